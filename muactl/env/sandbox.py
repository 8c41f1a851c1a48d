"""Environment: one episode's private database and the only way tools touch it.

Guarantees (each has its own test in tests/env/test_sandbox.py):
- fork() copies the template; the template is never written.
- arguments are checked against the tool's JSON schema before any SQL runs;
- only the domain's declared statements run, with bound parameters;
- reads run with `query_only` on and the authorizer in read mode;
- checks and writes run in one transaction that rolls back on any failure;
- a failure is data: call() returns ToolResult(error=True) and the episode goes on;
- python handlers run only with trust, in a child process with a timeout;
- every domain statement runs under the SQL budget (env/budget.py): a runaway is stopped and becomes a
  tool error; `cancel()` stops the running statement from any thread (an episode's timeout);
- a tool returns JSON-able values only (text, numbers, null, decoded json columns), at most
  MAX_RESULT_ROWS rows and MAX_RESULT_BYTES of text; a BLOB or a non-finite number is a tool error.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..compile.sql import Guard, bind_value
from ..limits import MAX_ARGUMENT_BYTES, MAX_RESULT_BYTES, MAX_RESULT_ROWS
from ..spec.models import call_parts
from .budget import CANCELLED, SqlBudget, SqlLimitExceeded

if TYPE_CHECKING:
    from ..compile import CompiledDomain, CompiledTool

# Hooks for tool kinds whose results come from outside the database (simulated: an LLM; mcp: a server).
# They are async: the episode engine awaits them through Environment.acall.
ToolPlayer = Callable[["CompiledTool", dict, "Environment"], Awaitable["ToolResult"]]
OUTSIDE_KINDS = ("simulated", "mcp")


@dataclass
class ToolResult:
    content: str
    error: bool = False
    transfer: bool = False  # the builtin transfer tool ends the episode
    changed: bool = False  # the call committed a write

    def to_dict(self) -> dict[str, Any]:
        return {"content": self.content, "error": self.error, "transfer": self.transfer, "changed": self.changed}


_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")


def fill(template: str, args: dict[str, Any]) -> str:
    """Fill {param} placeholders in a message; unknown ones stay as they are."""
    # not str.format: an author's text with other braces (JSON, "{0}", a lone "{") would raise mid-call
    def sub(m: re.Match) -> str:
        if m[1] not in args:
            return m[0]
        return "" if args[m[1]] is None else str(args[m[1]])

    return _PLACEHOLDER.sub(sub, template)


def decode_json_text(value: Any) -> Any:
    """JSON columns are stored as text; give them back as values (other text is left alone)."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


class Environment:
    def __init__(self, domain: CompiledDomain, conn: sqlite3.Connection, trust: bool = False,
                 players: dict[str, ToolPlayer] | None = None):
        self.domain = domain
        self.conn = conn
        self.trust = trust
        self.players: dict[str, ToolPlayer] = dict(players or {})
        self.guard = Guard(set(domain.tables))
        self.budget = SqlBudget(conn, domain.spec.domain.limits.sql_steps)
        conn.isolation_level = None  # transactions are explicit
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA query_only = ON")
        self.guard.install(conn)

    @classmethod
    def from_template(cls, domain: CompiledDomain, trust: bool = False) -> Environment:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.deserialize(domain.template_bytes())
        return cls(domain, conn, trust, domain.players)

    def fork(self) -> Environment:
        """A copy of this environment's current state (players and trust carry over)."""
        self.guard.mode = "off"
        try:
            data = self.conn.serialize()
        finally:
            self.guard.mode = "read"
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.deserialize(data)
        return Environment(self.domain, conn, self.trust, self.players)

    def close(self) -> None:
        self.conn.close()

    def cancel(self) -> None:
        """Stop the running statement and every later one; safe to call from another thread while a tool
        runs (an episode past its timeout). A stopped tool call rolls back and returns an error result."""
        self.budget.cancel()

    def select(self, sql: str, params: dict | None = None, max_rows: int = 1) -> tuple[list[str], list[tuple]]:
        """Run one of the domain's read statements (an assertion, a template's sample or derive) under the
        SQL budget: (column names, up to max_rows rows). A statement past the budget, or one returning more
        rows, raises SqlLimitExceeded (a sqlite3.Error)."""
        if self.budget.cancelled:
            raise SqlLimitExceeded(CANCELLED)
        self.guard.mode = "read"
        with self.budget.limit():
            try:
                cur = self.conn.execute(sql, params or {})
                names = [d[0] for d in cur.description or ()]
                rows = cur.fetchmany(max_rows + 1)
            except sqlite3.Error as e:
                self.budget.check(e)
                raise
        if len(rows) > max_rows:
            raise SqlLimitExceeded(f"returned more than {max_rows:,} rows (the limit here)")
        return names, rows

    # ------------------------------------------------------------ tools

    def _prepare(self, name: str, args: Any) -> tuple[CompiledTool, dict] | ToolResult:
        """Look the tool up and validate the arguments; an error result if either fails."""
        tool = self.domain.tools.get(name)
        if tool is None:
            known = ", ".join(self.domain.tools)
            return ToolResult(f"Error: unknown tool '{name}'. Available tools: {known}.", error=True)
        if isinstance(args, str):
            if len(args) > MAX_ARGUMENT_BYTES:
                return ToolResult(f"Error: arguments of {name} are {len(args):,} characters of JSON, over the "
                                  f"{MAX_ARGUMENT_BYTES:,} allowed.", error=True)
            try:
                args = json.loads(args) if args.strip() else {}
            except (ValueError, RecursionError):  # ValueError: also integers past 4,300 digits
                return ToolResult(f"Error: arguments of {name} are not valid JSON.", error=True)
        problems = tool.argument_errors(args if args is not None else {})
        if problems:
            return ToolResult(f"Error: invalid arguments for {name}: " + "; ".join(problems), error=True)
        return tool, tool.with_defaults(args or {})

    def call(self, name: str, args: Any) -> ToolResult:
        """Run a database tool (sql, builtin, python). Simulated and mcp tools need acall."""
        if self.budget.cancelled:
            return ToolResult(f"Error: {name} {CANCELLED}.", error=True)
        prepared = self._prepare(name, args)
        if isinstance(prepared, ToolResult):
            return prepared
        tool, args = prepared
        if tool.kind in OUTSIDE_KINDS:
            return self._no_player(tool) if tool.kind not in self.players else ToolResult(
                f"Error: tool {name} is a {tool.kind} tool; it runs only inside an episode.", error=True)
        if tool.kind == "sql":
            return self._call_sql(tool, args)
        if tool.kind == "builtin":
            if tool.spec.builtin == "transfer":
                return ToolResult("Transfer successful.", transfer=True)
            return ToolResult("")
        if tool.kind == "python":
            return self._call_python(tool, args)
        raise AssertionError(f"unknown tool kind {tool.kind}")

    async def acall(self, name: str, args: Any) -> ToolResult:
        """Run any tool; simulated and mcp tools are awaited through their players."""
        prepared = self._prepare(name, args)
        if isinstance(prepared, ToolResult):
            return prepared
        tool, args = prepared
        player = self.players.get(tool.kind)
        if tool.kind not in OUTSIDE_KINDS:
            if player is None:
                return self.call(name, args)
            # an LLM plays a database tool (synthesis with simulated tools): the agent sees the
            # simulated text, while the real call keeps the sandbox's state for scoring
            real = self.call(name, args)
            try:
                sim = await player(tool, args, self)
            except Exception as e:
                return ToolResult(f"Error: {name} failed: {e}", error=True)
            return ToolResult(sim.content, error=sim.error, transfer=real.transfer, changed=real.changed)
        if player is None:
            return self._no_player(tool)
        try:
            return await player(tool, args, self)
        except Exception as e:  # an outside player failing is data for the agent, never a crash
            return ToolResult(f"Error: {name} failed: {e}", error=True)

    @staticmethod
    def _no_player(tool: CompiledTool) -> ToolResult:
        need = {"simulated": "an LLM to play it (pass --tool-model MODEL)",
                "mcp": "its MCP server (started when the domain is used in episodes)"}[tool.kind]
        return ToolResult(f"Error: tool {tool.name} is a {tool.kind} tool and needs {need}.", error=True)

    def _call_sql(self, tool: CompiledTool, args: dict[str, Any]) -> ToolResult:
        spec = tool.spec
        bound = {k: bind_value(v) for k, v in args.items()}
        conn, guard = self.conn, self.guard
        writes = bool(spec.writes)
        try:
            if writes or spec.checks:
                self._set_query_only(not writes)
                self._txn("BEGIN")
            try:
                with self.budget.limit():
                    for check in spec.checks:
                        guard.mode = "read"
                        row = conn.execute(check.query, bound).fetchone()
                        if not row or not row[0]:
                            self._txn("ROLLBACK")
                            return ToolResult("Error: " + fill(check.error, args), error=True)
                    for statement in spec.writes:
                        guard.mode = "write"
                        conn.execute(statement, bound)
                    guard.mode = "read"
                    result = self._result(tool, bound, args)
                    if writes or spec.checks:
                        self._txn("ROLLBACK" if result.error else "COMMIT")
                        result.changed = writes and not result.error
                    return result
            # OverflowError: an integer argument the schema allows but SQLite cannot store (beyond 64 bits)
            except (sqlite3.Error, OverflowError) as e:
                if conn.in_transaction:
                    self._txn("ROLLBACK")
                stopped = self.budget.stopped(e)
                if stopped:
                    return ToolResult(f"Error: {tool.name} {stopped}.", error=True)
                return ToolResult(f"Error: {tool.name} failed: {_sqlite_message(e)}", error=True)
        finally:
            if conn.in_transaction:  # anything unexpected must still not leave half a tool's writes pending
                self._txn("ROLLBACK")
            guard.mode = "read"
            if writes:
                self._set_query_only(True)

    def _result(self, tool: CompiledTool, bound: dict, args: dict) -> ToolResult:
        spec = tool.spec
        if spec.query is None:
            return ToolResult(fill(spec.message, args) if spec.message else "Done.")
        cur = self.conn.execute(spec.query, bound)
        names = [d[0] for d in cur.description]
        raw = cur.fetchmany(MAX_RESULT_ROWS + 1)
        bad = _result_problem(names, raw)
        if bad:
            return ToolResult(f"Error: {tool.name} {bad}.", error=True)
        rows = [{n: decode_json_text(v) for n, v in zip(names, r)} for r in raw]
        if not rows:
            if spec.if_empty:
                return ToolResult("Error: " + fill(spec.if_empty, args), error=True)
            return ToolResult("null" if spec.returns != "rows" else "[]")
        if spec.returns == "value":
            value = next(iter(rows[0].values()))
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        elif spec.returns == "row":
            text = json.dumps(rows[0], ensure_ascii=False)
        else:
            text = json.dumps(rows, ensure_ascii=False)
        if len(text) > MAX_RESULT_BYTES:
            return ToolResult(f"Error: {tool.name} returned {len(text):,} characters, over the "
                              f"{MAX_RESULT_BYTES:,} a tool may return (MAX_RESULT_BYTES); narrow the query.", error=True)
        return ToolResult(text)

    def _txn(self, statement: str) -> None:
        """Transaction control is muactl's, never a tool's: it bypasses the guard."""
        mode, self.guard.mode = self.guard.mode, "off"
        try:
            self.conn.execute(statement)
        finally:
            self.guard.mode = mode

    def _set_query_only(self, on: bool) -> None:
        self._txn(f"PRAGMA query_only = {'ON' if on else 'OFF'}")

    def _call_python(self, tool: CompiledTool, args: dict[str, Any]) -> ToolResult:
        if not self.trust:
            return ToolResult(
                f"Error: tool {tool.name} runs Python code ({tool.spec.python}) and is disabled. "
                "Re-run with --trust if you trust this domain's author.", error=True)
        from .pyhandler import run_handler

        self.guard.mode = "off"
        try:
            data = self.conn.serialize()
        finally:
            self.guard.mode = "read"
        ok, content, new_data = run_handler(self.domain.spec.root, tool.spec.python, args, data, tool.spec.timeout)
        if not ok:
            return ToolResult(f"Error: {tool.name} failed: {content}", error=True)
        changed = new_data != data
        if changed:
            self.guard.mode = "off"
            try:
                self.conn.deserialize(new_data)
                self.conn.execute("PRAGMA foreign_keys = ON")
                self.conn.execute("PRAGMA query_only = ON")
            finally:
                self.guard.mode = "read"
        return ToolResult(content, changed=changed)

    def replay(self, calls: list[dict]) -> list[ToolResult]:
        """Apply tool calls ({tool: {args}}) in order, e.g. a task's setup or gold actions."""
        results = []
        for call in calls:
            name, args = call_parts(call)
            results.append(self.call(name, args))
        return results

    # ------------------------------------------------------------ state

    def rows(self, table: str) -> list[dict[str, Any]]:
        cols = list(self.domain.tables[table].columns)
        sql = "SELECT " + ", ".join(f'"{c}"' for c in cols) + f' FROM "{table}"'
        return [dict(zip(cols, r)) for r in self.conn.execute(sql)]

    def state_hash(self) -> str:
        """Digest of the database content: independent of row order and of SQLite's page layout.
        JSON columns are compared by value, so key order and spacing do not matter."""
        h = hashlib.sha256()
        for table in sorted(self.domain.tables):
            spec = self.domain.tables[table]
            cols = sorted(spec.columns)
            json_cols = {i for i, c in enumerate(cols) if spec.columns[c] == "json"}
            sql = "SELECT " + ", ".join(f'"{c}"' for c in cols) + f' FROM "{table}"'
            lines = []
            for row in self.conn.execute(sql):
                if json_cols:
                    row = tuple(_canonical_json(v) if i in json_cols else v for i, v in enumerate(row))
                lines.append(repr(row))  # repr of str/int/float/None tuples is exact and deterministic
            lines.sort()
            h.update(f"{table}\x1f{','.join(cols)}\x1f{len(lines)}\x1e".encode())
            h.update("\x1e".join(lines).encode())
            h.update(b"\x1d")
        return h.hexdigest()


@functools.lru_cache(maxsize=200_000)  # most rows are unchanged between episodes: parse each text once
def _canonical_json(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.dumps(json.loads(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    except ValueError:
        return value


def _result_problem(names: list[str], rows: list[tuple]) -> str | None:
    """What a tool may return: rows of text, integers, finite reals and nulls (json columns are text and
    come back decoded). None when the rows are fine, else why not, for the tool's error."""
    if len(rows) > MAX_RESULT_ROWS:
        return f"returned more than {MAX_RESULT_ROWS:,} rows, the most a tool may return (MAX_RESULT_ROWS); narrow the query"
    for row in rows:
        for name, v in zip(names, row):
            if isinstance(v, bytes):
                return (f"returned binary data (a BLOB) in column '{name}'; a tool returns text, numbers, "
                        "null or JSON: convert it in SQL (hex(), CAST(... AS TEXT))")
            if isinstance(v, float) and not math.isfinite(v):
                return f"returned a non-finite number ({v}) in column '{name}'; a tool returns JSON numbers only"
    return None


def _sqlite_message(e: sqlite3.Error) -> str:
    text = str(e)
    if "FOREIGN KEY" in text:
        return "a referenced row does not exist"
    if "UNIQUE" in text:
        return "a row with that key already exists"
    return text

