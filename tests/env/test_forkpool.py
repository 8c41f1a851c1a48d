"""Reused sandbox databases (env/forkpool.py): a closed sandbox comes back as exactly its template,
rowids included, on the real built-in domains and real SQLite."""

from __future__ import annotations

import random
import sqlite3

import pytest

from muactl.env import forkpool

from tests.env.test_statehash import mutate, raw
from muactl.env.sandbox import new_env


def dump(conn: sqlite3.Connection, tables) -> dict:
    """Everything a query can see: every row with its rowid, in rowid order, and the change log."""
    out = {t: conn.execute(f'SELECT rowid, * FROM "{t}" ORDER BY rowid').fetchall() for t in tables}
    out["logs"] = [conn.execute(f'SELECT count(*) FROM "_muactl_log_{t}"').fetchone()[0] for t in tables]
    return out


def fresh(compiled) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(compiled.template_bytes())
    return conn


@pytest.mark.parametrize("domain", ["bank", "retail"])
def test_a_closed_sandbox_comes_back_as_its_template(domain, request):
    opened = request.getfixturevalue(domain)
    compiled = opened.compiled
    template = dump(fresh(compiled), compiled.tables)
    start = new_env(compiled).state_hash()
    rng = random.Random(5)
    for round_ in range(3):
        env = new_env(compiled)
        for t in rng.sample(opened.tasks, 5):  # real tools ...
            env.replay(t.task.setup)
            env.replay(t.task.expect.actions)
        raw(env, "PRAGMA foreign_keys = OFF")
        for _ in range(40):  # ... and writes of every kind, rowid changes and REPLACE included
            mutate(env, rng)
        conn = env.conn
        env.close()
        with pytest.raises(sqlite3.ProgrammingError):
            env.conn.execute("SELECT 1")
        again = new_env(compiled)
        assert again.conn is conn, f"round {round_}: the database was not reused"
        assert dump(again.conn, compiled.tables) == template
        assert again.state_hash() == start == again.full_state_hash()
        assert again.state_delta() == {}
        tool, args = ("find_user_id_by_email", {"email": "nobody@example.com"}) if domain == "retail" \
            else ("find_customer", {"name": "Nobody"})
        assert again.call(tool, args).error  # the new sandbox's guard and settings are in place
        with pytest.raises(sqlite3.DatabaseError):
            again.conn.execute("DELETE FROM " + next(iter(compiled.tables)))
        again.close()


def test_a_sandbox_whose_database_was_swapped_in_is_not_reused(retail):
    from muactl.env import Environment

    compiled = retail.compiled
    while forkpool.take(compiled) is not None:
        pass
    conn = fresh(compiled)  # a database muactl did not fork: its log does not cover every change
    env = Environment(compiled, conn)
    env.close()
    assert forkpool.take(compiled) is None
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")

    env = new_env(compiled)
    raw(env, "CREATE TEMP TABLE scratch (x)")  # left-over state the template does not have
    env.close()
    assert forkpool.take(compiled) is None


def test_forks_of_a_sandbox_are_reused_too(bank):
    compiled = bank.compiled
    template = dump(fresh(compiled), compiled.tables)
    env = new_env(compiled)
    raw(env, "UPDATE accounts SET balance = balance + 7 WHERE rowid % 2 = 0")
    child = env.fork()
    raw(child, "DELETE FROM accounts WHERE rowid % 3 = 0")
    assert child.state_hash() == child.full_state_hash()
    conn = child.conn
    child.close()
    env.close()
    reused = [forkpool.take(compiled), forkpool.take(compiled)]
    assert conn in reused
    for c in reused:
        assert dump(c, compiled.tables) == template


def test_the_pool_keeps_a_bounded_number_of_databases_across_templates(bank):
    from muactl.compile.randomdb import instance

    domains = [bank.compiled] + [instance(bank.compiled, seed) for seed in range(3)]
    for round_ in range(2):
        envs = [new_env(d) for d in domains for _ in range(forkpool._MAX_KEPT // 2)]
        for i, env in enumerate(envs):
            if i % 3 == 0:
                raw(env, "UPDATE accounts SET balance = balance + 1 WHERE rowid = 1")
            env.close()
        assert sum(len(v) for v in forkpool._POOL.values()) == forkpool._MAX_KEPT
        assert all(forkpool._POOL.values())  # no template left with an empty list
    # the most recently closed templates are the ones kept, each still equal to its own template
    for d in domains:
        env = new_env(d)
        assert env.state_hash() == env.full_state_hash() == new_env(d).state_hash()


def test_after_a_python_tool_the_hash_is_rebuilt_and_the_database_not_reused(tmp_path, monkeypatch):
    """A python tool hands back a whole new database file: the log cannot be trusted to describe it, so
    the difference is rebuilt from its rows once, then follows the log again."""
    from muactl.domain.open import open_domain
    from tests.env.test_sandbox import make_domain

    monkeypatch.chdir(tmp_path)
    make_domain(tmp_path)
    shop = open_domain("shop").compiled
    env = new_env(shop, trust=True)
    assert env.call("set_qty", {"id": "i1", "qty": 9}).changed
    assert env.call("py_add", {"id": "i9", "name": "kiwi"}).changed
    assert env.state_hash() == env.full_state_hash()
    assert env.call("set_qty", {"id": "i9", "qty": 3}).changed  # logged again from here
    assert env.state_hash() == env.full_state_hash()
    other = new_env(shop)  # the same end state by other means
    raw(other, "INSERT INTO items (id, name, qty) VALUES ('i9', 'kiwi', 3)")
    assert other.call("set_qty", {"id": "i1", "qty": 9}).changed
    assert other.state_hash() == env.state_hash()
    assert other.state_delta() == env.state_delta()
    conn = env.conn
    env.close()
    assert forkpool.take(shop) is not conn


COUNTERS = "SELECT changes(), total_changes(), last_insert_rowid()"


def test_a_reused_sandbox_shows_a_fresh_copys_connection_counters(bank):
    """SQL can read the connection's own counters: on a reused database they must read as on a fresh
    copy, before and after the same writes (else a tool could tell, and see what earlier episodes wrote)."""
    compiled = bank.compiled
    task = next(t for t in bank.tasks if any("transfer_funds" in c for c in t.task.expect.actions))
    while forkpool.take(compiled) is not None:
        pass

    def play() -> tuple[tuple, tuple, sqlite3.Connection]:
        env = new_env(compiled)
        before = env.select(COUNTERS)[1][0]
        env.replay(task.task.setup)
        assert not any(r.error for r in env.replay(task.task.expect.actions))
        after = env.select(COUNTERS)[1][0]
        raw(env, "PRAGMA foreign_keys = OFF")  # rows deleted: the undo inserts them again
        raw(env, f'DELETE FROM "{table}" WHERE rowid IN (SELECT rowid FROM "{table}" LIMIT 3)')
        conn = env.conn
        env.close()
        return before, after, conn

    table = next(iter(compiled.tables))
    fresh_before, fresh_after, conn = play()
    assert fresh_before == (0, 0, 0) and fresh_after[1] > 0
    for _ in range(2):
        before, after, again = play()
        assert again is conn  # the same database, reused
        assert (before, after) == (fresh_before, fresh_after)
