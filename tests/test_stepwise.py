"""The episode engine cancelled from outside (run_many's callers, OpenEnv's abandoned sessions) and
driven step by step (stepwise.py): the real bank domain, real sandboxes and the scripted user; the
agents are stand-ins that wait or answer from the test (no model)."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from muactl.env.sandbox import new_env
from muactl.episode.agents.base import Agent, AgentReply
from muactl.episode.rollout import RolloutConfig, run_episode
from muactl.episode.stepwise import StepwiseEpisode
from muactl.episode.user import ScriptedUser
from muactl.errors import UsageError


class Waiting(Agent):
    """Never answers: its turn lasts until the episode is cancelled."""

    async def act(self, ctx) -> AgentReply:
        await asyncio.Event().wait()


def closed(env) -> bool:
    try:
        env.conn.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return True
    return False


def test_a_cancelled_episode_is_cancelled_and_closes_its_sandbox(bank):
    async def main():
        env = new_env(bank.compiled)
        run = asyncio.ensure_future(run_episode(bank.task("move-mia"), bank.compiled, Waiting(), ScriptedUser(),
                                                RolloutConfig(), env=env))
        await asyncio.sleep(0.2)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        return env

    env = asyncio.run(main())
    assert closed(env)


def test_cancelling_a_stepwise_episode_ends_in_cancellation(bank):
    """In every state: not started, waiting for the agent, over. The run ends cancelled (no other
    exception left for the loop to report) and the sandbox is closed."""
    async def main():
        task, cfg = bank.task("move-mia"), RolloutConfig()
        fresh = StepwiseEpisode(task, bank.compiled, ScriptedUser(), cfg)
        fresh.cancel()
        waiting = StepwiseEpisode(task, bank.compiled, ScriptedUser(), cfg)
        await waiting.start()
        waiting.cancel()
        over = StepwiseEpisode(task, bank.compiled, ScriptedUser(), RolloutConfig(max_turns=1))
        await over.start()
        assert (await over.step(AgentReply("Hello?", []))).done  # the user answers; a second turn is past max_turns
        over.cancel()
        await asyncio.sleep(0.1)
        return fresh, waiting, over

    fresh, waiting, over = asyncio.run(main())
    for ep in (fresh, waiting, over):
        assert closed(ep.sandbox)
    assert waiting.done and waiting._run.cancelled()


def test_a_step_after_the_timeout_answers_with_the_ended_episode(bank):
    async def main():
        ep = StepwiseEpisode(bank.task("move-mia"), bank.compiled, ScriptedUser(), RolloutConfig(timeout_s=0.2))
        await ep.start()
        await asyncio.sleep(0.4)
        turn = await ep.step(AgentReply("Could you give me your name?", []))
        with pytest.raises(UsageError, match="the episode is over"):
            await ep.step(AgentReply("Hello?", []))
        return turn

    turn = asyncio.run(main())
    assert turn.done and turn.episode.termination == "timeout"


def test_a_stepwise_episode_needs_one_party_played_from_outside(bank):
    from muactl.episode.agents.oracle import OracleAgent

    with pytest.raises(UsageError, match="one party played from outside"):
        StepwiseEpisode(bank.task("move-mia"), bank.compiled, ScriptedUser(), RolloutConfig(), agent=OracleAgent())
