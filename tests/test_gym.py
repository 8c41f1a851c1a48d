"""muactl.gym: the Gymnasium environments on the real bank domain, real sandboxes and the scripted user.
The agents are muactl's oracle (no model) or actions written here; UserEnv's user is this test."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import warnings

import pytest

gymnasium = pytest.importorskip("gymnasium")

import muactl.gym  # noqa: E402  (registers the ids)
from gymnasium.utils.env_checker import check_env  # noqa: E402
from muactl.episode.agents.oracle import OracleAgent  # noqa: E402
from muactl.episode.rollout import run_episode  # noqa: E402
from muactl.episode.stepwise import ExternalAgent, public_message  # noqa: E402
from muactl.episode.user import STOP, ScriptedUser  # noqa: E402
from muactl.errors import UsageError  # noqa: E402


def closed(sandbox) -> bool:
    try:
        sandbox.conn.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return True
    return False


@pytest.fixture(scope="module", autouse=True)
def opened_bank():
    """The envs' domain, opened once for the module (as in one process with many envs)."""
    return muactl.gym.opened_domain("bank", False)


@pytest.fixture
def agent_env():
    env = gymnasium.make("muactl/Agent-v0", domain="bank")
    yield env
    env.close()


@pytest.fixture
def user_env():
    env = gymnasium.make("muactl/User-v0", domain="bank", agent="oracle")
    yield env
    env.close()


def play(env, policy, **reset):
    """(every observation's messages, the last step's reward, terminated, truncated, info)."""
    obs, info = env.reset(**reset)
    seen = json.loads(obs)
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(policy())
        seen += json.loads(obs)
        done = terminated or truncated
    return seen, reward, terminated, truncated, info


@pytest.mark.parametrize("env_id,kwargs", [("muactl/Agent-v0", {}), ("muactl/User-v0", {"agent": "oracle"})])
def test_gymnasiums_env_checker_passes(env_id, kwargs):
    env = gymnasium.make(env_id, domain="bank", **kwargs)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env.unwrapped)  # seeded resets and steps repeat, observations in the space, close twice
    finally:
        env.close()
    assert [str(w.message) for w in caught] == []  # not even a warning


def test_oracle_actions_play_and_score_as_the_engine_plays_the_oracle(agent_env, opened_bank):
    """The same engine: the conversation the env shows, its reward and end state are run_episode's
    with the oracle, turn for turn."""
    env = agent_env.unwrapped
    for seed in (0, 1, 2):
        oracle = OracleAgent()
        seen, reward, terminated, truncated, info = play(agent_env, lambda: env.action_of(oracle), seed=seed)
        task = opened_bank.task(info["task_id"])
        direct = asyncio.run(run_episode(task, opened_bank.compiled, OracleAgent(), ScriptedUser(), env.rollout, trial=seed))
        assert (reward, terminated, truncated) == (1.0, True, False)
        assert info["termination"] == direct.termination == "user_stop" and info["breakdown"]["success"]
        assert info["state_hash"] == direct.final_hash
        assert seen == [public_message(m) for m in direct.messages if ExternalAgent.sees(m)]


def test_a_seed_replays_its_episode_and_unseeded_resets_follow_the_seed(agent_env):
    def run(seed):
        agent_env.action_space.seed(99)
        obs, info = agent_env.reset(seed=seed)
        steps = [(obs, info)]
        for _ in range(3):
            obs, reward, terminated, truncated, info = agent_env.step(agent_env.action_space.sample())
            steps.append((obs, reward, terminated, truncated, info))
            if terminated or truncated:
                break
        return steps

    first = run(7)
    assert run(7) == first
    assert first[0][1]["seed"] == 7 and run(8)[0][1]["seed"] == 8
    agent_env.reset(seed=3)
    after_3 = agent_env.reset()
    agent_env.reset(seed=3)
    assert agent_env.reset() == after_3


def test_template_instances_are_picked_by_the_seed():
    env = gymnasium.make("muactl/Agent-v0", domain="bank", tasks="template:all", db="random")
    try:
        a, b, c = env.reset(seed=5), env.reset(seed=5), env.reset(seed=6)
    finally:
        env.close()
    assert a == b and a != c
    assert a[1]["task_id"] != c[1]["task_id"]  # each instance has its own id


def test_tool_calls_results_and_user_replies_come_back(agent_env):
    obs, info = agent_env.reset(options={"task_id": "balance-finn"})
    first = json.loads(obs)
    assert [m["role"] for m in first][0] == "system" and first[-1]["role"] == "user"
    assert {t["function"]["name"] for t in info["tools"]} >= {"find_customer", "list_accounts"}
    obs, reward, terminated, truncated, _ = agent_env.step(
        {"content": "", "tool_calls": [{"name": "find_customer", "arguments": {"name": "Finn"}, "id": "c1"}]})
    assert json.loads(obs) == [{"role": "tool", "content": "c19", "tool_call_id": "c1", "name": "find_customer"}]
    assert (reward, terminated, truncated) == (0.0, False, False)
    obs, *_ = agent_env.step("Which account do you mean?")  # a bare string is a text turn
    assert [m["role"] for m in json.loads(obs)] == ["user"]


def test_tool_calls_that_do_not_parse_reach_the_agent_as_an_error_turn(agent_env):
    agent_env.reset(options={"task_id": "balance-finn"})
    obs, reward, terminated, truncated, _ = agent_env.step({"content": "", "tool_calls": "{not json"})
    (msg,) = json.loads(obs)
    assert msg["role"] == "tool" and "could not be parsed" in msg["content"] and not terminated
    obs, *_ = agent_env.step({"tool_calls": [{"arguments": {}}]})
    assert "without a name" in json.loads(obs)[0]["content"]


def test_the_callers_mistakes_are_usage_errors_naming_what_is_wrong(agent_env):
    with pytest.raises(UsageError, match="reset"):
        agent_env.unwrapped.step({"content": "hi"})
    agent_env.reset(seed=0)
    with pytest.raises(UsageError, match="not int"):
        agent_env.unwrapped.step(3)
    with pytest.raises(UsageError, match="unknown AgentEnv action key.*contnet"):
        agent_env.unwrapped.step({"contnet": "hi"})
    with pytest.raises(UsageError, match="unknown reset option.*task"):
        agent_env.reset(options={"task": "x"})
    with pytest.raises(UsageError, match="unknown muactl.gym setting.*max_turn"):
        gymnasium.make("muactl/Agent-v0", domain="bank", max_turn=3)
    with pytest.raises(UsageError, match="needs domain"):
        gymnasium.make("muactl/Agent-v0")
    with pytest.raises(UsageError, match="unknown adversary 'nope'"):
        gymnasium.make("muactl/User-v0", domain="bank", agent="adversary:nope")
    with pytest.raises(UsageError, match="--db must be"):
        gymnasium.make("muactl/Agent-v0", domain="bank", tasks="template:all", db="sometimes")


def test_reset_and_close_cancel_the_unfinished_episode_and_free_its_sandbox(agent_env):
    env = agent_env.unwrapped
    agent_env.reset(seed=0)
    agent_env.step("Could you tell me your name?")
    first = env.episode
    agent_env.reset(seed=1)
    assert closed(first.sandbox) and first._run.cancelled()
    second = env.episode
    loop = env.loop
    agent_env.close()
    assert closed(second.sandbox) and second.done and loop.is_closed()
    agent_env.close()  # twice is fine
    with pytest.raises(UsageError, match="closed"):
        agent_env.reset(seed=0)


def test_the_caller_plays_the_user_against_the_oracle(user_env):
    obs, info = user_env.reset(options={"task_id": "balance-finn"})
    assert json.loads(obs) == [{"role": "assistant", "content": "Hi! How can I help you today?"}]  # the greeting
    assert "balance of your checking account" in info["instructions"]
    obs, reward, terminated, truncated, _ = user_env.step("I want to know the balance of my checking account.")
    (ask,) = json.loads(obs)
    assert ask["role"] == "assistant" and "details" in ask["content"] and not terminated
    obs, *_ = user_env.step("My name is Finn.")
    replies = json.loads(obs)
    assert [m["role"] for m in replies] == ["assistant"] and "145" in replies[0]["content"]  # tools stay hidden
    obs, reward, terminated, truncated, info = user_env.step(f"Thanks! {STOP}")
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["termination"] == "user_stop" and "fidelity" in info


def test_a_user_who_gives_no_facts_fails_the_task(user_env):
    user_env.reset(options={"task_id": "balance-finn"})
    user_env.step("I want to know the balance of my checking account.")
    obs, reward, terminated, truncated, info = user_env.step(STOP)
    assert terminated and reward == 0.0 and not info["breakdown"]["success"]
    with pytest.raises(UsageError, match="the episode is over"):
        user_env.step("Hello?")


def test_a_user_action_is_text(user_env):
    user_env.reset(seed=0)
    with pytest.raises(UsageError, match="a UserEnv action is the user's message"):
        user_env.unwrapped.step({"content": "hi"})


@pytest.mark.slow
def test_the_user_env_plays_against_a_local_model():
    """hf:tiny (random weights) as the agent, on the env's own event loop, over two episodes."""
    env = gymnasium.make("muactl/User-v0", domain="bank", agent="hf:tiny", agent_max_new_tokens=4)
    try:
        for seed in (0, 1):
            env.reset(seed=seed)
            obs, reward, terminated, truncated, _ = env.step("I want to know my balance.")
            assert not terminated and [m["role"] for m in json.loads(obs)] == ["assistant"]
            obs, reward, terminated, truncated, info = env.step(STOP)
            assert terminated and info["termination"] == "user_stop" and reward == 0.0
    finally:
        env.close()


def test_the_example_runs_both_loops(capsys):
    from examples.gym_loop import main

    rewards = main(["--episodes", "3"])
    assert rewards["oracle"] == [1.0, 1.0, 1.0]
    assert sum(rewards["random"]) < 3
    assert "oracle mean reward 1.00" in capsys.readouterr().out
