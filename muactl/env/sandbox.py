"""Environment: one episode's private database and the only way tools touch it.

Guarantees (each has its own test in tests/env/test_sandbox.py):
- fork() copies the template; the template is never written.
- arguments are checked against the tool's JSON schema before any SQL runs;
- only the domain's declared statements run, with bound parameters;
- reads run with `query_only` on and the authorizer in read mode;
- checks and writes run in one transaction that rolls back on any failure (with the domain's
  after_write statements, run once the result is read);
- a failure is data: call() returns ToolResult(error=True) and the episode goes on;
- python handlers run only with trust, in a child process with a timeout;
- acall() does the tool's work (argument validation, SQL, Python) on a worker thread, one call at a time
  per environment, so a slow call never stalls the event loop that runs every other episode or MCP
  session; interrupt() stops the statement in flight and every later one until settle() (an episode
  past its timeout);
- every domain statement runs under the SQL budget (env/budget.py), of steps and of wall time, and no
  SQL value is over MAX_SQL_VALUE_BYTES: a runaway is stopped and becomes a tool error;
- close() during a call interrupts it and closes the connection once the call has ended;
- a tool returns JSON-able values only (text, numbers, null, decoded json columns), at most
  MAX_RESULT_ROWS rows and MAX_RESULT_BYTES of text; a BLOB or a non-finite number is a tool error.

State: the hash follows the change log the template's triggers fill (statehash.py, tested in
tests/env/test_statehash.py), and close() puts the database back to the template for the next fork
(forkpool.py, tests/env/test_forkpool.py); both cost the rows an episode changed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import sqlite3
import threading
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..compile.changelog import install as install_log, installed as log_installed
from ..compile.sql import Guard, bind_value, connect_search_indexes
from ..limits import MAX_ARGUMENT_BYTES
from ..spec.models import call_parts
from .forkpool import give_back, take
from .budget import STOPPED, SqlBudget, SqlLimitExceeded
from .results import ToolResult, query_result
from .statehash import StateTracker, full_hash
from .values import fill

if TYPE_CHECKING:
    from ..compile import CompiledDomain, CompiledTool

# Hooks for tool kinds whose results come from outside the database (simulated: an LLM; mcp: a server).
# They are async: the episode engine awaits them through Environment.acall.
ToolPlayer = Callable[["CompiledTool", dict, "Environment"], Awaitable["ToolResult"]]
OUTSIDE_KINDS = ("simulated", "mcp")


_CLOSED = sqlite3.connect(":memory:", check_same_thread=False)  # what a closed environment holds
_CLOSED.close()

_POOL: concurrent.futures.ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()
TOOL_THREADS = 64  # calls in flight at once across all environments; more wait their turn


def tool_pool() -> concurrent.futures.ThreadPoolExecutor:
    """The threads tool work runs on (created on first use; threads start as calls need them)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = concurrent.futures.ThreadPoolExecutor(TOOL_THREADS, thread_name_prefix="muactl-tool")
        return _POOL


class Environment:
    def __init__(self, domain: CompiledDomain, conn: sqlite3.Connection, trust: bool = False,
                 players: dict[str, ToolPlayer] | None = None, state: StateTracker | None = None):
        """`state`: the tracker of where `conn`'s content stands against the template; without one
        (a database from elsewhere) the first state hash reads every row, once."""
        self.domain = domain
        self.conn = conn
        self.trust = trust
        self.players: dict[str, ToolPlayer] = dict(players or {})
        self.guard = Guard(set(domain.tables))
        self._busy = threading.Lock()  # one call at a time touches the connection (and the guard's mode)
        self._pending: set[concurrent.futures.Future] = set()
        self._stop = threading.Event()  # set by interrupt(): a running python handler gives up too
        self._closing = False
        # False: writes skip database.after_write (how τ²'s evaluator plays a gold path: without its sync)
        self.after_write = True
        # the discoverable tools unlocked so far (builtin: unlock): the episode's, never the database's
        self.unlocked: set[str] = set()
        self.budget = SqlBudget(conn, domain.spec.domain.limits.sql_steps, self._stop)
        conn.isolation_level = None  # transactions are explicit
        self.state = state or self._adopt()
        self._configure()
        self.guard.install(conn)

    @classmethod
    def from_template(cls, domain: CompiledDomain, trust: bool = False) -> Environment:
        # a closed sandbox put back to the template costs the rows it changed (forkpool.py); else
        # deserializing the template's bytes, one memory copy (the backup API measured 2-8x slower
        # from 2 MB up: benchmarks/domains.py)
        conn = take(domain)
        if conn is None:
            conn = sqlite3.connect(":memory:", check_same_thread=False)
            conn.deserialize(domain.template_bytes())
        return cls(domain, conn, trust, domain.players, StateTracker(domain))

    def fork(self) -> Environment:
        """A copy of this environment's current state (players and trust carry over)."""
        state = self.state.read(self.conn).copy()  # the copy's log is read up to the same entry
        self.guard.mode = "off"
        try:
            data = self.conn.serialize()
        finally:
            self.guard.mode = "read"
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.deserialize(data)
        twin = Environment(self.domain, conn, self.trust, self.players, state)
        twin.unlocked = set(self.unlocked)
        return twin

    def _configure(self) -> None:
        """Connection settings the sandbox relies on (set again when a python tool swaps the database in)."""
        self.conn.execute("PRAGMA foreign_keys = ON")
        # REPLACE deletes the rows it overwrites; only with this do those deletes reach the change log
        self.conn.execute("PRAGMA recursive_triggers = ON")
        self.conn.execute("PRAGMA query_only = ON")

    def _adopt(self) -> StateTracker:
        """A database muactl did not fork: give it the change log if it lacks one, and a tracker that
        rebuilds its difference to the template from every row on first use."""
        if not log_installed(self.conn, self.domain.tables):
            self.conn.execute("PRAGMA query_only = OFF")
            install_log(self.conn, self.domain.tables)
        return StateTracker(self.domain, known=False)

    def close(self) -> None:
        """Done with this sandbox: its database goes back to the template for the next fork to reuse
        (or is closed when it cannot). Using the environment afterwards raises, as on a closed connection.
        A call still running (a session closed mid-call) is interrupted, and the connection is closed once
        that call is done with it (until then a tool call answers that the episode was stopped)."""
        if self.conn is _CLOSED or self._closing:
            return
        self._closing = True
        if self._pending:
            self.interrupt()  # the statement stops at its next step, a python handler is abandoned
            tool_pool().submit(self._close_when_idle)
            return
        conn, self.conn = self.conn, _CLOSED
        if not give_back(self.domain, conn, self.state):
            conn.close()

    def _close_when_idle(self) -> None:
        """Close the connection once no call holds it (closing it under a running statement would make that
        call fail on a closed database); a connection cut off mid-call is not reused."""
        with self._busy:
            conn, self.conn = self.conn, _CLOSED
        conn.close()

    def select(self, sql: str, params: dict | None = None, max_rows: int = 1) -> tuple[list[str], list[tuple]]:
        """Run one of the domain's read statements (an assertion, a template's sample or derive) under the
        SQL budget: (column names, up to max_rows rows). A statement past the budget, or one returning more
        rows, raises SqlLimitExceeded (a sqlite3.Error)."""
        if self._stop.is_set():
            raise SqlLimitExceeded.of_budget(STOPPED)
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

    def _prepare(self, name: str, args: Any, unlocked: bool = False) -> tuple[CompiledTool, dict] | ToolResult:
        """Look the tool up and validate the arguments; an error result if either fails. A discoverable tool
        is reached only through call_unlocked (`unlocked`)."""
        tool = self.domain.tools.get(name)
        if tool is None or (is_discoverable(tool) and not unlocked):
            known = ", ".join(n for n, t in self.domain.tools.items() if not is_discoverable(t))
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

    def call(self, name: str, args: Any, unlocked: bool = False) -> ToolResult:
        """Run a database tool (sql, builtin, python). Simulated and mcp tools need acall."""
        if self._stop.is_set():
            return ToolResult(f"Error: {name} {STOPPED}.", error=True)
        prepared = self._prepare(name, args, unlocked)
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
                return ToolResult(tool.spec.message or "Transfer successful.", transfer=True)
            if tool.spec.builtin == "unlock":
                return self._unlock(tool, args["agent_tool_name"])
            if tool.spec.builtin == "call_unlocked":
                return self._call_unlocked(args["agent_tool_name"], args["arguments"])
            if tool.spec.builtin == "merge":
                return self._merge(tool, args["table"], args["records"])
            return ToolResult(tool.spec.message or "")
        if tool.kind == "python":
            return self._call_python(tool, args)
        raise AssertionError(f"unknown tool kind {tool.kind}")

    def _unlock(self, unlock: CompiledTool, name: str) -> ToolResult:
        tool = self.domain.tools.get(name)
        if tool is None or not is_discoverable(tool):
            return ToolResult(f"Error: Unknown agent tool '{name}'. This tool is not available.", error=True)
        self.unlocked.add(name)
        parameters = json.dumps(tool.shown or tool.parameters, ensure_ascii=False)
        text = unlock.spec.message or ("Tool unlocked: {name}\nDescription: {description}\nParameters: {parameters}")
        return ToolResult(text.replace("{name}", name).replace("{description}", tool.description)
                          .replace("{parameters}", parameters).replace("{parameter_lines}", parameter_lines(tool)))

    def _merge(self, tool: CompiledTool, table: str, records: list[dict[str, Any]]) -> ToolResult:
        """Records merged by primary key (τ²'s initialization_data: fields replaced, new records added), in one
        transaction under the guard, then the domain's after_write as after any write."""
        from ..compile.database import coerce

        spec = self.domain.tables.get(table)
        if spec is None or not spec.pk_columns():
            return ToolResult(f"Error: {tool.name}: {table!r} is not a declared table with a primary key.", error=True)
        rows = []
        for i, record in enumerate(records):
            unknown = [c for c in record if c not in spec.columns]
            missing = [c for c in spec.pk_columns() if record.get(c) is None]
            if unknown or missing:
                what = f"no column {unknown[0]!r}" if unknown else f"no primary key {missing[0]!r}"
                return ToolResult(f"Error: {tool.name}: record {i} of {table} has {what}.", error=True)
            try:
                rows.append({c: bind_value(coerce(v, spec.columns[c], False)) for c, v in record.items()})
            except TypeError as e:
                return ToolResult(f"Error: {tool.name}: record {i} of {table}: {e}.", error=True)
        self._set_query_only(False)
        self._txn("BEGIN")
        try:
            with self.budget.limit():
                self.guard.mode = "write"
                for row in rows:
                    self.conn.execute(merge_statement(table, spec.pk_columns(), list(row)),
                                      {f"c{n}": v for n, v in enumerate(row.values())})
                if self.after_write:
                    for statement in self.domain.spec.domain.database.after_write:
                        self.conn.execute(statement)
            self._txn("COMMIT")
        except (sqlite3.Error, OverflowError) as e:
            self._txn("ROLLBACK")
            return ToolResult(f"Error: {tool.name} failed: {_sqlite_message(e)}", error=True)
        finally:
            self.guard.mode = "read"
            self._set_query_only(True)
        return ToolResult(f"Merged {len(rows)} record(s) into {table}.", changed=bool(rows))

    def _call_unlocked(self, name: str, arguments: str) -> ToolResult:
        tool = self.domain.tools.get(name)
        if tool is None or not is_discoverable(tool):
            return ToolResult(f"Error: Unknown agent tool '{name}'. This tool is not available.", error=True)
        if name not in self.unlocked:
            unlock = next((t.name for t in self.domain.tools.values() if t.kind == "builtin"
                           and t.spec.builtin == "unlock"), "the unlock tool")
            return ToolResult(f"Error: Tool '{name}' has not been unlocked. You must first use `{unlock}` to unlock this "
                              "tool before calling it.", error=True)
        try:
            args = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError) as e:
            return ToolResult(f"Error: Invalid JSON in arguments: {e}", error=True)
        if not isinstance(args, dict):
            return ToolResult("Error: arguments must be a JSON object.", error=True)
        return self.call(name, args, unlocked=True)

    async def off_loop(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Await fn(*args) run on a tool thread, after any earlier call on this environment."""

        def locked():
            with self._busy:
                return fn(*args)

        future = tool_pool().submit(locked)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)
        return await asyncio.wrap_future(future)

    def interrupt(self) -> None:
        """Stop the work in flight: the running SQL statement fails with 'interrupted' (its
        transaction rolls back) and a python handler is abandoned. Safe from any thread."""
        self._stop.set()
        self.conn.interrupt()

    async def settle(self) -> None:
        """Interrupt what is in flight and wait until no thread uses the connection any more."""
        if self._pending:
            self.interrupt()
            await asyncio.wait([asyncio.wrap_future(f) for f in list(self._pending)])
        self._stop.clear()

    async def acall(self, name: str, args: Any) -> ToolResult:
        """Run any tool without blocking the event loop: database tools (and every argument check) on a
        tool thread; simulated and mcp tools are awaited through their players."""
        tool = self.domain.tools.get(name)
        if tool is None or (tool.kind not in OUTSIDE_KINDS and tool.kind not in self.players):
            return await self.off_loop(self.call, name, args)
        prepared = await self.off_loop(self._prepare, name, args)
        if isinstance(prepared, ToolResult):
            return prepared
        tool, args = prepared
        player = self.players.get(tool.kind)
        if tool.kind not in OUTSIDE_KINDS:
            # an LLM plays a database tool (synthesis with simulated tools): the agent sees the
            # simulated text, while the real call keeps the sandbox's state for scoring
            real = await self.off_loop(self.call, name, args)
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
                        failed = self._failing_check(check, bound, args)
                        if failed is not None:
                            self._txn("ROLLBACK")
                            return ToolResult("Error: " + failed, error=True)
                    for statement in spec.writes:
                        guard.mode = "write"
                        conn.execute(statement, bound)
                    guard.mode = "read"
                    result = query_result(self.conn, tool, bound, args)
                    if writes and not result.error and self.after_write:  # after the result is read: the tool reports its own effect
                        guard.mode = "write"
                        for statement in self.domain.spec.domain.database.after_write:
                            conn.execute(statement)
                        guard.mode = "read"
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

    def _failing_check(self, check, bound: dict, args: dict) -> str | None:
        """The check's error text if it fails (for `each`, at the first failing element), else None."""
        if check.each:
            arrays = [args.get(p) or [] for p in check.each.values()]
            rounds = [dict(zip(check.each, values)) for values in zip(*arrays)]
        else:
            rounds = [{}]
        for element in rounds:
            row = self.conn.execute(check.query, {**bound, **{k: bind_value(v) for k, v in element.items()}})
            names = [d[0] for d in row.description]
            values = row.fetchone()
            if not values or not values[0]:
                computed = dict(zip(names[1:], values[1:])) if values else {}
                return fill(check.error, {**args, **element, **computed})
        return None

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
        ok, content, new_data = run_handler(self.domain.spec.root, tool.spec.python, args, data, tool.spec.timeout,
                                            stop=self._stop)
        if not ok:
            return ToolResult(f"Error: {tool.name} failed: {content}", error=True)
        changed = new_data != data
        if changed:
            self.guard.mode = "off"
            try:
                self.conn.deserialize(new_data)
                # the handler could have done anything to the file: the state is rebuilt from its rows
                self.state = self._adopt()
                self._configure()
                connect_search_indexes(self.conn)  # a new schema (guard off): its search indexes connect again
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
        """Digest of the database content: independent of row order and of SQLite's page layout;
        JSON columns are compared by value, so key order and spacing do not matter. Costs the rows
        changed since the last call (statehash.py), not the rows the database holds."""
        return self.state.read(self.conn).digest()

    def state_delta(self) -> dict[tuple[str, int], int]:
        """The rows this state differs from the template by: (table, row digest) -> net count."""
        return dict(self.state.read(self.conn).delta)

    def full_state_hash(self) -> str:
        """The state hash recomputed from every row: the check the incremental one must pass."""
        return full_hash(self.conn, self.domain.tables)


def _sqlite_message(e: sqlite3.Error) -> str:
    text = str(e)
    if "FOREIGN KEY" in text:
        return "a referenced row does not exist"
    if "UNIQUE" in text:
        return "a row with that key already exists"
    return text


def merge_statement(table: str, keys: list[str], columns: list[str]) -> str:
    """An upsert of the given columns (names are declared ones, quoted): the others of an existing row stay."""
    cols = ", ".join(f'"{c}"' for c in columns)
    params = ", ".join(f":c{n}" for n in range(len(columns)))
    update = ", ".join(f'"{c}" = excluded."{c}"' for c in columns if c not in keys)
    conflict = ", ".join(f'"{k}"' for k in keys)
    action = f"DO UPDATE SET {update}" if update else "DO NOTHING"
    return f'INSERT INTO "{table}" ({cols}) VALUES ({params}) ON CONFLICT ({conflict}) {action}'


def parameter_lines(tool: CompiledTool) -> str:
    """A tool's parameters one per line, as τ²-bench banking_knowledge's unlock lists them:
    `  - name: type (required|optional) - description` (optional: it has a default), or `  (no parameters)`."""
    lines = [f"  - {name}: {p.type} ({'optional' if 'default' in p.model_fields_set else 'required'}) - "
             f"{p.description or ''}" for name, p in tool.spec.params.items()]
    return "\n".join(lines) or "  (no parameters)"


def is_discoverable(tool: CompiledTool) -> bool:
    """Hidden from the agent's tool list until unlocked (a tool spec's `discoverable`)."""
    return bool(getattr(tool.spec, "discoverable", False))


def new_env(domain: CompiledDomain, trust: bool | None = None) -> Environment:
    """A fresh sandbox over a private copy of the domain's template database (trust defaults to the domain's)."""
    return Environment.from_template(domain, trust=domain.trust if trust is None else trust)
