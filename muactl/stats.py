"""Intervals for pass^1: a percentile bootstrap over tasks, and over training seeds when there are several.

Results here are small samples (20 test tasks, a few seeds), so a point estimate alone misleads: a 0.05 move
on 20 tasks is one task. Every success figure that compares models comes with a 95% interval from this
module; a paired difference (the same tasks under two models) resamples the tasks once for both, which is
what makes a small gain separable at all.
"""

from __future__ import annotations

import random

Outcomes = dict[str, dict[str, float]]  # group (a training seed) -> task -> success in [0, 1]


def bootstrap(outcomes: Outcomes, reps: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """(mean, low, high) of success over groups and the tasks every group has, with a 95% interval from
    resampling groups, then tasks (the same task draw for every group: they share the task set)."""
    groups = sorted(outcomes)
    tasks = sorted(set.intersection(*(set(outcomes[g]) for g in groups))) if groups else []
    if not tasks:
        nan = float("nan")
        return nan, nan, nan
    point = _mean(outcomes[g][t] for g in groups for t in tasks)
    rng = random.Random(seed)
    draws = []
    for _ in range(reps):
        gs = [rng.choice(groups) for _ in groups]
        ts = [rng.choice(tasks) for _ in tasks]
        draws.append(_mean(outcomes[g][t] for g in gs for t in ts))
    draws.sort()
    return point, draws[int(0.025 * reps)], draws[int(0.975 * reps) - 1]


def paired(after: Outcomes, before: Outcomes, reps: int = 4000, seed: int = 0) -> tuple[float, float, float]:
    """The bootstrap of after - before over the groups and tasks both have."""
    diff = {g: {t: after[g][t] - before[g][t] for t in set(after[g]) & set(before[g])}
            for g in set(after) & set(before)}
    return bootstrap({g: d for g, d in diff.items() if d}, reps, seed)


def verdict(low: float, high: float) -> str:
    """Plain words for a difference's interval."""
    if low > 0:
        return "a gain: the interval excludes 0"
    if high < 0:
        return "a loss: the interval excludes 0"
    return "within noise: the interval includes 0"


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs)
