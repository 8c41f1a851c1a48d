"""Fixed user turns (`turns:`, issue 29's BFCL multi-turn): scripted user messages sent one per turn, a turn ending
on the agent's reply without a tool call, BFCL's checks after each turn (state against the gold prefix, gold
results among the agent's), its step limit per turn, and tools that appear at a later turn. Any domain may
declare them; here the built-in bank's move-mia task, cut into turns. The agents are muactl's oracle and
small scripted agents (no model); no simulator is asked for anything."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from muactl.episode.agents.base import Agent, AgentReply
from muactl.episode.agents.oracle import OracleAgent
from muactl.episode.rollout import RolloutConfig, run_episode
from muactl.episode.user import UserSimulator
from muactl.spec.models import Task

FIND = {"find_customer": {"name": "Mia"}}
LIST = {"list_accounts": {"customer_id": "c84"}}
MOVE = {"transfer_funds": {"from_account": "a778", "to_account": "a295", "amount": 150}}


class NoUser(UserSimulator):
    """A simulator a task with fixed turns must never ask: any call fails the test."""

    async def respond(self, ctx):
        raise AssertionError("a task with fixed turns asked its user simulator for a message")


class Script(Agent):
    """Plays fixed replies in order: a list of calls (one step) or a text (a reply without calls)."""

    name = "script"

    def __init__(self, steps):
        self.steps = list(steps)
        self.seen_tools: list[list[str]] = []

    async def act(self, ctx) -> AgentReply:
        self.seen_tools.append([t["function"]["name"] for t in ctx.tools])
        step = self.steps.pop(0) if self.steps else "Done."
        if isinstance(step, str):
            return AgentReply(step)
        return AgentReply("", [{"name": n, "arguments": a} for c in step for n, a in c.items()])


def in_turns(spec, turns, **changes):
    data = spec.task.model_dump(by_alias=True, exclude_none=True)
    data["expect"] = {k: v for k, v in data["expect"].items() if k != "actions"}
    return dataclasses.replace(spec, task=Task.model_validate({**data, "turns": turns, **changes}))


@pytest.fixture(scope="module")
def turned(bank):
    return in_turns(bank.task("move-mia"), [
        {"message": "I am Mia. Which accounts do I have?", "actions": [FIND, LIST]},
        {"message": "Thanks, I will think about it.", "actions": []},
        {"message": "Move 150 from checking to holiday.", "actions": [MOVE]}])


def run(task, domain, agent, **cfg):
    return asyncio.run(run_episode(task, domain, agent, NoUser(), RolloutConfig(**cfg)))


def test_the_oracle_passes_every_turn_and_the_turns_are_sent_as_written(bank, turned):
    ep = run(turned, bank.compiled, OracleAgent())
    assert ep.termination == "agent_done" and ep.reward == 1.0, ep.breakdown
    assert [m["content"] for m in ep.messages if m["role"] == "user"] == [t.message for t in turned.task.turns]
    assert [t["turn"] for t in ep.breakdown["turns"]] == [0, 2]  # the empty turn is not checked
    assert all(t["ok"] for t in ep.breakdown["turns"])
    assert len(ep.turn_ends) == 3
    assert turned.task.expect.actions == [FIND, LIST, MOVE]  # the gold path is the turns' calls, filled in


def test_the_same_end_state_reached_a_turn_late_fails_that_turn(bank, turned):
    # all the work in the last turn: the end state is the gold one, but turn 0 fails (nothing called; its reads
    # leave the state as it was, so only the state check holds)
    ep = run(turned, bank.compiled, Script(["Hello.", "Ok.", [FIND, LIST, MOVE], "Done."]))
    assert ep.termination == "agent_done" and ep.breakdown["db_match"]
    first, last = ep.breakdown["turns"]
    assert not first["ok"] and not first["called"] and first["state"] and len(first["missing"]) == 2
    assert last["ok"] and ep.reward == 0.0


def test_a_write_made_a_turn_early_fails_the_state_check_of_that_turn(bank, turned):
    ep = run(turned, bank.compiled, Script([[FIND, LIST, MOVE], "Done.", "Ok.", [LIST], "Done."]))
    first, last = ep.breakdown["turns"]
    assert first["called"] and first["response"] and not first["state"]  # results right, state one step ahead
    assert last["ok"]  # its results were all seen by then, and the state is the gold one
    assert ep.reward == 0.0


def test_the_response_check_wants_the_gold_results_among_the_agents(bank, turned):
    # the right state after turn 0 (reads change nothing) but list_accounts never called: its result is missing
    ep = run(turned, bank.compiled, Script([[FIND], "Done.", "Ok.", [MOVE], "Done."]))
    first = ep.breakdown["turns"][0]
    assert first["state"] and first["called"] and not first["response"]
    assert len(first["missing"]) == 1 and "a778" in first["missing"][0]
    assert ep.reward == 0.0


def test_results_from_an_earlier_turn_count_for_a_later_one(bank):
    task = in_turns(bank.task("move-mia"), [{"message": "Find me, Mia.", "actions": [FIND]},
                                            {"message": "Twice, please.", "actions": [FIND, FIND]}], expect={})
    # turn 1's two gold results: one from this turn, one from turn 0
    ep = run(task, bank.compiled, Script([[FIND], "Done.", [FIND], "Done."]))
    assert all(t["ok"] for t in ep.breakdown["turns"]) and ep.reward == 1.0, ep.breakdown
    once = run(task, bank.compiled, Script([[FIND], "Done.", [LIST], "Done."]))  # a multiset: each result used once
    assert not once.breakdown["turns"][1]["response"] and len(once.breakdown["turns"][1]["missing"]) == 1
    assert once.reward == 0.0


def test_a_turn_over_its_step_limit_ends_the_episode(bank, turned):
    ep = run(turned, bank.compiled, Script([[FIND]] * 30), max_turns=3)
    # the 21st step with calls is one over BFCL's 20; the run's max_turns (3) does not cut fixed turns
    assert ep.termination == "max_turns" and ep.turns == 21
    small = in_turns(bank.task("move-mia"), [t.model_dump() for t in turned.task.turns], turn_steps=2)
    ep = run(small, bank.compiled, Script([[FIND]] * 10))
    assert ep.termination == "max_turns" and ep.turns == 3 and not ep.turn_ends
    assert ep.reward == 0.0 and not any(t["ok"] for t in ep.breakdown["turns"])


def test_a_tool_appears_at_its_turn(bank):
    task = in_turns(bank.task("move-mia"), [
        {"message": "I am Mia. Which accounts do I have?", "actions": [FIND, LIST]},
        {"message": "I have updated some more functions you can choose from. What about now?",
         "actions": [MOVE], "tools": ["transfer_funds"]}])
    agent = Script([[MOVE], "Done.", [MOVE], "Done."])
    ep = run(task, bank.compiled, agent)
    assert "transfer_funds" not in agent.seen_tools[0] and "transfer_funds" in agent.seen_tools[2]
    early = next(m for m in ep.messages if m["role"] == "tool")
    assert early["error"] and "unknown tool" in early["content"]  # hidden: refused, nothing moved
    first, second = ep.breakdown["turns"]
    assert not first["response"] and second["ok"]
    ep = run(task, bank.compiled, OracleAgent())
    assert ep.reward == 1.0, ep.breakdown


def test_a_tool_of_the_first_turn_is_there_from_the_start(bank):
    task = in_turns(bank.task("move-mia"), [
        {"message": "I am Mia. Move 150 to savings.", "actions": [FIND, MOVE], "tools": ["transfer_funds"]},
        {"message": "Thanks. Which accounts do I have now?", "actions": [LIST], "tools": ["list_accounts"]}])
    agent = Script([[FIND, MOVE], "Done.", [LIST], "Done."])
    ep = run(task, bank.compiled, agent)
    assert "transfer_funds" in agent.seen_tools[0] and "list_accounts" not in agent.seen_tools[0]
    assert not any(m.get("error") for m in ep.messages if m["role"] == "tool"), ep.messages  # listed, so callable
    assert ep.reward == 1.0, ep.breakdown


def test_turn_problems_are_told(bank):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="turns' actions in order"):
        Task.model_validate({"id": "x", "user": {"reason": "r"}, "turns": [{"message": "a", "actions": [FIND]}],
                             "expect": {"actions": [LIST]}})
    with pytest.raises(ValidationError, match="solo"):
        Task.model_validate({"id": "x", "user": {"reason": "r"}, "solo": True, "turns": [{"message": "a"}]})


def test_validate_names_an_undefined_tool_of_a_turn(bank, tmp_path):
    from muactl.domain.validate import check_tasks
    from muactl.spec.tasks import load_task_file

    path = tmp_path / "test.yaml"
    path.write_text(json.dumps([{"id": "t", "user": {"reason": "r"}, "turns": [
        {"message": "a", "actions": [FIND]}, {"message": "b", "tools": ["transfer_fundz"]}]}]))
    problems = check_tasks(dataclasses.replace(bank, tasks=load_task_file(path)))
    assert [(p.key, p.line) for p in problems if "transfer_fundz" in p.message] == [("[0].turns[1].tools", 1)], problems
    assert "did you mean" in problems[0].message.lower() or "transfer_funds" in problems[0].message


def test_turns_are_in_the_schema():
    props = Task.model_json_schema()["properties"]
    assert "agent_done" in props["turns"]["description"] and "turn_steps" in props
    turn = Task.model_json_schema()["$defs"]["UserTurn"]["properties"]
    assert "BFCL" in turn["actions"]["description"] and "hidden" in turn["tools"]["description"]


def test_a_tasks_own_tools_hide_the_others(bank):
    task = dataclasses.replace(bank.task("move-mia"), task=Task.model_validate(
        {**bank.task("move-mia").task.model_dump(by_alias=True, exclude_none=True), "solo": True,
         "tools": ["find_customer", "list_accounts"]}))
    agent = Script([[FIND, MOVE], "Done."])
    ep = asyncio.run(run_episode(task, bank.compiled, agent, NoUser(), RolloutConfig()))
    assert sorted(agent.seen_tools[0]) == ["find_customer", "list_accounts"]
    found, moved = [m for m in ep.messages if m["role"] == "tool"]
    assert not found["error"] and moved["error"] and "unknown tool" in moved["content"]
    assert not ep.breakdown["db_match"] and ep.reward == 0.0


def test_py_format_writes_numbers_as_python_does():
    from muactl.compile.sql import SQL_FUNCTIONS

    fmt = SQL_FUNCTIONS["py_format"][0]
    assert fmt(0.125, ".2f") == "0.12" and fmt(22716.000000000004, ".2f") == "22716.00" and fmt(3, ".1f") == "3.0"
    assert fmt(1234.5, ",.2f") == "1,234.50"
    assert fmt("1", ".2f") is None and fmt(1.0, "999999999f") is None and fmt(1.0, "{}") is None


def test_an_outside_agent_sees_a_tool_appear_at_its_turn(bank):
    """The stepwise engine (gym, OpenEnv): its `tools` are the turn's, not every tool of the domain."""
    from muactl.episode.stepwise import StepwiseEpisode

    task = in_turns(bank.task("move-mia"), [
        {"message": "I am Mia. Which accounts do I have?", "actions": [FIND, LIST]},
        {"message": "Now move 150.", "actions": [MOVE], "tools": ["transfer_funds"]}], tools=[
        "find_customer", "list_accounts", "transfer_funds"])

    async def main():
        ep = StepwiseEpisode(task, bank.compiled, NoUser(), RolloutConfig())
        names = lambda: sorted(t["function"]["name"] for t in ep.tools)  # noqa: E731
        before = names()
        turn = await ep.start()
        first = names()
        turn = await ep.step(AgentReply("Done."))
        assert turn.messages[-1]["content"] == "Now move 150."
        second = names()
        await ep.step(AgentReply("Done."))
        return before, first, second

    before, first, second = asyncio.run(main())
    assert before == first == ["find_customer", "list_accounts"]
    assert second == ["find_customer", "list_accounts", "transfer_funds"]


def test_tool_errors_do_not_end_a_task_with_fixed_turns(bank, turned):
    # BFCL goes on after any number of failed calls; only the steps of a turn are bounded
    bad = [{"no_such_tool": {}}]
    ep = run(turned, bank.compiled, Script([bad] * 6 + [[FIND, LIST], "Done.", "Ok.", [MOVE], "Done."]), max_tool_errors=2)
    assert ep.tool_errors == 6 and ep.termination == "agent_done" and ep.reward == 1.0, ep.breakdown
