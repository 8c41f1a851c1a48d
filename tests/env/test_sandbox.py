"""The sandbox guarantees (docs/contracts.md: Sandbox, State hash), one test group each, on real SQLite."""

from __future__ import annotations

import concurrent.futures
import sqlite3
import sys
import textwrap
import time
from pathlib import Path

import pytest

from muactl.env import Environment, ToolResult
from muactl.errors import SpecError
from muactl.domain.open import open_domain
from muactl.domain.validate import validate_domain
from muactl.env.sandbox import new_env

# ---------------------------------------------------------------- a small domain built in tmp

SHOP_YAML = """\
name: {name}
description: A tiny shop used by the sandbox tests.
policy: Be careful.
database:
  tables:
    items:
      columns: {{id: text, name: text, qty: integer, price: real, meta: json}}
      primary_key: id
    orders:
      columns: {{order_id: text, item_id: text, qty: integer}}
      primary_key: order_id
      foreign_keys: {{item_id: items.id}}
  seed:
{seed}
tools:
  get_item:
    description: One item.
    params:
      id: {{type: string, description: Item id.}}
    query: SELECT id, name, qty, meta FROM items WHERE id = :id
    returns: row
    if_empty: No item {{id}}.
  find_items:
    description: Items by name.
    params:
      name: {{type: string}}
    query: SELECT id FROM items WHERE name = :name ORDER BY id
    returns: rows
  set_qty:
    description: Set an item's quantity.
    params:
      id: {{type: string}}
      qty: {{type: integer, minimum: 0}}
    writes:
      - UPDATE items SET qty = :qty WHERE id = :id
    message: Quantity of {{id}} is now {{qty}}.
  add_item:
    description: Add an item.
    params:
      id: {{type: string, pattern: "^i\\\\d+$"}}
      name: {{type: string}}
      qty: {{type: integer, default: 0}}
      size: {{type: string, enum: [small, large], default: small}}
    writes:
      - INSERT INTO items (id, name, qty, meta) VALUES (:id, :name, :qty, json_object('size', :size))
    message: Added {{id}}.
  set_meta:
    description: Replace an item's metadata.
    params:
      id: {{type: string}}
      meta: {{type: object}}
    writes:
      - UPDATE items SET meta = :meta WHERE id = :id
    message: Done.
  order_item:
    description: Take stock from an item and record an order for another item id.
    params:
      order_id: {{type: string}}
      take_from: {{type: string}}
      item_id: {{type: string}}
      n: {{type: integer, minimum: 1}}
    checks:
      - query: SELECT qty >= :n FROM items WHERE id = :take_from
        error: Not enough stock in {{take_from}}.
    writes:
      - UPDATE items SET qty = qty - :n WHERE id = :take_from
      - INSERT INTO orders (order_id, item_id, qty) VALUES (:order_id, :item_id, :n)
    query: SELECT qty FROM items WHERE id = :take_from
    returns: value
  rename_then_add:
    description: Rename an item, then add an item with a given id.
    params:
      id: {{type: string}}
      new_id: {{type: string}}
    writes:
      - UPDATE items SET name = 'renamed' WHERE id = :id
      - INSERT INTO items (id, name, qty) VALUES (:new_id, 'new', 0)
    message: Done.
  py_add:
    description: Add an item from Python.
    params:
      id: {{type: string}}
      name: {{type: string}}
    python: "{module}:add_item"
  py_slow:
    description: A handler that writes, then sleeps.
    params:
      seconds: {{type: number}}
    python: "{module}:slow"
    timeout: 0.5
  py_boom:
    description: A handler that writes, then raises.
    python: "{module}:boom"
  transfer_to_human:
    builtin: transfer
"""

SEED_ITEMS = [
    {"id": "i1", "name": "apple", "qty": 5, "price": 1.5, "meta": {"color": "red", "size": "small"}},
    {"id": "i2", "name": "pear", "qty": 2, "price": 2.0, "meta": {"size": "large", "color": "green"}},
    {"id": "i3", "name": "fig", "qty": 0, "price": 0.25, "meta": None},
]
SEED_ORDERS = [
    {"order_id": "o1", "item_id": "i1", "qty": 1},
    {"order_id": "o2", "item_id": "i2", "qty": 2},
]

HANDLERS = """\
import pathlib
import time

# importing this module leaves a trace, so a test can tell whether anything imported it
pathlib.Path(__file__).with_name("imported.marker").write_text("imported")


def add_item(db, id, name):
    db.execute("INSERT INTO items (id, name, qty) VALUES (?, ?, 0)", (id, name))
    return {"added": id}


def slow(db, seconds):
    db.execute("UPDATE items SET qty = 999")
    db.commit()
    time.sleep(seconds)
    return "done"


def boom(db):
    db.execute("UPDATE items SET qty = 999")
    raise RuntimeError("handler exploded")
"""


def _seed_yaml(tables: dict[str, list[dict]], reverse: bool = False) -> str:
    import json

    lines = []
    for table, rows in (reversed(tables.items()) if reverse else tables.items()):
        lines.append(f"    {table}:")
        for row in (reversed(rows) if reverse else rows):
            lines.append(f"      - {json.dumps(row)}")
    return "\n".join(lines)


def make_domain(root: Path, name: str = "shop", *, reverse_seed: bool = False, tasks: str | None = None,
                yaml_text: str | None = None) -> Path:
    """Write domains/<name>/ (domain.yaml + handlers) and optional tasks/<name>/train.yaml under root."""
    folder = root / "domains" / name
    folder.mkdir(parents=True)
    module = f"{name}_handlers"
    if yaml_text is None:
        seed = _seed_yaml({"items": SEED_ITEMS, "orders": SEED_ORDERS}, reverse=reverse_seed)
        yaml_text = SHOP_YAML.format(name=name, seed=seed, module=module)
    (folder / "domain.yaml").write_text(yaml_text)
    (folder / f"{module}.py").write_text(HANDLERS)
    if tasks is not None:
        (root / "tasks" / name).mkdir(parents=True)
        (root / "tasks" / name / "train.yaml").write_text(textwrap.dedent(tasks))
    return folder


@pytest.fixture
def shop_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return make_domain(tmp_path)


@pytest.fixture
def shop(shop_dir):
    return open_domain("shop").compiled


def raw(env: Environment, sql: str, params=()) -> None:
    """Change the database behind muactl's back (as a test fixture would), guard and query_only off."""
    env.guard.mode = "off"
    try:
        env.conn.execute("PRAGMA query_only = OFF")
        env.conn.execute(sql, params)
        env.conn.execute("PRAGMA query_only = ON")
    finally:
        env.guard.mode = "read"


def pragma(env: Environment, name: str):
    """Read a pragma's value (the guard refuses every pragma, reads included, so it steps aside)."""
    env.guard.mode = "off"
    try:
        return env.conn.execute(f"PRAGMA {name}").fetchone()[0]
    finally:
        env.guard.mode = "read"


def err(result: ToolResult) -> str:
    assert isinstance(result, ToolResult)
    assert result.error, f"expected an error, got {result.content!r}"
    assert result.content.startswith("Error:"), result.content
    assert not result.changed
    return result.content


# ---------------------------------------------------------------- 1. fork isolation


def test_writes_are_private_to_one_environment_and_fork_copies_current_state(clinic):
    compiled = clinic.compiled
    a, b = new_env(compiled), new_env(compiled)
    start = a.state_hash()
    assert b.state_hash() == start

    assert not a.call("cancel_appointment", {"appointment_id": "a1"}).error
    assert a.state_hash() != start
    assert b.state_hash() == start
    assert b.call("list_appointments", {"patient_id": "p1"}).content.count("cancelled") == 0
    assert new_env(compiled).state_hash() == start

    child = a.fork()
    assert child.state_hash() == a.state_hash()
    assert not child.call("cancel_appointment", {"appointment_id": "a3"}).error
    assert child.state_hash() != a.state_hash()
    status = a.conn.execute("SELECT status FROM appointments WHERE appointment_id = 'a3'").fetchone()[0]
    assert status == "scheduled"  # the child's write stayed in the child
    # a fork is a full Environment: its guard still refuses writes outside declared statements
    with pytest.raises(sqlite3.DatabaseError):
        child.conn.execute("DELETE FROM appointments")


def test_template_on_disk_is_never_written(clinic):
    compiled = clinic.compiled
    path = Path(compiled.template_path)
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    for _ in range(5):
        env = new_env(compiled)
        for aid in ("a1", "a3", "a4"):
            assert not env.call("cancel_appointment", {"appointment_id": aid}).error
        env.fork().call("cancel_appointment", {"appointment_id": "a1"})
        env.close()
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime
    assert new_env(compiled).rows("appointments")[0]["status"] == "scheduled"


# ---------------------------------------------------------------- 2. argument validation


@pytest.mark.parametrize(("tool", "args", "names"), [
    ("set_qty", {"id": "i1", "qty": "7"}, ["'qty'", "integer"]),                         # wrong type
    ("set_qty", {"id": "i1", "qty": 2.5}, ["'qty'", "integer"]),
    ("set_qty", {"id": "i1", "qty": True}, ["'qty'", "integer"]),
    ("set_qty", {"id": "i1", "qty": -1}, ["'qty'", "minimum"]),
    ("set_qty", {"id": "i1"}, ["'qty'", "required"]),                                    # missing
    ("set_qty", {"id": "i1", "qty": 1, "extra": "x"}, ["'extra'", "unexpected"]),        # extra
    ("add_item", {"id": "x1", "name": "kiwi"}, ["'id'", "does not match"]),              # pattern
    ("add_item", {"id": "i9", "name": "kiwi", "size": "huge"}, ["'size'", "is not one of"]),  # enum
    ("set_meta", {"id": "i1", "meta": "not an object"}, ["'meta'", "object"]),
    ("set_qty", ["i1", 1], ["JSON object"]),
    ("set_qty", "{not json", ["not valid JSON"]),
])
def test_bad_arguments_are_refused_before_any_sql(shop, tool, args, names):
    env = new_env(shop)
    before = env.state_hash()
    content = err(env.call(tool, args))
    assert f"invalid arguments for {tool}" in content or "not valid JSON" in content
    for name in names:
        assert name in content
    assert env.state_hash() == before


def test_every_schema_problem_is_reported_at_once(shop):
    env = new_env(shop)
    content = err(env.call("add_item", {"id": "x", "size": "huge", "bogus": 1}))
    for name in ("'id'", "'size'", "'name'", "'bogus'"):
        assert name in content


def test_valid_arguments_pass_and_defaults_fill_in(shop):
    env = new_env(shop)
    result = env.call("add_item", '{"id": "i9", "name": "kiwi"}')
    assert result.changed and not result.error
    assert env.call("get_item", {"id": "i9"}).content == '{"id": "i9", "name": "kiwi", "qty": 0, "meta": {"size": "small"}}'


# ---------------------------------------------------------------- 3. SQL injection is data

INJECTIONS = [
    "a1' OR '1'='1",
    "a1'; DROP TABLE appointments; --",
    'x" OR 1=1 --',
    "' UNION SELECT patient_id, name, phone, birth_year FROM patients --",
    "a1\x00' OR 1=1",
    ":appointment_id",
]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_injection_strings_are_plain_data(clinic, payload):
    env = new_env(clinic.compiled)
    before = env.state_hash()
    n_rows = {t: len(env.rows(t)) for t in ("patients", "appointments")}

    listed = env.call("list_appointments", {"patient_id": payload})
    assert listed.error and "No appointments" in listed.content  # no row leaked
    assert err(env.call("cancel_appointment", {"appointment_id": payload})).endswith("does not exist.")
    found = env.call("find_patient_by_phone", {"phone": payload})
    assert found.error and "does not match" in found.content  # the pattern stops it before SQL

    assert env.state_hash() == before
    assert {t: len(env.rows(t)) for t in n_rows} == n_rows
    tables = {r[0] for r in env.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"patients", "appointments"} <= tables


def test_injection_strings_are_stored_verbatim_by_writes(shop):
    env = new_env(shop)
    evil = "i1'; DELETE FROM items; --"
    assert not env.call("set_meta", {"id": "i1", "meta": {"note": evil, "k": 'x" OR 1=1 --'}}).error
    assert env.call("find_items", {"name": "apple' OR '1'='1"}).content == "[]"
    assert len(env.rows("items")) == 3
    assert '"note": "i1\'; DELETE FROM items; --"' in env.call("get_item", {"id": "i1"}).content


# ---------------------------------------------------------------- 4. read-only reads, and what SQL may be declared


def _tool_yaml(tool: str) -> str:
    return textwrap.dedent("""\
        name: bad
        description: d
        policy: p
        database:
          tables:
            t: {columns: {id: text, v: integer}, primary_key: id}
        tools:
          bad_tool:
            description: d
        """) + textwrap.indent(textwrap.dedent(tool), "    ")


@pytest.mark.parametrize(("tool", "expected"), [
    ("query: UPDATE t SET v = 1", "only a SELECT is allowed here"),
    ("query: DELETE FROM t", "only a SELECT is allowed here"),
    ("query: INSERT INTO t (id, v) VALUES ('x', 1)", "only a SELECT is allowed here"),
    ("query: WITH x AS (SELECT 1) DELETE FROM t", "only a SELECT is allowed here"),
    ("query: SELECT 1; DELETE FROM t", "only one SQL statement"),
    ("checks: [{query: 'DELETE FROM t', error: e}]\nwrites: ['UPDATE t SET v = 1']", "only a SELECT is allowed here"),
    ("query: PRAGMA table_info(t)", "only a SELECT is allowed here (SQLite refused: pragma)"),
    ("query: SELECT * FROM pragma_table_info('t')", "only a SELECT is allowed here"),
    ("query: PRAGMA query_only = OFF", "only a SELECT is allowed here"),
    ("writes: ['PRAGMA foreign_keys = OFF']", "only INSERT, UPDATE or DELETE"),
    ("writes: [\"ATTACH DATABASE 'other.db' AS other\"]", "only INSERT, UPDATE or DELETE on declared tables is allowed here (SQLite refused: attach)"),
    ("query: ATTACH DATABASE ':memory:' AS other", "only a SELECT is allowed here"),
    ("writes: ['DETACH DATABASE main']", "only INSERT, UPDATE or DELETE"),
    ("query: SELECT load_extension('evil')", "function load_extension"),
    ("writes: [\"UPDATE t SET v = load_extension('evil')\"]", "function load_extension"),
    ("writes: ['DROP TABLE t']", "only INSERT, UPDATE or DELETE"),
    ("writes: ['CREATE TABLE u (x)']", "only INSERT, UPDATE or DELETE"),
    ("writes: ['CREATE INDEX ix ON t (v)']", "only INSERT, UPDATE or DELETE"),
    ("query: ANALYZE", "(SQLite refused: analyze)"),
    ("writes: ['ALTER TABLE t ADD COLUMN w']", "only INSERT, UPDATE or DELETE"),
    ("writes: ['CREATE TRIGGER tr AFTER UPDATE ON t BEGIN DELETE FROM t; END']", "only one SQL statement"),
    ("writes: [\"UPDATE sqlite_master SET sql = ''\"]", "sqlite_master may not be modified"),
    ("writes: ['VACUUM']", "only INSERT, UPDATE or DELETE on declared tables is allowed here (SQLite refused: vacuum)"),
    ("query: VACUUM INTO 'copy.db'", "only a SELECT is allowed here (SQLite refused: vacuum)"),
    ("writes: ['BEGIN']", "only INSERT, UPDATE or DELETE"),
])
def test_forbidden_sql_is_refused_at_validate_time(tmp_path, monkeypatch, tool, expected):
    monkeypatch.chdir(tmp_path)
    make_domain(tmp_path, "bad", yaml_text=_tool_yaml(tool))
    with pytest.raises(SpecError) as info:
        open_domain("bad")
    assert expected in str(info.value)
    assert any(p.key.startswith("tools.bad_tool") for p in info.value.problems), str(info.value)


def test_a_plain_select_is_accepted(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_domain(tmp_path, "bad", yaml_text=_tool_yaml("query: SELECT count(*) FROM t\nreturns: value"))
    env = new_env(open_domain("bad").compiled)
    assert env.call("bad_tool", {}).content == "0"


def test_the_runtime_connection_refuses_undeclared_sql(shop):
    env = new_env(shop)
    before = env.state_hash()
    assert env.guard.mode == "read"
    for sql in ("UPDATE items SET qty = 0", "DELETE FROM orders", "INSERT INTO items (id) VALUES ('zz')",
                "DROP TABLE orders", "CREATE TABLE evil (x)", "ATTACH DATABASE ':memory:' AS other",
                "PRAGMA foreign_keys = OFF", "PRAGMA query_only = OFF", "SELECT load_extension('x')"):
        with pytest.raises(sqlite3.DatabaseError):
            env.conn.execute(sql)
    # write mode allows DML on declared tables only, never schema changes or sqlite_master
    env.guard.mode = "write"
    try:
        for sql in ("DROP TABLE orders", "CREATE TABLE evil (x)", "UPDATE sqlite_master SET name = 'x'",
                    "ATTACH DATABASE ':memory:' AS other"):
            with pytest.raises(sqlite3.DatabaseError):
                env.conn.execute(sql)
        # and outside a declared write the connection is query_only too
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            env.conn.execute("UPDATE items SET qty = 0")
    finally:
        env.guard.mode = "read"
    assert env.state_hash() == before
    # after a write tool ran, reads are read-only again
    assert env.call("set_qty", {"id": "i1", "qty": 9}).changed
    assert env.guard.mode == "read"
    assert pragma(env, "query_only") == 1
    with pytest.raises(sqlite3.DatabaseError):
        env.conn.execute("UPDATE items SET qty = 0")


# ---------------------------------------------------------------- 5. checks and writes: one transaction


def test_a_failing_second_write_rolls_back_the_first(shop):
    env = new_env(shop)
    before = env.state_hash()
    # foreign key: the order references an item that does not exist, after stock was taken
    content = err(env.call("order_item", {"order_id": "o9", "take_from": "i1", "item_id": "nope", "n": 2}))
    assert "a referenced row does not exist" in content
    assert env.state_hash() == before
    assert env.rows("items")[0]["qty"] == 5
    # primary key: the second insert collides with an existing order id
    content = err(env.call("order_item", {"order_id": "o1", "take_from": "i1", "item_id": "i2", "n": 2}))
    assert "already exists" in content
    assert env.state_hash() == before
    # UNIQUE on the second statement after an UPDATE on the first
    content = err(env.call("rename_then_add", {"id": "i1", "new_id": "i2"}))
    assert "already exists" in content
    assert env.state_hash() == before
    assert not env.conn.in_transaction
    # the same tool with good arguments commits both statements
    result = env.call("order_item", {"order_id": "o9", "take_from": "i1", "item_id": "i2", "n": 2})
    assert (result.error, result.changed, result.content) == (False, True, "3")
    assert env.state_hash() != before
    assert len(env.rows("orders")) == 3


def test_a_failing_check_changes_nothing(shop):
    env = new_env(shop)
    before = env.state_hash()
    content = err(env.call("order_item", {"order_id": "o9", "take_from": "i3", "item_id": "i1", "n": 1}))
    assert content == "Error: Not enough stock in i3."
    content = err(env.call("order_item", {"order_id": "o9", "take_from": "missing", "item_id": "i1", "n": 1}))
    assert "Not enough stock in missing" in content
    assert env.state_hash() == before
    assert not env.conn.in_transaction
    assert pragma(env, "query_only") == 1


def test_an_error_in_the_final_query_rolls_back_the_writes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_domain(tmp_path, "bad", yaml_text=_tool_yaml("""\
        params: {id: {type: string}}
        writes: ["INSERT INTO t (id, v) VALUES (:id, 1)"]
        query: SELECT v FROM t WHERE id = :id AND v > 1
        returns: value
        if_empty: Nothing for {id}.
        """))
    env = new_env(open_domain("bad").compiled)
    before = env.state_hash()
    assert err(env.call("bad_tool", {"id": "x"})) == "Error: Nothing for x."
    assert env.state_hash() == before


def test_messages_with_stray_braces_still_fail_as_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_domain(tmp_path, "bad", yaml_text=_tool_yaml("""\
        params: {id: {type: string}}
        writes: ["INSERT INTO t (id, v) VALUES (:id, 1)"]
        query: SELECT v FROM t WHERE id = :id AND v > 1
        if_empty: 'No {id}; ids look like {"id": "t1"}, not {0} or {'
        """))
    env = new_env(open_domain("bad").compiled)
    before = env.state_hash()
    assert err(env.call("bad_tool", {"id": "x"})) == 'Error: No x; ids look like {"id": "t1"}, not {0} or {'
    assert env.state_hash() == before
    assert not env.conn.in_transaction


# ---------------------------------------------------------------- 6. failures are data


def test_failures_are_results_never_exceptions(shop):
    env = new_env(shop)
    before = env.state_hash()
    assert "unknown tool 'nope'" in err(env.call("nope", {}))
    assert "get_item" in err(env.call("nope", {}))  # lists what exists
    assert err(env.call("get_item", {"id": "zz"})) == "Error: No item zz."
    err(env.call("get_item", None))
    err(env.call("get_item", 42))
    err(env.call("order_item", {"order_id": "o9", "take_from": "i1", "item_id": "nope", "n": 1}))
    # a value SQLite cannot bind fails the call, not the episode, and leaves no transaction open
    content = err(env.call("set_qty", {"id": "i1", "qty": 2 ** 70}))
    assert "set_qty failed" in content
    assert not env.conn.in_transaction
    assert env.state_hash() == before
    # the episode goes on
    assert env.call("set_qty", {"id": "i1", "qty": 1}).changed
    assert env.call("transfer_to_human", {"summary": "s"}).transfer


# ---------------------------------------------------------------- 7. state hash


def test_state_hash_is_deterministic_and_independent_of_insertion_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    make_domain(tmp_path, "fwd")
    make_domain(tmp_path, "rev", reverse_seed=True)
    fwd, rev = open_domain("fwd").compiled, open_domain("rev").compiled
    assert fwd.template_path != rev.template_path
    a, b = new_env(fwd), new_env(rev)
    assert [r["id"] for r in a.rows("items")] == ["i1", "i2", "i3"]
    assert [r["id"] for r in b.rows("items")] == ["i3", "i2", "i1"]  # stored in the other order
    assert a.state_hash() == b.state_hash() == new_env(fwd).state_hash()
    assert len(a.state_hash()) == 64

    # the same rows written in different orders
    rows = [("i7", "plum", 3), ("i8", "lime", 1), ("i9", "kiwi", 4)]
    for env, order in ((a, rows), (b, rows[::-1])):
        for rid, name, qty in order:
            assert env.call("add_item", {"id": rid, "name": name, "qty": qty}).changed
    assert a.state_hash() == b.state_hash()

    # a different path to the same end state
    c = new_env(fwd)
    c.call("set_qty", {"id": "i1", "qty": 0})
    c.call("set_qty", {"id": "i1", "qty": 5})
    assert c.state_hash() == new_env(fwd).state_hash()


def test_state_hash_is_independent_of_page_layout(shop, tmp_path):
    env = new_env(shop)
    for i in range(200):  # grow, then shrink, so pages are freed and reused
        env.call("add_item", {"id": f"i{100 + i}", "name": "x" * 200})
    raw(env, "DELETE FROM items WHERE length(id) = 4 AND id != 'i150'")
    h = env.state_hash()

    # the same content in a vacuumed copy with another page size (a file: in-memory page size is fixed)
    other = sqlite3.connect(tmp_path / "copy.db", check_same_thread=False)
    env.conn.backup(other)
    other.execute("PRAGMA page_size = 512")
    other.execute("VACUUM")
    assert other.execute("PRAGMA page_size").fetchone()[0] == 512
    assert other.serialize() != env.conn.serialize()
    assert Environment(shop, other).state_hash() == h

    # a serialize/deserialize round trip, and a fork
    again = sqlite3.connect(":memory:", check_same_thread=False)
    again.deserialize(env.conn.serialize())
    assert Environment(shop, again).state_hash() == h
    assert env.fork().state_hash() == h

    # rows rebuilt in reverse rowid order
    raw(env, "CREATE TEMP TABLE keep AS SELECT * FROM items")
    raw(env, "DELETE FROM orders")
    raw(env, "DELETE FROM items")
    raw(env, "INSERT INTO items SELECT * FROM keep ORDER BY id DESC")
    raw(env, "INSERT INTO orders (order_id, item_id, qty) VALUES ('o2', 'i2', 2), ('o1', 'i1', 1)")
    assert env.state_hash() == h


def test_state_hash_ignores_json_key_order_and_spacing(shop):
    a, b, c = new_env(shop), new_env(shop), new_env(shop)
    raw(a, "UPDATE items SET meta = ? WHERE id = 'i3'", ['{"a": 1, "b": {"x": [1, 2], "y": null}}'])
    raw(b, "UPDATE items SET meta = ? WHERE id = 'i3'", ['{"b":{"y":null,"x":[1,2]},"a":1}'])
    raw(c, "UPDATE items SET meta = ? WHERE id = 'i3'", ['{"b":{"y":null,"x":[2,1]},"a":1}'])
    assert a.state_hash() == b.state_hash()
    assert c.state_hash() != a.state_hash()  # array order is content
    # the tool path binds objects canonically too
    d, e = new_env(shop), new_env(shop)
    d.call("set_meta", {"id": "i1", "meta": {"p": 1, "q": 2}})
    e.call("set_meta", {"id": "i1", "meta": {"q": 2, "p": 1}})
    assert d.state_hash() == e.state_hash()


@pytest.mark.parametrize(("table", "key", "column", "value"), [
    ("items", "i1", "name", "apples"),
    ("items", "i1", "qty", 6),
    ("items", "i1", "qty", "five"),      # text in an integer column
    ("items", "i1", "price", 1.5000001),
    ("items", "i3", "meta", "{}"),       # NULL -> empty object
    ("items", "i1", "meta", '{"color": "red", "size": "large"}'),
    ("items", "i2", "name", None),
    ("items", "i1", "name", "apple "),
    ("orders", "o1", "qty", 2),
])
def test_state_hash_changes_when_any_cell_changes(shop, table, key, column, value):
    env = new_env(shop)
    before = env.state_hash()
    pk = "id" if table == "items" else "order_id"
    raw(env, f'UPDATE "{table}" SET "{column}" = ? WHERE "{pk}" = ?', (value, key))
    assert env.state_hash() != before
    assert env.state_hash() == env.state_hash()


def test_state_hash_sees_added_and_removed_rows_and_which_table_holds_them(shop):
    env = new_env(shop)
    base = env.state_hash()
    raw(env, "DELETE FROM orders WHERE order_id = 'o2'")
    removed = env.state_hash()
    assert removed != base
    raw(env, "INSERT INTO orders (order_id, item_id, qty) VALUES ('o2', 'i2', 2)")
    assert env.state_hash() == base
    raw(env, "INSERT INTO orders (order_id, item_id, qty) VALUES ('o3', 'i2', 2)")
    assert env.state_hash() not in (base, removed)


# ---------------------------------------------------------------- 8. python tools


def test_python_tools_need_trust(shop):
    env = new_env(shop, trust=False)
    before = env.state_hash()
    content = err(env.call("py_add", {"id": "i9", "name": "kiwi"}))
    assert "--trust" in content and "py_add" in content
    assert env.state_hash() == before
    assert not (shop.spec.root / "imported.marker").exists()


def test_trusted_python_tools_run_and_their_writes_apply(shop):
    env = new_env(shop, trust=True)
    before = env.state_hash()
    result = env.call("py_add", {"id": "i9", "name": "kiwi"})
    assert (result.error, result.changed, result.content) == (False, True, '{"added": "i9"}')
    assert env.state_hash() != before
    assert env.call("get_item", {"id": "i9"}).content.startswith('{"id": "i9", "name": "kiwi"')
    # the swapped-in database keeps the sandbox rules
    assert pragma(env, "foreign_keys") == 1
    assert pragma(env, "query_only") == 1
    with pytest.raises(sqlite3.DatabaseError):
        env.conn.execute("DELETE FROM items")
    # arguments are validated before the handler runs
    assert "'name'" in err(env.call("py_add", {"id": "i10"}))


def test_a_python_handler_that_times_out_or_raises_changes_nothing(shop):
    env = new_env(shop, trust=True)
    before = env.state_hash()
    t0 = time.monotonic()
    content = err(env.call("py_slow", {"seconds": 30}))
    assert time.monotonic() - t0 < 10
    assert "timed out" in content
    assert env.state_hash() == before
    content = err(env.call("py_boom", {}))
    assert "RuntimeError" in content and "handler exploded" in content
    assert env.state_hash() == before
    # a quick run of the same slow handler does commit
    assert env.call("py_slow", {"seconds": 0}).changed


def test_loading_and_validating_never_imports_handlers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = make_domain(tmp_path, tasks="""\
        - id: set-apple
          user: {reason: r}
          expect:
            actions:
              - set_qty: {id: i1, qty: 3}
            assert:
              - query: SELECT qty FROM items WHERE id = 'i1'
                equals: 3
        """)
    opened = validate_domain("shop")
    assert "py_add" in opened.compiled.tools
    env = new_env(opened.compiled)
    env.call("py_add", {"id": "i9", "name": "kiwi"})
    assert not (folder / "imported.marker").exists()
    assert "shop_handlers" not in sys.modules


def test_validating_a_task_that_calls_a_python_tool_does_not_run_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = make_domain(tmp_path, tasks="""\
        - id: py-add
          user: {reason: r}
          expect:
            actions:
              - py_add: {id: i9, name: kiwi}
        """)
    with pytest.raises(SpecError) as err:
        validate_domain("shop")
    assert "--trust" in str(err.value)
    assert not (folder / "imported.marker").exists()
    validate_domain("shop", trust=True)  # with trust the gold path runs the handler
    assert (folder / "imported.marker").exists()


# ---------------------------------------------------------------- 9. replay of gold paths


def test_replay_of_gold_actions(clinic):
    start = new_env(clinic.compiled).state_hash()
    by_id = {t.task.id: t.task for t in clinic.tasks}

    write_env = new_env(clinic.compiled)
    results = write_env.replay(by_id["cancel-next-appointment"].expect.actions)
    assert [r.error for r in results] == [False, False, False]
    assert results[-1].changed
    assert write_env.state_hash() != start

    info_env = new_env(clinic.compiled)
    results = info_env.replay(by_id["ask-appointment-day"].expect.actions)
    assert not any(r.error or r.changed for r in results)
    assert "2026-12-09" in results[-1].content
    assert info_env.state_hash() == start

    # replay is deterministic: the same gold path gives the same end state every time
    again = new_env(clinic.compiled)
    again.replay(by_id["cancel-next-appointment"].expect.actions)
    assert again.state_hash() == write_env.state_hash()
    # and a failing call in a replay is data too
    assert err(again.replay([{"cancel_appointment": {"appointment_id": "a1"}}])[0]).endswith("cannot be cancelled.")


# ---------------------------------------------------------------- 10. many sandboxes at once


def test_many_forks_used_concurrently_never_see_each_other(shop):
    base = new_env(shop)
    start = base.state_hash()
    envs = [base.fork() if i % 2 else new_env(shop) for i in range(128)]

    def work(i: int) -> tuple[int, str, list]:
        env = envs[i]
        assert env.call("set_qty", {"id": "i1", "qty": 1000 + i}).changed
        assert env.call("add_item", {"id": f"i{500 + i}", "name": f"n{i}"}).changed
        seen = env.conn.execute("SELECT qty FROM items WHERE id = 'i1'").fetchone()[0]
        extra = [r[0] for r in env.conn.execute("SELECT id FROM items WHERE id NOT IN ('i1', 'i2', 'i3')")]
        return seen, env.state_hash(), extra

    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        out = list(pool.map(work, range(128)))

    for i, (seen, _, extra) in enumerate(out):
        assert seen == 1000 + i
        assert extra == [f"i{500 + i}"]
    assert len({h for _, h, _ in out}) == 128
    assert base.state_hash() == start
    assert new_env(shop).state_hash() == start
