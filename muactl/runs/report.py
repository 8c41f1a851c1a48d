"""`muactl report RUN_ID`: PNG plots of the training metrics and an HTML page with the config, the
tables and a few transcripts. Reads only the run folder (runs.sqlite, stages.json, config.yaml)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from .store import RunStore

# (file, title, y label, metric names tried in order, y range: "unit" for [0, 1] rates and binary rewards,
# "zero" for counts and losses: the axis starts at 0, so a flat series looks flat and not like noise)
PLOTS = [
    ("reward.png", "Mean reward per GRPO step", "mean reward", ["reward", "rewards/reward_from_episode/mean"], "unit"),
    ("success.png", "Task success per GRPO step", "episodes succeeded (share)", ["rollout/success"], "unit"),
    ("turns.png", "Agent turns per episode", "turns", ["rollout/turns"], "zero"),
    ("kl.png", "KL divergence to the reference model", "KL", ["kl"], "zero"),
    ("sft_loss.png", "SFT training loss", "loss", ["sft/loss"], "zero"),
    ("effective_turns.png", "Effective agent turns per episode (no tool error)", "turns",
     ["rollout/effective_turns"], "zero"),
    ("first_correct_write.png", "Agent turn of the first correct write", "agent turn", ["rollout/first_correct_write"], "zero"),
    ("user_turns.png", "User turns per episode", "turns", ["rollout/user_turns"], "zero"),
    ("tool_errors.png", "Tool errors per episode", "tool errors", ["rollout/tool_errors"], "zero"),
]


def metric_series(store: RunStore) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {}
    for row in store.db.query("SELECT step, name, value FROM metrics ORDER BY step"):
        out.setdefault(row["name"], []).append((row["step"], row["value"]))
    return out


def write_plots(store: RunStore, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = metric_series(store)
    tasks = tasks_per_step(store)
    written = []
    for name, title, label, keys, yrange in PLOTS:
        key = next((k for k in keys if k in series), None)
        if key is None:
            continue
        xs, ys = zip(*series[key])
        fig = figure(plt, xs, ys, title, label, yrange, tasks if key in STEP_TASK_METRICS else None)
        fig.savefig(out / name)
        plt.close(fig)
        written.append(out / name)
    if "heldout/success" in series:
        fig = heldout_figure(plt, series)
        fig.savefig(out / HELDOUT_PNG)
        plt.close(fig)
        written.insert(0, out / HELDOUT_PNG)
    return written


HELDOUT_PNG = "heldout.png"
TRAIN_REWARD = PLOTS[0][3]  # the names the reward plot reads


def domain_rows(series: dict[str, list[tuple[int, float]]], state: dict[str, Any]) -> list[dict[str, Any]]:
    """A run over several domains, one row per domain: GRPO's groups (the mix it drew), those with signal, its
    mean reward and success per step, its last held-out pass^1, and each eval stage's pass^1 on it."""
    names = sorted({k.split("/")[1] for k in series if k.startswith("domain/") and k.count("/") == 2})
    evals = state.get("eval", {})
    names += sorted({d for row in evals.values() for d in row.get("domains", {})} - set(names))
    total = sum(v for n in names for _, v in series.get(f"domain/{n}/groups", []))
    rows = []
    for n in names:
        def values(metric: str) -> list[float]:
            return [v for _, v in series.get(f"domain/{n}/{metric}", [])]

        groups = values("groups")
        row: dict[str, Any] = {"domain": n, "groups": int(sum(groups)),
                               "share of groups": sum(groups) / total if total else None,
                               "groups with signal": int(sum(values("groups_with_signal"))),
                               "mean reward": _mean(values("reward")), "mean success": _mean(values("success")),
                               "held-out (last)": (values("heldout_success") or [None])[-1]}
        for label, ev in evals.items():
            row[f"eval {label} pass^1"] = (ev.get("domains", {}).get(n) or {}).get("pass^1")
        rows.append(row)
    return rows


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def heldout_figure(plt, series: dict[str, list[tuple[int, float]]]):
    """The learning curve of a run with grpo.eval_every: held-out success and the training reward per step,
    then beside it, when logged, the share of groups without signal (all rewards equal) and the KL."""
    from matplotlib.ticker import MaxNLocator

    panels = [("Held-out success vs training reward", "share / mean reward", "unit",
               [("held-out pass^1 (greedy)", "heldout/success"),
                ("training reward (sampled)", next((k for k in TRAIN_REWARD if k in series), None))]),
              ("Groups without signal (all rewards equal)", "share of groups", "unit",
               [("as drawn", "rollout/all_equal_share"), ("in the update (after resampling)", "frac_reward_zero_std")]),
              ("KL to the reference model", "KL", "zero", [("KL", "kl")])]
    panels = [(t, y, r, [(label, key) for label, key in lines if key in series]) for t, y, r, lines in panels]
    panels = [p for p in panels if p[3]]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.6), dpi=110, squeeze=False)
    for ax, (title, ylabel, yrange, lines) in zip(axes[0], panels):
        ys_all = []
        for (label, key), style in zip(lines, ("-", "--")):  # dashed: a second line that may lie on the first
            xs, ys = zip(*series[key])
            ax.plot(xs, ys, style, marker="o" if len(xs) < 30 else None, linewidth=1.5, label=label)
            ys_all += ys
        ax.set_title(title, fontsize=11)
        ax.set_xlabel("training step")
        ax.set_ylabel(ylabel)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        if yrange == "unit" and min(ys_all) >= 0 and max(ys_all) <= 1:
            ax.set_ylim(-0.05, 1.05)
        else:
            ax.set_ylim(min(0.0, min(ys_all)), max(max(ys_all) * 1.1, 1e-3))
        if len(lines) > 1:
            ax.legend(fontsize=8, loc="best")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


FEW_POINTS = 5  # a plot with fewer points says it is too few to read a trend from
LABELLED_POINTS = 12  # up to this many points, each is labelled with the tasks its step played
# per-step figures of the GRPO rollouts: each point is a mean over the episodes of that step's tasks
STEP_TASK_METRICS = {"reward", "rewards/reward_from_episode/mean", "rollout/success", "rollout/turns",
                     "rollout/effective_turns", "rollout/user_turns", "rollout/tool_errors", "rollout/first_correct_write"}


def tasks_per_step(store: RunStore) -> dict[int, list[str]]:
    """The task ids each GRPO step played, re-drawn groups included."""
    out: dict[int, set[str]] = {}
    for e in store.episodes():
        if e["step"]:
            out.setdefault(e["step"], set()).add(e["task_id"])
    return {step: sorted(ids) for step, ids in out.items()}


def few_points_note(n: int) -> str | None:
    if n >= FEW_POINTS:
        return None
    return f"only {n} point{'s' if n != 1 else ''}: too few to read a trend"


def figure(plt, xs, ys, title: str, label: str, yrange: str, tasks: dict[int, list[str]] | None = None):
    """One metric per step. With `tasks` (a rollout figure) and few points, each point names the tasks its
    step played: two points from two different tasks are not a rise or a fall."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(6, 3.2), dpi=110)
    ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, linewidth=1.5)
    if tasks and len(xs) <= LABELLED_POINTS:
        for x, y in zip(xs, ys):
            names = tasks.get(x)
            if names:
                shown = ", ".join(names[:3]) + (f" +{len(names) - 3}" if len(names) > 3 else "")
                ax.annotate(shown, (x, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=7)
    note = few_points_note(len(xs))
    if note:
        ax.text(0.5, 0.5, note, transform=ax.transAxes, ha="center", va="center", fontsize=10, color="0.45")
    ax.set_title(title)
    ax.set_xlabel("training step")
    ax.set_ylabel(label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    top = max(ys)
    if yrange == "unit" and min(ys) >= 0 and top <= 1:
        ax.set_ylim(-0.05, 1.05)
    else:
        ax.set_ylim(min(0.0, min(ys)), max(top * 1.1, 1e-3))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def kl_note(config: dict[str, Any], plots: list[Path]) -> str | None:
    """Why a GRPO run has no KL plot: with beta 0 there is no reference model, so no KL is computed."""
    grpo = config.get("grpo") or {}
    if any(p.name == "kl.png" for p in plots) or "beta" not in grpo or grpo["beta"]:
        return None
    return "No KL plot: grpo.beta is 0, so training keeps no reference model and computes no KL (set grpo.beta > 0 for it)."


def _substores(store: RunStore) -> list[RunStore]:
    return [RunStore.read(p.parent) for p in sorted(store.path.glob("*/runs.sqlite"))]


def _transcript(store: RunStore, episode: dict[str, Any]) -> str:
    lines = []
    for m in store.messages(episode["id"]):
        if m["role"] == "system":
            continue
        text = html.escape(m["content"] or "")
        if m["role"] == "assistant":
            calls = "".join(f"<div class=call>&rarr; {html.escape(c['name'])}({html.escape(json.dumps(c['arguments']))})</div>"
                            for c in m["tool_calls"] or [])
            lines.append(f"<div class=agent><b>agent</b> {text}{calls}</div>" if text else calls)
        elif m["role"] == "tool":
            lines.append(f"<div class='tool{' err' if m['error'] else ''}'>&larr; {text[:400]}</div>")
        else:
            lines.append(f"<div class=user><b>user</b> {text}</div>")
    return "\n".join(lines)


def _table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>none</p>"
    keys = list(rows[0])
    head = "".join(f"<th>{html.escape(str(k))}</th>" for k in keys)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(r.get(k)))}</td>" for k in keys) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_cell(x)}" for k, x in v.items())
    return "-" if v is None else str(v)


def write_report(run_id: str, transcripts: int = 3) -> Path:
    store = RunStore.open(run_id)
    out = store.path / "report"
    out.mkdir(exist_ok=True)
    plots = write_plots(store, out)
    info = store.info()
    from .stages import before_after_table, stages_state

    state = stages_state(store)
    table = before_after_table(state)
    parts = [f"<h1>muactl run {html.escape(store.id)}</h1>",
             f"<p>{html.escape(info['kind'])} on <b>{html.escape(info['domain'])}</b>, status {html.escape(info['status'])}</p>"]
    if table:
        from .stages import comparisons

        parts.append("<h2>Before / after</h2>" + _table(table))
        parts += [f"<p>{html.escape(line)}</p>" for line in comparisons(state.get("eval", {}))]
    domains = domain_rows(metric_series(store), state)
    if domains:
        parts.append("<h2>Domains</h2><p>one policy over several domains: the GRPO groups each drew (by the "
                     "recipe's weights), with signal, mean reward and success over the steps, the last held-out "
                     "pass^1 and each eval stage's pass^1 on its own test tasks (the table above is over all of "
                     "them)</p>" + _table(domains))
    summary = {k: v for k, v in (info["summary"] or {}).items() if not isinstance(v, (dict, list))}
    if summary:
        from .summary import pass_k_note

        note = pass_k_note(info["summary"])
        parts.append("<h2>Summary</h2>" + _table([summary]) + (f"<p>{html.escape(note)}</p>" if note else ""))
    curve = [p for p in plots if p.name == HELDOUT_PNG]
    if curve:
        g = info["config"].get("grpo") or {}
        parts.append("<h2>Held-out success during GRPO</h2><p>greedy pass^1 of the policy on the held-out set "
                     f"(grpo.eval_tasks: {html.escape(str(g.get('eval_tasks')))}), before the first step, every "
                     f"{html.escape(str(g.get('eval_every')))} steps and after the last</p>"
                     f"<img class=wide src='{HELDOUT_PNG}' alt='held-out learning curve'>")
        plots = [p for p in plots if p.name != HELDOUT_PNG]
    if plots:
        parts.append("<h2>Training</h2>")
        steps = len(metric_series(store).get("rollout/success", []))
        if steps:
            note = few_points_note(steps)
            parts.append(f"<p>Each point of a rollout plot is one GRPO step's mean over the tasks it drew (named by "
                         f"the point when there are few), not a fixed set: a change between points is partly which "
                         f"tasks came up.{f' {html.escape(note.capitalize())}.' if note else ''}</p>")
        parts.append("".join(f"<img src='{p.name}' alt='{p.stem}'>" for p in plots))
        note = kl_note(info["config"], plots)
        if note:
            parts.append(f"<p>{html.escape(note)}</p>")
    for sub in [store, *_substores(store)]:
        eps = sub.episodes()
        if not eps:
            continue
        from .summary import fidelity_per_task, fidelity_summary, interaction_summary, per_task

        parts.append(f"<h2>Episodes: {html.escape(sub.id)}</h2>" + _table(per_task(eps)[:50]))
        parts.append("<h3>Interaction</h3>" + _table([interaction_summary(eps)]))
        fidelity = [r for r in [{"task_id": "all tasks", **fidelity_summary(eps)}, *fidelity_per_task(eps)] if r["episodes"]]
        if fidelity:
            parts.append("<h3>Simulated user fidelity</h3><p>share of episodes where each check held "
                         "(<code>_n</code>: how many it applies to)</p>" + _table(fidelity[:51]))
        shown = sorted(eps, key=lambda e: (-e["reward"], e["id"]))[:1] + [e for e in eps if e["reward"] < 1][: transcripts - 1]
        for e in shown:
            parts.append(f"<h3>{html.escape(e['task_id'])} (trial {e['trial']}): reward {e['reward']}, {html.escape(e['termination'])}</h3>"
                         f"<div class=transcript>{_transcript(sub, e)}</div>")
    parts.append("<h2>Config</h2><pre>" + html.escape((store.path / "config.yaml").read_text()) + "</pre>")
    style = ("body{font-family:sans-serif;max-width:1000px;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:3px 8px}img{max-width:48%;margin:4px}img.wide{max-width:100%}.transcript{border:1px solid #ddd;"
             "padding:8px}.agent{color:#05a}.user{color:#a05}.tool{color:#070;font-family:monospace;font-size:90%}"
             ".err{color:#c00}.call{color:#a60;font-family:monospace}pre{background:#f6f6f6;padding:8px}")
    page = out / "index.html"
    page.write_text(f"<!doctype html><html><head><meta charset=utf-8><title>{html.escape(store.id)}</title>"
                    f"<style>{style}</style></head><body>{''.join(parts)}</body></html>")
    return page
