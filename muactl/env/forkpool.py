"""Sandbox databases reused: a fork costs the rows the previous episode changed, not a database copy.

Forking by deserializing the template's bytes is one memory copy, but a copy of the whole database:
20 MB and 1.5-6 ms at retail scale 100 (benchmarks/domains.py). So a closed sandbox is put back to
its template instead, by undoing its change log (compile/changelog.py) newest entry first: each row
an episode added is deleted, each row it removed is inserted again under its old rowid (so queries
without ORDER BY see rows in the same order as on a fresh copy). The next fork of that template
takes it. The undo is checked: the state tracker must find no row differing from the template,
else the database is dropped. Its connection's counters (changes(), total_changes(), last_insert_rowid())
are set back to a fresh copy's. Only sandboxes whose every change went through the log come back
(not after a python tool swapped the database in, not a database muactl did not fork).
"""

from __future__ import annotations

import sqlite3
import threading
from collections import OrderedDict

from ..compile import changelog
from ..compile.changelog import quote
from .statehash import StateTracker, template_key

_MAX_KEPT = 32  # databases kept across all templates; the least recently used template's go first
_POOL: OrderedDict[str, list[sqlite3.Connection]] = OrderedDict()
_LOCK = threading.Lock()


def take(domain) -> sqlite3.Connection | None:
    """A database equal to the domain's template, if one was given back."""
    key = template_key(domain)
    with _LOCK:
        kept = _POOL.get(key)
        if not kept:
            return None
        conn = kept.pop()
        if not kept:
            del _POOL[key]
        return conn


def give_back(domain, conn: sqlite3.Connection, state: StateTracker) -> bool:
    """Undo this sandbox's changes and keep its database for the next fork. False when it cannot be
    reused (the caller closes it)."""
    try:
        if not _undo(conn, state):
            return False
        _reset_counters(conn)
    except sqlite3.Error:
        return False
    key = template_key(domain)
    with _LOCK:
        _POOL.setdefault(key, []).append(conn)
        _POOL.move_to_end(key)
        while sum(len(v) for v in _POOL.values()) > _MAX_KEPT:
            oldest = next(iter(_POOL))
            _POOL[oldest].pop(0).close()
            if not _POOL[oldest]:
                del _POOL[oldest]
    return True


def _undo(conn: sqlite3.Connection, state: StateTracker) -> bool:
    conn.set_authorizer(None)  # the sandbox is closed: these statements are muactl's own
    if not state.whole_log or conn.in_transaction or conn.execute("SELECT count(*) FROM temp.sqlite_master").fetchone()[0]:
        return False
    state = state.read(conn)
    changed = [s for s in state.shapes if state.cursor[s.name]]
    if changed:
        conn.execute("PRAGMA query_only = OFF")
        conn.execute("PRAGMA foreign_keys = OFF")  # rows come back table by table
        conn.execute("BEGIN")
        try:
            for s in changed:
                _undo_table(conn, s)
            conn.execute("COMMIT")
        except sqlite3.Error:
            conn.execute("ROLLBACK")
            raise
        if state.read(conn).delta:  # the undo must land exactly on the template
            return False
        for s in changed:
            conn.execute(f"DELETE FROM {quote(changelog.log_table(s.name))}")
    return True


def _reset_counters(conn: sqlite3.Connection) -> None:
    """Make the connection's own counters read as on a fresh copy, where changes(), total_changes() and
    last_insert_rowid() are all 0: else a tool's SQL could tell a reused sandbox from a fresh one (and
    see how much the episodes before it wrote). last_insert_rowid() is set by inserting rowid 0 into a
    scratch table, changes() by a statement that changes nothing; total_changes() cannot go back, so
    the SQL function is replaced by one counting from here (muactl's own code reads the real counter,
    Connection.total_changes)."""
    conn.execute("PRAGMA query_only = OFF")
    conn.execute("CREATE TEMP TABLE _muactl_counters (x)")
    try:
        conn.execute("INSERT INTO temp._muactl_counters (rowid) VALUES (0)")
        conn.execute("DELETE FROM temp._muactl_counters WHERE 0")
    finally:
        conn.execute("DROP TABLE temp._muactl_counters")
    base = conn.total_changes
    conn.create_function("total_changes", 0, lambda: conn.total_changes - base)


def _undo_table(conn: sqlite3.Connection, shape) -> None:
    log = quote(changelog.log_table(shape.name))
    table = quote(shape.name)
    values = ", ".join(f"v{i}" for i in range(len(shape.columns)))
    insert = (f"INSERT INTO {table} (rowid, {', '.join(quote(c) for c in shape.columns)}) "
              f"VALUES (?{', ?' * len(shape.columns)})")
    delete = f"DELETE FROM {table} WHERE rowid = ?"
    for sign, rid, *row in conn.execute(f"SELECT sign, rid, {values} FROM {log} ORDER BY seq DESC").fetchall():
        if sign > 0:
            conn.execute(delete, (rid,))
        else:
            conn.execute(insert, (rid, *row))
