"""`muactl serve openenv`: the bank domain served as an OpenEnv environment, driven by OpenEnv's own
client (GenericEnvClient, WebSocket sessions) over HTTP on 127.0.0.1. Real SQLite, the real bank
domain and the scripted user; no model anywhere (the client replays the oracle's turns)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("openenv.core.env_server.http_server")

from openenv.core import GenericEnvClient

from typer.testing import CliRunner

from muactl.episode.agents.oracle import OracleAgent
from muactl.cli import app
from muactl.episode.user import ScriptedUser
from muactl.share.openenv_server import ServeConfig, build_app
from muactl.episode.rollout import RolloutConfig, run_episode

from tests.fakes import free_port

REPO = Path(__file__).resolve().parent.parent


class Server:
    """build_app under uvicorn in a thread (the CLI test below starts the real command)."""

    def __init__(self, cfg: ServeConfig, opened=None):
        import uvicorn

        self.port = free_port()
        app = build_app(cfg, opened)
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            assert time.time() < deadline, "the server did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)

    def client(self):
        return GenericEnvClient(base_url=f"http://127.0.0.1:{self.port}").sync()


@pytest.fixture(scope="module")
def test_server(bank):
    with Server(ServeConfig(domain="bank", split="test"), bank) as s:
        yield s


def _oracle_episode(opened, task_id):
    task = opened.task(task_id)
    return asyncio.run(run_episode(task, opened.compiled, OracleAgent(), ScriptedUser(), RolloutConfig()))


def _turns(messages):
    """The agent's turns of an in-process episode, as OpenEnv actions."""
    return [{"message": m["content"], "tool_calls": [{"name": c["name"], "arguments": c["arguments"]}
                                                     for c in m.get("tool_calls", [])]}
            for m in messages if m["role"] == "assistant" and not m.get("fixed")]


def _seen(messages):
    """What the agent sees of an in-process episode: everything but its own turns."""
    out = []
    for m in messages:
        if m["role"] == "assistant" and not m.get("fixed"):
            continue
        seen = {"role": m["role"], "content": m["content"]}
        if m["role"] == "tool":
            seen.update(tool_call_id=m["tool_call_id"], name=m["name"])
        out.append(seen)
    return out


def test_oracle_turns_over_openenv_give_the_engines_episode(bank, test_server):
    """Replaying the oracle's turns through reset()/step() gives, message for message, the episode the
    engine runs in-process, and the last step carries the same reward and breakdown."""
    local = _oracle_episode(bank, "move-mia")
    assert local.reward == 1.0
    with test_server.client() as env:
        first = env.reset(task_id="move-mia")
        assert not first.done and first.reward is None
        obs = first.observation
        assert obs["task_id"] == "move-mia"
        assert [m["role"] for m in obs["messages"]] == ["system", "assistant", "user"]
        assert obs["messages"][0]["content"] == bank.compiled.system_prompt  # the policy
        assert {t["function"]["name"] for t in obs["tools"]} == {t.name for t in bank.compiled.agent_tools()}
        seen = list(obs["messages"])
        turns = _turns(local.messages)
        for i, action in enumerate(turns):
            result = env.step(action)
            seen += result.observation["messages"]
            assert result.done == (i == len(turns) - 1)
        assert seen == _seen(local.messages)
        assert result.reward == 1.0
        assert result.observation["termination"] == "user_stop"
        assert result.observation["breakdown"] == local.breakdown
        state = env.state()
        assert state["done"] and state["reward"] == 1.0 and state["state_hash"] == local.final_hash


def test_a_wrong_write_scores_zero_with_its_breakdown(bank, test_server):
    with test_server.client() as env:
        env.reset(task_id="move-mia")
        env.step({"message": "Could you please give me your name?"})
        r = env.step({"tool_calls": [{"name": "find_customer", "arguments": {"name": "Mia"}}]})
        customer = r.observation["messages"][0]["content"]
        r = env.step({"tool_calls": [{"name": "list_accounts", "arguments": {"customer_id": customer}}]})
        assert r.observation["messages"][0]["role"] == "tool" and not r.done
        r = env.step({"message": "All done."})  # nothing was moved; the user leaves
        assert r.done and r.reward == 0.0
        assert r.observation["termination"] == "user_stop"
        assert r.observation["breakdown"]["db_match"] is False


def test_sessions_are_isolated(bank, test_server):
    """Two sessions on the same task: one session's transfer is not seen by the other's sandbox."""
    gold = [a for a in _turns(_oracle_episode(bank, "move-mia").messages) if a["tool_calls"]]
    transfer = next(a for a in gold if a["tool_calls"][0]["name"] == "transfer_funds")
    lookup = next(a for a in gold if a["tool_calls"][0]["name"] == "list_accounts")
    with test_server.client() as a, test_server.client() as b:
        a.reset(task_id="move-mia")
        b.reset(task_id="move-mia")
        before = b.step(lookup).observation["messages"][0]["content"]
        moved = a.step(transfer).observation["messages"][0]
        assert moved["role"] == "tool" and not moved["content"].startswith("Error")
        assert a.step(lookup).observation["messages"][0]["content"] != before
        assert b.step(lookup).observation["messages"][0]["content"] == before


def test_malformed_calls_and_misuse_are_reported_not_fatal(test_server):
    with test_server.client() as env:
        with pytest.raises(Exception, match="reset"):
            env.step({"message": "hello"})
        env.reset(task_id="move-mia")
        r = env.step({"tool_calls": [{"name": "find_customer", "arguments": "{not json"}]})
        assert "not valid JSON" in r.observation["messages"][0]["content"] and not r.done
        r = env.step({"tool_calls": [{"name": "no_such_tool", "arguments": {}}]})
        assert "unknown tool" in r.observation["messages"][0]["content"]
        with pytest.raises(Exception, match="no task 'nope'"):
            env.reset(task_id="nope")


def test_template_instances_on_random_databases(bank):
    """--tasks template:all --db random: each reset draws an instance on its own random database; the
    same seed draws the same instance, and its gold path scores 1 over the wire."""
    with Server(ServeConfig(domain="bank", tasks="template:move", db="random", seed=3), bank) as s:
        with s.client() as env:
            first = env.reset(seed=7).observation
            second = env.reset(seed=7).observation
            other = env.reset(seed=8).observation
            assert first["task_id"] == second["task_id"] != other["task_id"]
            assert first["messages"][-1] == second["messages"][-1]
            # the gold path of the drawn instance, from the server's own draw
            from muactl.share.openenv_server import TaskSource

            task, domain = TaskSource(ServeConfig(domain="bank", tasks="template:move", db="random", seed=3), bank).draw(seed=7)
            assert domain is not bank.compiled  # a random database
            local = asyncio.run(run_episode(task, domain, OracleAgent(), ScriptedUser(), RolloutConfig()))
            assert local.reward == 1.0
            env.reset(seed=7)
            for action in _turns(local.messages):
                r = env.step(action)
            assert r.done and r.reward == 1.0


def test_cli_refuses_bad_input():
    runner = CliRunner()
    bad = runner.invoke(app, ["serve", "openenv", "bank", "--tasks", "template:nope"])
    assert bad.exit_code == 2 and "no template 'nope'" in bad.output
    bad = runner.invoke(app, ["serve", "openenv", "bank", "--tasks", "no-such-task"])
    assert bad.exit_code == 2 and "no task 'no-such-task'" in bad.output
    bad = runner.invoke(app, ["serve", "openenv", "bank", "--user", "hf:./no-such-model"])
    assert bad.exit_code == 2 and "unknown model" in bad.output


@pytest.mark.slow
def test_cli_serves_a_session():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "muactl", "serve", "openenv", "bank", "--split", "test",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        client = GenericEnvClient(base_url=f"http://127.0.0.1:{port}").sync()
        deadline = time.time() + 90
        while True:
            try:
                with client as c:
                    first = c.reset(task_id="move-mia")
                    break
            except Exception:
                assert proc.poll() is None, proc.stderr.read()
                assert time.time() < deadline, "the server did not come up"
                time.sleep(0.5)
        assert first.observation["messages"][-1]["role"] == "user"
    finally:
        proc.terminate()
        proc.wait(10)
