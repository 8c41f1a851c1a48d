"""Commands on stored runs: runs, runs show."""

from __future__ import annotations

import json
from typing import Optional

import typer

from ..errors import UsageError
from .app import app, command, guarded
from .output import command_console, fmt_value, print_fidelity, print_summary


runs_app = typer.Typer(help="List runs and show their episodes.", no_args_is_help=False, invoke_without_command=True)
app.add_typer(runs_app, name="runs")


@runs_app.callback()
@guarded
def runs_main(ctx: typer.Context) -> None:
    """List runs under ./runs with their headline numbers.

    Example: [bold]muactl runs[/bold], then [bold]muactl runs show RUN_ID --episode 3[/bold]
    """
    if ctx.invoked_subcommand is not None:
        return
    from rich.table import Table

    from ..runs.store import list_runs, runs_dir

    rows = list_runs()
    if not rows:
        typer.echo(f"no runs in {runs_dir()}/ yet; start one with: muactl eval bank --agent oracle")
        return
    table = Table("run", "kind", "domain", "status", "agent", "episodes", "pass^1", "avg reward")
    for r in rows:
        s, c = r.get("summary") or {}, r.get("config") or {}
        table.add_row(r["id"], r["kind"], r["domain"], r["status"], str(c.get("agent", "-")),
                      fmt_value(s.get("episodes")), fmt_value(s.get("pass^1")), fmt_value(s.get("avg_reward")))
    command_console().print(table)
    for r in rows:
        if r.get("resume"):
            typer.echo(f"{r['status']}: {r['id']}; continue with: {r['resume']}")


@command("show", group=runs_app)
def runs_show(
    run_id: str = typer.Argument(..., help="Run id (a folder name under runs/) or a run folder."),
    episode: Optional[int] = typer.Option(None, "--episode", "-e", help="Show one episode's transcript (its number in the table)."),
) -> None:
    """Show a run's per-task table, or one episode's transcript with its tool calls (and a thinking model's
    reasoning, which the user never saw).

    Example: [bold]muactl runs show RUN_ID --episode 3[/bold]
    """
    from rich.table import Table

    from ..runs.summary import fidelity_per_task, per_task
    from ..runs.store import RunStore

    store = RunStore.open(run_id)
    console = command_console()
    eps = store.episodes()
    if episode is None:
        info = store.info()
        if info["summary"]:
            print_summary(info["summary"], f"{store.id} ({info['status']})")
        if info.get("resume"):
            console.print(f"{info['status']}; continue with: {info['resume']}")
        table = Table("task", "trials", "successes", "excluded", "terminations")
        for r in per_task(eps):
            table.add_row(r["task_id"], str(r["trials"]), str(r["successes"]), str(r["excluded"]),
                          ", ".join(f"{k} {v}" for k, v in r["terminations"].items()))
        console.print(table)
        fidelity = [r for r in fidelity_per_task(eps) if r["episodes"]]
        if fidelity:
            print_fidelity(fidelity, "simulated user fidelity per task (share of episodes; in brackets: how many it applies to)")
        table = Table("#", "task", "trial", "reward", "outcome", "termination", "turns", "tool calls", "tool errors")
        for i, e in enumerate(eps, 1):
            table.add_row(str(i), e["task_id"], str(e["trial"]), fmt_value(e["reward"]), e["outcome"], e["termination"], str(e["turns"]),
                          str(e["tool_calls"]), str(e["tool_errors"]))
        console.print(table)
        return
    if not 1 <= episode <= len(eps):
        raise UsageError(f"run {store.id} has episodes 1..{len(eps)}")
    e = eps[episode - 1]
    from rich.markup import escape

    console.print(f"[bold]{e['task_id']}[/bold] trial {e['trial']}  reward {e['reward']}  {e['outcome']} "
                  f"({e['termination']}{': ' + escape(e['error']) if e.get('error') else ''})")
    for m in store.messages(e["id"]):
        role, content = m["role"], escape(m["content"] or "")
        if role == "system":
            console.print(f"[dim]system: {content[:200]}{'...' if len(content) > 200 else ''}[/dim]")
        elif role == "assistant":
            if m.get("reasoning"):  # a thinking model's <think> text: stored, never shown to the user
                console.print(f"[dim italic]agent thinking: {escape(m['reasoning'])}[/dim italic]")
            if content:
                console.print(f"[cyan]agent:[/cyan] {content}")
            for c in m["tool_calls"] or []:
                console.print(f"[yellow]  -> {c['name']}({escape(json.dumps(c['arguments'], ensure_ascii=False))})[/yellow]")
        elif role == "tool":
            style = "red" if m["error"] else "green"
            console.print(f"[{style}]  <- {content[:500]}[/{style}]")
        else:
            console.print(f"[magenta]user:[/magenta] {content}")
    b = e["breakdown"]
    if b.get("scoring") == "tau2":  # τ²'s evaluator: the counted components, then every check
        console.print(f"[bold]τ² reward breakdown:[/bold] basis={b.get('reward_basis')} "
                      f"counted={b.get('reward_breakdown')} termination={b.get('termination')}")
        console.print(f"  checks: {escape(json.dumps(b.get('checks')))}")
        for v in b.get("nl_verdicts") or []:
            console.print(f"  nl assertion {'holds' if v['ok'] else 'fails'}: {escape(v['assertion'])}"
                          + (f" ({escape(v['reason'])})" if v["reason"] else ""))
        return
    console.print(f"[bold]reward breakdown:[/bold] ended_normally={b.get('ended_normally')} db_match={b.get('db_match')} "
                  f"outputs={b.get('outputs')} required_calls={b.get('required_calls', {})} "
                  f"assertions={[a['ok'] for a in b.get('assertions', [])]}")
    for v in b.get("nl_assertions") or []:
        verdict = {True: "holds", False: "fails", None: "not judged"}[v["ok"]]
        console.print(f"  nl assertion {verdict}: {escape(v['assertion'])}" + (f" ({escape(v['reason'])})" if v["reason"] else ""))
