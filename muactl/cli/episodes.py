"""Commands that run episodes and look at their data: eval, synth, data show."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
from ..eval.config import EvalConfig
from ..train.synth_config import TASKS, SynthConfig
from .app import app, command, fail
from .options import config_options
from .output import command_console, print_summary, with_progress

NOTHING_SCORED = 4  # `muactl eval`: every episode was excluded, so there is no result (README, "Errors")


@command("eval")
@config_options(EvalConfig, own={"tasks": ("task", "templates")})
def eval_cmd(
    values: dict,
    ctx: typer.Context,
    task: list[str] = typer.Option([], "--task", help="Run only these task ids (repeatable)."),
    templates: Optional[str] = typer.Option(None, "--tasks", help="template:<id> or template:all: draw fresh "
                                            "instances from tasks/<domain>/templates.yaml instead of the task files."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue an interrupted run: skips finished episodes, "
                                         "plays infra_error and user_error ones again. With --n, a run of drawn "
                                         "instances grows to N (only the new ones are played)."),
) -> None:
    """Run episodes of a domain's tasks and report pass^k, rewards, outcome classes and termination reasons.

    Exits with 4 when no episode could be scored (every one ended in infra_error or user_error).

    Examples:
      [bold]muactl eval retail --agent oracle --user scripted[/bold]
      [bold]muactl eval retail --agent openai/gpt-4o-mini --user openai/gpt-4o-mini --trials 4 --concurrency 16[/bold]
      [bold]muactl eval bank --agent hf:tiny --user scripted --split test[/bold]
      [bold]muactl eval bank --tasks template:all --n 100 --db random --seed 7 --agent oracle --user scripted[/bold]
      [bold]muactl eval --resume RUN_ID --n 200[/bold]   (100 more instances of that run's stream)
    """
    from ..eval.evaluate import run_eval

    if not values["domain"] and not resume:
        raise UsageError("give a domain (muactl eval retail) or --resume RUN_ID")
    if values["opening"] not in (None, "agent", "user"):
        raise UsageError("--opening must be 'agent' or 'user'")
    if templates and not templates.startswith("template:"):
        raise UsageError("--tasks takes template:<id> or template:all (use --task ID for task ids)")
    if templates and task:
        raise UsageError("give either --task ID (task files) or --tasks template:... (drawn instances), not both")
    # on a resume every other option is the run's own; an --n typed on the command line grows the run
    # (by name: typer vendors click, and its ParameterSource enum is not public)
    typed = getattr(ctx.get_parameter_source("n"), "name", None) == "COMMANDLINE"
    grow_to = values["n"] if resume and typed else None
    cfg = EvalConfig(**{**values, "domain": values["domain"] or ""}, tasks=[templates] if templates else list(task))
    store, summary = with_progress("eval", "success", lambda cb: run_eval(cfg, resume=resume, on_progress=cb, grow_to=grow_to),
                                   "finished episodes are saved. Continue with: muactl eval --resume {run_id}")
    print_summary(summary, f"{store.id}: {summary['agent']} vs {summary['user']} user")
    if summary["episodes"] and not summary["counted"]:
        fail(f"no episode was scored: every one ended in {' or '.join(summary['excluded'])} (reasons above). "
              f"Fix the cause, then: muactl eval --resume {store.id}", NOTHING_SCORED)
    typer.echo(f"results: {store.path}/  (muactl runs show {store.id})")


@command()
@config_options(SynthConfig, own={"tasks": ("tasks_arg",)})
def synth(
    values: dict,
    tasks_arg: str = typer.Option("train", "--tasks", help=TASKS),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue an interrupted synth run."),
    from_chats: Optional[str] = typer.Option(None, "--from-chats", help="Export a `muactl chat` run's good chats instead."),
    min_rating: int = typer.Option(4, "--min-rating", min=1, max=5, help="With --from-chats: keep chats rated at least this "
                                   "(unrated ones are kept when their reward is 1)."),
) -> None:
    """Synthesize cold-start SFT data: run a teacher, keep episodes with reward 1, drop duplicates.

    Writes JSONL that TRL's SFTTrainer reads (messages with tool calls, plus a tools column) and a
    .stats.json beside it.
    Examples:
      [bold]muactl synth bank --agent oracle --user scripted --trials 8 -o data/bank-sft.jsonl[/bold]
      [bold]muactl synth retail --agent openai/gpt-4o --user openai/gpt-4o-mini --trials 4 -o data/retail-sft.jsonl[/bold]
      [bold]muactl synth retail --agent openai/gpt-4o --tools simulated --tool-model openai/gpt-4o-mini[/bold]
      [bold]muactl synth --from-chats RUN_ID -o data/chats.jsonl[/bold]   (chats from muactl chat)
    """
    from ..train.synth import run_synth

    domain, output = values["domain"], values["output"]
    if from_chats:
        from ..train.synth import export_chats

        if domain or resume:
            raise UsageError("--from-chats exports an existing chat run: give no domain and no --resume")
        if output is None:
            raise UsageError("--from-chats needs -o FILE.jsonl")
        stats = export_chats(from_chats, output, min_rating)
        typer.echo(f"kept {stats['kept']} of {stats['chats']} chats (rating >= {min_rating}, or unrated with "
                   f"reward 1) -> {stats['output']}")
        return

    if not domain and not resume:
        raise UsageError("give a domain (muactl synth bank) or --resume RUN_ID")
    if values["opening"] not in (None, "agent", "user"):
        raise UsageError("--opening must be 'agent' or 'user'")
    split, ids = (tasks_arg, []) if tasks_arg in ("train", "test", "all") else (None, [t for t in tasks_arg.split(",") if t])
    if tasks_arg.startswith("template:"):
        ids = [tasks_arg]
    cfg = SynthConfig(**{**values, "domain": domain or "", "output": str(output) if output else None}, split=split, tasks=ids)
    store, stats = with_progress("synth", "reward 1", lambda cb: run_synth(cfg, resume=resume, on_progress=cb),
                                 "continue with: muactl synth --resume {run_id}")
    from ..train.synth import describe

    typer.echo(describe(stats))
    typer.echo(f"run: {store.path}/  (inspect with: muactl data show {stats['output']})")


data_app = typer.Typer(help="Look at SFT data files.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@command("show", group=data_app)
def data_show(
    path: Path = typer.Argument(..., help="A JSONL file from muactl synth."),
    index: int = typer.Option(0, "--index", "-i", help="Which conversation (0-based)."),
    system: bool = typer.Option(False, "--system", help="Also print the system prompt."),
) -> None:
    """Render one conversation of an SFT data file for a person.

    Example: [bold]muactl data show data/bank-sft.jsonl --index 3[/bold]
    """
    from rich.markup import escape

    from ..train.synth import read_jsonl

    rows = read_jsonl(path)
    if not 0 <= index < len(rows):
        raise UsageError(f"{path} has conversations 0..{len(rows) - 1}")
    row = rows[index]
    console = command_console()
    where = f"domain {row['domain']}, " if row.get("domain") else ""  # rows from before #31 do not say
    console.print(f"[bold]{path}[/bold] #{index}: {where}task {row.get('task_id', '?')}, {len(row['messages'])} messages, "
                  f"{len(row.get('tools') or [])} tools")
    for m in row["messages"]:
        role, content = m["role"], escape(m.get("content") or "")
        if role == "system":
            if system:
                console.print(f"[dim]system: {content}[/dim]")
        elif role == "assistant":
            if content:
                console.print(f"[cyan]agent:[/cyan] {content}")
            for c in m.get("tool_calls") or []:
                f = c.get("function", c)
                console.print(f"[yellow]  -> {f['name']}({escape(json.dumps(f['arguments'], ensure_ascii=False))})[/yellow]")
        elif role == "tool":
            console.print(f"[green]  <- {content[:400]}[/green]")
        else:
            console.print(f"[magenta]user:[/magenta] {content}")
