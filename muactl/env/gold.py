"""A task's right outcome on a sandbox: its SQL assertions, and the end state its gold actions leave
(cached by content, safe to read from many threads). The validator, task templates and the episode reward
all judge by these; a setup or gold action that fails when replayed is an error naming the task and call."""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading
from collections import OrderedDict
from typing import Any

from ..errors import GoldReplayFailed
from ..limits import quote
from ..spec import models as m
from .sandbox import OUTSIDE_KINDS, new_env
from .statehash import distance as delta_distance
from .statehash import template_key
from .values import decode_json_text


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


GOLD_CACHE_SIZE = 4096  # gold end states kept; a GRPO run draws fresh template tasks for hours
# read and filled from tool threads (episodes score off the event loop): _GOLD_LOCK guards the dict, and
# one lock per key being computed makes a second caller wait for the first's replay instead of repeating it
_GOLD: OrderedDict[str, tuple[str, dict]] = OrderedDict()
_GOLD_LOCK = threading.Lock()
_COMPUTING: dict[str, threading.Lock] = {}


def gold_actions(task, domain) -> list:
    """The calls whose end state is the right outcome: the gold path, without its writes when the task's
    user declines them (user.consent: false)."""
    actions = task.expect.actions
    if task.user.consent:
        return actions
    return [c for c in actions if not domain.writes(next(iter(c)))]


def _gold_key(task, domain, synced: bool = True) -> str:
    """The gold state depends on the database the task runs on and on its setup and gold actions, not
    on its id: two tasks (or two versions of one task) with one id but other actions differ."""
    calls = json.dumps([task.task.setup, gold_actions(task.task, domain)], sort_keys=True, default=str)
    return hashlib.sha256(f"{template_key(domain)}:{calls}{'' if synced else ':unsynced'}".encode()).hexdigest()


def _gold_state(task, domain, synced: bool = True) -> tuple[str, dict]:
    """Hash and row difference to the template after the task's setup and gold actions on a fresh
    sandbox (cached by content, least recently used dropped first, computed once per key)."""
    key = _gold_key(task, domain, synced)
    with _GOLD_LOCK:
        hit = _cached(key)
        if hit is not None:
            return hit
        computing = _COMPUTING.setdefault(key, threading.Lock())
    with computing:
        with _GOLD_LOCK:
            hit = _cached(key)
        if hit is not None:  # another thread replayed it while this one waited
            return hit
        try:
            value = _replay_gold(task, domain, synced)
        finally:
            with _GOLD_LOCK:
                _COMPUTING.pop(key, None)
        with _GOLD_LOCK:
            _GOLD[key] = value
            if len(_GOLD) > GOLD_CACHE_SIZE:
                _GOLD.popitem(last=False)
    return value


def _cached(key: str) -> tuple[str, dict] | None:
    """The cached gold state of `key`, marked recently used (the caller holds _GOLD_LOCK)."""
    value = _GOLD.get(key)
    if value is not None:
        _GOLD.move_to_end(key)
    return value


def _replay_gold(task, domain, synced: bool = True) -> tuple[str, dict]:
    env = new_env(domain)
    try:
        replay_checked(env, task, "setup", task.task.setup)
        env.after_write = synced
        replay_checked(env, task, "gold action", gold_actions(task.task, domain))
        return env.state_hash(), env.state_delta()
    finally:
        env.close()


def replay_checked(env, task, group: str, calls: list) -> None:
    """Play `calls` (a task's setup or gold actions) on env; GoldReplayFailed names the task and the call
    that failed, or that succeeded where the task expects it to fail. Simulated and MCP tools run only
    inside episodes and change no sandbox state: they are skipped, as `muactl validate` does."""
    for i, call in enumerate(calls, 1):
        name, args = m.call_parts(call)
        tool = env.domain.tools.get(name)
        if tool is not None and tool.kind in OUTSIDE_KINDS:
            continue
        result = env.call(name, args)
        expected = m.expected_error(call)
        got = result.content.removeprefix("Error: ") if result.error else None
        if expected is None and result.error:
            why = f"fails with {got!r}"
        elif expected is not None and got != expected:
            why = f"is expected to fail with {expected!r} but {f'fails with {got!r}' if result.error else 'succeeds'}"
        else:
            continue
        raise GoldReplayFailed(f"task {task.task.id}: {group} {i} ({name} {quote(args, 200)}) {why} when replayed, so "
                               "its right end state is unknown (muactl validate names the same call)")


_TURNS: OrderedDict[str, list[tuple[str, list[str]]]] = OrderedDict()


def gold_turns(task, domain) -> list[tuple[str, list[str]]]:
    """Per fixed turn of the task: the state hash after the setup and the gold calls of that turn and every
    earlier one, and the texts of that turn's gold results (what BFCL's state and response checks compare
    with). Cached by content; a call that fails on the replay is GoldReplayFailed, as for gold_hash."""
    key = hashlib.sha256(f"{template_key(domain)}:turns:".encode() + json.dumps(
        [task.task.setup, [t.actions for t in task.task.turns]], sort_keys=True, default=str).encode()).hexdigest()
    with _GOLD_LOCK:
        hit = _TURNS.get(key)
    if hit is not None:
        return hit
    env = new_env(domain)
    try:
        replay_checked(env, task, "setup", task.task.setup)
        out = []
        for k, turn in enumerate(task.task.turns):
            results = [env.call(*m.call_parts(c)) for c in turn.actions]
            bad = next((r for c, r in zip(turn.actions, results) if r.error and m.expected_error(c) is None), None)
            if bad is not None:
                raise GoldReplayFailed(f"task {task.task.id}: a gold call of turn {k} fails with {bad.content!r} when "
                                       "replayed, so the turn's right state is unknown (muactl validate names it)")
            out.append((env.state_hash(), [r.content for r in results]))
    finally:
        env.close()
    with _GOLD_LOCK:
        _TURNS[key] = out
        if len(_TURNS) > GOLD_CACHE_SIZE:
            _TURNS.popitem(last=False)
    return out


def changes_nothing(task, domain) -> bool:
    """Whether the task's correct outcome is "no change": its gold actions leave the database as the
    setup left it (refusals, questions, transfers). An agent that never writes can pass only these."""
    env = new_env(domain)
    try:
        replay_checked(env, task, "setup", task.task.setup)
        start = env.state_hash()
    finally:
        env.close()
    return start == gold_hash(task, domain)


def gold_hash(task, domain) -> str:
    """State hash of the task's gold end state."""
    return _gold_state(task, domain)[0]


def unsynced_gold_hash(task, domain) -> str:
    """State hash after the setup and the gold actions played without database.after_write: the end state
    τ²'s evaluator compares with (it plays gold actions without its sync_tools). The same as gold_hash
    where the domain has no after_write."""
    if not domain.spec.domain.database.after_write:
        return gold_hash(task, domain)
    return _gold_state(task, domain, synced=False)[0]


class GoldDistance:
    """How many rows differ between a state and the task's gold end state (for turn-level shaping).
    Both are kept as differences to the template, so this costs the rows they changed."""

    def __init__(self, task, domain):
        self.gold = _gold_state(task, domain)[1]

    def distance(self, env) -> int:
        return delta_distance(env.state_delta(), self.gold)
