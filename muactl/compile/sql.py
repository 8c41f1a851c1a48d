"""The SQL guard: which statements a domain may declare, and how they are checked and bound.

Every statement is prepared under an SQLite authorizer, so the rules hold at compile time (EXPLAIN
against the schema) and again at run time on each sandbox connection: reads may only read, writes
may only insert/update/delete rows of declared tables, and nothing may attach files, run pragmas or
change the schema.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

from . import changelog

_READ_OPS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
_WRITE_OPS = _READ_OPS | {sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE}
# functions that could reach outside the database or loop forever are never allowed
_DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}

_STRING_OR_IDENT = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|\[[^\]]*\]|--[^\n]*|/\*.*?\*/", re.S)
_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def param_names(sql: str) -> list[str]:
    """Named parameters (`:name`) used in a statement, in order of first use, ignoring string literals."""
    stripped = _STRING_OR_IDENT.sub(" ", sql)
    seen: dict[str, None] = {}
    for name in _PARAM.findall(stripped):
        seen.setdefault(name)
    return list(seen)


class Guard:
    """An authorizer with a mode: 'read' allows reads only, 'write' allows DML too, 'off' is for muactl's own setup."""

    def __init__(self, tables: set[str]):
        self.tables = tables
        self.mode = "read"
        self.denied: str | None = None

    def __call__(self, action: int, arg1: Any, arg2: Any, dbname: Any, source: Any) -> int:
        if self.mode == "off":
            return sqlite3.SQLITE_OK
        allowed = _WRITE_OPS if self.mode == "write" else _READ_OPS
        if action not in allowed:
            self.denied = _ACTION_NAMES.get(action, f"operation {action}")
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_FUNCTION and str(arg2).lower() in _DENIED_FUNCTIONS:
            self.denied = f"function {arg2}"
            return sqlite3.SQLITE_DENY
        if action in (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE):
            # the change log's triggers (changelog.py) append to their log tables, and only they may
            if arg1 not in self.tables and not (_is_log(arg1) and _is_log(source)):
                self.denied = f"writing table {arg1}"
                return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def install(self, conn: sqlite3.Connection) -> None:
        # json_each/json_tree register their virtual tables on first use, which SQLite reports as a
        # write to sqlite_master; do that once before the guard is on, so domains may use them
        conn.execute("SELECT count(*) FROM json_each('[]'), json_tree('[]')").fetchone()
        conn.set_authorizer(self)


def _is_log(name: Any) -> bool:
    return isinstance(name, str) and name.startswith(changelog.PREFIX)


# authorizer action codes only: result codes share their numbers (SQLITE_ERROR == SQLITE_CREATE_INDEX)
# and would name the wrong operation in the error
_ACTIONS = ("CREATE_INDEX", "CREATE_TABLE", "CREATE_TEMP_INDEX", "CREATE_TEMP_TABLE", "CREATE_TEMP_TRIGGER",
            "CREATE_TEMP_VIEW", "CREATE_TRIGGER", "CREATE_VIEW", "DELETE", "DROP_INDEX", "DROP_TABLE",
            "DROP_TEMP_INDEX", "DROP_TEMP_TABLE", "DROP_TEMP_TRIGGER", "DROP_TEMP_VIEW", "DROP_TRIGGER", "DROP_VIEW",
            "INSERT", "PRAGMA", "READ", "SELECT", "TRANSACTION", "UPDATE", "ATTACH", "DETACH", "ALTER_TABLE",
            "REINDEX", "ANALYZE", "CREATE_VTABLE", "DROP_VTABLE", "FUNCTION", "SAVEPOINT", "RECURSIVE")
_ACTION_NAMES = {getattr(sqlite3, "SQLITE_" + n): n.lower().replace("_", " ")
                 for n in _ACTIONS if hasattr(sqlite3, "SQLITE_" + n)}


def explain(conn: sqlite3.Connection, guard: Guard, sql: str, mode: str) -> str | None:
    """Compile `sql` against the schema without running it. Returns an error text, or None if it is fine."""
    if ";" in _STRING_OR_IDENT.sub(" ", sql).strip().rstrip(";"):
        return "only one SQL statement is allowed here"
    guard.mode, guard.denied = mode, None
    params = {name: None for name in param_names(sql)}
    what = "only a SELECT is allowed here" if mode == "read" else "only INSERT, UPDATE or DELETE on declared tables is allowed here"
    try:
        program = conn.execute("EXPLAIN " + sql, params).fetchall()
    except sqlite3.DatabaseError as e:
        if guard.denied:
            return f"{what} (SQLite refused: {guard.denied})"
        return f"SQL does not compile: {e}"
    finally:
        guard.mode = "read"
    # VACUUM (and VACUUM INTO, which writes a file) is never shown to the authorizer when prepared
    if any(op[1] == "Vacuum" for op in program):
        return f"{what} (SQLite refused: vacuum)"
    return None


def bind_value(value: Any) -> Any:
    """Arrays and objects are bound as JSON text (use json_each/json_extract in SQL); bools as 0/1."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    return value
