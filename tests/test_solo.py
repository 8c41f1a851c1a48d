"""Solo tasks (`solo: true`, issue 29): no user after the goal. The goal is the one user message, no simulator
is asked for anything, and the agent's first reply without a tool call ends the episode (agent_done).
Any domain may declare one; here the built-in bank's own tasks, made solo. The agents are muactl's oracle
and small scripted agents (no model)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from muactl.episode.agents.base import Agent, AgentReply
from muactl.episode.agents.oracle import OracleAgent
from muactl.episode.rollout import RolloutConfig, run_episode
from muactl.episode.user import UserSimulator
from muactl.spec.models import Task


class NoUser(UserSimulator):
    """A simulator a solo episode must never ask: any call fails the test."""

    async def respond(self, ctx):
        raise AssertionError("a solo task asked its user simulator for a message")


class SaysDone(Agent):
    name = "says-done"

    async def act(self, ctx) -> AgentReply:
        return AgentReply("All done.")


def solo(spec, **changes):
    return dataclasses.replace(spec, task=Task.model_validate({**spec.task.model_dump(by_alias=True, exclude_none=True),
                                                                "solo": True, **changes}))


@pytest.fixture(scope="module")
def move(bank):
    return solo(bank.task("move-mia"))


def test_a_solo_task_sends_its_goal_once_and_ends_on_the_agents_reply(bank, move):
    ep = asyncio.run(run_episode(move, bank.compiled, OracleAgent(), NoUser(), RolloutConfig()))
    assert ep.termination == "agent_done" and ep.reward == 1.0, ep.breakdown
    users = [m for m in ep.messages if m["role"] == "user"]
    assert [m["content"] for m in users] == [move.task.user.reason]  # verbatim, no greeting before it
    assert ep.messages[1]["role"] == "user"
    # nobody to ask: the oracle writes without asking for consent first
    assert not any("Shall I proceed" in (m.get("content") or "") for m in ep.messages)
    assert ep.fidelity and all(v is None for v in ep.fidelity.values())  # no simulated user to judge


def test_a_solo_agent_that_stops_before_the_work_earns_nothing(bank, move):
    ep = asyncio.run(run_episode(move, bank.compiled, SaysDone(), NoUser(), RolloutConfig()))
    assert ep.termination == "agent_done" and ep.turns == 1
    assert ep.reward == 0.0 and ep.breakdown["ended_normally"] and not ep.breakdown["db_match"]


def test_a_solo_task_that_runs_out_of_turns_did_not_end_normally(bank, move):
    class Looker(Agent):  # looks the customer up for ever, never says it is done
        async def act(self, ctx) -> AgentReply:
            return AgentReply("", [{"name": "find_customer", "arguments": {"name": "Mia"}}])

    ep = asyncio.run(run_episode(move, bank.compiled, Looker(), NoUser(), RolloutConfig(max_turns=3)))
    assert ep.termination == "max_turns" and ep.tool_errors == 0
    assert ep.reward == 0.0 and not ep.breakdown["ended_normally"]


def test_the_same_task_not_solo_still_ends_with_the_users_stop(bank):
    from muactl.episode.user import ScriptedUser

    ep = asyncio.run(run_episode(bank.task("move-mia"), bank.compiled, OracleAgent(), ScriptedUser(), RolloutConfig()))
    assert ep.termination == "user_stop" and ep.reward == 1.0


def test_solo_is_in_the_schema():
    from muactl.spec.models import Task as T

    text = T.model_json_schema()["properties"]["solo"]["description"]
    assert "agent_done" in text and "no user" in text.lower()
