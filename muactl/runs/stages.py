"""The stages of a `muactl train` run (runs/<id>/stages.json): which finished, and their eval rows."""

from __future__ import annotations

import json
from typing import Any

from .stats import bootstrap, paired, verdict
from .store import RunStore


def stages_state(store: RunStore) -> dict[str, Any]:
    f = store.path / "stages.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def save_stages(store: RunStore, state: dict[str, Any]) -> None:
    tmp = store.path / "stages.json.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(store.path / "stages.json")


def comparisons(rows: dict[str, Any]) -> list[str]:
    """Each trained model against the one before it (SFT vs base, GRPO vs SFT), paired over the test tasks,
    as the sentences the console and the report print."""
    labels = [k for k in ("base", "sft", "grpo") if rows.get(k, {}).get("per_task")]
    lines = []
    for a, b in zip(labels, labels[1:]):
        d, lo, hi = paired({"0": rows[b]["per_task"]}, {"0": rows[a]["per_task"]})
        lines.append(f"{b} vs {a}: {d:+.2f} pass^1, 95% interval [{lo:+.2f}, {hi:+.2f}] over the tasks: {verdict(lo, hi)}")
    return lines


def before_after_table(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The eval stage's rows for a report: per-task outcomes become pass^1's 95% interval."""
    out = []
    for label, row in state.get("eval", {}).items():
        row = dict(row)
        per_task = row.pop("per_task", None)
        if per_task:
            _, lo, hi = bootstrap({"0": per_task})
            row["95% interval"] = f"[{lo:.2f}, {hi:.2f}]"
        out.append({"stage": label, **row})
    return out
