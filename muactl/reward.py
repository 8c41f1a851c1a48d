"""Task success. Issue-2 scope: SQL assertions over a final state (used by validate's gold replay)."""

from __future__ import annotations

import math
import sqlite3
from typing import Any

from .env.sandbox import decode_json_text
from .env.statehash import distance as delta_distance
from .env.statehash import template_key
from .spec import models as m


def values_equal(got: Any, want: Any) -> bool:
    got = decode_json_text(got)
    if isinstance(want, bool) and isinstance(got, int):
        return bool(got) == want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)) and not isinstance(got, bool):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-6)
    if isinstance(got, (int, float)) and isinstance(want, str):
        try:
            return math.isclose(float(want), got, rel_tol=1e-9, abs_tol=1e-6)
        except ValueError:
            return False
    return got == want


def assertion_result(env, assertion: m.Assertion) -> tuple[bool, str]:
    """Evaluate one SQL assertion on an environment's state. Returns (holds, explanation)."""
    try:
        _, rows = env.select(assertion.query)
    except sqlite3.Error as e:
        return False, f"query failed: {e}"
    got = rows[0][0] if rows else None
    if "equals" in assertion.model_fields_set:
        ok = values_equal(got, assertion.equals)
        return ok, "" if ok else f"got {got!r}, expected {assertion.equals!r}"
    ok = bool(got)
    return ok, "" if ok else f"got {got!r}, expected a true value"


# ---------------------------------------------------------------- episode reward (DESIGN.md, "Reward")

_GOLD: dict[tuple[str, str], tuple[str, dict]] = {}


def gold_actions(task, domain) -> list:
    """The calls whose end state is the right outcome: the gold path, without its writes when the task's
    user declines them (user.consent: false)."""
    actions = task.task.expect.actions
    if task.task.user.consent:
        return actions
    from .agents.oracle import _writes

    return [c for c in actions if not _writes(domain, next(iter(c)))]


def _gold_state(task, domain) -> tuple[str, dict]:
    """Hash and row difference to the template after the task's setup and gold actions on a fresh
    sandbox (cached per task and template)."""
    key = (template_key(domain), task.task.id)
    if key not in _GOLD:
        env = domain.environment()
        env.replay(task.task.setup)
        env.replay(gold_actions(task, domain))
        _GOLD[key] = (env.state_hash(), env.state_delta())
        env.close()
    return _GOLD[key]


def gold_hash(task, domain) -> str:
    """State hash of the task's gold end state."""
    return _gold_state(task, domain)[0]


class GoldDistance:
    """How many rows differ between a state and the task's gold end state (for turn-level shaping).
    Both are kept as differences to the template, so this costs the rows they changed."""

    def __init__(self, task, domain):
        self.gold = _gold_state(task, domain)[1]

    def distance(self, env) -> int:
        return delta_distance(env.state_delta(), self.gold)


def _norm(text: str) -> str:
    import re

    text = re.sub(r"(?<=\d),(?=\d{3}\b)", "", text.lower())
    return " ".join(text.split())


def output_said(required: str, agent_texts: list[str]) -> bool:
    """A required output counts when it appears in an agent message (case, spacing and thousands
    separators ignored)."""
    want = _norm(required)
    return any(want in _norm(t) for t in agent_texts)


def score(task, domain, env, episode) -> tuple[float, dict[str, Any]]:
    """1.0 only if the episode ended normally, the final DB equals the gold replay's, every required
    output was said and every assertion holds. Returns the value and its breakdown."""
    expect = task.task.expect
    allowed = {"user_stop"} | ({"transfer"} if expect.transfer else set())
    ended = episode.termination in allowed and (not expect.transfer or episode.termination == "transfer")
    db_match = episode.final_hash == gold_hash(task, domain)
    texts = [m.get("content") or "" for m in episode.messages if m["role"] == "assistant" and not m.get("fixed")]
    outputs = {o: output_said(o, texts) for o in expect.outputs}
    asserts = []
    for a in expect.assert_:
        ok, why = assertion_result(env, a)
        asserts.append({"query": a.query, "ok": ok, "why": why})
    success = ended and db_match and all(outputs.values()) and all(a["ok"] for a in asserts)
    breakdown = {"ended_normally": ended, "termination": episode.termination, "db_match": db_match,
                 "outputs": outputs, "assertions": asserts, "success": success,
                 "partial": partial_credit(task, episode)}
    return (1.0 if success else 0.0), breakdown


def partial_credit(task, episode) -> dict[str, float | None]:
    """Signals that move long before full success does (DESIGN.md, "What a tiny model can learn"):
    whether the agent's first tool call is the gold path's first (same tool, same arguments), and the
    share of gold calls it made. Not part of the reward."""
    from .spec.models import call_parts

    gold = [call_parts(c) for c in task.task.expect.actions]
    made = [(c["name"], c["arguments"]) for m in episode.messages if m["role"] == "assistant"
            for c in m.get("tool_calls") or []]
    if not gold:
        return {"first_call_right": None, "gold_calls_made": None}
    return {"first_call_right": float(bool(made) and made[0] == gold[0]),
            "gold_calls_made": sum(g in made for g in gold) / len(gold)}
