"""What a task pays: SQL assertions over a final state (also used by validate's gold replay) and the
episode reward with its breakdown (README, "Episodes and rewards")."""

from __future__ import annotations

import hashlib
import json
import math
import re
import sqlite3
from collections import OrderedDict
from decimal import Decimal
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
    """Evaluate one assertion (SQL, or a read-only tool call) on an environment's state. Returns (holds,
    explanation)."""
    if assertion.call is not None:
        name, args = m.call_parts(assertion.call)
        result = env.call(name, args)  # validate makes sure the tool writes nothing
        if result.error:
            return False, f"{name} failed: {result.content}"
        got = decode_json_text(result.content)
        if isinstance(got, str):
            try:
                got = json.loads(got)  # true, false, numbers
            except ValueError:
                pass
    else:
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


# ---------------------------------------------------------------- episode reward (README, "Episodes and rewards")

GOLD_CACHE_SIZE = 4096  # gold end states kept; a GRPO run draws fresh template tasks for hours
_GOLD: OrderedDict[str, tuple[str, dict]] = OrderedDict()


def gold_actions(task, domain) -> list:
    """The calls whose end state is the right outcome: the gold path, without its writes when the task's
    user declines them (user.consent: false)."""
    actions = task.task.expect.actions
    if task.task.user.consent:
        return actions
    from .agents.oracle import _writes

    return [c for c in actions if not _writes(domain, next(iter(c)))]


def _gold_key(task, domain) -> str:
    """The gold state depends on the database the task runs on and on its setup and gold actions, not
    on its id: two tasks (or two versions of one task) with one id but other actions differ."""
    calls = json.dumps([task.task.setup, gold_actions(task, domain)], sort_keys=True, default=str)
    return hashlib.sha256(f"{template_key(domain)}:{calls}".encode()).hexdigest()


def _gold_state(task, domain) -> tuple[str, dict]:
    """Hash and row difference to the template after the task's setup and gold actions on a fresh
    sandbox (cached by content, least recently used dropped first)."""
    key = _gold_key(task, domain)
    if key in _GOLD:
        _GOLD.move_to_end(key)
        return _GOLD[key]
    env = domain.environment()
    try:
        env.replay(task.task.setup)
        env.replay(gold_actions(task, domain))
        value = (env.state_hash(), env.state_delta())
    finally:
        env.close()
    _GOLD[key] = value
    if len(_GOLD) > GOLD_CACHE_SIZE:
        _GOLD.popitem(last=False)
    return value


def changes_nothing(task, domain) -> bool:
    """Whether the task's correct outcome is "no change": its gold actions leave the database as the
    setup left it (refusals, questions, transfers). An agent that never writes can pass only these."""
    env = domain.environment()
    try:
        env.replay(task.task.setup)
        start = env.state_hash()
    finally:
        env.close()
    return start == gold_hash(task, domain)


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


# A number stands alone: no letter or digit right before or after it, so "12" is not in "112" or in the
# id "a12", and "$50" is not in "$500". Thousands separators are only commas between groups of three.
_TOKEN = re.compile(r"(?<![^\W_])(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![^\W_])|[^\W_]+")


def tokens(text: str) -> list[str | Decimal]:
    """Words (lower-cased) and numbers (as Decimals, so 1,000 = 1000 = 1000.00) of a text; punctuation,
    symbols, underscores and spacing are separators."""
    out: list[str | Decimal] = []
    for mt in _TOKEN.finditer(text.lower()):
        out.append(Decimal(mt["num"].replace(",", "")) if mt["num"] else mt[0])
    return out


def _same(a: str | Decimal, b: str | Decimal) -> bool:
    return type(a) is type(b) and a == b


def _said(required: str, shown: list[str]) -> bool:
    want = tokens(required)
    if not want:  # nothing but punctuation: compare the bare text
        bare = "".join(required.split())
        return bool(bare) and any(bare in "".join(t.split()) for t in shown)
    for text in shown:
        got = tokens(text)
        for i in range(len(got) - len(want) + 1):
            if all(_same(g, w) for g, w in zip(got[i:i + len(want)], want)):
                return True
    return False


def _leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [] if value is None else [json.dumps(value) if isinstance(value, bool) else str(value)]


def output_said(required: str, shown: list[str]) -> bool:
    """A required output counts when its tokens appear, in order and contiguous, in one message the
    user was shown (see `tokens`). A JSON list or object (a template's list value) counts when each of
    its values does, in any message and order."""
    try:
        value = json.loads(required)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, (list, dict)) and _leaves(value):
        return all(_said(leaf, shown) for leaf in _leaves(value))
    return _said(required, shown)


def shown_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The agent's words the user saw: its text turns, not the domain's fixed greeting (see
    `shown_to_user`)."""
    from .env.user import shown_to_user

    return [m["content"] for m in messages if shown_to_user(m) and not m.get("fixed")]


def ended_as_expected(task, episode) -> bool:
    """A transfer task ends with the agent's transfer tool call; every other task with the user's stop.
    The user's own ###TRANSFER### (termination user_transfer) earns nothing."""
    return episode.termination == ("transfer" if task.task.expect.transfer else "user_stop")


def score(task, domain, env, episode, nl_verdicts: list[dict[str, Any]] | None = None) -> tuple[float, dict[str, Any]]:
    """1.0 only if the episode ended as expected, the final DB equals the gold replay's (when the task
    compares it), every required
    output was shown to the user, every SQL assertion holds and, when a judge was given
    (`nl_verdicts`), every natural-language assertion holds. Returns the value and its breakdown."""
    expect = task.task.expect
    ended = ended_as_expected(task, episode)
    db_match = episode.final_hash == gold_hash(task, domain)
    shown = shown_texts(episode.messages)
    outputs = {o: output_said(o, shown) for o in expect.outputs}
    asserts = []
    for a in expect.assert_:
        ok, why = assertion_result(env, a)
        asserts.append({"query": a.query or json.dumps(a.call, default=str), "ok": ok, "why": why})
    judged = nl_verdicts is not None and bool(expect.nl_assertions)
    nl = nl_verdicts if judged else [{"assertion": s, "ok": None, "reason": "not judged (no --judge)"}
                                     for s in expect.nl_assertions]
    success = (ended and (db_match or not expect.compare_db) and all(outputs.values()) and all(a["ok"] for a in asserts)
               and (not judged or all(v["ok"] for v in nl)))
    breakdown = {"ended_normally": ended, "termination": episode.termination, "db_match": db_match, "db_compared": expect.compare_db,
                 "outputs": outputs, "assertions": asserts, "nl_assertions": nl, "nl_judged": judged,
                 "success": success, "partial": partial_credit(task, episode)}
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
