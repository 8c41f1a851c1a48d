"""UserRL's turn-level shaping (train/shaping.py) on real episodes of the bank's task templates: real SQLite,
the scripted user, and the built-in oracle and adversary agents as policies (no model)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from muactl.domain.task_templates import domain_for, draw_stream
from muactl.episode.agents import make_agent
from muactl.episode.rollout import Job, RolloutConfig, run_many
from muactl.episode.user import ScriptedUser
from muactl.train.shaping import episode_reward, turn_rewards

USERRL = [SimpleNamespace(reward="userrl", turn_credit=c, gamma=0.9, trajectory_score=s)
          for c, s in (("equalized", "mean"), ("exponential", "mean"), ("r2g", "r2g"))]


def episodes(opened, template: str, agent: str):
    tasks = draw_stream(opened, f"template:{template}", 4, 5, "random", "train").tasks
    jobs = [Job(t, 0, domain_for(opened, t)) for t in tasks]
    return asyncio.run(run_many(jobs, opened.compiled, make_agent(agent), ScriptedUser,
                                RolloutConfig(track_progress=True), concurrency=4))


def test_evidence_lands_on_the_turn_it_was_met():
    assert turn_rewards([], 4, final=0.0, evidence=[2, None, 4, 4]) == pytest.approx([0.0, 0.25, 0.0, 0.5])
    assert turn_rewards([], 3, final=1.0, evidence=None) == [0.0, 0.0, 1.0]


@pytest.mark.parametrize("template", ["refuse-overdraft", "refuse-close-nonempty", "human"])
def test_acting_on_a_task_that_writes_nothing_earns_more_than_doing_nothing(bank, template):
    """The number-sprayer makes the required look-ups and then fails (it gives no reason): under userrl it
    scores above an agent that does nothing, and below the oracle, which succeeds. Progress used to need a
    write, so there the look-ups earned nothing and both failures scored alike."""
    idle, looked, right = (episodes(bank, template, a) for a in ("adversary:do-nothing", "adversary:number-sprayer",
                                                                  "oracle"))
    assert all(e.reward == 0 for e in idle + looked) and all(e.reward == 1 for e in right)
    for g in USERRL:
        for a, b, c in zip(idle, looked, right):
            assert episode_reward(a, g) < episode_reward(b, g) < episode_reward(c, g), (g, template)
