"""The state hash: a digest of a sandbox's database content that costs the rows an episode changed.

Each row has a 256-bit digest of its values (columns in sorted order, JSON columns canonicalized so
key order and spacing do not count). A table's digest is its row count and the sum of its rows'
digests modulo 2**256: a multiset hash, so row order and SQLite's page layout cannot change it, and
a row added then removed cancels out. The state hash is sha256 over every table's name, columns,
count and sum.

The template's sums are computed once per template image (kept beside the cached template file;
random-database instances once per process). A sandbox keeps only its
difference from the template (row digest -> net count), updated from the change log its triggers
fill (compile/changelog.py); so hashing reads the new log entries, not the tables. The same
difference, compared with the gold end state's, is how far an episode is from done
(gold.GoldDistance). `full_hash` recomputes everything from the tables: the checked fallback
(`muactl validate --verify-hash`, tests), and what a sandbox falls back to when its database was
replaced wholesale (a python tool) and the log no longer describes what changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..compile import changelog
from ..compile.changelog import quote

_MOD = 1 << 256
_FORMAT = 2  # bump when the digest changes, so stored template sums are not reused


@dataclass(frozen=True)
class TableShape:
    name: str
    columns: tuple[str, ...]  # sorted: the log's and the digest's column order
    json: frozenset[int]  # positions of json columns
    # in the state hash: a scratch table (`state: false`) is not, though its rows are logged and undone as any
    hashed: bool = True

    @classmethod
    def of(cls, name: str, spec) -> TableShape:
        cols = tuple(changelog.log_columns(spec.columns))
        return cls(name, cols, frozenset(i for i, c in enumerate(cols) if spec.columns[c] == "json"),
                   getattr(spec, "state", True))

    def digest(self, values: tuple) -> int:
        if self.json:
            values = tuple(canonical_json(v) if i in self.json else v for i, v in enumerate(values))
        # repr of a tuple of str/int/float/None/bytes is exact and deterministic
        data = repr(values).encode("utf-8", "surrogatepass")
        return int.from_bytes(hashlib.blake2b(data, digest_size=32).digest(), "big")

    def select_all(self) -> str:
        return "SELECT " + ", ".join(quote(c) for c in self.columns) + f" FROM {quote(self.name)}"

    def select_log(self) -> str:
        values = ", ".join(f"v{i}" for i in range(len(self.columns)))
        return f"SELECT seq, sign, {values} FROM {quote(changelog.log_table(self.name))} WHERE seq > ? ORDER BY seq"


def canonical_json(value: Any) -> Any:
    """JSON text -> one spelling of its value (sorted keys, no spaces); anything else as it is."""
    if not isinstance(value, str):
        return value
    try:
        return json.dumps(json.loads(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse: compared as text
        return value


def shapes(tables: dict) -> tuple[TableShape, ...]:
    return tuple(TableShape.of(name, tables[name]) for name in sorted(tables))


def combine(shapes_: tuple[TableShape, ...], sums: dict[str, tuple[int, int]]) -> str:
    h = hashlib.sha256(f"muactl-state:{_FORMAT}\x1e".encode())
    for s in (s for s in shapes_ if s.hashed):
        count, total = sums[s.name]
        h.update(f"{s.name}\x1f{','.join(s.columns)}\x1f{count}\x1f{total:064x}\x1e".encode())
    return h.hexdigest()


def row_digests(conn: sqlite3.Connection, shape: TableShape) -> dict[int, int]:
    """Every row of one table: digest -> how many rows have it."""
    out: dict[int, int] = {}
    for row in conn.execute(shape.select_all()):
        d = shape.digest(row)
        out[d] = out.get(d, 0) + 1
    return out


def _sums(conn: sqlite3.Connection, shapes_: tuple[TableShape, ...]) -> dict[str, tuple[int, int]]:
    sums = {}
    for s in shapes_:
        count = total = 0
        for row in conn.execute(s.select_all()):
            count += 1
            total += s.digest(row)
        sums[s.name] = (count, total % _MOD)
    return sums


def full_hash(conn: sqlite3.Connection, tables: dict) -> str:
    """The state hash recomputed from every row: what the incremental hash must always equal."""
    sh = shapes(tables)
    return combine(sh, _sums(conn, sh))


# ---------------------------------------------------------------- the template's digest, once


def template_key(domain) -> str:
    """Which template image a domain forks from: a random-database instance has its own."""
    return domain.content_hash + ":" + getattr(domain, "instance_key", "")


@dataclass(frozen=True)
class TemplateState:
    shapes: tuple[TableShape, ...]
    sums: dict[str, tuple[int, int]]


_TEMPLATES: OrderedDict[str, TemplateState] = OrderedDict()
_TEMPLATES_SIZE = 64  # as many as randomdb keeps instance images
_LOCK = threading.Lock()


def _open_template(domain) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    conn.deserialize(domain.template_bytes())
    return conn


def template_state(domain) -> TemplateState:
    key = template_key(domain)
    with _LOCK:  # many sandboxes of one domain may ask at once; compute it once
        state = _TEMPLATES.get(key)
        if state is None:
            sh = shapes(domain.tables)
            sums = _stored_sums(domain, sh)
            if sums is None:
                conn = _open_template(domain)
                try:
                    sums = _sums(conn, sh)
                finally:
                    conn.close()
                _store_sums(domain, sums)
            state = TemplateState(sh, sums)
            _TEMPLATES[key] = state
            if len(_TEMPLATES) > _TEMPLATES_SIZE:
                _TEMPLATES.popitem(last=False)
        else:
            _TEMPLATES.move_to_end(key)
        return state


def _sums_path(domain) -> Path | None:
    """Beside the cached template file (named by its content hash), so reading every row happens once
    per template, not once per process (seconds at retail scale 100). Random instances live in memory."""
    if getattr(domain, "instance_key", "") or not getattr(domain, "template_path", None):
        return None
    return Path(domain.template_path).with_suffix(f".sums-{_FORMAT}.json")


def _stored_sums(domain, shapes_: tuple[TableShape, ...]) -> dict[str, tuple[int, int]] | None:
    path = _sums_path(domain)
    try:
        stored = json.loads(path.read_text()) if path else None
        return {s.name: (int(stored[s.name][0]), int(stored[s.name][1], 16)) for s in shapes_} if stored else None
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None  # absent or unreadable: computed again


def _store_sums(domain, sums: dict[str, tuple[int, int]]) -> None:
    path = _sums_path(domain)
    if path is None:
        return
    tmp = None
    try:  # written whole or not at all: a reader never sees half a file
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({t: [c, f"{total:064x}"] for t, (c, total) in sums.items()}, f)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs the recomputation next time
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)


# ---------------------------------------------------------------- one sandbox's state


class StateTracker:
    """A sandbox's difference from its template, kept up to date from the change log.

    `delta` maps (table, row digest) to the net number of such rows added (negative: removed);
    `cursor` is the last log entry read per table. `known` is False when the database was replaced
    behind the log's back (a python tool, a connection from elsewhere): the next read then rebuilds
    the difference from every row, once. `whole_log`: the log holds every change since the template
    (so undoing it gives the template back; forkpool.py).
    """

    def __init__(self, domain, known: bool = True):
        self.domain = domain
        self.shapes = shapes(domain.tables)
        self.delta: dict[tuple[str, int], int] = {}
        self.cursor: dict[str, int] = {s.name: 0 for s in self.shapes}
        self.known = self.whole_log = known
        self._seen_changes = 0  # conn.total_changes when the log was last read
        self._digest: str | None = None

    def copy(self) -> StateTracker:
        other = StateTracker.__new__(StateTracker)
        other.__dict__.update(self.__dict__)
        other.delta, other.cursor = dict(self.delta), dict(self.cursor)
        other._seen_changes = 0  # a new connection counts its changes from 0
        return other

    def read(self, conn: sqlite3.Connection) -> StateTracker:
        """Bring the difference up to date; returns the tracker to read it from. Inside an open
        transaction (never the case between tool calls) the result is a throwaway copy, so a rollback
        cannot leave log entries counted that no longer exist."""
        if conn.in_transaction:
            tracker = self.copy()
            tracker._seen_changes = -1
            tracker._read(conn)
            return tracker
        self._read(conn)
        return self

    def _read(self, conn: sqlite3.Connection) -> None:
        if not self.known:
            self._rebuild(conn)
            return
        if conn.total_changes == self._seen_changes:
            return
        delta = self.delta
        for s in self.shapes:
            last = self.cursor[s.name]
            for seq, sign, *values in conn.execute(s.select_log(), (last,)):
                key = (s.name, s.digest(tuple(values)))
                n = delta.get(key, 0) + sign
                if n:
                    delta[key] = n
                else:
                    del delta[key]
                last = seq
            self.cursor[s.name] = last
        self._seen_changes = conn.total_changes
        self._digest = None

    def _rebuild(self, conn: sqlite3.Connection) -> None:
        template = _open_template(self.domain)
        try:
            delta: dict[tuple[str, int], int] = {}
            for s in self.shapes:
                now, then = row_digests(conn, s), row_digests(template, s)
                for d in now.keys() | then.keys():
                    n = now.get(d, 0) - then.get(d, 0)
                    if n:
                        delta[(s.name, d)] = n
                log = quote(changelog.log_table(s.name))
                self.cursor[s.name] = conn.execute(f"SELECT coalesce(max(seq), 0) FROM {log}").fetchone()[0]
        finally:
            template.close()
        self.delta, self.known, self.whole_log, self._digest = delta, True, False, None
        self._seen_changes = conn.total_changes

    def digest(self) -> str:
        if self._digest is None:
            base = template_state(self.domain).sums
            sums = {name: list(v) for name, v in base.items()}
            for (table, d), n in self.delta.items():
                sums[table][0] += n
                sums[table][1] += n * d
            self._digest = combine(self.shapes, {t: (c, total % _MOD) for t, (c, total) in sums.items()})
        return self._digest


def distance(a: dict[tuple[str, int], int], b: dict[tuple[str, int], int]) -> int:
    """How many rows differ between two states of one template, from their differences to it."""
    return sum(abs(a.get(k, 0) - b.get(k, 0)) for k in a.keys() | b.keys())
