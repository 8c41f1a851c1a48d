"""One slow call must not stall the others: tool work runs off the event loop (Environment.acall), so
concurrent episodes and MCP sessions go on, and an episode's timeout fires on time even while its
tool is inside a runaway SQL statement. Real SQLite; the agent is a fixed script (the model is faked)."""

from __future__ import annotations

import asyncio
import textwrap
import time
from pathlib import Path

import pytest

from muactl.episode.agents.base import Agent, AgentReply
from muactl.episode.user import ScriptedUser
from muactl.episode.rollout import Job, RolloutConfig, run_episode, run_many
from muactl.domain.open import open_domain

# A recursive count: seconds of SQLite work for a large limit (about 2 million rows a second here).
DOMAIN = """\
name: slowpoke
description: A domain with one fast tool and two slow ones.
policy: Answer briefly.
database:
  tables:
    items:
      columns: {id: text, n: integer}
      primary_key: id
  seed:
    items: [{id: a, n: 1}, {id: b, n: 2}]
tools:
  get_item:
    description: One item's number.
    params:
      id: {type: string}
    query: SELECT n FROM items WHERE id = :id
    returns: value
  count_to:
    description: Count from 1 to a limit.
    params:
      limit: {type: integer}
    query: WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < :limit) SELECT count(*) FROM c
    returns: value
  nap:
    description: Sleep in Python.
    params:
      seconds: {type: number}
    python: "slowtools:nap"
    timeout: 30
"""

TASKS = """\
- id: fast
  user: {reason: You want item a's number.}
  expect: {actions: [{get_item: {id: a}}]}
- id: slow
  user: {reason: You want the agent to rest.}
  expect: {actions: []}
- id: runaway
  user: {reason: You want a very long count.}
  expect: {actions: []}
- id: sleepy
  user: {reason: You want the agent to rest for long.}
  expect: {actions: []}
"""

RUNAWAY = 2 * 10**7  # about 10 s of SQLite work here when nothing interrupts it


@pytest.fixture(scope="module")
def slowpoke(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "domains" / "slowpoke").mkdir(parents=True)
    (root / "domains" / "slowpoke" / "domain.yaml").write_text(DOMAIN)
    (root / "domains" / "slowpoke" / "slowtools.py").write_text(textwrap.dedent("""\
        import time

        def nap(db, seconds):
            time.sleep(seconds)
            return "rested"
        """))
    (root / "tasks" / "slowpoke").mkdir(parents=True)
    (root / "tasks" / "slowpoke" / "test.yaml").write_text(TASKS)
    return root / "domains" / "slowpoke"


@pytest.fixture(scope="module")
def opened(slowpoke):
    return open_domain(str(slowpoke), trust=True)


class Script(Agent):
    """Per task: the fast task looks item a up once; the slow task naps once; the runaway task counts
    for 10 s (again after each failure, so an SQL budget that stops one count does not end it; and not
    forever, so that code which cannot interrupt it fails this test instead of hanging)."""

    name = "script"

    async def act(self, ctx) -> AgentReply:
        tid = ctx.task.task.id
        results = [m for m in ctx.messages if m["role"] == "tool"]
        if tid == "runaway":
            if time.monotonic() - ctx.state.setdefault("t0", time.monotonic()) > 10:
                return AgentReply(content="Done.")
            return AgentReply(tool_calls=[{"name": "count_to", "arguments": {"limit": RUNAWAY}}])
        if results:
            return AgentReply(content="Done.")
        call = {"fast": ("get_item", {"id": "a"}), "slow": ("nap", {"seconds": 1.5}),
                "sleepy": ("nap", {"seconds": 20})}[tid]
        return AgentReply(tool_calls=[{"name": call[0], "arguments": call[1]}])


def test_episode_timeout_holds_during_a_runaway_query(opened):
    cfg = RolloutConfig(timeout_s=2, max_turns=1000, max_tool_errors=1000)
    start = time.perf_counter()
    ep = asyncio.run(run_episode(opened.task("runaway"), opened.compiled, Script(), ScriptedUser(), cfg))
    wall = time.perf_counter() - start
    assert ep.termination == "timeout"
    assert wall < 3.5, f"the episode ran {wall:.1f} s past a 2 s timeout"
    assert ep.reward == 0.0 and ep.final_hash  # scored after the statement was interrupted


def test_episode_timeout_holds_during_a_slow_python_tool(opened):
    start = time.perf_counter()
    ep = asyncio.run(run_episode(opened.task("sleepy"), opened.compiled, Script(), ScriptedUser(), RolloutConfig(timeout_s=1)))
    wall = time.perf_counter() - start
    assert ep.termination == "timeout" and wall < 2.5, (ep.termination, wall)  # the handler was stopped, not awaited


def test_a_slow_episode_does_not_delay_a_fast_one(opened):
    finished: dict[str, float] = {}
    start = time.perf_counter()

    def on_done(ep) -> None:
        finished[ep.task_id] = time.perf_counter() - start

    jobs = [Job(opened.task("slow"), 0), Job(opened.task("runaway"), 0), Job(opened.task("fast"), 0)]
    eps = asyncio.run(run_many(jobs, opened.compiled, Script(), ScriptedUser,
                               RolloutConfig(timeout_s=4, max_turns=1000, max_tool_errors=1000),
                               concurrency=3, on_done=on_done))
    by_id = {e.task_id: e for e in eps}
    assert by_id["fast"].termination == "user_stop" and by_id["fast"].reward == 1.0
    assert by_id["slow"].termination == "user_stop" and by_id["runaway"].termination == "timeout"
    assert finished["fast"] < 1.2, finished  # not behind the nap nor the runaway count
    assert finished["slow"] >= 1.5 and finished["runaway"] < 5.5, finished


def test_an_mcp_session_is_not_stuck_behind_another_sessions_slow_call(opened):
    pytest.importorskip("mcp")
    from mcp import Client

    from muactl.share.mcp_server import build_server

    server = build_server(opened, trust=True)

    async def go():
        async with Client(server, mode="legacy") as a, Client(server, mode="legacy") as b:
            t0 = time.perf_counter()
            nap = asyncio.ensure_future(a.call_tool("nap", {"seconds": 1.5}))
            await asyncio.sleep(0.3)
            b0 = time.perf_counter()
            quick = await b.call_tool("get_item", {"id": "b"})
            b_latency = time.perf_counter() - b0
            assert not nap.done()  # b's answer came while a's call was still running
            slow = await nap
            return quick.content[0].text, b_latency, slow.content[0].text, time.perf_counter() - t0

    quick, b_latency, slow, a_wall = asyncio.run(go())
    assert quick == "2" and slow == "rested" and a_wall >= 1.5
    assert b_latency < 0.8, f"session b waited {b_latency:.1f} s behind session a"
