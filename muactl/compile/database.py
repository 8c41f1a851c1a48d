"""Schema and seed rows -> a SQLite template database (built with sqlite-utils, cached by content hash)."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import sqlite_utils

from ..errors import Problem, SpecError
from ..limits import SQLITE_INT_MAX, SQLITE_INT_MIN, quote
from ..spec import models as m
from ..spec.load import DomainSpec
from ..spec.seeds import SeedSource, parse_json

_PY_TYPES = {"text": str, "integer": int, "real": float, "boolean": int, "json": str}


def cache_dir() -> Path:
    root = os.environ.get("MUACTL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "muactl")
    return Path(root)


def create_schema(db: sqlite_utils.Database, domain: m.Domain, views: bool = True) -> None:
    """Create every declared table, referenced tables first so foreign keys resolve, then the views."""
    tables = domain.database.tables
    done: set[str] = set()
    deferred: list[tuple[str, str, str, str]] = []

    def create(name: str, stack: tuple = ()) -> None:
        if name in done or name in stack:
            return
        table = tables[name]
        for ref in table.foreign_keys.values():
            other = ref.split(".")[0]
            if other in tables and other != name:
                create(other, stack + (name,))
        fks = []
        for col, ref in table.foreign_keys.items():
            other, other_col = ref.split(".", 1)
            if other in stack:  # a cycle (a -> b -> a): sqlite-utils wants the target to exist, so add it after
                deferred.append((name, col, other, other_col))
            else:
                fks.append((col, other, other_col))
        db[name].create(
            {col: _PY_TYPES[t] for col, t in table.columns.items()},
            pk=table.primary_key if table.primary_key else None,
            foreign_keys=fks or None,
            not_null=set(table.pk_columns()),
        )
        done.add(name)

    for name in tables:
        create(name)
    if deferred:
        db.add_foreign_keys(deferred)
    for name, index in domain.database.search.items():
        create_search_index(db.conn, name, index)
    if views:
        for name, select in domain.database.views.items():
            create_view(db.conn, name, select)


def create_search_index(conn: sqlite3.Connection, name: str, index: m.SearchIndex) -> None:
    cols = ", ".join(f'"{c}"' for c in index.columns)
    conn.execute(f'CREATE VIRTUAL TABLE "{name}" USING fts5({cols}, tokenize = \'{index.tokenize}\')')


def fill_search_indexes(conn: sqlite3.Connection, domain: m.Domain) -> None:
    """Each index holds its table's seed rows, under their rowids."""
    for name, index in domain.database.search.items():
        cols = ", ".join(f'"{c}"' for c in index.columns)
        conn.execute(f'INSERT INTO "{name}"(rowid, {cols}) SELECT rowid, {cols} FROM "{index.table}"')


def create_view(conn: sqlite3.Connection, name: str, select: str) -> None:
    conn.execute(f'CREATE VIEW "{name}" AS {select}')


def coerce(value: Any, ctype: str, from_text: bool) -> Any:
    """Seed value -> stored value. CSV cells are text, so they are parsed; JSON/YAML values must already match.
    Messages quote at most a short prefix of the value (a seed cell may be 128 KiB)."""
    if value is None or (from_text and value == "" and ctype != "text"):
        return None
    if ctype == "text":
        if isinstance(value, str):
            return value
        raise TypeError(f"expected text, got {type(value).__name__} {quote(value)}; quote it")
    if ctype == "integer":
        if from_text and isinstance(value, str):
            text = value.strip()
            digits = text[1:] if text[:1] in "+-" else text
            # int() would also take '1_000' and non-ASCII digits, and gives up past 4,300 digits
            if not (digits.isascii() and digits.isdigit()):
                raise TypeError(f"expected integer, got {quote(value)}")
            if len(digits) > 19:
                raise TypeError(f"an integer of {len(digits)} digits is out of range (SQLite integers lie between "
                                f"{SQLITE_INT_MIN} and {SQLITE_INT_MAX})")
            value = int(text)
        if isinstance(value, int) and not isinstance(value, bool):
            if not SQLITE_INT_MIN <= value <= SQLITE_INT_MAX:
                raise TypeError(f"integer {quote(value)} is out of range (SQLite integers lie between "
                                f"{SQLITE_INT_MIN} and {SQLITE_INT_MAX})")
            return value
        if isinstance(value, float) and value.is_integer():
            return coerce(int(value), ctype, False)
        raise TypeError(f"expected integer, got {type(value).__name__} {quote(value)}")
    if ctype == "real":
        if from_text and isinstance(value, str):
            try:
                value = float(value.strip())
            except ValueError:
                raise TypeError(f"expected a number, got {quote(value)}") from None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise TypeError(f"expected a finite number, got {type(value).__name__} {quote(value)}")
    if ctype == "boolean":
        if from_text and isinstance(value, str):
            v = value.strip().lower()
            if v in ("true", "1", "yes"):
                return 1
            if v in ("false", "0", "no"):
                return 0
        if isinstance(value, bool):
            return int(value)
        raise TypeError(f"expected true or false, got {quote(value)}")
    if ctype == "json":
        if from_text and isinstance(value, str):
            try:
                value = parse_json(value)
            except json.JSONDecodeError as e:
                raise TypeError(f"invalid JSON in a json column: {e.msg} (character {e.pos + 1})") from None
            except ValueError as e:
                raise TypeError(f"json column: {e}") from None
        return json.dumps(value, ensure_ascii=False)  # key order as written; the state hash canonicalizes
    raise TypeError(f"unknown column type {ctype}")


def seed_problem(src: SeedSource, spec: DomainSpec, i: int, column: str | None, message: str) -> Problem:
    if src.key_prefix:  # inline rows in domain.yaml: point at the key
        path = src.key_prefix + (i,) + ((column,) if column else ())
        return spec.doc.problem(path, message)
    key = f"{src.table}[{i}]" + (f".{column}" if column else "")
    return Problem(str(src.file), src.lines[i], 1, key, message)


def coerce_seeds(spec: DomainSpec) -> dict[str, list[dict[str, Any]]]:
    """Check every seed row against types, primary keys and foreign keys; all problems at once."""
    tables = spec.domain.database.tables
    problems: list[Problem] = []
    out: dict[str, list[dict[str, Any]]] = {}
    where: dict[tuple, tuple[SeedSource, int]] = {}
    for name, src in spec.seeds.items():
        table = tables[name]
        from_text = src.file.suffix == ".csv"
        rows = []
        pks: dict[tuple, int] = {}
        for i, row in enumerate(src.rows):
            clean = {}
            for col, value in row.items():
                if col not in table.columns:
                    import difflib

                    close = difflib.get_close_matches(col, list(table.columns), n=1)
                    hint = f"; did you mean '{close[0]}'?" if close else f"; columns: {', '.join(table.columns)}"
                    message = f"unknown column '{col}' for table '{name}'{hint}"
                    if from_text:  # every CSV row shares the header: report the typo once, where it is
                        if i == 0:
                            problems.append(Problem(str(src.file), 1, 1, f"{name}.{col}", message))
                    else:
                        problems.append(seed_problem(src, spec, i, col, message))
                    continue
                try:
                    clean[col] = coerce(value, table.columns[col], from_text)
                except (TypeError, ValueError) as e:
                    problems.append(seed_problem(src, spec, i, col, str(e)))
            key = tuple(clean.get(c) for c in table.pk_columns())
            if key and any(k is None for k in key):
                problems.append(seed_problem(src, spec, i, None, f"primary key {table.pk_columns()} is missing"))
            elif key in pks:
                problems.append(seed_problem(src, spec, i, None, f"duplicate primary key {key if len(key) > 1 else key[0]!r} (also row {pks[key]})"))
            elif key:
                pks[key] = i
            where[(name, i)] = (src, i)
            rows.append(clean)
        out[name] = rows
    for name, rows in out.items():
        for col, ref in tables[name].foreign_keys.items():
            other, other_col = ref.split(".", 1)
            targets = {r.get(other_col) for r in out.get(other, [])}
            for i, row in enumerate(rows):
                v = row.get(col)
                if v is not None and v not in targets:
                    src, _ = where[(name, i)]
                    problems.append(seed_problem(src, spec, i, col, f"{v!r} not found in {ref} (foreign key)"))
    if problems:
        raise SpecError(problems)
    return out


def build_template(spec: DomainSpec, path: Path) -> None:
    """Write the template database atomically: a crash never leaves a half-built cache entry."""
    rows = coerce_seeds(spec)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp)
        db = sqlite_utils.Database(conn)
        create_schema(db, spec.domain)
        with conn:
            for name in spec.domain.database.tables:
                if rows.get(name):
                    db[name].insert_all(rows[name])
            fill_search_indexes(conn, spec.domain)
        conn.execute("VACUUM")
        conn.close()
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def schema_connection(domain: m.Domain, views: bool = True) -> sqlite3.Connection:
    """An empty in-memory database with the declared schema, for compiling statements."""
    conn = sqlite3.connect(":memory:")
    create_schema(sqlite_utils.Database(conn), domain, views)
    return conn
