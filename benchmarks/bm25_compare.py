"""How muactl's document search (database.search: SQLite FTS5, ranked by its bm25()) ranks τ²-bench's
banking_knowledge documents against τ²'s own bm25 configuration (rank_bm25's BM25Okapi over each document's
content split on whitespace, lower-cased, k1 = 1.5, b = 0.75; FTS5's bm25() has k1 = 1.2, b = 0.75 and its
unicode61 words, punctuation removed).

Queries, per task: the first 40 words of its user scenario (a long query), and the title of each document the task requires (a
short one, whose right answer is known: recall@k of that document is measured for both). Prints the mean
top-k overlap (|muactl's top k ∩ rank_bm25's top k| / k), how often the first document is the same, and
recall@k of the required document by title.

rank_bm25 is the ground truth only: it runs in a throwaway venv (`python -m venv /tmp/bm25 &&
/tmp/bm25/bin/pip install rank_bm25`), never in muactl's:

    .venv/bin/python benchmarks/bm25_compare.py PATH/TO/tau2-bench --truth-python /tmp/bm25/bin/python [-k 10]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BANK = Path("data") / "tau2" / "domains" / "banking_knowledge"
SCENARIO_WORDS = 40  # of a task's user scenario, as a query (an agent's queries are short)


def documents(checkout: Path) -> list[dict]:
    """τ²'s documents in file-name order (τ² globs them in directory order; only ties could differ)."""
    return [json.loads(p.read_text()) for p in sorted((checkout / BANK / "documents").glob("*.json"))]


def queries(checkout: Path, docs: list[dict]) -> list[dict]:
    title = {d["id"]: d["title"] for d in docs}
    out = []
    for task in json.loads((checkout / BANK / "tasks.json").read_text()):
        words = task["user_scenario"]["instructions"].split()[:SCENARIO_WORDS]
        out.append({"kind": "scenario", "text": " ".join(words), "want": None})
        out += [{"kind": "title", "text": title[ref], "want": ref}
                for ref in task.get("required_documents") or [] if ref in title]
    return out


def truth(docs_path: str, queries_path: str, k: int) -> None:
    """rank_bm25's top k per query, as τ²'s BM25Retriever ranks (stable sort by score, descending)."""
    from rank_bm25 import BM25Okapi

    docs, qs = json.loads(Path(docs_path).read_text()), json.loads(Path(queries_path).read_text())
    bm25 = BM25Okapi([d["content"].lower().split() for d in docs])
    ranked = []
    for q in qs:
        scores = bm25.get_scores(q["text"].lower().split())
        ranked.append([docs[i]["id"] for i in sorted(range(len(docs)), key=lambda i: scores[i], reverse=True)[:k]])
    print(json.dumps(ranked))


DOMAIN = """\
name: kb-compare
description: τ²'s banking_knowledge documents, searched.
policy: none
database:
  tables:
    documents:
      columns: {doc_id: text, title: text, content: text}
      primary_key: doc_id
  search:
    kb: {table: documents, columns: [content]}
  seed: data
limits: {sql_steps: 100000000}
tools:
  kb_search:
    description: Search the knowledge base.
    params:
      query: {type: string, maxLength: 100000}
      k: {type: integer}
    query: >-
      SELECT d.doc_id FROM kb JOIN documents d ON d.rowid = kb.rowid WHERE kb MATCH fts_any(:query)
      ORDER BY bm25(kb), kb.rowid LIMIT :k
spec_version: 2
"""


def muactl_ranked(docs: list[dict], qs: list[dict], k: int) -> tuple[list[list[str]], float]:
    """muactl's top k per query, through a real domain's search tool in a sandbox."""
    import time

    from muactl.domain.open import open_domain
    from muactl.env.sandbox import new_env

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "domains" / "kb-compare"
        (d / "data").mkdir(parents=True)
        (d / "domain.yaml").write_text(DOMAIN)
        (d / "data" / "documents.jsonl").write_text("".join(
            json.dumps({"doc_id": x["id"], "title": x["title"], "content": x["content"]}) + "\n" for x in docs))
        old = os.getcwd()
        os.chdir(tmp)
        try:
            env = new_env(open_domain("kb-compare").compiled)
            t0 = time.perf_counter()
            out = []
            for q in qs:
                r = env.call("kb_search", {"query": q["text"], "k": k})
                if r.error:
                    raise SystemExit(f"kb_search failed on {q['text'][:60]!r}: {r.content}")
                out.append([row["doc_id"] for row in json.loads(r.content)])
            per_query = (time.perf_counter() - t0) / len(qs)
            env.close()
        finally:
            os.chdir(old)
    return out, per_query


def report(qs: list[dict], ours: list[list[str]], theirs: list[list[str]], k: int) -> None:
    print(f"{'queries':10} {'n':>5} {'top-' + str(k) + ' overlap':>14} {'same first':>10} "
          f"{'recall@' + str(k) + ' muactl':>16} {'rank_bm25':>10}")
    for kind in ("scenario", "title"):
        idx = [i for i, q in enumerate(qs) if q["kind"] == kind]
        overlap = sum(len(set(ours[i]) & set(theirs[i])) / k for i in idx) / len(idx)
        first = sum(bool(ours[i]) and bool(theirs[i]) and ours[i][0] == theirs[i][0] for i in idx) / len(idx)
        line = f"{kind:10} {len(idx):5} {overlap:14.3f} {first:10.3f}"
        if kind == "title":
            rec = lambda ranked: sum(qs[i]["want"] in ranked[i] for i in idx) / len(idx)  # noqa: E731
            line += f" {rec(ours):16.3f} {rec(theirs):10.3f}"
        print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--truth-python", required=True, help="a Python with rank_bm25 (a throwaway venv)")
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--truth", nargs=2, help=argparse.SUPPRESS)  # the ground-truth half, run by --truth-python
    args = ap.parse_args()
    if args.truth:
        truth(*args.truth, args.k)
        return
    sys.path.insert(0, str(ROOT))
    docs = documents(args.checkout)
    qs = queries(args.checkout, docs)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "docs.json").write_text(json.dumps(docs))
        (Path(tmp) / "queries.json").write_text(json.dumps(qs))
        theirs = json.loads(subprocess.run(
            [args.truth_python, __file__, str(args.checkout), "--truth-python", args.truth_python, "-k", str(args.k),
             "--truth", str(Path(tmp) / "docs.json"), str(Path(tmp) / "queries.json")],
            check=True, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ""}).stdout)
    ours, per_query = muactl_ranked(docs, qs, args.k)
    print(f"{len(docs)} documents, {len(qs)} queries from {len(json.loads((args.checkout / BANK / 'tasks.json').read_text()))} "
          f"tasks; muactl's search {1000 * per_query:.1f} ms a query")
    report(qs, ours, theirs, args.k)


if __name__ == "__main__":
    main()
