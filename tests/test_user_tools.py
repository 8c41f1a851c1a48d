"""Dual control (as in tau2-bench telecom): tools declared `side: user` are offered to the LLM user
simulator, run on the episode's sandbox, and are hidden from the agent."""

import asyncio

from muactl.episode.agents import make_agent
from muactl.episode.user import make_user
from muactl.episode.rollout import Job, RolloutConfig, run_many
from muactl.domain.open import open_domain
from tests.fakes.openai_server import FakeOpenAI, Reply, is_user_request

DOMAIN = """\
name: phone
description: Support for a mobile phone plan.
policy: Help the customer get mobile data working. Ask them to turn data on if it is off.
database:
  tables:
    device:
      columns: {id: text, data_on: boolean}
      primary_key: id
  seed:
    device: [{id: d1, data_on: false}]
tools:
  check_device:
    description: Check whether the customer's mobile data is on.
    query: SELECT data_on FROM device WHERE id = 'd1'
    returns: value
  toggle_data:
    side: user
    description: Turn mobile data on, on your own phone.
    writes: ["UPDATE device SET data_on = 1 WHERE id = 'd1'"]
    message: Mobile data is now on.
"""
TASKS = """\
- id: data-off
  user: {reason: Your mobile data does not work.}
  expect:
    actions: [{toggle_data: {}}]
    assert: [{query: "SELECT data_on FROM device", equals: 1}]
"""


def test_user_side_tools_run_on_the_sandbox_and_stay_hidden_from_the_agent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "domains" / "phone").mkdir(parents=True)
    (tmp_path / "domains" / "phone" / "domain.yaml").write_text(DOMAIN)
    (tmp_path / "tasks" / "phone").mkdir(parents=True)
    (tmp_path / "tasks" / "phone" / "test.yaml").write_text(TASKS)
    opened = open_domain("phone")
    assert [t.name for t in opened.compiled.user_tools()] == ["toggle_data"]

    def responder(body):
        if is_user_request(body):
            tools = [t["function"]["name"] for t in body.get("tools", [])]
            assert tools == ["toggle_data"]
            if any(m["role"] == "tool" for m in body["messages"]):
                return Reply(content="Done, data is on now. ###STOP###")
            agent_said = " ".join(m["content"] or "" for m in body["messages"] if m["role"] == "user")
            if "turn data on" in agent_said:
                return Reply(tool_calls=[{"name": "toggle_data", "arguments": {}}])
            return Reply(content="My mobile data does not work.")
        assert [t["function"]["name"] for t in body["tools"]] == ["check_device"]  # never the user's tool
        assert "toggle_data" not in str(body["messages"])
        return Reply(content="Please turn data on in your settings.")

    with FakeOpenAI(responder) as server:
        agent = make_agent("openai/agent", api_base=server.base, backoff_s=0.01)
        eps = asyncio.run(run_many([Job(opened.tasks[0], 0)], opened.compiled, agent,
                                   lambda: make_user("openai/user", api_base=server.base, backoff_s=0.01),
                                   RolloutConfig(max_turns=4)))
    ep = eps[0]
    assert ep.termination == "user_stop" and ep.reward == 1.0, ep.breakdown
    assert all("toggle_data" not in str(m) for m in ep.messages)  # the transcript the agent saw
