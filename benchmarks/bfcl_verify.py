"""muactl's BFCL multi-turn import checked against BFCL's own classes, per category: entries in BFCL, entries
imported (an entry involving a class muactl had no tools for would not be), gold calls with the same output bytes,
turns after which the involved classes' state is the same, BFCL's own check passing the gold, and the oracle's
score by BFCL's rule through muactl's engine (`muactl eval --agent oracle`: every turn with gold calls passes
the state and response checks), with the lines of muactl's YAML against the imported classes' Python. With an
ACEBench or τ²-bench checkout, their rows (benchmarks/acebench_verify.py, tau2_verify.py) follow.

The ground truth is tests/data/bfcl/truth.json (written by benchmarks/bfcl_record.py):

    .venv/bin/python benchmarks/bfcl_verify.py PATH/TO/gorilla [--acebench PATH] [--tau2 PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run(checkout: Path) -> list[dict]:
    from benchmarks.tau2_verify import code_lines
    from muactl.domain.validate import validate_domain
    from muactl.importers.bfcl import HERE, IMPORTED, SOURCES, eval_root, import_bfcl, table_rows, verify

    truth = json.loads((ROOT / "tests" / "data" / "bfcl" / "truth.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        old = os.getcwd()
        os.chdir(tmp)
        try:
            imported = import_bfcl(checkout, Path(tmp))
            opened = validate_domain(imported.domain.name)
            checked = verify(opened, truth)
            yaml = HERE / "bfcl.yaml"
            sources = eval_root(checkout) / SOURCES
            py = sum(len((sources / module).read_text().splitlines()) for _, module, _ in IMPORTED.values())
            rows = []
            for r in table_rows(imported):
                row = {**r, **checked.get(r["category"], {}), "oracle": oracle_score(opened, r["category"]),
                       "yaml_lines": len(yaml.read_text().splitlines()), "yaml_code": code_lines(yaml), "py_lines": py}
                rows.append(row)
        finally:
            os.chdir(old)
    return rows


def oracle_score(opened, category: str) -> float | None:
    """Mean reward of `muactl eval --agent oracle` over the category's imported entries (BFCL's rule)."""
    from muactl.eval.config import EvalConfig
    from muactl.eval.evaluate import run_eval

    ids = [t.task.id for t in opened.tasks if category in t.task.tags]
    if not ids:
        return None
    _, summary = run_eval(EvalConfig(domain=opened.spec.domain.name, split="all", tasks=ids), opened=opened)
    return summary["avg_reward"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", type=Path, nargs="?", default=os.environ.get("BFCL"))
    ap.add_argument("--acebench", type=Path, default=os.environ.get("ACEBENCH"), help="an ACEBench checkout: its rows too")
    ap.add_argument("--tau2", type=Path, default=os.environ.get("TAU2_BENCH"), help="a τ²-bench checkout: its rows too")
    args = ap.parse_args()
    if not args.checkout:
        ap.error("give a gorilla checkout (or set BFCL)")
    pct = lambda a, b: f"{100 * a / b:.0f}%" if b else "-"  # noqa: E731
    print(f"{'BFCL category':16} {'entries':>7} {'imported':>8} {'calls':>5} {'same output':>11} {'turns':>5} "
          f"{'same state':>10} {'BFCL passes':>11} {'oracle':>6} {'YAML lines':>10} {'Python':>6}")
    rows = run(args.checkout.resolve())
    for r in rows:
        oracle = f"{r['oracle']:6.2f}" if r["oracle"] is not None else f"{'-':>6}"
        print(f"{r['category']:16} {r['entries']:7} {r['imported']:8} {r.get('calls', 0):5} "
              f"{pct(r.get('same_output', 0), r.get('calls', 0)):>11} {r.get('turns', 0):5} "
              f"{pct(r.get('same_state', 0), r.get('turns', 0)):>10} {r.get('bfcl_passes', 0):11} {oracle} "
              f"{r['yaml_lines']:10} {r['py_lines']:6}")
        for line in r.get("mismatches", [])[:10]:
            print("   ", line)
    missing = {}
    for r in rows:
        for cls, n in r["missing_classes"].items():
            missing[cls] = missing.get(cls, 0) + n
    print("not imported yet (entries involving each class, all categories): "
          + (", ".join(f"{c} {n}" for c, n in sorted(missing.items())) or "none"))
    repaired = [i for r in rows for i in r["repaired"]]
    print("repaired (the gold calls a held-out function before it is shown; tasks/bfcl/repaired.json): "
          + (", ".join(repaired) or "none"))
    if args.acebench or args.tau2:
        from benchmarks import acebench_verify

        sys.argv = [sys.argv[0], *([str(args.acebench)] if args.acebench else []),
                    *(["--tau2", str(args.tau2)] if args.tau2 else [])]
        if args.acebench:
            print()
            acebench_verify.main()


if __name__ == "__main__":
    main()
