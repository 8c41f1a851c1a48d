"""The SQL guard: which statements a domain may declare, and how they are checked and bound.

Every statement is prepared under an SQLite authorizer, so the rules hold at compile time (EXPLAIN
against the schema) and again at run time on each sandbox connection: reads may only read, writes
may only insert/update/delete rows of declared tables, and nothing may attach files, run pragmas or
change the schema.
"""

from __future__ import annotations

import ast
import hashlib
import json
import operator
import re
import sqlite3
from typing import Any

from .changelog import PREFIX as LOG_PREFIX

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


def _py_round(x: Any, digits: Any = 0) -> Any:
    if x is None or digits is None:
        return None
    return float(round(float(x), int(digits)))


def _py_number(x: Any) -> Any:
    # SQLite writes reals into JSON with 15 significant digits (3.9200000000000017 -> 3.92); Python's
    # repr is the shortest text that reads back as the same float
    return None if x is None else repr(x) if isinstance(x, float) else str(x)


def _parsed(text: Any) -> Any:
    """A JSON text as Python reads it (json.loads), within bounds; a ValueError for anything else."""
    if not isinstance(text, str) or len(text) > 1_000_000:
        raise ValueError("not JSON text")
    return json.loads(text)


def _py_json(text: Any, indent: Any = None) -> Any:
    # Python's json.dumps of the value (", " and ": " separators, non-ASCII as \uXXXX): what a Python
    # tool that returns json.dumps(result) prints; py_json(x, n) as json.dumps(result, indent=n) (n at most 8);
    # NULL for text that is not JSON
    if indent is not None and (type(indent) is not int or not 0 <= indent <= 8):
        return None
    try:
        return json.dumps(_parsed(text), indent=indent)
    except (ValueError, RecursionError):
        return None


def _py_str(text: Any) -> Any:
    # Python's str() of the JSON value: single-quoted reprs inside lists and dicts, True/False/None
    try:
        return str(_parsed(text))
    except (ValueError, RecursionError):
        return None


def _py_equal(a: Any, b: Any) -> Any:
    # the two JSON values equal as Python compares them (1 == 1.0 == true; key order never counts)
    try:
        return int(_parsed(a) == _parsed(b))
    except (ValueError, RecursionError):
        return None


_FORMAT_SPEC = re.compile(r"[+\- ]?,?(?:\.\d{1,2})?[fe%]")


def _py_format(x: Any, spec: Any) -> Any:
    # format(x, spec) as Python's f-strings write a number ({total:.2f}): SQLite's printf rounds on the decimal
    # text (0.125 -> 0.13), Python on the binary float (0.12); specs are limited to signs, grouping and up
    # to 2-digit precisions of f, e and %, so the text stays small
    if type(x) not in (int, float) or not isinstance(spec, str) or not _FORMAT_SPEC.fullmatch(spec):
        return None
    return format(float(x), spec)


def _py_sha256(value: Any) -> Any:
    # hashlib.sha256's hexdigest: text as UTF-8, a blob as its bytes, a number as Python's str() of it
    # (deterministic ids made from the data, as τ²'s banking tools make theirs); NULL for NULL
    if value is None:
        return None
    return hashlib.sha256(value if isinstance(value, bytes) else str(value).encode()).hexdigest()


def _fts_any(text: Any) -> Any:
    # free text as a safe FTS5 MATCH: every whitespace-separated word a quoted string (FTS5 then tokenizes it),
    # OR-ed, so no query syntax (NEAR, *, -, column filters) reaches FTS5; nothing to look for matches nothing
    words = str(text).split() if text is not None else []
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in words) or '""'


MAX_PRECISION = 1000  # digits py_mp_log and py_decimal_sqrt compute at most (each costs time that grows with it)
MAX_POW_BITS = 10_000  # the largest integer py_pow writes (Python's int ** int is unbounded)


def _py_mp_log(value: Any, base: Any, dps: Any) -> Any:
    # repr of mpmath's log(value) / log(base) at `dps` decimal digits (mpf('1.3027'), mpc(...) for a negative
    # value), as a Python tool that sets mpmath.mp.dps prints it; a context of its own, so nothing global moves.
    # NULL where mpmath raises (a base whose log is 0) or dps is over MAX_PRECISION
    if type(value) not in (int, float) or type(base) not in (int, float) or type(dps) is not int or dps > MAX_PRECISION:
        return None
    import mpmath

    ctx = mpmath.MPContext()
    ctx.dps = dps
    try:
        return repr(ctx.log(value) / ctx.log(base))
    except (ZeroDivisionError, ValueError, OverflowError):
        return None


def _py_decimal_sqrt(x: Any, prec: Any) -> Any:
    # repr of decimal's Decimal(x).sqrt() with `prec` significant digits (Decimal('1.4142')); NULL for a negative
    # x or a prec outside 1..MAX_PRECISION
    if type(x) not in (int, float) or type(prec) is not int or not 1 <= prec <= MAX_PRECISION or x < 0:
        return None
    import decimal

    try:
        return repr(decimal.Context(prec=prec).sqrt(decimal.Decimal(x)))
    except (decimal.InvalidOperation, ValueError):
        return None


def _py_pow(base: Any, exponent: Any) -> Any:
    # Python's base ** exponent as repr writes it: an int for int ** non-negative int (up to MAX_POW_BITS bits),
    # a float, or a complex ((1+1.7j), a negative base to a fractional power); NULL where Python raises
    # (0 to a negative power, a float overflow) or the int would be longer
    if type(base) not in (int, float) or type(exponent) not in (int, float):
        return None
    if type(base) is int and type(exponent) is int and exponent > 0 and abs(base) > 1 \
            and (abs(base).bit_length() - 1) * exponent > MAX_POW_BITS:
        return None
    try:
        return repr(base ** exponent)
    except (ZeroDivisionError, OverflowError):
        return None


def _py_splitlines(text: Any) -> Any:
    # str.splitlines() of a text as a JSON array (Python's line breaks: \n, \r\n, \r, \v, \f, \x1c-\x1e, \x85,
    # \u2028, \u2029; no empty last line); NULL for anything but text
    return json.dumps(text.splitlines()) if isinstance(text, str) else None


def _py_split(text: Any) -> Any:
    # str.split() of a text as a JSON array (runs of Unicode whitespace; no empty words); NULL for anything but text
    return json.dumps(text.split()) if isinstance(text, str) else None


MAX_DRAWS = 10_000  # draws py_randint replays at most


def _py_randint(seed: Any, ranges: Any) -> Any:
    # the last of random.Random(seed).randint(a, b) for each [a, b] of a JSON list, in order: one stream that draws
    # from several ranges (each range takes its own share of the stream, so the draws cannot be tabled per range);
    # NULL for anything but an int seed and a list of int pairs (at most MAX_DRAWS)
    import random

    try:
        pairs = _parsed(ranges)
    except (ValueError, RecursionError):
        return None
    if type(seed) is not int or not isinstance(pairs, list) or not 0 < len(pairs) <= MAX_DRAWS or not all(
            isinstance(p, list) and len(p) == 2 and all(type(x) is int for x in p) and p[0] <= p[1] for p in pairs):
        return None
    rng = random.Random(seed)
    return [rng.randint(a, b) for a, b in pairs][-1]


_STRPTIME_FORMAT = re.compile(r"(?:%[YmdHMS]|[-/ :T.])+")


def _py_strptime(text: Any, fmt: Any) -> Any:
    # datetime.strptime(text, fmt) as ISO text ('2024-01-05T00:00:00'; "1" and " 1" read as days, as Python reads
    # them); NULL where Python raises ValueError. Formats of %Y %m %d %H %M %S and separators, texts up to 64 chars
    import datetime

    if not isinstance(text, str) or len(text) > 64 or not isinstance(fmt, str) or not _STRPTIME_FORMAT.fullmatch(fmt):
        return None
    try:
        return datetime.datetime.strptime(text, fmt).isoformat()
    except ValueError:
        return None


_CALC_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _calc(expression: Any) -> Any:
    """+ - * / and parentheses over numbers, as Python evaluates them; NULL for anything else."""
    if not isinstance(expression, str) or len(expression) > 1000:
        return None

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _CALC_OPS:
            return _CALC_OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
            return -ev(node.operand) if isinstance(node.op, ast.USub) else ev(node.operand)
        raise ValueError("not arithmetic")

    try:
        return float(ev(ast.parse(expression, mode="eval")))
    except (ValueError, SyntaxError, ZeroDivisionError, RecursionError, OverflowError):
        return None


class _PySum:
    """sum() as a Python loop adds: left to right, no compensation (SQLite's own sum() is compensated
    from 3.43 on, so its last digit depends on the SQLite version)."""

    def __init__(self) -> None:
        self.total: Any = None

    def step(self, x: Any) -> None:
        if x is not None:
            self.total = x if self.total is None else self.total + x

    def finalize(self) -> Any:
        return self.total


# Deterministic helper functions muactl registers on every connection (README, "SQL functions").
# SQLite's round() rounds half away from zero on the decimal text (round(2.675, 2) = 2.68); py_round is
# Python's round on the binary float (2.67), which ports of Python tools need to reproduce their numbers.
SQL_FUNCTIONS = {"py_round": (_py_round, -1), "py_number": (_py_number, 1), "calc": (_calc, 1),
                 "py_json": (_py_json, -1), "py_str": (_py_str, 1), "py_equal": (_py_equal, 2),
                 "py_format": (_py_format, 2), "py_sha256": (_py_sha256, 1), "fts_any": (_fts_any, 1),
                 "py_mp_log": (_py_mp_log, 3), "py_decimal_sqrt": (_py_decimal_sqrt, 2), "py_pow": (_py_pow, 2),
                 "py_splitlines": (_py_splitlines, 1), "py_split": (_py_split, 1), "py_randint": (_py_randint, 2),
                 "py_strptime": (_py_strptime, 2)}
SQL_AGGREGATES = {"py_sum": (_PySum, 1)}


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
        if action == sqlite3.SQLITE_PRAGMA and arg1 == "data_version" and arg2 is None:
            return sqlite3.SQLITE_OK  # FTS5 reads it on every query of a search index (read-only)
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
        connect_search_indexes(conn)
        for name, (fn, nargs) in SQL_FUNCTIONS.items():
            conn.create_function(name, nargs, fn, deterministic=True)
        for name, (cls, nargs) in SQL_AGGREGATES.items():
            conn.create_aggregate(name, nargs, cls)
        conn.set_authorizer(self)


def connect_search_indexes(conn: sqlite3.Connection) -> None:
    """A domain's search indexes (FTS5 tables) register themselves on first use as json_each does: do it
    before the guard is on, once per schema the connection loads. The caller keeps any authorizer off."""
    for (index,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE "
                                 "'CREATE VIRTUAL TABLE % USING fts5(%'").fetchall():
        conn.execute(f'SELECT count(*) FROM "{index}" WHERE 0').fetchone()


def _is_log(name: Any) -> bool:
    return isinstance(name, str) and name.startswith(LOG_PREFIX)


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
        guard.mode = "off"  # reading the schema for a hint is not the statement's doing
        return f"SQL does not compile: {e}{column_hint(conn, sql, str(e))}"
    finally:
        guard.mode = "read"
    # VACUUM (and VACUUM INTO, which writes a file) is never shown to the authorizer when prepared
    if any(op[1] == "Vacuum" for op in program):
        return f"{what} (SQLite refused: vacuum)"
    return None


def unknown_name(error: str) -> str | None:
    """The column or table SQLite named in a compile error ("no such column: phon"), or None."""
    found = re.search(r"no such (?:column|table): (?:\w+\.)?(\w+)", error)
    return found.group(1) if found else None


def column_hint(conn: sqlite3.Connection, sql: str, error: str) -> str:
    """For "no such column: X": the columns X is spelled like, and those of the tables the statement names."""
    import difflib

    if not error.startswith("no such column"):
        return ""
    name = unknown_name(error)
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view') "
                                         "AND name NOT LIKE 'sqlite_%'")]
    columns = {t: [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')] for t in tables}
    words = set(re.findall(r"\w+", _STRING_OR_IDENT.sub(" ", sql).lower()))
    named = [t for t in tables if t.lower() in words and not _is_log(t)] or [t for t in tables if not _is_log(t)]
    close = difflib.get_close_matches(name or "", sorted({c for t in named for c in columns[t]}), n=3)
    listed = "; ".join(f"{t} has {', '.join(columns[t])}" for t in named[:3])
    return (f"; did you mean {', '.join(close)}?" if close else "") + (f" ({listed})" if listed else "")


def bind_value(value: Any) -> Any:
    """Arrays and objects are bound as JSON text (use json_each/json_extract in SQL), keys in the order
    given; bools as 0/1."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return value


