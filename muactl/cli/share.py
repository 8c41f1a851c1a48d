"""Commands that share a domain: pack, install, uninstall, mcp serve, serve openenv, export verl."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..share.verl import VerlExport
from .app import app, command
from .options import config_options


@command()
def pack(
    domain: str = typer.Argument(..., help="Domain name or a folder holding domain.yaml (its tasks come along)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Pack file to write (default NAME-VERSION.muapack)."),
) -> None:
    """Pack a domain, its tasks and a manifest with checksums into one .muapack file.

    The domain is checked first, as `muactl install` will check it on the receiving machine.
    Example: [bold]muactl pack domains/clinic -o clinic-0.1.0.muapack[/bold]
    """
    from ..share.packs import pack_domain

    result = pack_domain(domain, output)
    m = result.manifest
    extra = " (has Python handlers: they run only with --trust)" if m["has_python"] else ""
    typer.echo(f"packed {m['name']} {m['version']}: {len(m['files'])} files, {m['tasks']} tasks -> {result.path}{extra}")


@command()
def install(
    pack_file: Path = typer.Argument(..., help="A .muapack file made by `muactl pack`."),
    force: bool = typer.Option(False, "--force", help="Replace an installed domain of the same name (another version), "
                               "or install a pack named like a built-in domain (bank, retail), hiding it."),
) -> None:
    """Install a domain pack into your library (checksums and spec verified; nothing in it is run).

    Example: [bold]muactl install clinic-0.1.0.muapack && muactl validate clinic[/bold]
    """
    from ..share.packs import install_pack

    r = install_pack(pack_file, force=force)
    if r.unchanged:
        typer.echo(f"{r.name} {r.version} is already installed from this pack at {r.root}; nothing to do")
        return
    typer.echo(f"installed {r.name} {r.version} -> {r.root}" + (f" (replaced {r.replaced})" if r.replaced else ""))
    if r.shadows_builtin:
        typer.echo(f"note: it hides the built-in domain {r.name}; `muactl uninstall {r.name}` brings the built-in back", err=True)
    if r.manifest.get("has_python"):
        tools = ", ".join(r.manifest.get("python_tools") or []) or "none declared"
        typer.echo(f"note: this pack holds Python code (tools: {tools}); those tools run only with --trust", err=True)
    if r.manifest.get("mcp_commands"):
        typer.echo("note: its MCP tools start these commands, only with --trust: " + "; ".join(r.manifest["mcp_commands"]), err=True)
    typer.echo(f"Next: muactl validate {r.name}")


@command()
def uninstall(name: str = typer.Argument(..., help="Name of an installed domain (see `muactl domains`).")) -> None:
    """Remove an installed domain pack from your library.

    Example: [bold]muactl uninstall clinic[/bold]
    """
    from ..share.packs import uninstall as remove

    typer.echo(f"removed {remove(name)}")


# ---------------------------------------------------------------- sharing: MCP

mcp_app = typer.Typer(help="Serve a domain's tools over MCP.", no_args_is_help=True)
app.add_typer(mcp_app, name="mcp")


@command("serve", group=mcp_app)
def mcp_serve(
    domain: str = typer.Argument(..., help="Domain name or folder."),
    http: Optional[str] = typer.Option(None, "--http", help="Serve streamable HTTP on HOST:PORT instead of stdio."),
    trust: bool = typer.Option(False, "--trust", help="Allow the domain's Python (and MCP) tools to run."),
) -> None:
    """Expose a domain's agent tools as an MCP server, one sandbox database per client session.

    An extra tool, muactl_state_hash, returns the session sandbox's state hash.
    Examples:
      [bold]muactl mcp serve retail[/bold]   (stdio, for MCP clients that launch servers)
      [bold]muactl mcp serve retail --http 127.0.0.1:8765[/bold]   (then connect to http://127.0.0.1:8765/mcp)
    """
    from ..share.mcp_server import serve

    try:
        # stdout is the protocol channel on stdio: every human-readable line goes to stderr
        serve(domain, http=http, trust=trust, log=lambda line: typer.echo(line, err=True))
    except KeyboardInterrupt:  # the way to stop a server: not an error
        raise typer.Exit(0)


# ---------------------------------------------------------------- sharing: OpenEnv

serve_app = typer.Typer(help="Serve a domain as an environment for other RL frameworks.", no_args_is_help=True)
app.add_typer(serve_app, name="serve")


@command("openenv", group=serve_app)
def serve_openenv(
    domain: str = typer.Argument(..., help="Domain name or folder."),
    tasks: Optional[str] = typer.Option(None, "--tasks", help="template:<id> or template:all (fresh instances), or "
                                        "task ids separated by commas; default: the task files of --split."),
    split: str = typer.Option("train", "--split", help="train | test | all (task files; templates: which stream)."),
    db: str = typer.Option("random", "--db", help="With --tasks template:...: random (a fresh database each) | fixed."),
    user: str = typer.Option("scripted", "--user", help="scripted | hf:<model> | a litellm model id."),
    user_api_base: Optional[str] = typer.Option(None, "--user-api-base", help="OpenAI-compatible server for the user."),
    user_temperature: float = typer.Option(0.0, "--user-temperature", help="User simulator temperature."),
    seed: int = typer.Option(0, "--seed", help="Seed of the template stream and of the episodes."),
    max_turns: int = typer.Option(24, "--max-turns", min=1, help="Agent turns before an episode is cut."),
    max_sessions: int = typer.Option(64, "--max-sessions", min=1, help="Concurrent client sessions."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", help="Port to listen on."),
    trust: bool = typer.Option(False, "--trust", help="Allow the domain's Python (and MCP) tools to run."),
) -> None:
    """Serve a domain as an OpenEnv environment: reset() draws a task, step() is one agent turn.

    Each client session (OpenEnv's EnvClient, over WebSocket at /ws) gets its own simulated user and
    sandbox database; the last step carries the reward and its breakdown.
    Examples:
      [bold]muactl serve openenv bank --port 8000[/bold]
      [bold]muactl serve openenv bank --tasks template:all --db random --port 8000[/bold]
      [bold]muactl serve openenv retail --user openai/gpt-4o-mini --split test[/bold]
    """
    from ..share.openenv_server import ServeConfig, serve

    cfg = ServeConfig(domain=domain, tasks=tasks, split=split, db=db, user=user, user_api_base=user_api_base,
                      user_temperature=user_temperature, seed=seed, max_turns=max_turns, max_sessions=max_sessions,
                      host=host, port=port, trust=trust)
    try:
        serve(cfg, log=lambda line: typer.echo(line, err=True))
    except KeyboardInterrupt:  # Ctrl-C is how a server is stopped: its normal end
        raise typer.Exit(0)


export_app = typer.Typer(help="Export a domain to another training stack.", no_args_is_help=True)
app.add_typer(export_app, name="export")


@command("verl", group=export_app)
@config_options(VerlExport)
def export_verl_cmd(values: dict) -> None:
    """Export a domain for verl (0.8+) multi-node GRPO: parquet datasets, agent loop, its config, launch script.

    Example: [bold]muactl export verl retail -o out/verl-retail && cat out/verl-retail/README.md[/bold]
    """
    from ..share.verl import export_verl

    info = export_verl(VerlExport(**{**values, "overrides": list(values["overrides"])}))
    typer.echo(f"wrote {info['output']}/: train.parquet ({info['rows']['train']} tasks), test.parquet ({info['rows']['test']}), "
               f"tools.json, muactl_agent_loop.py, agent_loop.yaml, launch.sh, README.md")
    typer.echo(f"Next: read {info['output']}/README.md, then run {info['output']}/launch.sh against your Ray cluster")
