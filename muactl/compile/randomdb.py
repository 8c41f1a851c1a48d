"""Randomized database instances: `database.generate:` drawn with one seed into a fresh SQLite image.

An instance is the domain's compiled form with another template image and an `instance_key`, so
everything built on CompiledDomain (sandbox forks, gold hashes, rewards) works on it unchanged; the
gold-hash cache keys on content_hash + instance_key, so each instance gets its own gold state.

Speed matters (one instance per rollout group): the empty schema is serialized once per domain and
each instance is rows drawn in Python + executemany into a deserialized copy (a few ms for bank).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
import re
import sqlite3
from collections import OrderedDict
from typing import Any

from . import changelog
from .database import coerce, schema_connection
from ..errors import Problem, SpecError, UsageError
from ..limits import MAX_GENERATED_ROWS, MAX_PATTERN_SLOT
from ..spec.generators import Gen, TableGen

_SLOT = re.compile(r"\{([^{}]+)\}")
_EMPTY: dict[str, bytes] = {}  # content_hash -> serialized empty schema
_CACHE: OrderedDict[tuple[str, int], bytes] = OrderedDict()
_CACHE_SIZE = 64


class _Exhausted(Exception):
    """A declaration that cannot produce rows (reported as the domain's problem, never a traceback)."""


class Drawer:
    """Draws the rows of every generated table, in declaration order, from one seed."""

    def __init__(self, gens: dict[str, TableGen], seed: int):
        self.gens = gens
        self.rng = random.Random(seed)
        self.rows: dict[str, list[dict[str, Any]]] = {}
        self.used: dict[tuple[str, str], set] = {}
        self.count = 0  # rows drawn so far, all tables

    def draw_all(self) -> dict[str, list[dict[str, Any]]]:
        for table, tg in self.gens.items():
            self.rows[table] = self._table(table, tg)
        return self.rows

    def _table(self, table: str, tg: TableGen) -> list[dict[str, Any]]:
        out = []
        if tg.per is None:
            n = tg.rows if isinstance(tg.rows, int) else self.rng.randint(*tg.rows)
            for _ in range(n):
                out.append(self._row(table, tg.columns, None))
            return out
        variants = tg.variants or [None]
        for parent in self.rows[tg.per]:
            for v in variants:
                if v is not None and v.chance < 1 and self.rng.random() >= v.chance:
                    continue
                cols = dict(tg.columns)
                if v is not None:
                    cols.update(v.columns)
                out.append(self._row(table, cols, parent))
        return out

    def _row(self, table: str, cols: dict[str, Gen], parent: dict | None) -> dict[str, Any]:
        self.count += 1
        if self.count > MAX_GENERATED_ROWS:
            raise _Exhausted(f"{table}: an instance would hold more than {MAX_GENERATED_ROWS:,} rows "
                             "(MAX_GENERATED_ROWS); lower `rows` or the parents' counts")
        row: dict[str, Any] = {}
        for col, gen in cols.items():
            if not gen.unique:
                row[col] = self.value(gen, row, parent)
                continue
            used = self.used.setdefault((table, col), set())
            for _ in range(1000):
                v = self.value(gen, row, parent)
                if v not in used:
                    break
            else:
                raise _Exhausted(f"{table}.{col}: could not draw a new unique value after 1000 tries; "
                                 "widen the pattern, range or choice")
            used.add(v)
            row[col] = v
        return row

    def value(self, g: Gen, row: dict, parent: dict | None) -> Any:
        rng = self.rng
        kind = g.kind
        if kind == "value":
            return g.value
        if kind == "choice":
            return rng.choices(g.choice, weights=g.weights)[0] if g.weights else rng.choice(g.choice)
        if kind == "pattern":
            return _SLOT.sub(lambda m: self._slot(m[1], row), g.pattern)
        if kind == "int":
            lo, hi = g.int_
            return lo + g.step * rng.randint(0, (hi - lo) // g.step)
        if kind == "real":
            return round(rng.uniform(*g.real), g.decimals)
        if kind == "date":
            a, b = (dt.date.fromisoformat(x) for x in g.date)
            return (a + dt.timedelta(days=rng.randint(0, (b - a).days))).isoformat()
        if kind == "ref":
            table, col = g.ref.split(".", 1)
            return rng.choice(self.rows[table])[col]
        if kind == "parent":
            return parent[g.parent]
        if kind == "one_of":
            pick = rng.choices(g.one_of, weights=[o.weight for o in g.one_of])[0]
            return self.value(pick, row, parent)
        if kind == "json":
            return self._json(g.json_, row, parent)
        raise AssertionError(kind)

    def _json(self, node: Any, row: dict, parent: dict | None) -> Any:
        if isinstance(node, dict):
            if any(k in node for k in ("value", "choice", "pattern", "int", "real", "date", "ref", "parent", "one_of")):
                return self.value(Gen.model_validate(node), row, parent)
            return {k: self._json(v, row, parent) for k, v in node.items()}
        if isinstance(node, list):
            return [self._json(v, row, parent) for v in node]
        return node

    def _slot(self, slot: str, row: dict) -> str:
        rng = self.rng
        if len(slot) > MAX_PATTERN_SLOT:
            raise _Exhausted(f"pattern slot {{{slot[:20]}...}} is over {MAX_PATTERN_SLOT} characters (MAX_PATTERN_SLOT)")
        if set(slot) == {"n"}:
            return str(rng.randint(10 ** (len(slot) - 1) if len(slot) > 1 else 1, 10 ** len(slot) - 1))
        if set(slot) == {"d"}:
            return "".join(rng.choice("0123456789") for _ in slot)
        if set(slot) == {"L"}:
            return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in slot)
        if set(slot) == {"l"}:
            return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in slot)
        if slot not in row:
            raise _Exhausted(f"pattern slot {{{slot}}} names a column that is drawn after this one (or not at all); "
                             "list it earlier among the columns")
        return str(row[slot])


def draw_rows(gens: dict[str, TableGen], seed: int) -> dict[str, list[dict[str, Any]]]:
    return Drawer(gens, seed).draw_all()


def check_generators(spec) -> list[Problem]:
    """Semantic checks of database.generate (columns, references, order, types), then one instance
    drawn and type-checked, so a wrong type points at the generator's line."""
    gens = spec.domain.database.generate
    if not gens:
        return []
    tables = spec.domain.database.tables
    doc = spec.doc
    problems: list[Problem] = []
    seen: list[str] = []
    for tname, tg in gens.items():
        base = ("database", "generate", tname)
        if tname not in tables:
            problems.append(doc.problem(base, f"generator for undeclared table '{tname}'"))
            seen.append(tname)
            continue
        table = tables[tname]
        if tg.per is not None and tg.per not in seen:
            problems.append(doc.problem(base + ("per",), f"parent table '{tg.per}' must be generated above '{tname}'"))
        all_cols = [(("columns", c), c, g) for c, g in tg.columns.items()]
        for i, v in enumerate(tg.variants):
            all_cols += [(("variants", i, "columns", c), c, g) for c, g in v.columns.items()]
        for path, col, g in all_cols:
            problems += _check_gen(doc, base + path, g, col, table, tables, seen, tg, gens)
        drawn = {c for _, c, _ in all_cols}
        for col in table.pk_columns():
            if col not in drawn:
                problems.append(doc.problem(base + ("columns",), f"primary key column '{col}' has no generator"))
        seen.append(tname)
    for tname, table in tables.items():
        for col, ref in table.foreign_keys.items():
            if tname in gens and ref.split(".")[0] not in gens:
                problems.append(doc.problem(("database", "generate", tname),
                                            f"{tname}.{col} references {ref}, whose table has no generator"))
    if problems:
        return problems
    try:
        rows = draw_rows(gens, 0)
    except _Exhausted as e:
        return [doc.problem(("database", "generate"), str(e))]
    for tname, trs in rows.items():
        for col, ctype in tables[tname].columns.items():
            for r in trs[:50]:
                try:
                    coerce(r.get(col), ctype, False)
                except (TypeError, ValueError) as e:
                    path = ("database", "generate", tname, "columns", col)
                    problems.append(doc.problem(path, f"generated value does not fit column type {ctype}: {e}"))
                    break
    return problems


def _check_gen(doc, path, g: Gen, col, table, tables, seen, tg, gens) -> list[Problem]:
    out = []
    if col not in table.columns:
        out.append(doc.problem(path, f"'{col}' is not a column of this table (columns: {', '.join(table.columns)})"))
    kind = g.kind
    if kind == "ref":
        other, _, ocol = g.ref.partition(".")
        if other not in seen:
            out.append(doc.problem(path + ("ref",), f"'{g.ref}': table '{other}' must be generated above this one"))
        elif other not in tables or ocol not in tables[other].columns:
            out.append(doc.problem(path + ("ref",), f"'{g.ref}' is not a 'table.column' that exists"))
    if kind == "parent" and (tg.per is None or tg.per not in tables or g.parent not in tables[tg.per].columns):
        out.append(doc.problem(path + ("parent",), f"'{g.parent}' is not a column of the parent table (per: {tg.per})"))
    if kind == "int" and g.int_[0] > g.int_[1]:
        out.append(doc.problem(path + ("int",), "[low, high] needs low <= high"))
    if kind == "date":
        try:
            a, b = (dt.date.fromisoformat(x) for x in g.date)
            if a > b:
                out.append(doc.problem(path + ("date",), "[first, last] needs first <= last"))
        except ValueError as e:
            out.append(doc.problem(path + ("date",), f"not an ISO date (YYYY-MM-DD): {e}"))
    if kind == "pattern":
        for slot in _SLOT.findall(g.pattern):
            if len(set(slot)) == 1 and slot[0] in "ndLl":
                continue
            if slot not in table.columns:
                out.append(doc.problem(path + ("pattern",), f"slot {{{slot}}} is neither nn/dd/LL/ll nor a column"))
    if kind == "one_of":
        for i, o in enumerate(g.one_of):
            out += _check_gen(doc, path + ("one_of", i), o, col, table, tables, seen, tg, gens)
    return out


# ---------------------------------------------------------------- instances


def _empty_image(compiled) -> bytes:
    key = compiled.content_hash
    if key not in _EMPTY:
        conn = schema_connection(compiled.spec.domain)
        _EMPTY[key] = conn.serialize()
        conn.close()
    return _EMPTY[key]


def instance_bytes(compiled, seed: int) -> bytes:
    """The SQLite image of random instance `seed` (cached: the same seed is often asked for twice,
    once to draw a task's bindings and once for its episode)."""
    key = (compiled.content_hash, seed)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    domain = compiled.spec.domain
    gens = domain.database.generate
    if not gens:
        raise UsageError(f"domain {domain.name} declares no random database (database.generate in domain.yaml); "
                         "use db=fixed")
    try:
        rows = draw_rows(gens, seed)
    except _Exhausted as e:
        raise SpecError([Problem(str(compiled.spec.doc.file), 1, 1, "database.generate", str(e))]) from None
    conn = sqlite3.connect(":memory:")
    conn.deserialize(_empty_image(compiled))
    tables = domain.database.tables
    with conn:
        for tname in tables:  # schema order, so foreign keys resolve in declaration order too
            trs = rows.get(tname)
            if not trs:
                continue
            cols = list(tables[tname].columns)
            types = tables[tname].columns
            names = ", ".join(f'"{c}"' for c in cols)
            sql = f'INSERT INTO "{tname}" ({names}) VALUES ({", ".join("?" * len(cols))})'
            conn.executemany(sql, [[coerce(r.get(c), types[c], False) for c in cols] for r in trs])
    changelog.install(conn, tables)  # after the rows, so the log starts empty
    data = conn.serialize()
    conn.close()
    _CACHE[key] = data
    if len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return data


def instance(compiled, seed: int | None):
    """The domain over random database `seed` (None: the compiled domain itself, the fixed seed DB)."""
    if seed is None:
        return compiled
    inst = dataclasses.replace(compiled, _template=instance_bytes(compiled, seed))
    inst.instance_key = f"db{seed}"
    return inst
