"""How commands print results: run summaries, fidelity tables, the before/after table, a progress bar."""

from __future__ import annotations

from collections import Counter

import typer


from .app import fail


# Piped, with no COLUMNS set, rich would lay tables out for 80 columns and cut cells (run ids among them) with
# "…": a pipe or a file has no width, so nothing is cut there.
PIPED_WIDTH = 1000


def command_console():
    """The console a command prints to: the terminal's width, or as wide as the content when piped."""
    import os
    import sys

    from rich.console import Console

    if "COLUMNS" not in os.environ and not sys.stdout.isatty():
        return Console(width=PIPED_WIDTH)
    return Console()


def fmt_value(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}"
    return str(v)


SCORING_NAMES = {"muactl": "muactl (muactl's reward)", "tau2": "tau2 (τ²-bench's evaluator)"}


def print_summary(summary: dict, title: str) -> None:
    from rich.table import Table

    table = Table(title=title, show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    keys = [k for k in summary if k.startswith("pass^")]
    for k in keys + ["tasks_in_pass_k", "avg_reward", "first_call_right", "gold_calls_made", "process", "episodes", "counted", "infra_errors",
                     "user_errors", "tasks", "avg_turns", "effective_turns", "first_correct_write",
                     "correct_write_share", "user_turns", "tool_error_rate", "avg_tool_errors", "prompt_tokens", "completion_tokens", "cost"]:
        if k in summary:
            table.add_row(k, fmt_value(summary[k]))
    if "outcomes" in summary:
        table.add_row("outcomes", ", ".join(f"{k} {v}" for k, v in summary["outcomes"].items()))
    table.add_row("terminations", ", ".join(f"{k} {v}" for k, v in summary.get("terminations", {}).items()))
    if summary.get("scoring"):
        table.add_row("scoring", SCORING_NAMES.get(summary["scoring"], summary["scoring"]))
    console = command_console()
    console.print(table)
    for line in excluded_lines(summary):
        console.print(line, markup=False, highlight=False)
    if summary.get("nl_not_judged"):
        console.print(f"{summary['nl_not_judged']} episode(s) have NL assertions in τ²'s reward basis that no judge "
                      "checked (--judge MODEL): they do not count, so those rewards are not τ²'s.", markup=False)
    if summary.get("user_fidelity", {}).get("episodes"):
        print_fidelity([{"task_id": "all tasks", **summary["user_fidelity"]}], "simulated user fidelity")
    if summary.get("user_verdict"):
        from ..runs.summary import verdict_line

        console.print(verdict_line(summary["user_verdict"], summary["user_fidelity"]), markup=False, highlight=False)


def print_fidelity(rows: list[dict], title: str) -> None:
    """Each fidelity check as the share of episodes where it held (of those it applies to)."""
    from rich.table import Table

    from ..episode.fidelity import CHECKS

    table = Table("task", *[c.replace("_", " ") for c in CHECKS], "faithful", title=title)
    for r in rows:
        cells = [f"{fmt_value(r[c])} ({r[c + '_n']})" if r.get(c) is not None else "-" for c in CHECKS]
        table.add_row(r["task_id"], *cells, fmt_value(r.get("faithful")))
    command_console().print(table)


def excluded_lines(summary: dict) -> list[str]:
    """What was left out of pass^k and why: the tasks short of scored trials, each excluded class with its
    top reasons, and the tasks that have no scored trial at all."""
    from ..runs.summary import pass_k_note

    note = pass_k_note(summary)
    lines = [note] if note else []
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
                  TextColumn(label + " {task.fields[succ]}"), TimeElapsedColumn(), console=command_console()) as progress:
        def on_progress(state: dict) -> None:
            if "bar" not in holder:
                holder["run_id"], holder["first"] = state["run_id"], dict(state)
                holder["bar"] = progress.add_task(f"{kind} {state['run_id']}", total=state["total"], succ=0)
            progress.update(holder["bar"], completed=state["done"], succ=state["successes"])

        try:
            out = run(on_progress)
        except KeyboardInterrupt:
            fail("interrupted; " + on_interrupt.format(run_id=holder.get("run_id", "?")), 130)
    first = holder.get("first")
    if first and first["total"] and first["done"] == first["total"]:
        typer.echo(f"nothing left to play: {first['run_id']} had finished all {first['total']} episodes "
                   f"({label} {first['successes']}); its results as stored:")
    return out




def print_before_after(state: dict) -> None:
    from rich.table import Table

    rows = state.get("eval", {})
    if not rows:
        return
    from ..runs.stages import before_after_table, comparisons

    table = Table("model", "pass^1 [95% interval]", "first call right", "gold calls made", "avg turns",
                  title="before / after (checkpoints: stages.json)")
    for r in before_after_table(state):
        table.add_row(r["stage"], " ".join(filter(None, [fmt_value(r.get("pass^1")), r.get("95% interval")])),
                      fmt_value(r.get("first_call_right")), fmt_value(r.get("gold_calls_made")), fmt_value(r.get("avg_turns")))
    command_console().print(table)
    for label, row in rows.items():  # a run over several domains: the table is over all; each domain's own
        if row.get("domains"):
            typer.echo(f"{label} by domain: " + ", ".join(f"{d} pass^1 {fmt_value(f.get('pass^1'))} over {f.get('episodes')} "
                                                         "episodes" for d, f in row["domains"].items()))
    for line in comparisons(rows):  # paired over the same tasks: the honest test of a gain
        typer.echo(line)
