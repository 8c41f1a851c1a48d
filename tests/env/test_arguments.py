"""Tool arguments are untrusted (a model sends them): sizes are capped before any schema walk, patterns
mean what JSON Schema says (ECMA-262), and errors quote at most a short prefix. Real retail domain."""

from __future__ import annotations

import json
import time

import pytest

from muactl.errors import SpecError
from muactl.domain.open import open_domain
from muactl.env.sandbox import new_env

pytestmark = pytest.mark.timeout(120, method="thread")  # a backtracking match runs on in C


@pytest.fixture
def env(retail):
    e = new_env(retail.compiled)
    yield e
    e.close()


def _modify(item_ids, new_item_ids=None, **extra):
    return {"order_id": "#W0000001", "item_ids": item_ids, "new_item_ids": new_item_ids or ["100001"],
            "payment_method_id": "gift_card_1", **extra}


def test_a_million_item_ids_are_refused_at_once_with_a_short_message(env):
    start = time.perf_counter()
    result = env.call("modify_pending_order_items", _modify([str(100000 + i) for i in range(1_000_000)]))
    took = time.perf_counter() - start
    assert result.error and "'item_ids'" in result.content and "1,000,000 items, over the 1,000 allowed (maxItems)" in result.content
    assert len(result.content) < 400 and took < 2


def test_a_huge_string_is_refused_and_not_echoed(env):
    result = env.call("cancel_pending_order", {"order_id": "#W0000001", "reason": "x" * 1_000_000})
    assert result.error and "over the 10,000 allowed (maxLength)" in result.content and len(result.content) < 400


def test_arguments_as_json_text_are_bounded(env):
    big = json.dumps({"order_id": "#W0000001", "reason": "x" * 2_000_000})
    assert "over the 1,048,576 allowed" in env.call("cancel_pending_order", big).content
    deep = '{"order_id": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert "not valid JSON" in env.call("cancel_pending_order", deep).content
    assert "not valid JSON" in env.call("cancel_pending_order", '{"order_id": ' + "9" * 5000 + "}").content


def test_deeply_nested_objects_are_refused(env):
    value: dict | list = []
    for _ in range(200):
        value = [value]
    result = env.call("cancel_pending_order", {"order_id": value, "reason": "ordered by mistake"})
    assert result.error and "nested deeper than 64 levels" in result.content


@pytest.mark.parametrize("value, why", [
    ("x" * 5000, "not one of"),  # enum
    (list(range(500)), "is not of type 'string'"),  # type
])
def test_schema_errors_quote_a_short_prefix(env, value, why):
    result = env.call("cancel_pending_order", {"order_id": "#W0000001", "reason": value})
    assert result.error and why in result.content and len(result.content) < 400, result.content


def test_many_unexpected_arguments_are_listed_briefly(env):
    args = {"order_id": "#W0000001", "reason": "ordered by mistake", **{f"k{i}": i for i in range(900)}}
    result = env.call("cancel_pending_order", args)
    assert result.error and "('k0', 'k1', 'k10', 'k100', 'k101' and 895 more were unexpected)" in result.content and len(result.content) < 400


@pytest.mark.parametrize("arg", [
    "\u0661\u0660\u0660\u0660\u0660\u0661",  # Arabic-Indic digits: Python's \d takes them, ECMA's does not
    "100001\n",  # Python's $ matches before a final newline, ECMA's does not
])
def test_patterns_have_json_schema_semantics(env, arg):
    result = env.call("modify_pending_order_items", _modify([arg]))
    assert result.error and "does not match" in result.content, result.content


def test_ecma_translation_keeps_escapes_and_classes():
    from muactl.compile.arguments import ecma_regex

    assert ecma_regex(r"^[A-Z]{2}$").search("AB") and not ecma_regex(r"^[A-Z]{2}$").search("AB\n")
    assert ecma_regex(r"^a\$b$").search("a$b")  # an escaped $ stays a dollar sign
    assert ecma_regex(r"^[$]$").search("$")  # inside a class too
    assert not ecma_regex(r"^\w+$").search("caf\u00e9")


REDOS = """\
name: redos
description: A pattern that backtracks.
policy: None.
database:
  tables:
    items: {columns: {id: text}, primary_key: id}
tools:
  find:
    description: Find an item.
    params:
      id: {type: string, pattern: "^(a|a)*$"}
    query: SELECT id FROM items WHERE id = :id
    returns: value
"""


def test_a_backtracking_pattern_is_stopped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "domains" / "redos"
    folder.mkdir(parents=True)
    (folder / "domain.yaml").write_text(REDOS)
    env = new_env(open_domain("redos").compiled)
    start = time.perf_counter()
    result = env.call("find", {"id": "a" * 40 + "b"})  # re would backtrack for days
    assert result.error and "backtracks too much" in result.content and time.perf_counter() - start < 30


SHOP = """\
name: bulk
description: Bulk orders.
policy: None.
database:
  tables:
    items: {columns: {id: text}, primary_key: id}
tools:
  count_ids:
    description: Count ids.
    params:
      ids: {type: array, items: {type: string}, maxItems: MAX}
    query: SELECT json_array_length(:ids)
    returns: value
"""


def test_a_param_raises_its_cap_within_the_hard_limit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "domains" / "bulk"
    folder.mkdir(parents=True)
    (folder / "domain.yaml").write_text(SHOP.replace("MAX", "5000"))
    env = new_env(open_domain("bulk").compiled)
    assert env.call("count_ids", {"ids": ["a"] * 3000}).content == "3000"
    assert "over the 5,000 allowed" in env.call("count_ids", {"ids": ["a"] * 5001}).content
    (folder / "domain.yaml").write_text(SHOP.replace("MAX", "10000000"))
    with pytest.raises(SpecError) as e:
        open_domain("bulk")
    assert "domain.yaml:11:" in str(e.value) and "maxItems" in str(e.value)
