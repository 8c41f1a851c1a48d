"""A GRPO episode's score: the binary task reward (MUA-RL), or UserRL's turn-level shaping (see grpo.py's docstring)."""

from __future__ import annotations

from typing import Any


def turn_rewards(records: list[dict[str, Any]], turns: int, final: float,
                 evidence: list[int | None] | None = None) -> list[float]:
    """Per agent turn: progress toward the gold state minus a small penalty per tool error; the task
    reward lands on the last turn. Progress is the share of gold rows a turn's writes set right, plus,
    for the task's evidence (`evidence`: the turn each required output and required call was first met,
    None when never; reward.evidence_turns), 1/len(evidence) on the turn each item was met. Without the
    evidence a task whose right outcome writes nothing (a refusal, a question, a transfer) would have no
    progress to pay, so acting there would earn only its tool-error penalties."""
    out = [0.0] * max(1, turns)
    d0 = next((r["distance_before"] for r in records if "distance_before" in r), None)
    for r in records:
        t = min(max(r["turn"] - 1, 0), len(out) - 1)
        if "distance_before" in r and "distance_after" in r and d0:
            out[t] += (r["distance_before"] - r["distance_after"]) / max(d0, 1)
        if r.get("error"):
            out[t] -= 0.1
    for turn in evidence or []:
        if turn is not None:
            out[min(max(turn - 1, 0), len(out) - 1)] += 1 / len(evidence)
    out[-1] += final
    return out


def turn_credit(rewards: list[float], mode: str, gamma: float) -> list[float]:
    T = len(rewards)
    if mode == "equalized":
        return [sum(rewards) / T] * T
    if mode == "exponential":
        return [gamma ** (T - 1 - t) * r for t, r in enumerate(rewards)]
    if mode == "r2g":
        out, g = [0.0] * T, 0.0
        for t in range(T - 1, -1, -1):
            g = rewards[t] + gamma * g
            out[t] = g
        return out
    raise ValueError(f"unknown turn_credit '{mode}' (equalized | exponential | r2g)")


def trajectory_score(credits: list[float], mode: str) -> float:
    if mode == "mean":
        return sum(credits) / len(credits)
    if mode == "r2g":
        return credits[0]
    raise ValueError(f"unknown trajectory_score '{mode}' (mean | r2g)")


def episode_reward(ep, g) -> float | None:
    if not ep.counted:
        return None
    if g.reward == "binary":
        return float(ep.reward)
    if g.reward == "userrl":
        rewards = turn_rewards(ep.records, ep.turns, float(ep.reward), ep.breakdown.get("evidence_turns"))
        return trajectory_score(turn_credit(rewards, g.turn_credit, g.gamma), g.trajectory_score)
    raise ValueError(f"unknown grpo.reward '{g.reward}' (binary | userrl)")
