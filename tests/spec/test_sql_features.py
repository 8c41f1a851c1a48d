"""The spec features τ²-class domains need (issue 14): check errors with computed columns, per-element
checks, views and fragments, typed results, json key order, muactl's SQL functions, gold calls expected
to fail, the transfer message and the name/folder warning. Real SQLite, a small domain written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.errors import SpecError
from muactl.domain.open import open_domain
from muactl.domain.validate import validate_domain
from muactl.env.sandbox import new_env

runner = CliRunner()

DOMAIN = """\
name: shop
description: A tiny shop.
policy: Be nice.
database:
  tables:
    items:
      columns: {item_id: text, name: text, price: real, ok: boolean, meta: json, owner: text}
      primary_key: item_id
    owners:
      columns: {owner_id: text, name: json}
      primary_key: owner_id
  views:
    cheap: SELECT item_id, price FROM items WHERE price < 10
  fragments:
    price_of: SELECT price FROM items WHERE item_id = :item_id
  seed:
    items:
      - {item_id: a, name: "[not json", price: 5.0, ok: true, meta: {b: 1, a: 2}, owner: o1}
      - {item_id: b, name: Bee, price: 250.0, ok: false, meta: [1, 2], owner: o1}
    owners:
      - {owner_id: o1, name: {first: Ann, last: Lee}}
tools:
  get_item:
    description: One item.
    params:
      item_id: {type: string}
    query: SELECT * FROM items WHERE item_id = :item_id
    returns: row
  get_owner:
    description: One owner (name is json here, text in items).
    params:
      owner_id: {type: string}
    query: SELECT * FROM owners WHERE owner_id = :owner_id
    returns: row
  summary:
    description: Computed json.
    query: SELECT json_group_array(item_id) AS ids, (SELECT count(*) FROM cheap) AS n_cheap FROM items
    returns: row
    types: {ids: json}
  buy:
    description: Buy items.
    params:
      item_ids: {type: array, items: {type: string}}
      limit: {type: number, default: 100}
    checks:
      - query: SELECT count(*) = 1 FROM items WHERE item_id = :item_id
        each: {item_id: item_ids}
        error: Item {item_id} not found
      - query: SELECT {{price_of}} <= :limit, {{price_of}} AS price
        each: {item_id: item_ids}
        error: Item {item_id} costs {price}, over {limit}
    writes:
      - UPDATE items SET ok = 0 WHERE item_id IN (SELECT value FROM json_each(:item_ids))
    message: Bought.
  rounded:
    description: Python's rounding.
    params:
      x: {type: number}
    query: SELECT py_round(:x, 2) AS sqlite_would_say, round(:x, 2) AS sqlite
    returns: row
  arithmetic:
    description: calc.
    params:
      expression: {type: string}
    query: SELECT calc(:expression)
    returns: value
  transfer_to_human_agents: {builtin: transfer, message: Transfer successful}
spec_version: 2
"""

TASKS = """\
- id: buy-missing
  user: {reason: buy}
  expect:
    actions:
      - get_item: {item_id: a}
      - buy: {item_ids: [a, zz, b]}
        error: Item zz not found
"""


def write(root: Path, domain: str = DOMAIN, tasks: str = TASKS, folder: str = "shop") -> Path:
    d = root / "domains" / folder
    d.mkdir(parents=True, exist_ok=True)
    (d / "domain.yaml").write_text(domain)
    t = root / "tasks" / folder
    t.mkdir(parents=True, exist_ok=True)
    (t / "test.yaml").write_text(tasks)
    return d


@pytest.fixture
def shop(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path)
    return validate_domain("shop")


def call(opened, name, args):
    env = new_env(opened.compiled)
    try:
        return env.call(name, args)
    finally:
        env.close()


def test_results_are_typed_as_declared_and_keep_key_order(shop):
    r = call(shop, "get_item", {"item_id": "a"})
    assert not r.error
    row = json.loads(r.content)
    assert row["ok"] is True and row["name"] == "[not json"  # boolean as true; text never parsed
    assert list(row["meta"]) == ["b", "a"] and '"meta": {"b": 1, "a": 2}' in r.content
    assert json.loads(call(shop, "get_item", {"item_id": "b"}).content)["ok"] is False
    owner = json.loads(call(shop, "get_owner", {"owner_id": "o1"}).content)
    assert owner["name"] == {"first": "Ann", "last": "Lee"}  # json in the table the query reads
    summary = json.loads(call(shop, "summary", {}).content)
    assert summary == {"ids": ["a", "b"], "n_cheap": 1}  # types: for a computed column; a view read like a table


def test_state_hash_ignores_json_key_order(shop):
    env = new_env(shop.compiled)
    before = env.state_hash()
    env.guard.mode = "off"
    env.conn.execute("PRAGMA query_only = OFF")
    env.conn.execute("""UPDATE items SET meta = '{"a": 2, "b": 1}' WHERE item_id = 'a'""")
    assert env.state_hash() == before
    env.close()


def test_each_checks_stop_at_the_first_failing_element_and_use_computed_columns(shop):
    r = call(shop, "buy", {"item_ids": ["a", "zz", "yy"]})
    assert r.error and r.content == "Error: Item zz not found"
    r = call(shop, "buy", {"item_ids": ["a", "b"], "limit": 100})
    assert r.content == "Error: Item b costs 250.0, over 100"
    env = new_env(shop.compiled)
    assert env.call("buy", {"item_ids": ["a"]}).content == "Bought."
    assert env.conn.execute("SELECT ok FROM items WHERE item_id = 'a'").fetchone() == (0,)
    env.close()


def test_py_round_and_calc_are_pythons(shop):
    row = json.loads(call(shop, "rounded", {"x": 2.675}).content)
    assert row == {"sqlite_would_say": 2.67, "sqlite": 2.68}
    assert json.loads(call(shop, "rounded", {"x": 0.125}).content)["sqlite_would_say"] == 0.12
    assert call(shop, "arithmetic", {"expression": "(2 + 3) * 4 / 8"}).content == "2.5"
    assert call(shop, "arithmetic", {"expression": "__import__('os')"}).content == "null"


def test_transfer_message_is_configurable(shop):
    r = call(shop, "transfer_to_human_agents", {"summary": "x"})
    assert r.transfer and r.content == "Transfer successful"


def test_gold_call_expected_to_fail_replays(shop):
    assert [t.task.id for t in shop.tasks] == ["buy-missing"]


def test_gold_call_with_the_wrong_error_text_is_reported(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, tasks=TASKS.replace("Item zz not found", "Item zz missing"))
    with pytest.raises(SpecError) as e:
        validate_domain("shop")
    (p,) = e.value.problems
    assert p.file.endswith("test.yaml") and p.line == 7 and p.key == "[0].expect.actions[1].error"
    assert "expected to fail with 'Item zz missing' but fails with 'Item zz not found'" in p.message
    write(tmp_path, tasks=TASKS.replace("[a, zz, b]", "[a]"))
    with pytest.raises(SpecError) as e:
        validate_domain("shop")
    assert "but succeeds" in e.value.problems[0].message


@pytest.mark.parametrize("old, new, line, key, message", [
    ("        each: {item_id: item_ids}\n        error: Item {item_id} not found",
     "        each: {item_id: limit}\n        error: Item {item_id} not found", 47,
     "tools.buy.checks[0].each.item_id", "'limit' is a number param; each walks arrays"),
    ("{{price_of}} AS price", "{{price_off}} AS price", 49, "tools.buy.checks[1].query",
     "unknown fragment {{price_off}}; did you mean 'price_of'?"),
    ("cheap: SELECT item_id, price FROM items WHERE price < 10", "cheap: SELECT * FROM items WHERE price < :p", 13,
     "database.views.cheap", "a view takes no parameters"),
    ("types: {ids: json}", "types: {idz: json}", 39, "tools.summary.types.idz", "the query returns no column 'idz'"),
    ("costs {price}, over", "costs {prize}, over", 51, "tools.buy.checks[1].error",
     "placeholder {prize} is not a declared param; did you mean 'price'?"),
])
def test_misuse_is_reported_at_its_line(tmp_path, monkeypatch, old, new, line, key, message):
    assert old in DOMAIN
    monkeypatch.chdir(tmp_path)
    write(tmp_path, DOMAIN.replace(old, new))
    with pytest.raises(SpecError) as e:
        open_domain("shop")
    found = [(p.line, p.key, p.message) for p in e.value.problems]
    assert any(ln == line and k == key and message in msg for ln, k, msg in found), found


def test_validate_warns_when_the_name_differs_from_the_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, folder="shop2")
    r = runner.invoke(app, ["validate", "shop2"])
    assert r.exit_code == 0, r.output
    assert "domain.yaml:1:1: name: name 'shop' differs from the folder 'shop2'" in r.output
    write(tmp_path)
    r = runner.invoke(app, ["validate", "shop"])
    assert r.exit_code == 0 and "warning" not in r.output


def test_the_readmes_new_row_and_today_recipe_works_as_written(project):
    """README "More SQL": the YAML block (a key made from the data, "today" fixed in a view), pasted into the
    clinic as printed: it validates, and two sandboxes make the same rows and the same end state; an
    integer key left out of an INSERT is numbered the same way; the built-in transfer requires `summary`."""
    import re

    import yaml

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"```yaml\n(database:\n  views:\n    today: .*?)```", readme, re.S).group(1)
    recipe = yaml.safe_load(block)
    path = project / "domains" / "clinic" / "domain.yaml"
    spec = yaml.safe_load(path.read_text())
    spec["database"]["views"] = recipe["database"]["views"]
    spec["database"]["tables"]["notes"] = {"columns": {"note_id": "integer", "text": "text"}, "primary_key": "note_id"}
    spec["tools"].update(recipe["tools"])
    spec["tools"]["add_note"] = {"description": "Add a note.", "params": {"text": {"type": "string"}},
                                 "writes": ["INSERT INTO notes (text) VALUES (:text)"],
                                 "query": "SELECT * FROM notes WHERE rowid = last_insert_rowid()", "returns": "row"}
    spec["tools"]["transfer_to_human_agents"] = {"builtin": "transfer"}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    opened = validate_domain("clinic")
    hashes = []
    for _ in range(2):
        env = new_env(opened.compiled)
        try:
            first = json.loads(env.call("book_appointment", {"patient_id": "p1", "doctor": "Dr. Lind"}).content)
            second = json.loads(env.call("book_appointment", {"patient_id": "p2", "doctor": "Dr. Osei"}).content)
            assert (first["appointment_id"], second["appointment_id"]) == ("a5", "a6")  # seed rows a1..a4
            assert first["day"] == second["day"] == "2026-12-08" and first["status"] == "scheduled"
            notes = [json.loads(env.call("add_note", {"text": t}).content)["note_id"] for t in ("x", "y")]
            assert notes == [1, 2]
            hashes.append(env.state_hash())
        finally:
            env.close()
    assert hashes[0] == hashes[1]
    transfer = opened.compiled.tools["transfer_to_human_agents"].parameters
    assert transfer["required"] == ["summary"] and list(transfer["properties"]) == ["summary"]


IDS_DOMAIN = """\
name: ids
description: Deterministic ids.
policy: Be nice.
database:
  tables:
    txns:
      columns: {txn_id: text, user_id: text, amount: real}
      primary_key: txn_id
tools:
  add_txn:
    description: Record a transaction under an id made from its data.
    params:
      user_id: {type: string}
      amount: {type: number}
    writes:
      - INSERT INTO txns VALUES ('txn_' || substr(py_sha256('transaction|' || :user_id || '|' || :amount), 1, 12),
          :user_id, :amount)
    query: SELECT txn_id FROM txns WHERE user_id = :user_id ORDER BY rowid DESC LIMIT 1
    returns: value
  digest:
    description: sha256 of a value.
    params:
      x: {type: string}
    query: SELECT py_sha256(:x) AS of_text, py_sha256(12) AS of_number, py_sha256(NULL) AS of_null
    returns: row
spec_version: 2
"""


def test_py_sha256_is_hashlibs_hex_digest_and_makes_the_same_id_in_every_sandbox(tmp_path, monkeypatch):
    import hashlib

    monkeypatch.chdir(tmp_path)
    write(tmp_path, IDS_DOMAIN, "[]\n", folder="ids")
    opened = validate_domain("ids")
    row = json.loads(call(opened, "digest", {"x": "card_last4:cc_1 é"}).content)
    assert row == {"of_text": hashlib.sha256("card_last4:cc_1 é".encode()).hexdigest(),
                   "of_number": hashlib.sha256(b"12").hexdigest(), "of_null": None}
    want = "txn_" + hashlib.sha256(b"transaction|u1|12.5").hexdigest()[:12]
    assert call(opened, "add_txn", {"user_id": "u1", "amount": 12.5}).content == want
    assert call(opened, "add_txn", {"user_id": "u1", "amount": 12.5}).content == want  # a fresh sandbox: the same id


@pytest.mark.parametrize("query, holds_after_gold, problem", [
    ("SELECT 1", False, "holds after the gold actions, but holds_after_gold is false"),
    ("SELECT 0", True, "assertion does not hold after the gold actions"),
    ("SELECT 0", False, None),  # τ²'s data: its own gold path leaves it false, and says so
])
def test_validate_checks_an_assertion_against_holds_after_gold(tmp_path, monkeypatch, query, holds_after_gold, problem):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, tasks=TASKS + f"    assert:\n      - {{query: {query}, holds_after_gold: {str(holds_after_gold).lower()}}}\n")
    if problem is None:
        validate_domain("shop")
        return
    with pytest.raises(SpecError, match=problem):
        validate_domain("shop")
