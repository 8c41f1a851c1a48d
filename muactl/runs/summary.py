"""What a run's stored episodes add up to: pass^k (every k over one task set), outcome classes, why
episodes were excluded, per-task rows, interaction and user-fidelity figures. Eval prints these, the report and `runs show` read them."""

from __future__ import annotations

from collections import Counter
from math import comb
from typing import Any

from ..episode.fidelity import summarize_fidelity, summarize_interaction
from ..episode.types import EXCLUDED, OUTCOMES, outcome_of


def pass_hat_k(counts: dict[str, tuple[int, int]], k: int) -> float | None:
    """Mean over tasks with at least k counted trials of C(c, k) / C(n, k)."""
    vals = [comb(c, k) / comb(n, k) for n, c in counts.values() if n >= k]
    return sum(vals) / len(vals) if vals else None


def pass_k_tasks(counts: dict[str, tuple[int, int]], k_max: int) -> tuple[dict[str, tuple[int, int]], list[dict]]:
    """The one task set every pass^k of a summary is over: tasks with at least k_max scored trials. Were each
    k over the tasks with k trials, a task short of trials (an excluded one not played again yet) would
    weigh in pass^1 and vanish from pass^k, and pass^4 could exceed pass^1. Returns that set's counts and
    the tasks left out, each with its number of scored trials."""
    kept = {t: nc for t, nc in counts.items() if nc[0] >= k_max}
    left = [{"task_id": t, "scored": n} for t, (n, _) in sorted(counts.items()) if n < k_max]
    return kept, left


def pass_k_note(summary: dict[str, Any]) -> str | None:
    """The sentence naming the tasks left out of pass^k, wherever pass^k is shown; None when none are."""
    left = summary.get("left_out_of_pass_k") or []
    if not left:
        return None
    k = max((int(key[5:]) for key in summary if key.startswith("pass^") and key[5:].isdigit()), default=1)
    ids = ", ".join(f"{t['task_id']} ({t['scored']} of {k})" for t in left[:10]) + (", ..." if len(left) > 10 else "")
    return (f"pass^1..{k} are over the {summary.get('tasks_in_pass_k', 0)} tasks with {k} scored trials; "
            f"{len(left)} left out for fewer scored trials (excluded ones; --resume plays them again): {ids}")


def _outcome(e: dict[str, Any]) -> str:
    return e.get("outcome") or outcome_of(e["termination"], bool(e["success"]))


def _reason(e: dict[str, Any]) -> str:
    """An excluded episode's error, short enough to group identical causes (model name first, cut)."""
    text = (e.get("error") or "no error recorded").strip().splitlines()[0]
    return text if len(text) <= 120 else text[:117] + "..."


def excluded_report(episodes: list[dict[str, Any]], top: int = 3) -> dict[str, Any]:
    """Per excluded class: its count and its `top` most frequent reasons as [reason, count] pairs."""
    out: dict[str, Any] = {}
    for cls in EXCLUDED:
        reasons = Counter(_reason(e) for e in episodes if _outcome(e) == cls)
        if reasons:
            out[cls] = {"count": sum(reasons.values()), "reasons": [list(r) for r in reasons.most_common(top)]}
    return out


def tasks_not_scored(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tasks that ran but have no scored trial, with the classes their trials ended in: they are not
    in pass^k, and a summary must say so rather than shrink the denominator quietly."""
    by_task: dict[str, Counter] = {}
    for e in episodes:
        by_task.setdefault(e["task_id"], Counter())[_outcome(e)] += 1
    return [{"task_id": t, "outcomes": dict(sorted(c.items()))} for t, c in sorted(by_task.items())
            if not c["success"] and not c["failure"]]


def summarize(episodes: list[dict[str, Any]], k_max: int) -> dict[str, Any]:
    counted = [e for e in episodes if _outcome(e) not in EXCLUDED]
    counts: dict[str, tuple[int, int]] = {}
    for e in counted:
        n, c = counts.get(e["task_id"], (0, 0))
        counts[e["task_id"]] = (n + 1, c + int(e["success"]))
    terms = Counter(e["termination"] for e in episodes)
    outcomes = Counter(_outcome(e) for e in episodes)
    calls = sum(e["tool_calls"] for e in counted)
    out: dict[str, Any] = {
        "episodes": len(episodes), "counted": len(counted),
        "infra_errors": outcomes["infra_error"], "user_errors": outcomes["user_error"],
        "tasks": len(counts),
        "avg_reward": sum(e["reward"] for e in counted) / len(counted) if counted else None,
        "outcomes": {o: outcomes[o] for o in OUTCOMES if outcomes[o]},
        "terminations": dict(sorted(terms.items())),
        "excluded": excluded_report(episodes),
        "tasks_not_scored": tasks_not_scored(episodes),
        "tool_error_rate": sum(e["tool_errors"] for e in counted) / calls if calls else 0.0,
        # errors also count malformed replies, which make no call: per episode says more for weak models
        "avg_tool_errors": sum(e["tool_errors"] for e in counted) / len(counted) if counted else None,
        "avg_turns": sum(e["turns"] for e in counted) / len(counted) if counted else None,
        "prompt_tokens": sum(e["prompt_tokens"] or 0 for e in episodes),
        "completion_tokens": sum(e["completion_tokens"] or 0 for e in episodes),
        "cost": round(sum(e["cost"] or 0 for e in episodes), 6),
    }
    full, left = pass_k_tasks(counts, k_max)
    for k in range(1, k_max + 1):
        out[f"pass^{k}"] = pass_hat_k(full, k)
    out["tasks_in_pass_k"], out["left_out_of_pass_k"] = len(full), left
    for key in ("first_call_right", "gold_calls_made", "process"):
        vals = [v for e in counted if (v := ((e.get("breakdown") or {}).get("partial") or {}).get(key)) is not None]
        out[key] = sum(vals) / len(vals) if vals else None
    out.update({k: v for k, v in interaction_summary(episodes).items() if k != "tool_errors"})  # avg_tool_errors
    out["user_fidelity"] = fidelity_summary(episodes)
    return out


def _played(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Episodes that ran (an API that kept failing says nothing about the agent or the user)."""
    return [e for e in episodes if e["termination"] != "infra_error"]


def interaction_summary(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """UserRL's interaction figures per episode."""
    return summarize_interaction([e["interaction"] for e in _played(episodes) if e.get("interaction")])


def fidelity_summary(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """How the simulated user behaved, check by check (muactl/episode/fidelity.py)."""
    return summarize_fidelity([e["fidelity"] for e in _played(episodes) if e.get("fidelity")])


def fidelity_intervals(episodes: list[dict[str, Any]]) -> dict[str, list[float]]:
    """A 95% bootstrap interval (runs/stats.py, over episodes) of each check's share, and of `faithful`."""
    from ..episode.fidelity import CHECKS, faithful
    from .stats import bootstrap

    rows = [e for e in _played(episodes) if e.get("fidelity")]
    out = {}
    for key in (*CHECKS, "faithful"):
        vals = {f"{e['task_id']}:{e['trial']}": float(faithful(e["fidelity"]) if key == "faithful" else e["fidelity"][key])
                for e in rows if key == "faithful" or e["fidelity"].get(key) is not None}
        if vals:
            _, low, high = bootstrap({"0": vals})
            out[key] = [round(low, 3), round(high, 3)]
    return out


def user_model_verdict(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the user that played these episodes is faithful (episode/fidelity.py's model_verdict), with the
    intervals of its checks."""
    from ..episode.fidelity import model_verdict

    return {**model_verdict(fidelity_summary(episodes)), "intervals": fidelity_intervals(episodes)}


def verdict_line(verdict: dict, fidelity: dict) -> str:
    """A user model's verdict as a sentence: faithful at the threshold or not, which checks fell short, and the
    95% interval of each check."""
    from ..episode.fidelity import CHECKS

    at = f"at >= {verdict['threshold']:.2f} on every check"
    head = (f"user model faithful {at}" if verdict["faithful"] else
            f"user model NOT faithful {at}" + (f" (below: {', '.join(verdict['below'])})" if verdict["below"] else ""))
    spans = [f"{k} {fidelity[k]:.2f} [{lo:.2f}, {hi:.2f}]" for k in (*CHECKS, "faithful")
             if fidelity.get(k) is not None and (iv := verdict.get("intervals", {}).get(k)) for lo, hi in [iv]]
    return f"{head}; over {fidelity['episodes']} episodes, 95% intervals: " + "; ".join(spans)


def fidelity_per_task(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_task: dict[str, list[dict[str, Any]]] = {}
    for e in episodes:
        by_task.setdefault(e["task_id"], []).append(e)
    return [{"task_id": tid, **fidelity_summary(eps)} for tid, eps in by_task.items()]


def per_task(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for e in episodes:
        r = rows.setdefault(e["task_id"], {"task_id": e["task_id"], "trials": 0, "successes": 0, "excluded": 0,
                                           "terminations": {}})
        r["trials"] += 1
        r["successes"] += int(e["success"])
        r["excluded"] += int(_outcome(e) in EXCLUDED)
        r["terminations"][e["termination"]] = r["terminations"].get(e["termination"], 0) + 1
    return list(rows.values())


def per_task_success(episodes: list[dict[str, Any]]) -> dict[str, float]:
    """task -> mean success over its scored trials: what the before/after intervals resample."""
    by_task: dict[str, list[int]] = {}
    for e in episodes:
        if e["outcome"] in ("success", "failure"):
            by_task.setdefault(e["task_id"], []).append(int(e["success"]))
    return {t: sum(v) / len(v) for t, v in sorted(by_task.items())}
