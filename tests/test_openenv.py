"""`muactl serve openenv`: the bank domain served as an OpenEnv environment, driven by OpenEnv's own
client (GenericEnvClient, WebSocket sessions) over HTTP on 127.0.0.1. Real SQLite, the real bank
domain and the scripted user; no model anywhere (the client replays the oracle's turns)."""

from __future__ import annotations

import asyncio
import json
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


def test_a_step_after_the_server_side_timeout_gets_the_finished_episode(bank):
    """The episode's timeout counts the client's thinking time: a step that comes after it answers
    with the ended episode (termination timeout, scored), not an internal error; the next is refused."""
    with Server(ServeConfig(domain="bank", split="test", timeout_s=0.5), bank) as s, s.client() as env:
        env.reset(task_id="move-mia")
        time.sleep(1.0)
        r = env.step({"message": "Could you please give me your name?"})
        assert r.done and r.reward == 0.0 and r.observation["termination"] == "timeout"
        assert r.observation["breakdown"]["db_match"] is False  # scored: the money was never moved
        with pytest.raises(Exception, match="the episode is over; reset"):
            env.step({"message": "still there?"})
        assert not env.reset(task_id="move-mia").done  # the session goes on


# Quarantined to the slow run: on a fresh clone (0c4ea5a) it hung once in a futex wait with ~450 threads alive
# (passed in every other run: 12 runs alone, 3 with 200 sessions, one after the 670 tests before it). The
# threads were the fake OpenAI server's kept-alive handlers (fixed in tests/fakes/openai_server.py); the
# receives now time out, so a server that stops answering fails the test; the hang itself was not reproduced.
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_abandoned_sessions_end_cleanly(bank, monkeypatch):
    """Clients that leave mid-episode (a closed WebSocket, or a dropped connection) cancel their episode:
    the cancellation ends the run (no 'Task exception was never retrieved' from the server's loop),
    and every sandbox is closed."""
    import gc
    import logging
    import socket

    from websockets.sync.client import connect

    from muactl.episode import stepwise

    sandboxes = []

    def recording_new_env(*args, **kwargs):  # a spy: the real sandbox, remembered
        env = real_new_env(*args, **kwargs)
        sandboxes.append(env)
        return env

    real_new_env = stepwise.new_env
    monkeypatch.setattr(stepwise, "new_env", recording_new_env)
    logged = []

    class Keep(logging.Handler):
        def emit(self, record):
            logged.append(record.getMessage() + "".join(
                [str(record.exc_info[1])] if record.exc_info else []))

    handler = Keep(level=logging.ERROR)
    logging.getLogger("asyncio").addHandler(handler)
    lookup = {"type": "step", "data": {"tool_calls": [{"name": "find_customer", "arguments": {"name": "Mia"}}]}}
    try:
        with Server(ServeConfig(domain="bank", split="test"), bank) as s:
            for i in range(30):
                with connect(f"ws://127.0.0.1:{s.port}/ws") as ws:
                    ws.send(json.dumps({"type": "reset", "data": {"task_id": "move-mia"}}))
                    assert json.loads(ws.recv(timeout=60))["type"] == "observation"
                    if i % 3:
                        ws.send(json.dumps(lookup))
                        assert json.loads(ws.recv(timeout=60))["type"] == "observation"
                    if i % 2:  # gone without a close frame (else the context closes it properly)
                        ws.socket.shutdown(socket.SHUT_RDWR)
            deadline = time.time() + 20
            while not all(_closed(env) for env in sandboxes):
                assert time.time() < deadline, "abandoned sessions' sandboxes were not closed"
                time.sleep(0.05)
            gc.collect()  # an unretrieved task exception is logged when the task is collected
            time.sleep(0.2)
    finally:
        logging.getLogger("asyncio").removeHandler(handler)
    assert len(sandboxes) == 30
    assert logged == []
    assert not [e for e in sandboxes if not _closed(e)]


def _closed(env) -> bool:
    """A closed sandbox refuses to be used, as a closed connection does."""
    import sqlite3

    try:
        env.conn.execute("SELECT 1")
    except sqlite3.ProgrammingError:
        return True
    return False


def test_misuse_answers_4xx_and_the_session_goes_on(bank, test_server):
    """Over HTTP: step before reset 400, an unknown task 400, a task id that is not text or a bad seed
    422. Over a WebSocket: the same as error frames (validation errors for arguments), also for frames
    that are not JSON objects, and the session plays an episode afterwards."""
    import httpx
    from websockets.sync.client import connect

    base = f"http://127.0.0.1:{test_server.port}"
    r = httpx.post(f"{base}/step", json={"action": {"message": "hi"}})
    assert r.status_code == 400 and "reset() before step()" in r.json()["detail"]
    for body, code, says in [({"task_id": "nope"}, 400, "no task 'nope'"), ({"task_id": 5}, 422, "valid string"),
                             ({"seed": -1}, 422, "greater than or equal to 0"), ({"seed": "x"}, 422, "valid integer")]:
        r = httpx.post(f"{base}/reset", json=body)
        assert (r.status_code, says in r.text) == (code, True), (body, r.status_code, r.text)
    assert httpx.post(f"{base}/reset", json={"task_id": "move-mia"}).status_code == 200

    with connect(f"ws://127.0.0.1:{test_server.port}/ws") as ws:
        def answer(frame):
            ws.send(frame if isinstance(frame, (str, bytes)) else json.dumps(frame))
            return json.loads(ws.recv(timeout=60))

        cases = [({"type": "step", "data": {"message": "hi"}}, "EXECUTION_ERROR", "reset() before step()"),
                 ({"type": "reset", "data": {"task_id": "nope"}}, "EXECUTION_ERROR", "no task 'nope'"),
                 ({"type": "reset", "data": {"task_id": 5}}, "VALIDATION_ERROR", "valid string"),
                 ({"type": "reset", "data": {"seed": "x"}}, "VALIDATION_ERROR", "valid integer"),
                 ({"type": "reset", "data": {"seed": -1}}, "VALIDATION_ERROR", "greater than or equal to 0"),
                 ("[1, 2]", "VALIDATION_ERROR", "must be a JSON object, not list"),
                 ('"reset"', "VALIDATION_ERROR", "must be a JSON object, not str"),
                 (b"\x00", "VALIDATION_ERROR", "text frames")]
        for frame, code, says in cases:
            got = answer(frame)
            assert got["type"] == "error" and got["data"]["code"] == code and says in json.dumps(got), (frame, got)
        first = answer({"type": "reset", "data": {"task_id": "move-mia", "seed": 3}})
        assert first["type"] == "observation" and first["data"]["observation"]["task_id"] == "move-mia"
        assert answer({"type": "step", "data": {"message": "Could you please give me your name?"}})["type"] == "observation"


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


@pytest.mark.slow
def test_the_cli_server_logs_nothing_for_abandoned_sessions():
    """The real `muactl serve openenv` process: 20 sessions left mid-episode (half without a close
    frame), then Ctrl-C. Its log has no unretrieved task exception and no traceback; it exits 0."""
    import signal
    import socket

    from websockets.sync.client import connect

    env = dict(os.environ, PYTHONPATH=str(REPO))
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "muactl", "serve", "openenv", "bank", "--split", "test",
                             "--port", str(port)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 90
        for i in range(20):
            while True:
                try:
                    ws = connect(f"ws://127.0.0.1:{port}/ws")
                    break
                except OSError:
                    assert proc.poll() is None and time.time() < deadline, "the server did not come up"
                    time.sleep(0.5)
            with ws:
                ws.send(json.dumps({"type": "reset", "data": {"task_id": "move-mia"}}))
                assert json.loads(ws.recv(timeout=30))["type"] == "observation"
                ws.send(json.dumps({"type": "step", "data": {"tool_calls": [
                    {"name": "find_customer", "arguments": {"name": "Mia"}}]}}))
                assert json.loads(ws.recv(timeout=30))["type"] == "observation"
                if i % 2:
                    ws.socket.shutdown(socket.SHUT_RDWR)
        time.sleep(1.0)
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
    log = proc.stderr.read()
    assert "never retrieved" not in log and "Traceback" not in log, log[-2000:]
    assert code == 0
