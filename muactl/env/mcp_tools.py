"""Tools of kind `mcp`: discovered from a server started from the declared command, played in episodes.

Discovery (when a domain is opened: validate, eval, synth, train) starts each distinct server once,
lists its tools, and gives every `{mcp: {command, tool}}` tool the server's description (unless the
domain overrides it) and input schema; a missing tool or a server that does not start is a problem at
that tool's line. The server runs in the domain's folder, so a script shipped beside domain.yaml can be
named by a relative path; it gets the SDK's minimal environment plus MUACTL_* and the tool's `env`.

In episodes, the player registered as `compiled.players["mcp"]` keeps one client session (one server
process) per episode and server, started on the episode's first call to it and closed with the
episode's sandbox: a stateful server then starts fresh for every episode, as the sandbox does.
Whatever state lives in the server is not part of the reward, which compares the sandbox database.

Domains from packs (installed or unpacked: spec/library.py) start their servers only with --trust (a
command is code, like a python handler); without it nothing is started, discovery included, and their mcp
tools answer with an error that says why and how to trust the domain.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import McpError, Problem
from .results import ToolResult

DISCOVERY_TIMEOUT_S = 60.0
CALL_TIMEOUT_S = 120.0


def import_mcp():
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise McpError("the MCP SDK is not installed: pip install 'muactl[mcp]'") from None


def tool_result_text(result) -> str:
    """The text of a CallToolResult (text blocks joined; other blocks as JSON)."""
    parts = []
    for block in result.content or []:
        text = getattr(block, "text", None)
        parts.append(text if text is not None else json.dumps(block.model_dump(mode="json")))
    return "\n".join(parts)


def _key(ref) -> tuple:
    return tuple(ref.command), tuple(sorted(ref.env.items()))


def _params(ref, cwd: Path):
    from mcp import StdioServerParameters

    env = {k: v for k, v in os.environ.items() if k.startswith("MUACTL_")}
    env.update(ref.env)
    return StdioServerParameters(command=ref.command[0], args=list(ref.command[1:]), env=env, cwd=str(cwd))


class McpSession:
    """One client session to one server, owned by its own task: the SDK's transports are anyio task
    groups that must be entered and left by the same task, while episode calls come from many."""

    def __init__(self, ref, cwd: Path):
        self.ref, self.cwd = ref, cwd
        self.queue: asyncio.Queue | None = None
        self.task: asyncio.Task | None = None
        self.ready: asyncio.Future | None = None
        self.errlog = None

    async def start(self, timeout: float = DISCOVERY_TIMEOUT_S) -> McpSession:
        import_mcp()
        loop = asyncio.get_running_loop()
        self.queue, self.ready = asyncio.Queue(), loop.create_future()
        self.errlog = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self.task = asyncio.ensure_future(self._run())
        try:
            await asyncio.wait_for(asyncio.shield(self.ready), timeout)
        except TimeoutError:
            self.close()
            raise McpError(f"MCP server `{' '.join(self.ref.command)}` did not answer within {timeout:g} s{self._stderr()}") from None
        return self

    def _stderr(self) -> str:
        try:
            self.errlog.seek(0)
            tail = self.errlog.read()[-600:].strip()
        except (OSError, ValueError, AttributeError):
            return ""
        return f" (its stderr: {tail})" if tail else ""

    async def _run(self) -> None:
        from mcp import Client
        from mcp.client.stdio import stdio_client

        try:
            async with Client(stdio_client(_params(self.ref, self.cwd), errlog=self.errlog), mode="legacy") as client:
                self.ready.set_result(client)
                while True:
                    item = await self.queue.get()
                    if item is None:
                        break
                    method, args, fut = item
                    try:
                        res = await method(client, *args)
                    except Exception as e:
                        if not fut.done():
                            fut.set_exception(e)
                    else:
                        if not fut.done():
                            fut.set_result(res)
        except BaseException as e:
            err = McpError(f"MCP server `{' '.join(self.ref.command)}` failed: {_reason(e)}{self._stderr()}")
            if not self.ready.done():
                self.ready.set_exception(err)
            while self.queue is not None and not self.queue.empty():
                item = self.queue.get_nowait()
                if item is not None and not item[2].done():
                    item[2].set_exception(err)
            if isinstance(e, asyncio.CancelledError):
                raise
        finally:
            if self.errlog is not None:
                self.errlog.close()

    async def _ask(self, method, *args, timeout: float = CALL_TIMEOUT_S):
        if self.task is None or self.task.done():
            raise McpError(f"MCP server `{' '.join(self.ref.command)}` is not running")
        fut = asyncio.get_running_loop().create_future()
        self.queue.put_nowait((method, args, fut))
        return await asyncio.wait_for(fut, timeout)

    async def list_tools(self) -> list:
        async def run(client):
            return (await client.list_tools()).tools

        return await self._ask(run)

    async def call(self, name: str, args: dict) -> Any:
        async def run(client, n, a):
            return await client.call_tool(n, a)

        return await self._ask(run, name, args)

    def close(self) -> None:
        if self.queue is not None:
            self.queue.put_nowait(None)

    async def aclose(self) -> None:
        self.close()
        if self.task is not None:
            try:
                await asyncio.wait_for(self.task, 10)
            except (TimeoutError, asyncio.CancelledError, Exception):
                self.task.cancel()


def _reason(e: BaseException) -> str:
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _run_sync(make_coro):
    """Run a coroutine from sync code, even when the caller is inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make_coro())
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make_coro())).result()


async def _discover(ref, cwd: Path) -> list:
    session = await McpSession(ref, cwd).start()
    try:
        return await session.list_tools()
    finally:
        await session.aclose()


def discover(spec, compiled) -> list[Problem]:
    """Fill in each mcp tool's schema and description from its server. Returns problems, never raises."""
    groups: dict[tuple, list[str]] = {}
    for name, tool in compiled.tools.items():
        if tool.kind == "mcp":
            groups.setdefault(_key(tool.spec.mcp), []).append(name)
    problems = []
    for names in groups.values():
        ref = compiled.tools[names[0]].spec.mcp
        try:
            listed = _run_sync(lambda ref=ref: _discover(ref, spec.root))
        except McpError as e:
            for n in names:
                problems.append(spec.doc.problem(("tools", n, "mcp", "command"), f"could not list the server's tools: {e}"))
            continue
        by_name = {t.name: t for t in listed}
        for n in names:
            tool = compiled.tools[n]
            remote = by_name.get(tool.spec.mcp.tool)
            if remote is None:
                import difflib

                close = difflib.get_close_matches(tool.spec.mcp.tool, list(by_name), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else f"; it has: {', '.join(by_name) or 'no tools'}"
                problems.append(spec.doc.problem(("tools", n, "mcp", "tool"),
                                                 f"the server `{' '.join(ref.command)}` has no tool '{tool.spec.mcp.tool}'{hint}"))
                continue
            schema = dict(remote.input_schema or {})
            if schema.get("type") != "object":
                problems.append(spec.doc.problem(("tools", n, "mcp", "tool"), "the server's input schema is not a JSON object schema"))
                continue
            try:
                import jsonschema

                jsonschema.Draft202012Validator.check_schema(schema)
            except Exception as e:
                problems.append(spec.doc.problem(("tools", n, "mcp", "tool"), f"the server's input schema is invalid: {e}"))
                continue
            tool.schema = schema
            if tool.spec.description is None and remote.description:
                tool.description = remote.description.strip()
    return problems


class McpPlayer:
    """Plays mcp tools in episodes: one client session per episode and server (see the module doc)."""

    def __init__(self, root: Path, refused: str | None = None):
        self.root = root
        self.refused = refused  # why its servers may not start (and how to allow them); None: they may
        self.live: set[McpSession] = set()

    async def __call__(self, tool, args: dict, env) -> ToolResult:
        ref = tool.spec.mcp
        if self.refused is not None:
            return ToolResult(f"Error: tool {tool.name} starts an external program (`{' '.join(ref.command)}`), "
                              f"which did not start: {self.refused}.", error=True)
        sessions = env.__dict__.get("_mcp_sessions")
        if sessions is None:
            sessions = env.__dict__["_mcp_sessions"] = {}
            self._close_with(env, sessions)
        key = _key(ref)
        session = sessions.get(key)
        if session is None:
            session = sessions[key] = McpSession(ref, self.root)
            self.live.add(session)
            try:
                await session.start()
            except McpError as e:
                return ToolResult(f"Error: {tool.name} failed: {e}", error=True)
        try:
            result = await session.call(ref.tool, args)
        except TimeoutError:
            return ToolResult(f"Error: {tool.name} did not answer within {CALL_TIMEOUT_S:g} s.", error=True)

        return ToolResult(tool_result_text(result), error=bool(result.is_error))

    def _close_with(self, env, sessions: dict) -> None:
        # the episode engine closes the sandbox when the episode ends: end its server sessions with it
        close = env.close

        def close_all() -> None:
            for s in sessions.values():
                s.close()
            close()

        env.close = close_all

    async def aclose(self) -> None:
        """Wait for every session's server to stop (the end of a run)."""
        live, self.live = list(self.live), set()
        await asyncio.gather(*(s.aclose() for s in live), return_exceptions=True)


def attach(spec, compiled, refused: str | None = None) -> list[Problem]:
    """Register the episode player and discover the domain's mcp tools, unless `refused` says why not."""
    compiled.players["mcp"] = McpPlayer(spec.root, refused)
    return discover(spec, compiled) if refused is None else []
