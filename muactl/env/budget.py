"""The SQL budget: a domain's statements run under a limit of SQLite virtual-machine steps.

A declared statement is fixed SQL, but it can still be a runaway: an infinite recursive CTE, a cross
join of two big tables. SQLite calls a progress handler every SQL_CHECK_EVERY steps; ours counts them
against the budget that is open and stops the statement (SQLite raises "interrupted") once it is spent.

How muactl uses it (and how other code should):
- `with budget.limit():` opens a budget of the domain's per-call limit (`limits.sql_steps` in
  domain.yaml, DEFAULT_SQL_STEPS when unset); every statement inside draws from it. A tool call (its
  checks, writes and query together), an assertion, a template's sample or derive each get one.
- Outside a `limit()` block statements are not counted: those are muactl's own (state hash, row dumps),
  whose cost follows the database size, which the seed limits bound.
- The environment's stop event (set by `Environment.interrupt()` from any thread, cleared by `settle()`)
  stops the running statement at its next check and every later one while it is set: an episode that
  runs out of time is stopped this way.
- `stopped(error)` turns the "interrupted" that SQLite raises into a sentence naming the limit.
"""

from __future__ import annotations

import sqlite3
import threading
from contextlib import contextmanager
from typing import Iterator

from ..limits import DEFAULT_SQL_STEPS, MAX_SQL_STEPS, MAX_SQL_VALUE_BYTES, SQL_CHECK_EVERY


STOPPED = "stopped: the episode was stopped (it ran out of time)"


class SqlLimitExceeded(sqlite3.OperationalError):
    """A statement was stopped by a limit (its budget, an interrupt, a row cap). A sqlite3.Error, so code that
    reports failing statements reports these too, with the sentence naming the limit."""


class SqlBudget:
    def __init__(self, conn: sqlite3.Connection, steps: int = DEFAULT_SQL_STEPS,
                 stop: threading.Event | None = None):
        self.steps = steps
        self.left: int | None = None  # None: no budget open
        self.exceeded = False
        self.stop = stop or threading.Event()
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_SQL_VALUE_BYTES)
        conn.set_progress_handler(self._tick, SQL_CHECK_EVERY)

    def _tick(self) -> int:
        if self.stop.is_set():
            return 1
        if self.left is None:
            return 0
        self.left -= SQL_CHECK_EVERY
        if self.left < 0:
            self.exceeded = True
            return 1
        return 0

    @contextmanager
    def limit(self, steps: int | None = None) -> Iterator[SqlBudget]:
        """A budget of `steps` (default: the domain's per-call limit) for the statements inside."""
        self.left, self.exceeded = steps or self.steps, False
        try:
            yield self
        finally:
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
        return None

    def check(self, error: BaseException) -> None:
        """Re-raise a budget stop as SqlLimitExceeded with its sentence (other errors are left alone)."""
        why = self.stopped(error)
        if why is not None and not isinstance(error, SqlLimitExceeded):
            raise SqlLimitExceeded(why) from None
