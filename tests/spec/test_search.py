"""Full-text search over a table (database.search: SQLite FTS5, bm25() ranking) declared in YAML, and
fts_any(text), the SQL function that makes free text a safe MATCH: each whitespace-separated word a quoted
FTS5 string (a word with punctuation inside is the phrase of its parts), OR-ed. Real SQLite, a real domain."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from muactl.domain.validate import validate_domain
from muactl.env.sandbox import new_env
from muactl.errors import SpecError

DOMAIN = """\
name: kb
description: A knowledge base.
policy: Search before you answer.
database:
  tables:
    documents:
      columns: {doc_id: text, title: text, content: text, views: integer}
      primary_key: doc_id
  search:
    kb_index: {table: documents, columns: [title, content]}
  seed:
    documents:
      - {doc_id: d1, title: Checking accounts, content: "Open a checking account; fees apply to checking.", views: 3}
      - {doc_id: d2, title: Credit cards, content: "The gold card has no annual fee.", views: 5}
      - {doc_id: d3, title: Savings, content: "Savings accounts earn interest.", views: 1}
      - {doc_id: d4, title: Wires, content: "A wire transfer costs a fee, checking or savings alike.", views: 0}
tools:
  kb_search:
    description: Search the knowledge base.
    params:
      query: {type: string}
      k: {type: integer, default: 10}
    query: >-
      SELECT d.doc_id, d.title, round(bm25(kb_index), 6) AS score FROM kb_index JOIN documents d
      ON d.rowid = kb_index.rowid WHERE kb_index MATCH fts_any(:query) ORDER BY bm25(kb_index), kb_index.rowid
      LIMIT :k
  count_docs:
    description: How many documents.
    query: SELECT count(*) FROM documents
    returns: value
  bump:
    description: Count a view of a document.
    params:
      doc_id: {type: string}
    writes:
      - UPDATE documents SET views = views + 1 WHERE doc_id = :doc_id
    message: ok
spec_version: 2
"""


def write(root: Path, domain: str = DOMAIN) -> None:
    (root / "domains" / "kb").mkdir(parents=True, exist_ok=True)
    (root / "domains" / "kb" / "domain.yaml").write_text(domain)
    (root / "tasks" / "kb").mkdir(parents=True, exist_ok=True)
    (root / "tasks" / "kb" / "test.yaml").write_text("- id: t\n  user: {reason: a fee}\n  expect:\n    actions:\n"
                                                     "      - kb_search: {query: fee}\n      - bump: {doc_id: d2}\n")


@pytest.fixture
def opened(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path)
    return validate_domain("kb")


def fts5_directly(query: str) -> list[str]:
    """The same ranking on a plain SQLite connection: FTS5's own bm25() over the same rows."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE i USING fts5(title, content)")
    rows = [("Checking accounts", "Open a checking account; fees apply to checking."),
            ("Credit cards", "The gold card has no annual fee."), ("Savings", "Savings accounts earn interest."),
            ("Wires", "A wire transfer costs a fee, checking or savings alike.")]
    conn.executemany("INSERT INTO i(rowid, title, content) VALUES (?, ?, ?)", [(n, *r) for n, r in enumerate(rows, 1)])
    return [f"d{r[0]}" for r in conn.execute("SELECT rowid FROM i WHERE i MATCH ? ORDER BY bm25(i), rowid", (query,))]


def search(opened, query: str, k: int = 10) -> list[dict]:
    env = new_env(opened.compiled)
    try:
        result = env.call("kb_search", {"query": query, "k": k})
        assert not result.error, result.content
        return json.loads(result.content)
    finally:
        env.close()


def test_search_ranks_by_fts5s_bm25_and_returns_the_rows(opened):
    got = search(opened, "checking fee")
    assert [r["doc_id"] for r in got] == fts5_directly('"checking" OR "fee"')
    assert sorted(r["doc_id"] for r in got) == ["d1", "d2", "d4"]  # d3 has neither word
    assert all(r["score"] < 0 for r in got)  # bm25(): lower is better
    assert search(opened, "checking fee", k=1) == got[:1]
    assert [r["doc_id"] for r in search(opened, "SAVINGS,")] == fts5_directly("savings")  # words, case folded


@pytest.mark.parametrize("query, found", [
    ('fee" OR title:x', ["d2", "d4"]),  # the words fee, or, title, x: no column filter, no OR of the caller's
    ("NEAR(fee card)", ["d2"]),  # the phrase "near fee", and card: never FTS5's NEAR
    ("-fee", ["d2", "d4"]), ("fee*", ["d2", "d4"]),  # no negation, no prefix query: the word fee
    ("kb_index:savings", []), ("savings", ["d3", "d4"]),  # a phrase "kb index savings", not a column filter
    ("   ", []), ("", []), ('"', []),
])
def test_any_free_text_is_a_safe_match_of_its_words(opened, query, found):
    assert sorted(r["doc_id"] for r in search(opened, query)) == found


def test_the_index_is_no_part_of_the_state_and_a_write_changes_only_the_table(opened):
    env = new_env(opened.compiled)
    try:
        before = env.state_hash()
        env.call("kb_search", {"query": "fee"})
        assert env.state_hash() == before
        env.call("bump", {"doc_id": "d2"})
        assert env.state_hash() != before and env.state_hash() == env.full_state_hash()
        assert env.call("count_docs", {}).content == "4"
    finally:
        env.close()


@pytest.mark.parametrize("search_yaml, message", [
    ("kb_index: {table: nowhere, columns: [title]}", "'nowhere', which is not a declared table"),
    ("kb_index: {table: documents, columns: [views]}", "'views' is not a text column of 'documents'"),
    ("documents: {table: documents, columns: [title]}", "has the name of a table or view"),
    ("kb_index: {table: documents, columns: [title], tokenize: 'porter; DROP'}", "tokenize"),
])
def test_a_wrong_index_is_named_at_its_line(tmp_path, monkeypatch, search_yaml, message):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, DOMAIN.replace("kb_index: {table: documents, columns: [title, content]}", search_yaml))
    with pytest.raises(SpecError) as e:
        validate_domain("kb")
    assert message in str(e.value) and "domain.yaml:" in str(e.value)
