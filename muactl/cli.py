"""The muactl command line. Each command composes its inputs, makes one library call and formats the
result; every MuactlError becomes its message on stderr and exit code 2. Heavy libraries (torch,
transformers, trl, litellm) are imported inside the commands that need them."""

from __future__ import annotations

import functools
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Optional

import typer

from .errors import MuactlError, UsageError

app = typer.Typer(
    name="muactl",
    help="Train tool-using LLM agents with RL against simulated users, on domains declared in YAML.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def guarded(fn):
    """Wrap a command so bad input is one line and exit 2 (MuactlError, or an OSError on a path the
    user named), Ctrl-C is exit 130, and a bug in muactl is one line with exit 1, never a traceback."""

    @functools.wraps(fn)
    def inner(*a, **kw):
        import os

        try:
            return fn(*a, **kw)
        except MuactlError as e:
            _fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except (typer.Exit, typer.Abort):
            raise
        except BrokenPipeError:  # `muactl tools retail | head`: the reader left; exit quietly
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise typer.Exit(0)
        except OSError as e:
            if os.environ.get("MUACTL_DEBUG"):
                raise
            if e.filename is None:
                _fail(f"internal error: {type(e).__name__}: {e} (set MUACTL_DEBUG=1 for the traceback and please report it)", 1)
            # a file the user named (an output path in an unwritable place, a missing folder...)
            _fail(f"{e.filename}: {e.strerror or e}")
        except Exception as e:  # a bug in muactl: one line for the user, the traceback on request
            if os.environ.get("MUACTL_DEBUG"):
                raise
            _fail(f"internal error: {type(e).__name__}: {e} (set MUACTL_DEBUG=1 for the traceback and please report it)", 1)

    return inner


def command(*args, group: typer.Typer | None = None, **kwargs):
    """`group.command` (the top-level app by default) with every command behind `guarded`."""

    def wrap(fn):
        return (group or app).command(*args, **kwargs)(guarded(fn))

    return wrap


def _print_version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"muactl {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                      help="Print the version and exit.")) -> None:
    pass


# ---------------------------------------------------------------- domains


@command()
def init(
    name: str = typer.Argument(..., help="Name of the new domain (lowercase letters, digits, - and _)."),
    directory: Path = typer.Option(Path("."), "--dir", help="Project folder to write domains/ and tasks/ into."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing files."),
) -> None:
    """Scaffold a small working domain: 2 tables, 3 tools, 2 personas, 4 tasks.

    [bold]init clinic[/bold] writes the README's clinic front desk; any other name a neutral starter
    (a small help desk) under that name, to edit into your own domain.
    Example: [bold]muactl init clinic && muactl validate clinic[/bold]
    """
    if not re.match(r"^[a-z][a-z0-9_-]*$", name):
        raise UsageError(f"'{name}' is not a valid domain name: use lowercase letters, digits, '-' and '_', starting with a letter")
    from .scaffold import scaffold

    written = scaffold(name, directory, force)
    for path in written:
        typer.echo(f"wrote {path}")
    typer.echo(f"\nNext: muactl validate {name}")


@command()
def validate(
    domain: str = typer.Argument(..., help="Domain name (./domains, installed, built-in) or a folder holding domain.yaml."),
    trust: bool = typer.Option(False, "--trust", help="Run the domain's Python tools when replaying gold paths."),
    verify_hash: bool = typer.Option(False, "--verify-hash", help="Also check the incremental state hash against a "
                                     "full recompute from every row after each gold path (a check of muactl itself)."),
) -> None:
    """Check a domain and its tasks: schema, SQL, references, seed rows, and every task's gold path.

    Problems are printed as file:line:column: key: message, all at once; exit code 2 if any.
    Example: [bold]muactl validate retail[/bold]
    """
    from .validate import domain_warnings, validate_domain

    opened = validate_domain(domain, trust=trust, verify_hash=verify_hash)
    for warning in domain_warnings(opened):
        typer.echo(f"warning: {warning}", err=True)
    d = opened.spec.domain
    splits: dict[str, int] = {}
    for t in opened.tasks:
        splits[t.split] = splits.get(t.split, 0) + 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(splits.items())) or "no tasks"
    typer.echo(f"ok: {d.name} {d.version} ({opened.ref.origin}, {opened.ref.root}): "
               f"{len(d.database.tables)} tables, {len(d.tools)} tools, {len(opened.tasks)} tasks ({counts}); "
               f"every gold path replayed" + (", state hashes verified" if verify_hash else "")
               + (f"; {len(opened.templates)} templates checked (sample instances replayed)" if opened.templates else ""))


import_app = typer.Typer(help="Import another benchmark's worlds as muactl domains and task sets.", no_args_is_help=True)
app.add_typer(import_app, name="import")


@command("tau2", group=import_app)
def import_tau2_cmd(
    checkout: Path = typer.Argument(..., help="A τ²-bench checkout (sierra-research/tau2-bench)."),
    domain: str = typer.Option(..., "--domain", help="retail | airline | telecom."),
    directory: Path = typer.Option(Path("."), "--dir", help="Project folder to write domains/ and tasks/ into."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier import."),
) -> None:
    """Import a τ²-bench domain: writes domains/tau2-DOMAIN/ (muactl's YAML tools, τ²'s data and policy)
    and tasks/tau2-DOMAIN/ (τ²'s tasks, split as in its split_tasks.json).

    Example: [bold]muactl import tau2 ../tau2-bench --domain retail && muactl validate tau2-retail[/bold]
    """
    from .importers.tau2 import import_tau2

    d, t, counts = import_tau2(checkout, domain, directory, force)
    shown = ", ".join(f"{n} {s}" for s, n in counts.items())
    typer.echo(f"wrote {d} and {t} ({shown})\nNext: muactl validate {d.name}")


@command("domains")
def domains_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List built-in, installed and local domains with version, tables, tools and task counts.

    Example: [bold]muactl domains[/bold]
    """
    from .summary import domain_summaries

    rows = domain_summaries()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "version", "origin", "tables", "tools", "tasks (train/test)", "path")
    for r in rows:
        name = r["name"] + (" (shadowed)" if r["shadowed"] else "")
        origin = r["origin"] + (f" ({r['pack']['source_name']})" if r.get("pack") else "")
        if r.get("error"):
            table.add_row(name, "?", origin, "-", "-", "-", f"{r['path']}  [red]{r['error']}[/red]")
            continue
        table.add_row(name, r["version"], origin, str(r["tables"]), str(r["tools"]),
                      f"{r['tasks']} ({r['train']}/{r['test']})", r["path"])
    Console().print(table)


@command()
def tools(
    domain: str = typer.Argument(..., help="Domain name or folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the OpenAI function schemas as one JSON list."),
) -> None:
    """Print each tool's OpenAI function schema: what the model sees.

    Example: [bold]muactl tools retail --json[/bold]
    """
    from .validate import open_domain

    opened = open_domain(domain, with_tasks=False)
    schemas = [t.openai_schema() | ({"x-muactl-side": "user"} if t.side == "user" else {})
               for t in opened.compiled.tools.values()]
    if as_json:
        typer.echo(json.dumps(schemas, indent=2, ensure_ascii=False))
        return
    for tool, schema in zip(opened.compiled.tools.values(), schemas):
        typer.secho(f"{tool.name}  [{tool.kind}{', user side' if tool.side == 'user' else ''}]", bold=True)
        typer.echo(f"  {tool.description}")
        params = schema["function"]["parameters"]
        for pname, p in params["properties"].items():
            req = "" if pname in params["required"] else " (optional)"
            extra = {k: v for k, v in p.items() if k not in ("type", "description")}
            typer.echo(f"    {pname}: {p['type']}{req}  {p.get('description', '')}" + (f"  {json.dumps(extra)}" if extra else ""))
        typer.echo("")


@command()
def call(
    domain: str = typer.Argument(..., help="Domain name or folder."),
    tool: str = typer.Argument(..., help="Tool name (see `muactl tools DOMAIN`)."),
    arguments: str = typer.Argument("{}", help="Arguments as a JSON object."),
    trust: bool = typer.Option(False, "--trust", help="Allow tools that run the domain's Python code."),
    show_hash: bool = typer.Option(False, "--hash", help="Also print the sandbox's state hash after the call."),
) -> None:
    """Run one tool on a fresh sandbox of the domain's database and print the result.

    Nothing is saved: every call starts from the seed data.
    Example: [bold]muactl call retail find_user_id_by_email '{"email": "maya.novak34@example.com"}'[/bold]
    """
    from .errors import ToolNotFound
    from .validate import open_domain

    try:
        args = json.loads(arguments)
    except json.JSONDecodeError as e:
        raise UsageError(f"arguments are not valid JSON ({e.msg} at column {e.colno}); example: '{{\"email\": \"a@b.c\"}}'") from None
    opened = open_domain(domain, with_tasks=False, trust=trust)
    if tool not in opened.compiled.tools:
        import difflib

        close = difflib.get_close_matches(tool, list(opened.compiled.tools), n=1)
        raise ToolNotFound(f"domain {opened.spec.domain.name} has no tool '{tool}'" + (f"; did you mean '{close[0]}'?" if close else "")
                           + f". Tools: {', '.join(opened.compiled.tools)}")
    env = opened.compiled.environment()
    result = env.call(tool, args)
    out = result.content
    try:
        out = json.dumps(json.loads(out), indent=2, ensure_ascii=False)
    except ValueError:
        pass
    typer.echo(out)
    if show_hash:
        typer.echo(f"state hash: {env.state_hash()}", err=True)
    if result.error:
        raise typer.Exit(1)


@command()
def schema() -> None:
    """Print the JSON Schema of domain.yaml and task files, for editors (YAML language servers).

    Example: [bold]muactl schema > muactl-domain.schema.json[/bold]
    """
    from . import limits
    from .spec.models import Domain, Task

    out = Domain.model_json_schema(by_alias=True)
    out["$defs"]["Task"] = Task.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
    for name, d in out["$defs"]["Task"].pop("$defs", {}).items():
        out["$defs"].setdefault(name, d)
    out["title"] = "muactl domain.yaml"
    out["$comment"] = limits.summary()
    typer.echo(json.dumps(out, indent=2))


# ---------------------------------------------------------------- episodes


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


def print_summary(summary: dict, title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    keys = [k for k in summary if k.startswith("pass^")]
    for k in keys + ["avg_reward", "first_call_right", "gold_calls_made", "episodes", "counted", "infra_errors",
                     "user_errors", "tasks", "avg_turns", "effective_turns", "first_correct_write",
                     "correct_write_share", "user_turns", "tool_error_rate", "avg_tool_errors", "prompt_tokens", "completion_tokens", "cost"]:
        if k in summary:
            table.add_row(k, _fmt(summary[k]))
    if "outcomes" in summary:
        table.add_row("outcomes", ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items()))
    table.add_row("terminations", ", ".join(f"{k} {v}" for k, v in summary.get("terminations", {}).items()))
    console = Console()
    console.print(table)
    for line in excluded_lines(summary):
        console.print(line, markup=False, highlight=False)
    if summary.get("user_fidelity", {}).get("episodes"):
        print_fidelity([{"task_id": "all tasks", **summary["user_fidelity"]}], "simulated user fidelity")


def print_fidelity(rows: list[dict], title: str) -> None:
    """Each fidelity check as the share of episodes where it held (of those it applies to)."""
    from rich.console import Console
    from rich.table import Table

    from .fidelity import CHECKS

    table = Table("task", *[c.replace("_", " ") for c in CHECKS], "faithful", title=title)
    for r in rows:
        cells = [f"{_fmt(r[c])} ({r[c + '_n']})" if r.get(c) is not None else "-" for c in CHECKS]
        table.add_row(r["task_id"], *cells, _fmt(r.get("faithful")))
    Console().print(table)


def excluded_lines(summary: dict) -> list[str]:
    """What was left out of pass^k and why: each excluded class with its top reasons, and the tasks
    that have no scored trial at all."""
    lines = []
    for cls, info in (summary.get("excluded") or {}).items():
        reasons = "; ".join(f"{reason} ({n})" for reason, n in info["reasons"])
        lines.append(f"{info['count']} {cls} (not scored): {reasons}")
    missing = summary.get("tasks_not_scored") or []
    if missing:
        why = Counter(cls for t in missing for cls in t["outcomes"])
        ids = ", ".join(t["task_id"] for t in missing[:10]) + (", ..." if len(missing) > 10 else "")
        lines.append(f"{len(missing)} task{'s' if len(missing) != 1 else ''} not scored "
                     f"({', '.join(f'{c} {n}' for c, n in sorted(why.items()))}): {ids}")
    return lines


def with_progress(kind: str, label: str, run, on_interrupt: str):
    """Run `run(on_progress)` under a live progress bar of finished episodes; Ctrl-C becomes exit 130
    with `on_interrupt` (which may name {run_id}), everything finished so far being saved already."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    holder: dict = {}
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn(label + " {task.fields[succ]}"), TimeElapsedColumn()) as progress:
        def on_progress(state: dict) -> None:
            if "bar" not in holder:
                holder["run_id"] = state["run_id"]
                holder["bar"] = progress.add_task(f"{kind} {state['run_id']}", total=state["total"], succ=0)
            progress.update(holder["bar"], completed=state["done"], succ=state["successes"])

        try:
            return run(on_progress)
        except KeyboardInterrupt:
            _fail("interrupted; " + on_interrupt.format(run_id=holder.get("run_id", "?")), 130)


# Episode limits and API-call settings, shared by eval and synth: EvalConfig's fields (tests check that
# every field has its option and the same default).
MAX_TOOL_ERRORS = typer.Option(4, "--max-tool-errors", min=0, help="Failed tool calls (and malformed replies) an "
                               "episode survives; one more ends it (too_many_errors).")
EPISODE_TIMEOUT = typer.Option(600.0, "--episode-timeout", min=1.0, help="Seconds one episode may run (then: timeout).")
MAX_TOKENS = typer.Option(1024, "--max-tokens", min=1, help="Tokens per API reply: API agents, LLM users, judges, "
                          "simulated tools (local models: --max-new-tokens).")
REQUEST_TIMEOUT = typer.Option(60.0, "--request-timeout", min=1.0, help="Seconds per API request before it is "
                               "retried; raise it for a slow (CPU-hosted) server.")
RETRIES = typer.Option(4, "--retries", min=0, help="Retries of a failed API call (rate limit, 5xx, timeout); then "
                       "the episode is infra_error (not counted).")
BACKOFF = typer.Option(1.0, "--backoff", min=0.0, help="Seconds before the first API retry; doubles per retry.")
# shared by eval and synth (synth keeps only episodes whose reward, judged assertions included, is 1)
JUDGE = typer.Option(None, "--judge", help="litellm model id or hf:<model> that checks the tasks' "
                     "expect.nl_assertions (without it they are reported as not judged and do not count).")
JUDGE_API_BASE = typer.Option(None, "--judge-api-base", help="OpenAI-compatible server for the judge.")


@command("eval")
def eval_cmd(
    domain: str = typer.Argument(None, help="Domain name or folder (not needed with --resume)."),
    agent: str = typer.Option("oracle", "--agent", help="oracle | hf:<model> | vllm:<model> | a litellm model id | "
                              "adversary:<do-nothing|transfer-at-once|number-sprayer|id-echo> (reward loophole probes)."),
    user: str = typer.Option("scripted", "--user", help="scripted | hf:<model> | a litellm model id."),
    split: str = typer.Option("test", "--split", help="train | test | all."),
    task: list[str] = typer.Option([], "--task", help="Run only these task ids (repeatable)."),
    templates: Optional[str] = typer.Option(None, "--tasks", help="template:<id> or template:all: draw fresh "
                                            "instances from tasks/<domain>/templates.yaml instead of the task files."),
    n: int = typer.Option(100, "--n", min=1, help="With --tasks template:...: how many instances."),
    db: str = typer.Option("fixed", "--db", help="With --tasks template:...: fixed | random (a fresh database each)."),
    trials: int = typer.Option(1, "--trials", "-k", min=1, help="Trials per task; pass^1..k are reported."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, help="Episodes in flight at once."),
    seed: int = typer.Option(0, "--seed", help="Run seed (each episode's seed derives from it)."),
    max_turns: int = typer.Option(24, "--max-turns", min=1, help="Agent turns before an episode is cut."),
    max_tool_errors: int = MAX_TOOL_ERRORS,
    episode_timeout: float = EPISODE_TIMEOUT,
    max_tokens: int = MAX_TOKENS,
    request_timeout: float = REQUEST_TIMEOUT,
    retries: int = RETRIES,
    backoff: float = BACKOFF,
    api_base: Optional[str] = typer.Option(None, "--api-base", help="OpenAI-compatible server for the agent."),
    user_api_base: Optional[str] = typer.Option(None, "--user-api-base", help="OpenAI-compatible server for the user."),
    temperature: float = typer.Option(0.0, "--temperature", help="Agent sampling temperature (0: greedy)."),
    user_temperature: float = typer.Option(0.0, "--user-temperature", help="User simulator temperature."),
    max_new_tokens: int = typer.Option(256, "--max-new-tokens", help="Tokens per agent turn (local models)."),
    tool_model: Optional[str] = typer.Option(None, "--tool-model", help="litellm model that plays simulated tools."),
    opening: Optional[str] = typer.Option(None, "--opening", help="Who speaks first: agent (greeting) or user."),
    trust: bool = typer.Option(False, "--trust", help="Allow the domain's Python tools to run."),
    judge: Optional[str] = JUDGE,
    judge_api_base: Optional[str] = JUDGE_API_BASE,
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue an interrupted run: skips finished episodes, "
                                         "plays infra_error and user_error ones again."),
) -> None:
    """Run episodes of a domain's tasks and report pass^k, rewards, outcome classes and termination reasons.

    Exits with 1 when no episode could be scored (every one ended in infra_error or user_error).

    Examples:
      [bold]muactl eval retail --agent oracle --user scripted[/bold]
      [bold]muactl eval retail --agent openai/gpt-4o-mini --user openai/gpt-4o-mini --trials 4 --concurrency 16[/bold]
      [bold]muactl eval bank --agent hf:tiny --user scripted --split test[/bold]
      [bold]muactl eval bank --tasks template:all --n 100 --db random --seed 7 --agent oracle --user scripted[/bold]
    """
    from .evaluate import EvalConfig, run_eval

    if not domain and not resume:
        raise UsageError("give a domain (muactl eval retail) or --resume RUN_ID")
    if opening not in (None, "agent", "user"):
        raise UsageError("--opening must be 'agent' or 'user'")
    if templates and not templates.startswith("template:"):
        raise UsageError("--tasks takes template:<id> or template:all (use --task ID for task ids)")
    if templates and task:
        raise UsageError("give either --task ID (task files) or --tasks template:... (drawn instances), not both")
    cfg = EvalConfig(domain=domain or "", agent=agent, user=user, split=split,
                     tasks=[templates] if templates else list(task), n=n, db=db, trials=trials,
                     concurrency=concurrency, seed=seed, max_turns=max_turns, api_base=api_base,
                     user_api_base=user_api_base, temperature=temperature, user_temperature=user_temperature,
                     max_new_tokens=max_new_tokens, tool_model=tool_model, opening=opening, trust=trust,
                     max_tool_errors=max_tool_errors, timeout_s=episode_timeout, max_tokens=max_tokens,
                     llm_timeout_s=request_timeout, retries=retries, backoff_s=backoff,
                     judge=judge, judge_api_base=judge_api_base)
    store, summary = with_progress("eval", "success", lambda cb: run_eval(cfg, resume=resume, on_progress=cb),
                                   "finished episodes are saved. Continue with: muactl eval --resume {run_id}")
    print_summary(summary, f"{store.id}: {summary['agent']} vs {summary['user']} user")
    if summary["episodes"] and not summary["counted"]:
        _fail(f"no episode was scored: every one ended in {' or '.join(summary['excluded'])} (reasons above). "
              f"Fix the cause, then: muactl eval --resume {store.id}", 1)
    typer.echo(f"results: {store.path}/  (muactl runs show {store.id})")


@command()
def synth(
    domain: str = typer.Argument(None, help="Domain name or folder (not needed with --resume)."),
    agent: str = typer.Option("oracle", "--agent", help="Teacher: oracle | hf:<model> | a litellm model id."),
    user: str = typer.Option("scripted", "--user", help="scripted | hf:<model> | a litellm model id."),
    tasks: str = typer.Option("train", "--tasks", help="Split (train | test | all), comma-separated task ids, or "
                              "template:<id>|all (fresh instances from the domain's templates)."),
    n: int = typer.Option(100, "--n", min=1, help="With --tasks template:...: how many instances."),
    db: str = typer.Option("fixed", "--db", help="With --tasks template:...: fixed | random (a fresh database each)."),
    trials: int = typer.Option(8, "--trials", min=1, help="Episodes per task; only reward-1 ones are kept."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="JSONL to write (default runs/<id>/sft.jsonl)."),
    tools_mode: str = typer.Option("real", "--tools", help="real (the sandbox) | simulated (an LLM plays every SQL tool; the real database keeps score)."),
    tool_model: Optional[str] = typer.Option(None, "--tool-model", help="litellm model for simulated tools."),
    concurrency: int = typer.Option(8, "--concurrency", min=1),
    seed: int = typer.Option(0, "--seed"),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="OpenAI-compatible server for the teacher."),
    user_api_base: Optional[str] = typer.Option(None, "--user-api-base", help="OpenAI-compatible server for the user."),
    temperature: float = typer.Option(0.0, "--temperature", help="Teacher temperature (use > 0 with trials > 1)."),
    user_temperature: float = typer.Option(0.0, "--user-temperature"),
    max_turns: int = typer.Option(24, "--max-turns", min=1),
    max_tool_errors: int = MAX_TOOL_ERRORS,
    episode_timeout: float = EPISODE_TIMEOUT,
    max_tokens: int = MAX_TOKENS,
    request_timeout: float = REQUEST_TIMEOUT,
    retries: int = RETRIES,
    backoff: float = BACKOFF,
    trust: bool = typer.Option(False, "--trust", help="Allow the domain's Python tools to run."),
    judge: Optional[str] = JUDGE,
    judge_api_base: Optional[str] = JUDGE_API_BASE,
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
    from .train.synth import SynthConfig, run_synth

    if from_chats:
        from .train.synth import export_chats

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
    split, ids = (tasks, []) if tasks in ("train", "test", "all") else (None, [t for t in tasks.split(",") if t])
    if tasks.startswith("template:"):
        ids = [tasks]
    cfg = SynthConfig(domain=domain or "", agent=agent, user=user, split=split, tasks=ids, n=n, db=db, trials=trials,
                      concurrency=concurrency, seed=seed, max_turns=max_turns, api_base=api_base,
                      user_api_base=user_api_base, temperature=temperature, user_temperature=user_temperature,
                      tool_model=tool_model, trust=trust, output=str(output) if output else None, tools=tools_mode,
                      max_tool_errors=max_tool_errors, timeout_s=episode_timeout, max_tokens=max_tokens,
                      llm_timeout_s=request_timeout, retries=retries, backoff_s=backoff,
                      judge=judge, judge_api_base=judge_api_base)
    store, stats = with_progress("synth", "reward 1", lambda cb: run_synth(cfg, resume=resume, on_progress=cb),
                                 "continue with: muactl synth --resume {run_id}")
    from .train.synth import describe

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
    from rich.console import Console
    from rich.markup import escape

    from .train.synth import read_jsonl

    rows = read_jsonl(path)
    if not 0 <= index < len(rows):
        raise UsageError(f"{path} has conversations 0..{len(rows) - 1}")
    row = rows[index]
    console = Console()
    console.print(f"[bold]{path}[/bold] #{index}: task {row.get('task_id', '?')}, {len(row['messages'])} messages, "
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


@command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train(
    ctx: typer.Context,
    what: str = typer.Argument(..., help="A stage (sft, grpo) or an experiment config (YAML) naming several."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue a run (after a crash or kill -9)."),
    show_config: bool = typer.Option(False, "--cfg", help="Print the resolved config and exit."),
) -> None:
    """Train: SFT, GRPO with the simulated user in the loop, or a whole recipe from a config file.

    Configs are hydra groups from muactl/conf (model, user, synth, sft, grpo, eval) plus a YAML file
    and dotted overrides. Every run writes runs/<id>/ (config.yaml, runs.sqlite, TensorBoard, checkpoints).
    Examples:
      [bold]muactl train examples/quickstart.yaml[/bold]   (synth -> sft -> grpo -> eval)
      [bold]muactl train sft model=smollm2-135m data=data/bank-sft.jsonl sft.epochs=2[/bold]
      [bold]muactl train grpo model=runs/<sft>/checkpoint-final domain=bank grpo.group_size=8 grpo.steps=50[/bold]
      [bold]muactl train grpo ... user=litellm user.model=openai/gpt-4o-mini[/bold]
      [bold]muactl train grpo ... grpo.reward=userrl grpo.turn_credit=r2g grpo.trajectory_score=r2g[/bold]
      [bold]muactl train grpo ... --resume RUN_ID[/bold]
    """
    from omegaconf import OmegaConf

    from .config import compose, to_yaml
    from .runs import RunStore, runs_dir

    overrides = list(ctx.args)
    stage = what if what in ("sft", "grpo") else None
    config_file = None if stage else Path(what)
    if config_file is not None and config_file.suffix not in (".yaml", ".yml"):
        raise UsageError(f"'{what}' is neither a stage (sft, grpo) nor a YAML config file")
    store = None
    if resume:
        store = RunStore.open(resume)
        # the saved, resolved config is the run's truth; new overrides may only extend it (e.g. more steps)
        cfg = compose(store.path / "config.yaml", overrides)
    else:
        cfg = compose(config_file, overrides)
    typer.echo(to_yaml(cfg))
    if show_config:
        return
    from .preflight import check_backend

    # an LLM user or teacher that cannot answer fails here, before a run folder exists, not as infra errors
    if cfg.user.kind != "scripted":
        check_backend(str(cfg.user.model), cfg.user.api_base, "user.model")
    if stage is None and "synth" in cfg.stages:
        check_backend(str(cfg.synth.agent), None, "synth.agent")
    if (stage == "grpo" or (stage is None and "grpo" in cfg.stages)) and cfg.grpo.eval_every:
        from .train.grpo import heldout_tasks
        from .validate import open_domain

        heldout_tasks(cfg, open_domain(cfg.domain, trust=cfg.trust), draw=False)  # a bad held-out set: no run folder
    resolved = OmegaConf.to_container(cfg, resolve=True)
    kind = stage or "train"
    if store is None and cfg.run_id and (runs_dir() / cfg.run_id).is_dir():
        store = RunStore.open(cfg.run_id)  # naming an existing run continues it, like --resume
    if store is None:
        store = RunStore.create(kind, str(cfg.domain), resolved, run_id=cfg.run_id)
        store.lock()
    else:
        store.lock()  # one process at a time writes a run (two --resume of it would double its work)
        (store.path / "config.yaml").write_text(to_yaml(cfg))
    typer.echo(f"run: {store.path}/")
    store.update(status="running")
    try:
        if stage == "sft":
            if not cfg.data:
                raise UsageError("sft needs data=FILE.jsonl (make one with `muactl synth DOMAIN -o FILE.jsonl`)")
            from .train.sft import run_sft

            final, stats = run_sft(cfg, store, Path(cfg.data), log=typer.echo)
            store.update(status="finished", summary={"sft": stats, "checkpoint": str(final)})
            typer.echo(f"checkpoint: {final}\nevaluate it: muactl eval {cfg.domain} --agent hf:{final} --split test")
        elif stage == "grpo":
            from .train.grpo import run_grpo

            final, stats = run_grpo(cfg, store, str(cfg.model.name), log=typer.echo)
            store.update(status="finished", summary={"grpo": stats, "checkpoint": str(final)})
            typer.echo(f"checkpoint: {final}\nplots: muactl report {store.id}")
        else:
            from .pipeline import run_pipeline

            state = run_pipeline(cfg, store, log=typer.echo)
            store.update(status="finished", summary=state)
            print_before_after(state)
            typer.echo(f"\nrun: {store.path}/   report: muactl report {store.id}")
    except KeyboardInterrupt:
        store.update(status="interrupted")
        _fail(f"interrupted; continue with: muactl train {what} --resume {store.id}", 130)
    except BaseException:
        store.update(status="failed")
        raise
    finally:
        store.unlock()


def print_before_after(state: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    rows = state.get("eval", {})
    if not rows:
        return
    from .pipeline import comparisons
    from .stats import bootstrap, verdict

    table = Table("model", "pass^1 [95% interval]", "first call right", "gold calls made", "avg turns",
                  title="before / after (checkpoints: stages.json)")
    for label, r in rows.items():
        _, lo, hi = bootstrap({"0": r["per_task"]}) if r.get("per_task") else (None, None, None)
        table.add_row(label, _fmt(r.get("pass^1")) + (f" [{lo:.2f}, {hi:.2f}]" if lo is not None else ""),
                      _fmt(r.get("first_call_right")), _fmt(r.get("gold_calls_made")), _fmt(r.get("avg_turns")))
    Console().print(table)
    for name, (d, lo, hi) in comparisons(rows):  # paired over the same tasks: the honest test of a gain
        typer.echo(f"{name}: {d:+.2f} pass^1, 95% interval [{lo:+.2f}, {hi:+.2f}] over the tasks: {verdict(lo, hi)}")


@command()
def report(
    run_id: str = typer.Argument(..., help="Run id (see `muactl runs`) or a run folder."),
) -> None:
    """Write PNG plots (reward, success rate, turns, KL per step) and an HTML summary of a run.

    Example: [bold]muactl report 20261129-101500-train-bank-1a2b[/bold]  ->  runs/<id>/report/index.html
    """
    from .report import write_report

    page = write_report(run_id)
    typer.echo(f"report: {page}")
    for png in sorted(page.parent.glob("*.png")):
        typer.echo(f"plot: {png}")


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
    from rich.console import Console
    from rich.table import Table

    from .runs import list_runs, runs_dir

    rows = list_runs()
    if not rows:
        typer.echo(f"no runs in {runs_dir()}/ yet; start one with: muactl eval bank --agent oracle")
        return
    table = Table("run", "kind", "domain", "status", "agent", "episodes", "pass^1", "avg reward")
    for r in rows:
        s, c = r.get("summary") or {}, r.get("config") or {}
        table.add_row(r["id"], r["kind"], r["domain"], r["status"], str(c.get("agent", "-")),
                      _fmt(s.get("episodes")), _fmt(s.get("pass^1")), _fmt(s.get("avg_reward")))
    Console().print(table)
    for r in rows:
        if r.get("resume"):
            typer.echo(f"{r['status']}: {r['id']}; continue with: {r['resume']}")


@command("show", group=runs_app)
def runs_show(
    run_id: str = typer.Argument(..., help="Run id (a folder name under runs/) or a run folder."),
    episode: Optional[int] = typer.Option(None, "--episode", "-e", help="Show one episode's transcript (its number in the table)."),
) -> None:
    """Show a run's per-task table, or one episode's transcript with its tool calls.

    Example: [bold]muactl runs show RUN_ID --episode 3[/bold]
    """
    from rich.console import Console
    from rich.table import Table

    from .evaluate import fidelity_per_task, per_task
    from .runs import RunStore

    store = RunStore.open(run_id)
    console = Console()
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
            table.add_row(str(i), e["task_id"], str(e["trial"]), _fmt(e["reward"]), e["outcome"], e["termination"], str(e["turns"]),
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
    console.print(f"[bold]reward breakdown:[/bold] ended_normally={b.get('ended_normally')} db_match={b.get('db_match')} "
                  f"outputs={b.get('outputs')} assertions={[a['ok'] for a in b.get('assertions', [])]}")
    for v in b.get("nl_assertions") or []:
        verdict = {True: "holds", False: "fails", None: "not judged"}[v["ok"]]
        console.print(f"  nl assertion {verdict}: {escape(v['assertion'])}" + (f" ({escape(v['reason'])})" if v["reason"] else ""))


# ---------------------------------------------------------------- sharing: packs


@command()
def pack(
    domain: str = typer.Argument(..., help="Domain name or a folder holding domain.yaml (its tasks come along)."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Pack file to write (default NAME-VERSION.muapack)."),
) -> None:
    """Pack a domain, its tasks and a manifest with checksums into one .muapack file.

    The domain is checked first, as `muactl install` will check it on the receiving machine.
    Example: [bold]muactl pack domains/clinic -o clinic-0.1.0.muapack[/bold]
    """
    from .packs import pack_domain

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
    from .packs import install_pack

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
    from .packs import uninstall as remove

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
    from .mcp_server import serve

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
    from .openenv_server import ServeConfig, serve

    cfg = ServeConfig(domain=domain, tasks=tasks, split=split, db=db, user=user, user_api_base=user_api_base,
                      user_temperature=user_temperature, seed=seed, max_turns=max_turns, max_sessions=max_sessions,
                      host=host, port=port, trust=trust)
    try:
        serve(cfg, log=lambda line: typer.echo(line, err=True))
    except KeyboardInterrupt:  # Ctrl-C is how a server is stopped: its normal end
        raise typer.Exit(0)


@command()
def chat(
    domain: str = typer.Argument(..., help="Domain name (./domains, installed, built-in) or a folder holding domain.yaml."),
    agent: str = typer.Option("oracle", "--agent", help="oracle | hf:<model or checkpoint> | vllm:<model> | a litellm model id."),
    task: Optional[str] = typer.Option(None, "--task", help="Start on this task (default: pick one, or chat freely)."),
    show_goal: bool = typer.Option(False, "--show-goal", help="Show the task's user goal beside the chat."),
    watch: bool = typer.Option(False, "--watch", help="Watch the agent against a simulated user; ctrl+t takes over."),
    user: str = typer.Option("scripted", "--user", help="The simulated user in --watch: scripted | hf:<model> | a litellm model id."),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="OpenAI-compatible server for the agent (and the --watch user)."),
    pace: float = typer.Option(1.0, "--pace", min=0.0, help="Seconds before each simulated user turn in --watch."),
    max_tokens: int = MAX_TOKENS,
    request_timeout: float = REQUEST_TIMEOUT,
    retries: int = RETRIES,
    trust: bool = typer.Option(False, "--trust", help="Allow the domain's Python tools to run."),
) -> None:
    """Talk to an agent as its user in a terminal UI; see every tool call and what it did to the database.

    Each chat is scored like an eval episode and saved (marked human, with your rating and note) in
    runs/<id>/runs.sqlite. Keys: enter sends, ctrl+e ends (or type ###STOP###), ctrl+r retries a failed
    agent turn, ctrl+t takes over / gives back the user's seat in --watch, ctrl+q quits.
    Examples:
      [bold]muactl chat retail --agent hf:runs/<id>/checkpoint-final[/bold]
      [bold]muactl chat retail --agent openai/gpt-4o-mini --task cancel-gift-card-order --show-goal[/bold]
      [bold]muactl chat bank --agent hf:tiny --watch --user scripted[/bold]
    """
    from .validate import open_domain

    opened = open_domain(domain, trust=trust)
    if task:
        opened.task(task)  # an unknown id fails here, with suggestions, before the screen opens
    from .preflight import check_episode_parts

    check_episode_parts(agent, user if watch else "scripted", api_base, api_base)  # a missing key or model folder too
    if not sys.stdin.isatty() or not sys.stdout.isatty():
        raise UsageError("muactl chat needs an interactive terminal (stdin and stdout must be a TTY)")
    from .chat import ChatConfig, run_chat  # imports textual: only this command pays for it

    cfg = ChatConfig(domain=domain, agent=agent, task=task, show_goal=show_goal, watch=watch, user=user,
                     api_base=api_base, user_api_base=api_base, trust=trust, pace_s=pace, max_tokens=max_tokens,
                     llm_timeout_s=request_timeout, retries=retries)
    chats = run_chat(cfg, opened)
    if chats.store is None:
        typer.echo("no chat was saved")
        return
    store = chats.store
    n = len(store.episodes())
    typer.echo(f"saved {n} chat{'s' * (n != 1)} to {store.path}/  (muactl runs show {store.id})")
    typer.echo(f"export the good ones as SFT data: muactl synth --from-chats {store.id} -o chats.jsonl")


# ---------------------------------------------------------------- scaling out: export

export_app = typer.Typer(help="Export a domain to another training stack.", no_args_is_help=True)
app.add_typer(export_app, name="export")


@command("verl", group=export_app)
def export_verl_cmd(
    domain: str = typer.Argument(..., help="Domain name or folder."),
    output: Path = typer.Option(..., "-o", "--output", help="Folder to write (parquet, agent loop, config, launch script)."),
    model: str = typer.Option("Qwen/Qwen3-8B", "--model", help="Default policy in the launch script (MODEL=... overrides)."),
    user: str = typer.Option("scripted", "--user", help="User simulator in the rollout: scripted or a litellm model id."),
    user_api_base: Optional[str] = typer.Option(None, "--user-api-base", help="OpenAI-compatible server for the user."),
    nnodes: int = typer.Option(1, "--nnodes", min=1, help="Nodes in the launch script (NNODES=... overrides)."),
    gpus_per_node: int = typer.Option(8, "--gpus-per-node", min=1, help="GPUs per node (GPUS_PER_NODE=... overrides)."),
    max_prompt_length: int = typer.Option(4096, "--max-prompt-length", help="verl data.max_prompt_length."),
    max_response_length: int = typer.Option(8192, "--max-response-length", help="verl data.max_response_length (whole episode)."),
    grpo: list[str] = typer.Option([], "--grpo", help="Override a muactl grpo setting, e.g. --grpo group_size=16 (repeatable)."),
    force: bool = typer.Option(False, "--force", help="Write into a folder that is not empty."),
) -> None:
    """Export a domain for verl (0.8+) multi-node GRPO: parquet datasets, agent loop, its config, launch script.

    Example: [bold]muactl export verl retail -o out/verl-retail && cat out/verl-retail/README.md[/bold]
    """
    from .export.verl import VerlExport, export_verl

    info = export_verl(VerlExport(domain, output, model=model, user=user, user_api_base=user_api_base, nnodes=nnodes,
                                  gpus_per_node=gpus_per_node, max_prompt_length=max_prompt_length,
                                  max_response_length=max_response_length, overrides=list(grpo), force=force))
    typer.echo(f"wrote {info['output']}/: train.parquet ({info['rows']['train']} tasks), test.parquet ({info['rows']['test']}), "
               f"tools.json, muactl_agent_loop.py, agent_loop.yaml, launch.sh, README.md")
    typer.echo(f"Next: read {info['output']}/README.md, then run {info['output']}/launch.sh against your Ray cluster")


tasks_app = typer.Typer(help="Task templates: generate concrete task files.", no_args_is_help=True)
app.add_typer(tasks_app, name="tasks")


@command("generate", group=tasks_app)
def tasks_generate(
    domain: str = typer.Argument(..., help="Domain name or folder."),
    template: list[str] = typer.Option([], "--template", help="Template id (repeatable)."),
    all_templates: bool = typer.Option(False, "--all-templates", help="Use every template, in turn."),
    n: int = typer.Option(100, "--n", min=1, help="How many distinct tasks to write."),
    seed: int = typer.Option(0, "--seed", help="Task k is drawn with seed + k."),
    db_seed: Optional[int] = typer.Option(None, "--db-seed", help="Task k runs on random database db_seed + k "
                                          "(default: the domain's seed database)."),
    split: str = typer.Option("train", "--split", help="Split written into each task: train | test."),
    output: Path = typer.Option(..., "-o", "--output", help="Task file to write (YAML)."),
) -> None:
    """Write concrete tasks drawn from templates; every task's gold path is replayed, failures are dropped
    and reported, duplicate bindings are written once.

    Examples:
      [bold]muactl tasks generate retail --template cancel-pending --n 100 --seed 1 -o tasks/retail/gen-train.yaml[/bold]
      [bold]muactl tasks generate bank --all-templates --n 200 --seed 9000 --db-seed 9000 --split test -o tasks/bank/gen-test.yaml[/bold]
    """
    from .library import refuse_builtin_write
    from .templates import generate, write_tasks
    from .validate import open_domain

    if bool(template) == all_templates:
        raise UsageError("give --template ID (repeatable) or --all-templates")
    if split not in ("train", "test"):
        raise UsageError("--split must be train or test")
    from .outputs import prepare_output

    refuse_builtin_write(output)
    prepare_output(output)
    opened = open_domain(domain)
    drawn = generate(opened, None if all_templates else list(template), n, seed, db_seed, split)
    header = (f"Generated by: muactl tasks generate {opened.ref.name} "
              f"{'--all-templates' if all_templates else ' '.join('--template ' + t for t in template)} --n {n} "
              f"--seed {seed}{f' --db-seed {db_seed}' if db_seed is not None else ''} --split {split}")
    write_tasks(drawn.tasks, output, header)
    counts: dict[str, int] = {}
    for t in drawn.tasks:
        counts[t.task.origin.template] = counts.get(t.task.origin.template, 0) + 1
    typer.echo(f"wrote {len(drawn.tasks)} tasks to {output} ("
               + ", ".join(f"{k} {v}" for k, v in counts.items()) + ")")
    if drawn.duplicates:
        typer.echo(f"skipped {drawn.duplicates} duplicate bindings")
    if drawn.dropped:
        reasons: dict[tuple, int] = {}
        for tid, _, _, why in drawn.dropped:
            reasons[(tid, why)] = reasons.get((tid, why), 0) + 1
        typer.echo(f"dropped {len(drawn.dropped)} instances whose gold path failed:")
        for (tid, why), k in sorted(reasons.items()):
            typer.echo(f"  {tid}: {why} (x{k})")
    if len(drawn.tasks) < n:
        typer.echo(f"warning: only {len(drawn.tasks)} of {n} distinct tasks could be drawn", err=True)


def run() -> None:  # pragma: no cover - console entry for `python -m muactl`
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
