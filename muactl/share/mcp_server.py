"""`muactl mcp serve DOMAIN`: a domain's agent tools as an MCP server (official `mcp` SDK, low-level API).

Every client session gets its own sandbox: a fresh copy of the domain's database that lives as long as
the session, so one client's writes are never seen by another. An extra tool, `muactl_state_hash`,
returns the session sandbox's state hash (the digest rewards compare), for clients that score episodes.

Over HTTP, sessions need the handshake era of the protocol: the 2026-07-28 revision makes every HTTP
request stand alone (no initialize, no Mcp-Session-Id), which leaves nothing to hang a sandbox on. So
the HTTP server does not answer `server/discover`, and clients in the SDK's default `auto` mode fall
back to the initialize handshake (a client pinned to the modern revision gets a clear error). On stdio
a server process has exactly one client, so either era works and the sandbox lives as long as the
process.
"""

from __future__ import annotations

import sys
from typing import Any

from ..env.mcp_tools import import_mcp
from ..env.sandbox import new_env

STATE_TOOL = "muactl_state_hash"
_ENV_KEY = "muactl.sandbox"


def _modern_versions() -> set[str]:
    try:
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS
    except ImportError:  # older SDKs have only the handshake era
        return set()
    return set(MODERN_PROTOCOL_VERSIONS)


def build_server(opened, trust: bool = False):
    """An `mcp.server.lowlevel.Server` exposing the domain's agent tools, one sandbox per session."""
    import_mcp()
    from mcp import types
    from mcp.server.lowlevel import Server
    from mcp.shared.exceptions import MCPError

    from .. import __version__

    compiled = opened.compiled
    tools = {t.name: t for t in compiled.agent_tools()}
    if STATE_TOOL in tools:  # a domain tool of that name would be shadowed silently otherwise
        from ..errors import UsageError

        raise UsageError(f"domain {compiled.name} declares a tool named {STATE_TOOL}, which muactl mcp serve reserves")
    modern = _modern_versions()
    process_slot: dict[str, Any] = {}

    def sandbox(ctx):
        # The SDK keeps per-connection scratch state on the Connection behind each request's
        # ServerSession; it is the one object that lives exactly as long as a client session.
        conn = getattr(getattr(ctx, "session", None), "_connection", None)
        if conn is not None and getattr(conn, "session_id", None) is None and ctx.protocol_version in modern:
            conn = None  # modern era: a fresh Connection per request, nothing to keep state on
        if conn is not None:
            state = conn.state
            if _ENV_KEY not in state:
                env = new_env(compiled, trust=trust)
                state[_ENV_KEY] = env
                conn.exit_stack.callback(env.close)
            return state[_ENV_KEY]
        if getattr(ctx, "request", None) is None:  # stdio: the process has exactly one client
            if _ENV_KEY not in process_slot:
                process_slot[_ENV_KEY] = new_env(compiled, trust=trust)
            return process_slot[_ENV_KEY]
        raise MCPError(code=types.INVALID_REQUEST,
                       message="muactl keeps one sandbox per MCP session; connect with the initialize handshake "
                               "(the SDK's default mode='auto' or mode='legacy')")

    def describe() -> list:
        out = [types.Tool(name=t.name, description=t.description, input_schema=t.shown or t.parameters) for t in tools.values()]
        out.append(types.Tool(
            name=STATE_TOOL,
            description="Digest of this session's sandbox database (independent of row order). Compare it with "
                        "the hash after a task's gold actions to score an episode. Takes no arguments.",
            input_schema={"type": "object", "properties": {}, "additionalProperties": False}))
        return out

    async def list_tools(ctx, params) -> Any:
        return types.ListToolsResult(tools=describe())

    async def call_tool(ctx, params) -> Any:
        env = sandbox(ctx)
        if params.name == STATE_TOOL:
            digest = await env.off_loop(env.state_hash)  # after this session's calls in flight
            return types.CallToolResult(content=[types.TextContent(type="text", text=digest)],
                                        structured_content={"state_hash": digest})
        if params.name not in tools:
            known = ", ".join(list(tools) + [STATE_TOOL])
            return types.CallToolResult(content=[types.TextContent(type="text", text=f"Error: unknown tool '{params.name}'. Available tools: {known}.")],
                                        is_error=True)
        result = await env.acall(params.name, params.arguments or {})
        return types.CallToolResult(content=[types.TextContent(type="text", text=result.content)], is_error=result.error)

    server = Server(f"muactl-{compiled.name}", version=__version__,
                    instructions=compiled.system_prompt, on_list_tools=list_tools, on_call_tool=call_tool)

    default_discover = server.get_request_handler("server/discover") if hasattr(server, "get_request_handler") else None
    if default_discover is not None:  # an SDK that knows the modern era
        async def discover(ctx, params) -> Any:
            if getattr(ctx, "request", None) is None:  # stdio: one client per process, the modern era is fine
                return await default_discover.handler(ctx, params)
            # HTTP: refusing discovery makes `auto` clients fall back to the handshake, which gives a session
            raise MCPError(code=types.METHOD_NOT_FOUND, message="muactl serves HTTP with sessions (initialize handshake)")

        server.add_request_handler("server/discover", default_discover.params_type, discover)
    return server


async def serve_stdio(server) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def parse_bind(value: str) -> tuple[str, int]:
    from ..errors import UsageError

    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not host or not 0 < int(port) < 65536:
        raise UsageError(f"--http wants HOST:PORT with a port in 1..65535 (e.g. 127.0.0.1:8765), got {value!r}")
    return host.strip("[]"), int(port)


def check_bind(host: str, port: int) -> None:
    """Fail with one clear line (not uvicorn's log and exit code 3) when HOST:PORT cannot be listened on."""
    import socket

    from ..errors import UsageError

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does
            s.bind((host, port))
    except OSError as e:
        raise UsageError(f"cannot serve on {host}:{port}: {e.strerror or e}") from None


def serve_http(server, host: str, port: int, log=None) -> None:
    import uvicorn

    check_bind(host, port)

    app = server.streamable_http_app(host=host)
    if log:
        log(f"serving {server.name} on http://{host}:{port}/mcp (streamable HTTP); Ctrl-C stops")
        if host not in ("127.0.0.1", "localhost", "::1"):
            log("warning: this address is reachable from other machines and the server has no authentication")
    uvicorn.run(app, host=host, port=port, log_level="warning")


def serve(domain: str, http: str | None = None, trust: bool = False, log=None) -> None:
    """Open the domain and serve its tools until the client (stdio) or Ctrl-C (HTTP) ends it."""
    import anyio

    from ..domain.open import open_domain

    opened = open_domain(domain, with_tasks=False, trust=trust)
    server = build_server(opened, trust=trust)
    if http:
        host, port = parse_bind(http)
        serve_http(server, host, port, log=log)
        return
    if log:
        log(f"serving {server.name} on stdio ({len(opened.compiled.agent_tools())} tools + {STATE_TOOL})")
    anyio.run(serve_stdio, server)


if __name__ == "__main__":  # pragma: no cover
    serve(sys.argv[1])
