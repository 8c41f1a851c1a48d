"""The incremental state hash (env/statehash.py) equals a full recompute after any sequence of writes,
on the real built-in domains and real SQLite; and it reads the change log, not the tables."""

from __future__ import annotations

import json
import random
import sqlite3

import pytest

from muactl.env import Environment
from muactl.env.statehash import template_key
from muactl.env.gold import GoldDistance, gold_hash
from muactl.spec.models import call_parts
from muactl.env.sandbox import new_env


def raw(env: Environment, sql: str, params=()) -> None:
    """A write behind muactl's back (guard and query_only off), as a test fixture or a buggy tool would."""
    env.guard.mode = "off"
    try:
        env.conn.execute("PRAGMA query_only = OFF")
        env.conn.execute(sql, params)
    finally:
        env.conn.execute("PRAGMA query_only = ON")
        env.guard.mode = "read"


def reshuffled_json(text: str, rng: random.Random) -> str:
    """The same JSON value spelled another way: keys in another order, other spacing."""
    def shuffle(v):
        if isinstance(v, dict):
            items = list(v.items())
            rng.shuffle(items)
            return {k: shuffle(x) for k, x in items}
        if isinstance(v, list):
            return [shuffle(x) for x in v]
        return v

    return json.dumps(shuffle(json.loads(text)), indent=rng.choice([None, 1, 3]),
                      separators=rng.choice([(",", ":"), (", ", ": ")]), ensure_ascii=rng.random() < 0.5)


def random_value(ctype: str, rng: random.Random):
    return {
        "text": lambda: rng.choice(["x", "", "Ünïcode ✓", "a'b\"c", None, 7]),  # 7: text affinity stores '7'
        "integer": lambda: rng.choice([0, -3, 2**62, None, "five", 1.5]),
        "real": lambda: rng.choice([0.1 + 0.2, 3, -0.0, 1e300, None, 2.5]),
        "boolean": lambda: rng.choice([0, 1, None]),
        "json": lambda: rng.choice(['{"b": [1, 2], "a": {"y": null, "x": 1.0}}', "[]", "not json", None, "[" * 2000]),
    }[ctype]()


def mutate(env: Environment, rng: random.Random) -> None:
    """One random write: update a cell, delete a row, delete and re-insert it, REPLACE it, rewrite a
    JSON cell in another spelling, update many rows, or a write that is rolled back. A write that
    breaks a constraint fails as a whole (its log entries with it)."""
    try:
        _mutate(env, rng)
    except sqlite3.IntegrityError:
        pass


def _mutate(env: Environment, rng: random.Random) -> None:
    tables = env.domain.tables
    name = rng.choice(sorted(tables))
    cols = list(tables[name].columns)
    count = env.conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
    if count == 0:
        return
    # the row comes from the test's seeded rng, not SQLite's random(), so a failing seed fails every time
    row = env.conn.execute(f'SELECT rowid, * FROM "{name}" ORDER BY rowid LIMIT 1 OFFSET ?',
                           (rng.randrange(count),)).fetchone()
    rowid, values = row[0], row[1:]
    placeholders = ", ".join("?" * len(cols))
    names = ", ".join(f'"{c}"' for c in cols)
    op = rng.randrange(8)
    if op == 0:
        col = rng.choice(cols)
        raw(env, f'UPDATE "{name}" SET "{col}" = ? WHERE rowid = ?', (random_value(tables[name].columns[col], rng), rowid))
    elif op == 1:
        raw(env, f'DELETE FROM "{name}" WHERE rowid = ?', (rowid,))
    elif op == 2:  # deleted and re-inserted: same content, another rowid and page
        raw(env, f'DELETE FROM "{name}" WHERE rowid = ?', (rowid,))
        raw(env, f'INSERT INTO "{name}" ({names}) VALUES ({placeholders})', values)
    elif op == 3:  # REPLACE removes the old row itself
        new = list(values)
        free = [i for i, c in enumerate(cols) if c not in tables[name].pk_columns()]
        if free:
            i = rng.choice(free)
            new[i] = random_value(tables[name].columns[cols[i]], rng)
        raw(env, f'INSERT OR REPLACE INTO "{name}" ({names}) VALUES ({placeholders})', new)
    elif op == 4:
        json_cols = [i for i, c in enumerate(cols) if tables[name].columns[c] == "json" and values[i]]
        for i in json_cols:
            try:
                text = reshuffled_json(values[i], rng)
            except (ValueError, RecursionError):  # "not json", or the 2000-deep "[[[..." random_value writes
                continue
            raw(env, f'UPDATE "{name}" SET "{cols[i]}" = ? WHERE rowid = ?', (text, rowid))
    elif op == 5:  # many rows at once, most of them unchanged
        col = rng.choice(cols)
        raw(env, f'UPDATE "{name}" SET "{col}" = "{col}" WHERE rowid % 3 = ?', (rng.randrange(3),))
    elif op == 6:
        raw(env, "BEGIN")
        raw(env, f'DELETE FROM "{name}" WHERE rowid % 2 = 0')
        raw(env, "ROLLBACK")
    else:
        new = list(values)
        for i, c in enumerate(cols):
            if c in tables[name].pk_columns():
                new[i] = f"{new[i]}-copy{rng.randrange(10**6)}" if isinstance(new[i], str) else None
        raw(env, f'INSERT OR IGNORE INTO "{name}" ({names}) VALUES ({placeholders})', new)


@pytest.mark.parametrize("domain", ["bank", "retail"])
@pytest.mark.parametrize("seed", [0, 1])
def test_incremental_hash_equals_full_recompute_after_random_writes(domain, seed, request):
    compiled = request.getfixturevalue(domain).compiled
    rng = random.Random(seed)
    env = new_env(compiled)
    raw(env, "PRAGMA foreign_keys = OFF")  # any row may go; the hash must follow
    start = env.state_hash()
    assert start == env.full_state_hash()
    forks = []
    for step in range(120):
        mutate(env, rng)
        if step % 10 == 0:
            assert env.state_hash() == env.full_state_hash(), f"step {step}"
        if step % 40 == 20:  # a fork carries on from the same point, on its own
            forks.append(env.fork())
            raw(forks[-1], "PRAGMA foreign_keys = OFF")
        for f in forks:
            mutate(f, rng)
    assert env.state_hash() == env.full_state_hash()
    for f in forks:
        assert f.state_hash() == f.full_state_hash() != env.state_hash()
    # undo everything by rebuilding each table from the template, rows in reverse order
    template = new_env(compiled)
    for name, spec in compiled.tables.items():
        cols = ", ".join(f'"{c}"' for c in spec.columns)
        rows = template.conn.execute(f'SELECT {cols} FROM "{name}" ORDER BY rowid DESC').fetchall()
        raw(env, f'DELETE FROM "{name}"')
        for r in rows:
            raw(env, f'INSERT INTO "{name}" ({cols}) VALUES ({", ".join("?" * len(spec.columns))})', r)
    assert env.state_hash() == start == env.full_state_hash()
    assert env.state_delta() == {}


@pytest.mark.parametrize("domain", ["bank", "retail"])
def test_every_gold_path_hashes_as_a_full_recompute_does(domain, request):
    """The real write tools, through the sandbox: each task's setup and gold actions."""
    opened = request.getfixturevalue(domain)
    for t in opened.tasks:
        env = new_env(opened.compiled)
        env.replay(t.task.setup)
        env.replay(t.task.expect.actions)
        assert env.state_hash() == env.full_state_hash(), t.task.id
        assert gold_hash(t, opened.compiled) == env.state_hash()
        env.close()


def test_json_spelling_does_not_count_but_content_does(retail):
    compiled = retail.compiled
    a, b = new_env(compiled), new_env(compiled)
    order, items = a.conn.execute("SELECT order_id, items FROM orders LIMIT 1").fetchone()
    rng = random.Random(3)
    raw(a, "UPDATE orders SET items = ? WHERE order_id = ?", (reshuffled_json(items, rng), order))
    assert a.state_hash() == b.state_hash() == new_env(compiled).state_hash()
    assert a.conn.execute("SELECT items FROM orders WHERE order_id = ?", (order,)).fetchone()[0] != items
    changed = json.loads(items)
    changed[0]["price"] = changed[0]["price"] + 1
    raw(b, "UPDATE orders SET items = ? WHERE order_id = ?", (json.dumps(changed), order))
    assert b.state_hash() != a.state_hash()
    assert b.state_hash() == b.full_state_hash()


def test_hash_reads_the_change_log_not_the_tables(retail):
    """Cost follows the rows changed: after a write, the hash runs a handful of statements, none of
    which scans a declared table."""
    env = new_env(retail.compiled)
    env.state_hash()
    pending = env.conn.execute("SELECT order_id FROM orders WHERE status = 'pending' LIMIT 1").fetchone()[0]
    assert not env.call("cancel_pending_order", {"order_id": pending, "reason": "no longer needed"}).error
    seen: list[str] = []
    env.conn.set_trace_callback(seen.append)
    h = env.state_hash()
    env.conn.set_trace_callback(None)
    assert seen and all("_muactl_log_" in s for s in seen), seen
    assert len(seen) <= len(retail.compiled.tables)
    env.conn.set_trace_callback(seen.append)
    assert env.state_hash() == h
    env.conn.set_trace_callback(None)
    assert len(seen) <= len(retail.compiled.tables)  # nothing new written: no statement at all
    assert h == env.full_state_hash()


def test_a_database_from_elsewhere_is_hashed_from_its_rows(retail):
    """No tracker (a connection muactl did not fork) or a database swapped in wholesale (what a python
    tool does): the change log is added if missing and the difference rebuilt once from every row."""
    compiled = retail.compiled
    env = new_env(compiled)
    pending = env.conn.execute("SELECT order_id FROM orders WHERE status = 'pending' LIMIT 1").fetchone()[0]
    env.call("cancel_pending_order", {"order_id": pending, "reason": "no longer needed"})
    plain = sqlite3.connect(":memory:", check_same_thread=False)
    disk = sqlite3.connect(compiled.template_path)
    disk.backup(plain)  # the cached template file carries no change log
    disk.close()
    plain.execute("UPDATE orders SET status = 'cancelled' WHERE order_id = ?", (pending,))
    plain.execute("UPDATE orders SET status = 'pending' WHERE order_id = ?", (pending,))
    plain.commit()
    other = Environment(compiled, plain)
    assert other.state_hash() == new_env(compiled).state_hash()
    assert other.call("cancel_pending_order", {"order_id": pending, "reason": "no longer needed"}).changed
    assert other.state_hash() == env.state_hash() == other.full_state_hash()
    assert other.state_delta() == env.state_delta()


def test_gold_distance_counts_rows_that_differ_from_the_gold_end_state(retail):
    """Turn-level shaping's distance, from the two states' differences to the template: the size of
    the symmetric difference of their row sets, as a full comparison counts it."""
    compiled = retail.compiled

    def row_set(env):
        return {(t, repr(tuple(sorted(r.items())))) for t in compiled.tables for r in env.rows(t)}

    task = next(t for t in retail.tasks if len(t.task.expect.actions) >= 2)
    gold = new_env(compiled)
    gold.replay(task.task.setup)
    gold.replay(task.task.expect.actions)
    progress = GoldDistance(task, compiled)
    env = new_env(compiled)
    env.replay(task.task.setup)
    distances = [progress.distance(env)]
    assert distances[0] == len(row_set(env) ^ row_set(gold)) > 0
    for call in task.task.expect.actions:
        env.call(*call_parts(call))
        distances.append(progress.distance(env))
        assert distances[-1] == len(row_set(env) ^ row_set(gold))
    assert distances[-1] == 0


def test_random_database_instances_hash_against_their_own_template(bank):
    from muactl.compile.randomdb import instance

    a, b = instance(bank.compiled, 1), instance(bank.compiled, 2)
    assert template_key(a) != template_key(b)
    ea, eb = new_env(a), new_env(b)
    assert ea.state_hash() == ea.full_state_hash() != eb.state_hash() == eb.full_state_hash()
    acc = ea.conn.execute("SELECT account_id FROM accounts LIMIT 1").fetchone()[0]
    raw(ea, "UPDATE accounts SET balance = balance + 1 WHERE account_id = ?", (acc,))
    assert ea.state_hash() == ea.full_state_hash()


def test_validate_verify_hash_checks_the_incremental_hash_against_a_full_recompute(monkeypatch):
    from typer.testing import CliRunner

    from muactl.cli import app
    from muactl.env import statehash

    ok = CliRunner().invoke(app, ["validate", "bank", "--verify-hash"])
    assert ok.exit_code == 0 and "state hashes verified" in ok.output, ok.output
    # a tracker that lost a change: every gold path that writes is reported, with the task file's line
    monkeypatch.setattr(statehash.StateTracker, "digest", lambda self: "stale")
    bad = CliRunner().invoke(app, ["validate", "bank", "--verify-hash"])
    assert bad.exit_code == 2, bad.output
    assert "differs from a full recompute" in bad.output and ".yaml:" in bad.output
    assert CliRunner().invoke(app, ["validate", "bank"]).exit_code == 0  # the check runs only when asked


def test_change_log_table_names_are_reserved(in_tmp):
    from typer.testing import CliRunner

    from muactl.cli import app

    folder = in_tmp / "domains" / "notes"
    folder.mkdir(parents=True)
    (folder / "domain.yaml").write_text(
        "name: notes\ndescription: Notes.\npolicy: Be kind.\ndatabase:\n  tables:\n"
        "    _muactl_log_notes:\n      columns: {id: text}\n      primary_key: id\n"
        "tools:\n  count_notes:\n    description: How many notes.\n    query: SELECT count(*) FROM _muactl_log_notes\n"
        "    returns: value\n")
    r = CliRunner().invoke(app, ["validate", "notes"])
    assert r.exit_code == 2, r.output
    assert "domain.yaml:6" in r.output and "muactl's own" in r.output and "Traceback" not in r.output


def test_template_sums_are_stored_beside_the_cached_template(bank):
    """Read once per template, not per process; a damaged file is recomputed, and a wrong one is what
    `validate --verify-hash` exists to catch."""
    from muactl.env import statehash

    compiled = bank.compiled
    stored = statehash._sums_path(compiled)
    statehash._TEMPLATES.clear()
    stored.unlink(missing_ok=True)
    start = new_env(compiled).state_hash()
    assert stored.exists() and set(json.loads(stored.read_text())) == set(compiled.tables)

    stored.write_text("{not json")
    statehash._TEMPLATES.clear()
    env = new_env(compiled)
    assert env.state_hash() == start == env.full_state_hash()

    sums = json.loads(stored.read_text())
    sums["accounts"][1] = f"{int(sums['accounts'][1], 16) ^ 1:064x}"
    stored.write_text(json.dumps(sums))
    statehash._TEMPLATES.clear()
    env = new_env(compiled)
    assert env.state_hash() != env.full_state_hash()  # the stored sums are what the hash starts from
    stored.unlink()
    statehash._TEMPLATES.clear()
    assert new_env(compiled).state_hash() == start
