"""A task's gold end state (env/gold.py): computed once per key however many tool threads ask at once,
and a setup or gold action that fails when replayed is an error naming the task and the call. Real
built-in domains, real SQLite; the episode test's agent is the oracle (no model)."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sqlite3
import threading
from collections import OrderedDict

import pytest

from muactl.env import gold
from muactl.errors import GoldReplayFailed


def with_calls(t, setup=None, actions=None):
    """The task with other setup or gold actions (its id stays: the gold cache keys by content)."""
    expect = t.task.expect.model_copy(update={"actions": actions}) if actions is not None else t.task.expect
    task = t.task.model_copy(update={"expect": expect, **({"setup": setup} if setup is not None else {})})
    return dataclasses.replace(t, task=task)


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(gold, "_GOLD", OrderedDict())


def count_replays(monkeypatch) -> list[int]:
    """Counts the sandboxes gold opens: one per gold state computed."""
    opened = [0]
    real = gold.new_env

    def counting(domain, *a, **kw):
        opened[0] += 1
        return real(domain, *a, **kw)

    monkeypatch.setattr(gold, "new_env", counting)
    return opened


def hammer(tasks, domain, threads: int = 8, rounds: int = 3) -> list[BaseException]:
    """Every thread asks for every task's gold hash, in its own order, all starting at once."""
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def worker(seed: int) -> None:
        order = [t for _ in range(rounds) for t in tasks]
        random.Random(seed).shuffle(order)
        start.wait()
        try:
            for t in order:
                gold.gold_hash(t, domain)
        except BaseException as e:  # noqa: BLE001 - a race shows up as any error; the test lists them
            errors.append(e)

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return errors


def test_concurrent_readers_compute_each_gold_state_once(bank, fresh_cache, monkeypatch):
    tasks = [t for t in bank.tasks if t.task.expect.actions][:12]
    keys = {gold._gold_key(t, bank.compiled) for t in tasks}
    opened = count_replays(monkeypatch)
    assert hammer(tasks, bank.compiled) == []
    assert opened[0] == len(keys)  # without the lock, threads that missed together replayed it again
    want = {t.task.id: gold.gold_hash(t, bank.compiled) for t in tasks}
    assert opened[0] == len(keys)  # all cached now

    # a cache smaller than the working set: entries are evicted while other threads read them
    monkeypatch.setattr(gold, "_GOLD", OrderedDict())
    monkeypatch.setattr(gold, "GOLD_CACHE_SIZE", 3)
    assert hammer(tasks, bank.compiled) == []
    assert len(gold._GOLD) <= 3 and {t.task.id: gold.gold_hash(t, bank.compiled) for t in tasks} == want


def test_a_gold_action_that_fails_on_replay_is_an_error_naming_task_and_call(bank, fresh_cache):
    t = bank.task("move-mia")
    bad = with_calls(t, actions=[*t.task.expect.actions, {"transfer_funds": {"from_account": "zz9", "to_account": "a305",
                                                                           "amount": 5}}])
    n = len(t.task.expect.actions) + 1
    with pytest.raises(GoldReplayFailed, match=rf"task move-mia: gold action {n} \(transfer_funds .*'zz9'.*\) fails with "
                                               r"'Account zz9 does not exist.' when replayed"):
        gold.gold_hash(bad, bank.compiled)
    setup = with_calls(t, setup=[{"close_account": {"account_id": "nope"}}])
    with pytest.raises(GoldReplayFailed, match=r"task move-mia: setup 1 \(close_account .*\) fails"):
        gold.gold_hash(setup, bank.compiled)
    with pytest.raises(GoldReplayFailed, match=r"task move-mia: setup 1"):
        gold.changes_nothing(setup, bank.compiled)
    assert gold.gold_hash(t, bank.compiled)  # the task as written still replays


def test_an_episode_whose_gold_no_longer_replays_is_infra_error_and_closes_its_sandbox(bank, fresh_cache):
    from muactl.env.sandbox import new_env
    from muactl.episode.agents.oracle import OracleAgent
    from muactl.episode.rollout import RolloutConfig, run_episode
    from muactl.episode.user import ScriptedUser

    t = bank.task("move-mia")
    bad = with_calls(t, actions=[*t.task.expect.actions, {"close_account": {"account_id": "nope"}}])
    env = new_env(bank.compiled)
    ep = asyncio.run(run_episode(bad, bank.compiled, OracleAgent(), ScriptedUser(), RolloutConfig(), env=env))
    assert ep.outcome == "infra_error" and not ep.counted and ep.reward == 0.0
    assert ep.error.startswith("scoring failed: task move-mia: gold action") and "close_account" in ep.error
    with pytest.raises(sqlite3.ProgrammingError):
        env.conn.execute("SELECT 1")
    # turn-level shaping replays the gold path before the first turn: the same failure, before any turn
    ep = asyncio.run(run_episode(bad, bank.compiled, OracleAgent(), ScriptedUser(), RolloutConfig(track_progress=True)))
    assert ep.outcome == "infra_error" and ep.turns == 0 and ep.error.startswith("task move-mia: gold action")
