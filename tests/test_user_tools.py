"""Dual control (as in tau2-bench telecom): tools declared `side: user` are offered to the LLM user
simulator, run on the episode's sandbox, and are hidden from the agent; `side: env` tools serve only task
setup and assertions by tool call; database.after_write keeps derived state in step after every write.
The oracle asks the scripted user to make the gold path's user-side calls."""

import asyncio

import pytest

from muactl.domain.open import open_domain
from muactl.domain.validate import validate_domain
from muactl.env.sandbox import new_env
from muactl.episode.agents import make_agent
from muactl.episode.rollout import Job, RolloutConfig, run_many
from muactl.episode.user import make_user
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


# ---------------------------------------------------------------- τ² telecom's features, on a small phone world

PHONE = """\
name: carrier
description: A mobile carrier.
policy: Resume suspended lines when asked.
database:
  tables:
    lines:
      columns: {line_id: text, status: text}
      primary_key: line_id
    phone:
      columns: {data_on: boolean, service: boolean}
  seed:
    lines: [{line_id: L1, status: Active}]
    phone: [{data_on: true, service: true}]
  after_write:
    - UPDATE phone SET service = (SELECT status = 'Active' FROM lines WHERE line_id = 'L1')
tools:
  resume_line:
    description: Resume the customer's line.
    params: {line_id: {type: string}}
    checks: [{query: "SELECT status = 'Suspended' FROM lines WHERE line_id = :line_id", error: Line is not suspended}]
    writes: ["UPDATE lines SET status = 'Active' WHERE line_id = :line_id"]
    query: SELECT 'Line resumed; phone service ' || iif(service, 'on', 'off') FROM phone
    returns: value
  toggle_data:
    side: user
    description: Turn mobile data on or off on your phone.
    writes: ["UPDATE phone SET data_on = NOT data_on"]
    query: SELECT 'Mobile data is now ' || iif(data_on, 'ON', 'OFF') FROM phone
    returns: value
  suspend:
    side: env
    description: Suspend the line (task setup only).
    writes: ["UPDATE lines SET status = 'Suspended'", "UPDATE phone SET data_on = 0"]
  assert_online:
    side: env
    description: Whether the phone has data.
    query: SELECT data_on AND service AS ok FROM phone
    returns: value
    types: {ok: boolean}
"""
PHONE_TASKS = """\
- id: offline
  user: {reason: My phone has no data., known: My line is L1.}
  setup: [{suspend: {}}]
  expect:
    actions: [{resume_line: {line_id: L1}}, {toggle_data: {}}]
    assert: [{call: {assert_online: {}}}, {call: {assert_online: {}}, equals: true}]
"""


@pytest.fixture
def carrier(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_domain(tmp_path, "carrier", PHONE, PHONE_TASKS)
    return validate_domain("carrier")  # every gold path replayed, assertions by tool call included


def write_domain(root, name, domain, tasks):
    (root / "domains" / name).mkdir(parents=True, exist_ok=True)
    (root / "domains" / name / "domain.yaml").write_text(domain)
    (root / "tasks" / name).mkdir(parents=True, exist_ok=True)
    (root / "tasks" / name / "test.yaml").write_text(tasks)


def test_env_tools_are_neither_sides_and_after_write_follows_each_write(carrier):
    c = carrier.compiled
    assert [t.name for t in c.agent_tools()] == ["resume_line"]
    assert [t.name for t in c.user_tools()] == ["toggle_data"]
    env = new_env(c)
    try:
        env.replay(carrier.tasks[0].task.setup)
        assert env.rows("phone") == [{"data_on": 0, "service": 0}]  # the setup's write synced the phone
        assert env.call("resume_line", {"line_id": "L9"}).error  # a failing call syncs nothing ...
        assert env.rows("phone")[0]["service"] == 0
        # ... a successful one reports the state before the sync (as τ²'s tools do), then syncs
        assert env.call("resume_line", {"line_id": "L1"}).content == "Line resumed; phone service off"
        assert env.rows("phone")[0]["service"] == 1
    finally:
        env.close()


def test_oracle_asks_the_scripted_user_for_user_side_calls_and_env_tools_stay_closed(carrier):
    from muactl.eval.config import EvalConfig
    from muactl.eval.evaluate import run_eval

    _, summary = run_eval(EvalConfig(domain="carrier", split="all"), opened=carrier)
    assert summary["avg_reward"] == 1.0  # the scripted user toggled data when the oracle asked

    from muactl.episode.agents.base import Agent, AgentReply

    class Cheat(Agent):  # an agent that calls a setup tool and a user tool by name: both refused
        name = "cheat"

        async def act(self, ctx):
            if ctx.state.get("done"):
                return AgentReply("Bye.")
            ctx.state["done"] = True
            return AgentReply("", [{"name": "suspend", "arguments": {}}, {"name": "toggle_data", "arguments": {}}])

    (ep,) = asyncio.run(run_many([Job(carrier.tasks[0], 0)], carrier.compiled, Cheat(), lambda: make_user("scripted"),
                                 RolloutConfig(max_turns=3)))
    results = [m["content"] for m in ep.messages if m["role"] == "tool"]
    assert results == ["Error: unknown tool 'suspend'.", "Error: unknown tool 'toggle_data'."]
    assert ep.reward == 0.0 and not all(a["ok"] for a in ep.breakdown["assertions"])


def test_partial_metrics_count_the_agents_gold_calls_only(tmp_path, monkeypatch):
    """first_call_right and gold_calls_made measure the agent: the gold path's user-side call (toggle_data,
    made by the scripted user) is in neither, so the oracle scores 1.0 on both, whichever comes first (τ²
    telecom's oracle scored 0.193 and 0.352 while the user's calls counted as calls the agent missed)."""
    from muactl.eval.config import EvalConfig
    from muactl.eval.evaluate import run_eval

    monkeypatch.chdir(tmp_path)
    user_first = PHONE_TASKS.replace("offline", "offline-user-first").replace(
        "[{resume_line: {line_id: L1}}, {toggle_data: {}}]", "[{toggle_data: {}}, {resume_line: {line_id: L1}}]")
    write_domain(tmp_path, "carrier", PHONE, PHONE_TASKS + user_first)
    opened = validate_domain("carrier")
    store, summary = run_eval(EvalConfig(domain="carrier", split="all"), opened=opened)
    assert summary["episodes"] == 2 and summary["avg_reward"] == 1.0
    assert summary["first_call_right"] == 1.0 and summary["gold_calls_made"] == 1.0


@pytest.mark.parametrize("old, new, file, line, key, message", [
    ("UPDATE phone SET service = (SELECT status = 'Active' FROM lines WHERE line_id = 'L1')",
     "UPDATE phone SET service = (SELECT status = 'Active' FROM lines WHERE line_id = :line_id)", "domain.yaml", 15,
     "database.after_write[0]", "after_write statements take no parameters (:line_id)"),
    ("UPDATE phone SET service = (SELECT status = 'Active' FROM lines WHERE line_id = 'L1')",
     "SELECT 1", "domain.yaml", 15, "database.after_write[0]", "only INSERT, UPDATE or DELETE"),
    ("side: env\n    description: Suspend", "side: both\n    description: Suspend", "domain.yaml", 31,
     "tools.suspend.side", "'agent', 'user' or 'env'"),
    ("{call: {assert_online: {}}, equals: true}", "{call: {suspend: {}}, equals: true}", "test.yaml", 6,
     "[0].expect.assert[1].call", "tool 'suspend' writes; an assertion may call only a sql tool without writes"),
    ("{call: {assert_online: {}}, equals: true}", "{call: {assert_onlin: {}}}", "test.yaml", 6,
     "[0].expect.assert[1].call", "undefined tool 'assert_onlin'; did you mean 'assert_online'?"),
    ("{call: {assert_online: {}}, equals: true}", "{call: {assert_online: {}}, query: SELECT 1}", "test.yaml", 6,
     "[0].expect.assert[1]", "either a 'query' (SQL) or a 'call'"),
])
def test_misuse_of_dual_control_features_is_reported_at_its_line(tmp_path, monkeypatch, old, new, file, line, key,
                                                                 message):
    from muactl.errors import SpecError

    assert old in PHONE + PHONE_TASKS
    monkeypatch.chdir(tmp_path)
    write_domain(tmp_path, "carrier", PHONE.replace(old, new), PHONE_TASKS.replace(old, new))
    with pytest.raises(SpecError) as e:
        validate_domain("carrier")
    found = [(p.file.rsplit("/", 1)[-1], p.line, p.key, p.message) for p in e.value.problems]
    assert any(f == file and ln == line and k == key and message in msg for f, ln, k, msg in found), found


def test_compare_db_false_rewards_by_assertions_as_tau2_telecom_does(carrier):
    from muactl.episode.reward import score
    from muactl.episode.types import Episode

    task, c = carrier.tasks[0], carrier.compiled
    env = new_env(c)
    try:
        env.replay(task.task.setup + task.task.expect.actions)
        other_state = Episode(task.task.id, 0, 0, [], "user_stop", final_hash="not the gold end state")
        reward, b = score(task, c, env, other_state)
        assert reward == 0.0 and b["db_match"] is False and b["db_compared"] is True
        task.task.expect.compare_db = False  # the assertions hold: that is enough
        reward, b = score(task, c, env, other_state)
        assert reward == 1.0 and b["db_match"] is False and b["db_compared"] is False
        env.call("toggle_data", {})  # data off again: an assertion fails
        assert score(task, c, env, other_state)[0] == 0.0
    finally:
        env.close()
