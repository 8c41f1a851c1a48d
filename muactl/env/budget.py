"""The SQL budget: a domain's statements run under a limit of SQLite virtual-machine steps and of wall time.

A declared statement is fixed SQL, but it can still be a runaway: an infinite recursive CTE, a cross
join of two big tables (many cheap steps), or a few rows that each build and rewrite a string of
megabytes (few, heavy steps). SQLite calls a progress handler every SQL_CHECK_EVERY steps; ours counts
them against the budget that is open and stops the statement (SQLite raises "interrupted") once it is
spent or its deadline has passed. A thousand heavy steps can take minutes between two calls of the
handler, so a watchdog thread also interrupts the connection of every open budget past its deadline
(SQLite looks at that flag at every step), and keeps doing so until the budget closes.

How muactl uses it (and how other code should):
- `with budget.limit():` opens a budget of the domain's per-call limit (`limits.sql_steps` in
  domain.yaml, DEFAULT_SQL_STEPS when unset) and of the wall time those steps take on a slow machine
  (limits.sql_seconds); every statement inside draws from it. A tool call (its checks, writes and query
  together), an assertion, a template's sample or derive each get one.
- Outside a `limit()` block statements are not counted: those are muactl's own (state hash, row dumps),
  whose cost follows the database size, which the seed limits bound.
- Every connection with a budget caps the size of any value SQLite makes (limits.SQL_LIMITS), which
  bounds the memory and the time of one step, and has a printf() that does not spend a step repeating
  a character past that cap (BoundedPrintf).
- The environment's stop event (set by `Environment.interrupt()` from any thread, cleared by `settle()`)
  stops the running statement at its next check and every later one while it is set: an episode that
  runs out of time is stopped this way.
- `stopped(error)` turns the "interrupted" that SQLite raises into a sentence naming the limit.
"""

from __future__ import annotations

import math
import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from ..limits import DEFAULT_SQL_STEPS, MAX_SQL_STEPS, MAX_SQL_VALUE_BYTES, SQL_CHECK_EVERY, SQL_LIMITS, SQL_REINTERRUPT_SECONDS, sql_seconds


STOPPED = "stopped: the episode was stopped (it ran out of time)"


class SqlLimitExceeded(sqlite3.OperationalError):
    """A statement was stopped by a limit (its budget, an interrupt, a row cap). A sqlite3.Error, so code that
    reports failing statements reports these too, with the sentence naming the limit."""

    spent = False  # True when a budget ran out (its steps, its wall time, a stop), not a cap on rows

    @classmethod
    def of_budget(cls, why: str) -> SqlLimitExceeded:
        error = cls(why)
        error.spent = True
        return error


class SqlBudget:
    def __init__(self, conn: sqlite3.Connection, steps: int = DEFAULT_SQL_STEPS,
                 stop: threading.Event | None = None):
        self.conn = conn
        self.steps = steps
        self.left: int | None = None  # None: no budget open
        self.deadline = 0.0  # time.monotonic() past which the open budget is spent
        self.exceeded = self.late = False
        self.stop = stop or threading.Event()
        cap_limits(conn)
        for name in ("printf", "format"):
            conn.create_function(name, -1, BoundedPrintf(), deterministic=True)
        conn.set_progress_handler(self._tick, SQL_CHECK_EVERY)

    @property
    def seconds(self) -> float:
        return sql_seconds(self.steps)

    def _tick(self) -> int:
        if self.stop.is_set():
            return 1
        if self.left is None:
            return 0
        self.left -= SQL_CHECK_EVERY
        if self.left < 0:
            self.exceeded = True
            return 1
        if time.monotonic() > self.deadline:
            self.late = True
            return 1
        return 0

    @contextmanager
    def limit(self, steps: int | None = None) -> Iterator[SqlBudget]:
        """A budget of `steps` (default: the domain's per-call limit) and of their wall time for the statements
        inside."""
        steps = steps or self.steps
        self.left, self.exceeded, self.late = steps, False, False
        self.deadline = time.monotonic() + sql_seconds(steps)
        WATCHDOG.watch(self)
        try:
            yield self
        finally:
            WATCHDOG.unwatch(self)  # no interrupt reaches the connection for this budget after this line
            self.left = None

    def stopped(self, error: BaseException) -> str | None:
        """Why `error` happened, if this budget caused it; None for any other error."""
        if isinstance(error, SqlLimitExceeded):
            return str(error)
        if not isinstance(error, sqlite3.OperationalError) or "interrupted" not in str(error):
            return None
        if self.stop.is_set():
            return STOPPED
        if self.exceeded:
            return (f"stopped: its SQL ran past the budget of {self.steps:,} SQLite steps (limits.sql_steps in "
                    f"domain.yaml, at most {MAX_SQL_STEPS:,}); make the statement cheaper or raise the limit")
        if self.late:
            return (f"stopped: its SQL ran past {self.seconds:g} seconds, the wall time of its budget of "
                    f"{self.steps:,} SQLite steps (limits.sql_steps in domain.yaml); its steps are too heavy "
                    f"(big strings built row by row?): make the statement cheaper")
        return None

    def check(self, error: BaseException) -> None:
        """Re-raise a budget stop as SqlLimitExceeded with its sentence (other errors are left alone)."""
        why = self.stopped(error)
        if why is not None and not isinstance(error, SqlLimitExceeded):
            raise SqlLimitExceeded.of_budget(why) from None


def cap_limits(conn: sqlite3.Connection) -> None:
    for limit, value in SQL_LIMITS.items():
        conn.setlimit(getattr(sqlite3, limit), value)


# one conversion of SQLite's printf: flags, width, precision, length, type (sqlite3's printf.c)
_CONVERSION = re.compile(r"%[-+ #!0,]*(\*|\d*)(?:\.(\*|\d*))?(?:ll|l)?(.)?", re.S)


class BoundedPrintf:
    """SQLite's printf()/format() without its one step that no limit bounds: `%.*c` repeats a character
    `precision` times and keeps working for the whole count after the result has passed the value cap
    (printf('%.*c', 2000000000, 'x') is one step of ~20 s). Such a call gets the NULL SQLite gives it at
    the end; every other call is SQLite's own printf, run on a connection of its own."""

    def __init__(self) -> None:
        self._sqlite: sqlite3.Connection | None = None

    def __call__(self, *args):
        if args and isinstance(args[0], str) and "c" in args[0] and _repeats_past_cap(args[0], args[1:]):
            return None
        if self._sqlite is None:
            self._sqlite = sqlite3.connect(":memory:", check_same_thread=False)
            cap_limits(self._sqlite)
        marks = ", ".join("?" * len(args))
        return self._sqlite.execute(f"SELECT printf({marks})", args).fetchone()[0]


def _repeats_past_cap(fmt: str, args: tuple) -> bool:
    """Whether a %c conversion of `fmt` would repeat its character past MAX_SQL_VALUE_BYTES."""
    rest = list(args)
    for m in _CONVERSION.finditer(fmt):
        width, precision, kind = m.groups()
        if m.group(0) == "%%" or kind is None:
            continue
        if width == "*" and rest:
            rest.pop(0)
        if precision == "*":
            precision = _c_int(rest.pop(0)) if rest else 0
        elif precision:
            precision = int(precision) & 0x7FFFFFFF  # SQLite keeps the low 31 bits of a long literal
        if kind == "c" and precision and abs(int(precision)) > MAX_SQL_VALUE_BYTES:
            return True
        if kind != "c" and rest:  # the value it formats
            rest.pop(0)
        elif kind == "c" and rest:
            rest.pop(0)
    return False


def _c_int(value) -> int:
    """An SQL value as printf's `*` reads it: a 64-bit integer cast to a C int."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:
            value = float(value) if isinstance(value, (str, bytes)) else 0
        except ValueError:
            value = 0
    if isinstance(value, float):
        value = int(value) if math.isfinite(value) else 0
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


IDLE_SECONDS = 1.0  # the watchdog's wait when no budget is open, before it sleeps until one opens


class Watchdog:
    """One thread that interrupts the connection of every open budget past its deadline, again every
    SQL_REINTERRUPT_SECONDS while it stays open (an interrupt that lands between two statements of a tool
    call is forgotten when the next one starts). It sleeps until the earliest deadline; opening a budget
    wakes it only when that budget's deadline comes sooner, so an ordinary call costs a lock and a dict
    entry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # taken directly on the hot path (cheaper than through the condition)
        self._cond = threading.Condition(self._lock)
        self._open: set[SqlBudget] = set()
        self._opened = 0  # budgets watched so far
        self._wake_at: float | None = None  # when the thread wakes next; None: not running or idle
        self._thread: threading.Thread | None = None

    def watch(self, budget: SqlBudget) -> None:
        with self._lock:
            self._open.add(budget)
            self._opened += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="muactl-sql-watchdog", daemon=True)
                self._thread.start()
            elif self._wake_at is None or budget.deadline < self._wake_at:
                self._cond.notify()

    def unwatch(self, budget: SqlBudget) -> None:
        with self._lock:
            self._open.discard(budget)

    def _run(self) -> None:
        opened = -1  # self._opened when this thread last looked
        with self._cond:
            while True:
                now = time.monotonic()
                late = [b for b in self._open if b.deadline <= now]
                for budget in late:
                    budget.late = True
                    try:
                        budget.conn.interrupt()
                    except sqlite3.ProgrammingError:  # closed under a running call; it fails on its own
                        pass
                soonest = min((b.deadline for b in self._open if b.deadline > now), default=None)
                if late:
                    soonest = min(now + SQL_REINTERRUPT_SECONDS, soonest or float("inf"))
                elif soonest is None and opened != self._opened:
                    # budgets open and close thousands of times a second: sleeping until the next one opens
                    # would make each of them wake this thread; it does so only after a quiet IDLE_SECONDS
                    soonest = now + IDLE_SECONDS
                opened = self._opened
                self._wake_at = soonest
                self._cond.wait(None if soonest is None else soonest - now)


WATCHDOG = Watchdog()
