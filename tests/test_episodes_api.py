"""Episodes with API models end to end: litellm -> a real OpenAI-compatible HTTP server on 127.0.0.1
(tests/fakes/openai_server.py) whose replies come from a Python responder. The engine, sandbox, reward,
retries and run store are the real ones; only the model is fake. Faults are injected by the server."""

from __future__ import annotations

import asyncio
import json
import re
import textwrap

import pytest

from muactl.episode.agents import make_agent
from muactl.episode.agents.oracle import OracleAgent
from muactl.episode.user import ScriptedUser, make_user
from muactl.eval.config import EvalConfig
from muactl.eval.evaluate import run_eval
from muactl.runs.summary import pass_hat_k, summarize
from muactl.env.gold import gold_hash
from muactl.episode.rollout import Job, RolloutConfig, run_episode, run_many
from muactl.runs.store import RunStore
from tests.fakes.openai_server import (
    FakeOpenAI,
    Faulty,
    Late,
    Reply,
    do_nothing_agent,
    fake_user,
    gold_agent,
    is_tool_request,
    is_user_request,
    opening_line,
    two_sided,
)
from muactl.env.sandbox import new_env

FAST = {"backoff_s": 0.01, "retries": 4, "timeout_s": 10.0}  # tiny backoff keeps the fault tests fast




@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))


def api_parts(server, agent_model="openai/fake", **kw):
    opts = {**FAST, **kw}
    agent = make_agent(agent_model, api_base=server.base, **opts)
    return agent, (lambda: make_user("openai/fake", api_base=server.base, **opts))


def run_jobs(tasks, domain, agent, user_factory, trials=1, concurrency=16, cfg=None):
    jobs = [Job(t, k) for t in tasks for k in range(trials)]
    eps = asyncio.run(run_many(jobs, domain.compiled, agent, user_factory, cfg or RolloutConfig(), concurrency))
    return sorted(eps, key=lambda e: (e.task_id, e.trial))


def writes(opened, task) -> bool:
    return any(opened.compiled.writes(next(iter(a))) for a in task.task.expect.actions)


def by_id(opened, *ids):
    return [opened.task(i) for i in ids]


# ---------------------------------------------------------------- end to end


@pytest.mark.parametrize("agent_model", ["openai/fake", "hosted_vllm/my-ckpt"])
def test_api_agent_and_llm_user_on_the_gold_path_score_1(bank, retail, agent_model):
    for opened in (bank, retail):
        tasks = [t for t in opened.tasks if t.split == "test"]
        with FakeOpenAI(two_sided(gold_agent([t.task for t in opened.tasks]))) as server:
            agent, users = api_parts(server, agent_model)
            eps = run_jobs(tasks, opened, agent, users)
        bad = [(e.task_id, e.termination, e.breakdown) for e in eps if e.reward != 1.0]
        assert not bad, bad
        assert {e.termination for e in eps} <= {"user_stop", "transfer"}
        assert all(e.usage.get("agent_prompt_tokens") and e.usage.get("user_prompt_tokens") for e in eps)
        assert sum(e.tool_calls for e in eps) == sum(len(t.task.expect.actions) for t in tasks)


def test_do_nothing_api_agent_scores_0_on_write_tasks(bank, retail):
    for opened in (bank, retail):
        tasks = [t for t in opened.tasks if writes(opened, t)]
        assert len(tasks) >= 8
        with FakeOpenAI(two_sided(do_nothing_agent)) as server:
            eps = run_jobs(tasks, opened, *api_parts(server))
        assert all(e.termination == "user_stop" for e in eps)  # it ended normally; the reward still says no
        assert [e.reward for e in eps] == [0.0] * len(eps)
        assert not any(e.breakdown["db_match"] for e in eps)


def test_user_opening_and_a_malformed_tool_call_from_the_api_model(bank):
    """--opening user: the simulator speaks first. Tool-call arguments that are not JSON become an
    error result the agent sees; the episode goes on and can still succeed."""
    task = bank.task("move-mia")
    gold = gold_agent([task.task])

    def agent(body):
        tools = [m for m in body["messages"] if m["role"] == "tool"]
        if not tools:
            return Reply(tool_calls=[{"name": "find_customer", "arguments": '{"name": "Mia"'}])  # cut off
        # then the gold path, as if the failed call had not happened
        return gold({**body, "messages": [m for m in body["messages"] if m is not tools[0]]})

    with FakeOpenAI(two_sided(agent)) as server:
        ep, = run_jobs([task], bank, *api_parts(server), cfg=RolloutConfig(opening="user"))
    assert ep.messages[1]["role"] == "user" and ep.messages[1]["content"] == opening_line(task.task)
    first_user_req = next(r for r in server.requests if is_user_request(r))
    assert first_user_req["messages"][-1]["content"].startswith("(The support chat has opened.")
    bad = ep.messages[3]
    assert bad["role"] == "tool" and bad["error"] and "not valid JSON" in bad["content"]
    assert ep.tool_errors == 1 and ep.records[0]["error"]
    assert ep.reward == 1.0 and ep.tool_calls == 4
    second_agent_req = [r for r in server.requests if not is_user_request(r)][1]
    assert any(m["role"] == "tool" and "not valid JSON" in m["content"] for m in second_agent_req["messages"])


# ---------------------------------------------------------------- the user simulator's requests


def test_user_requests_carry_the_goal_and_never_the_tools(bank):
    task = bank.task("move-mia")
    persona = bank.spec.domain.personas[task.task.persona]
    with FakeOpenAI(two_sided(gold_agent([task.task]))) as server:
        agent, users = api_parts(server)
        ep, = run_jobs([task], bank, agent, users)
    assert ep.reward == 1.0
    user_reqs = [r for r in server.requests if is_user_request(r)]
    agent_reqs = [r for r in server.requests if not is_user_request(r)]
    assert len(user_reqs) == 2 and len(agent_reqs) == 4  # opening + stop; 3 tool calls + "All done"
    for req in user_reqs:
        system = req["messages"][0]
        assert system["role"] == "system"
        for text in (task.task.user.reason, task.task.user.known, task.task.user.unknown, persona):
            assert text.strip() in system["content"]
        assert "transfer_funds" not in system["content"]  # the agent's tools are not the user's business
    # role-flipped: the agent's greeting and messages are "user", the simulator's own lines "assistant"
    last = user_reqs[-1]["messages"][1:]
    agent_texts = [m["content"] for m in ep.messages if m["role"] == "assistant" and m.get("content")]
    user_texts = [m["content"] for m in ep.messages if m["role"] == "user"]
    assert [m["content"] for m in last if m["role"] == "user"] == agent_texts
    assert [m["content"] for m in last if m["role"] == "assistant"] == user_texts[:-1]  # the last is its reply
    assert user_reqs[0]["messages"][1] == {"role": "user", "content": bank.spec.domain.greeting}
    # the agent's tool calls and results never reach the simulator (they do reach the agent)
    results = [m["content"] for m in ep.messages if m["role"] == "tool"]
    assert len(results) == 3 and "a778" in results[1]
    for req in user_reqs:
        assert all(m["role"] in ("system", "user", "assistant") and set(m) <= {"role", "content"} for m in req["messages"])
        dumped = json.dumps(req["messages"])
        assert not any(r in dumped for r in results) and "tool_call" not in dumped and "a778" not in dumped
    assert [m["content"] for m in agent_reqs[-1]["messages"] if m["role"] == "tool"] == results


@pytest.mark.parametrize("token,reason", [("###STOP###", "user_stop"), ("###TRANSFER###", "user_transfer"),
                                          ("###OUT-OF-SCOPE###", "out_of_scope")])
def test_stop_tokens_end_the_episode(bank, token, reason):
    task = bank.task("move-mia")

    def user(body):
        if not any(m["role"] == "assistant" for m in body["messages"][1:]):
            return fake_user(body)
        return Reply(content=f"I have to go now. {token}")

    agent = lambda body: Reply(content="Could you tell me your account ids?")
    with FakeOpenAI(two_sided(agent, user)) as server:
        ep, = run_jobs([task], bank, *api_parts(server))
    assert ep.termination == reason and ep.turns == 1
    assert ep.messages[-1] == {"role": "user", "content": "I have to go now."}  # said, token stripped
    assert ep.reward == 0.0 and ep.breakdown["ended_normally"] == (reason == "user_stop")


# ---------------------------------------------------------------- faults


def clean_request_count(bank, task) -> int:
    with FakeOpenAI(two_sided(gold_agent([task.task]))) as server:
        ep, = run_jobs([task], bank, *api_parts(server))
    assert ep.reward == 1.0
    return len(server.requests)


FAULTS = {
    "http-500": Reply(status=500),
    "http-429": Reply(status=429),
    "http-503": Reply(status=503),
    "malformed-json": Reply(raw='{"choices": [{"message": '),
    "not-json": Reply(raw="<html>bad gateway</html>"),
    "slower-than-timeout": Reply(content="too late", delay=1.5),
}


@pytest.mark.parametrize("kind", list(FAULTS))
@pytest.mark.parametrize("side", ["agent", "user"])
def test_transient_faults_are_retried_and_the_episode_succeeds(bank, kind, side):
    task = bank.task("move-mia")
    clean = clean_request_count(bank, task)
    only = is_user_request if side == "user" else (lambda b: not is_user_request(b))
    faulty = Faulty(two_sided(gold_agent([task.task])), fault=FAULTS[kind], first=3, only=only)
    with FakeOpenAI(faulty) as server:
        ep, = run_jobs([task], bank, *api_parts(server, timeout_s=0.5))
    assert ep.reward == 1.0 and ep.termination == "user_stop", (ep.termination, ep.error)
    assert faulty.injected == 3
    assert len(server.requests) == clean + 3  # each fault cost exactly one retry


@pytest.mark.parametrize("side", ["agent", "user"])
def test_a_server_that_keeps_failing_ends_the_episode_as_infra_error(bank, side):
    task = bank.task("move-mia")
    only = is_user_request if side == "user" else (lambda b: not is_user_request(b))
    faulty = Faulty(two_sided(gold_agent([task.task])), fault=Reply(status=500), first=10**6, only=only)
    with FakeOpenAI(faulty) as server:
        ep, = run_jobs([task], bank, *api_parts(server, retries=2))
    assert ep.termination == "infra_error" and not ep.counted and ep.reward == 0.0
    assert "500" in ep.error and "openai/fake" in ep.error
    assert faulty.injected == 3  # first try + 2 retries, then it gave up


CONTEXT_OVERFLOW = Reply(status=400, raw=json.dumps({"error": {
    "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9100 tokens.",
    "type": "invalid_request_error", "code": "context_length_exceeded"}}))


@pytest.mark.parametrize("side,fault,outcome,error", [
    ("agent", Reply(status=400), "failure", "BadRequestError"),  # its own messages were refused: its failure
    ("agent", CONTEXT_OVERFLOW, "failure", "ContextWindowExceededError"),
    ("agent", Reply(status=401), "infra_error", "AuthenticationError"),  # bad key: says nothing about the agent
    ("agent", Reply(status=404), "infra_error", "NotFoundError"),
    ("user", Reply(status=400), "user_error", "BadRequestError"),  # the simulator broke, not the agent
    ("user", CONTEXT_OVERFLOW, "user_error", "ContextWindowExceededError"),
    ("user", Reply(status=401), "infra_error", "AuthenticationError"),
    ("user", Reply(status=404), "infra_error", "NotFoundError"),
])
def test_permanent_errors_are_not_retried_and_land_in_their_class(bank, side, fault, outcome, error):
    task = bank.task("move-mia")
    only = is_user_request if side == "user" else (lambda b: not is_user_request(b))
    faulty = Faulty(two_sided(gold_agent([task.task])), fault=fault, first=10**6, only=only)
    with FakeOpenAI(faulty) as server:
        ep, = run_jobs([task], bank, *api_parts(server))
    assert ep.outcome == outcome and error in ep.error, (ep.outcome, ep.error)
    assert ep.counted == (outcome == "failure") and ep.reward == 0.0
    # retrying a bad request or a bad key only burns time: the user speaks first, then the agent
    assert faulty.injected == 1 and len(server.requests) == (1 if side == "user" else 2)


def test_infra_errors_are_reported_and_excluded_from_pass_k(bank):
    ok_task, broken = bank.task("move-mia"), bank.task("move-quin")
    # every request of the broken task's episodes fails: the user's (its goal is in the system
    # prompt) and the agent's (its opening line is in the history)
    hit = lambda b: broken.task.user.reason in json.dumps(b["messages"])
    faulty = Faulty(two_sided(gold_agent([ok_task.task, broken.task])), fault=Reply(status=503), first=10**6, only=hit)
    with FakeOpenAI(faulty) as server:
        cfg = EvalConfig("bank", agent="openai/fake", user="openai/fake", api_base=server.base,
                         user_api_base=server.base, tasks=["move-mia", "move-quin"], trials=3, retries=1, backoff_s=0.01)
        store, summary = run_eval(cfg)
    rows = store.episodes()
    assert len(rows) == 6
    assert sorted((r["task_id"], r["termination"]) for r in rows) == (
        [("move-mia", "user_stop")] * 3 + [("move-quin", "infra_error")] * 3)
    assert all("503" in r["error"] for r in rows if r["termination"] == "infra_error")
    assert summary["infra_errors"] == 3 and summary["counted"] == 3 and summary["tasks"] == 1
    assert summary["pass^1"] == summary["pass^3"] == 1.0  # not 0.5: an outage says nothing about the agent
    assert summary["terminations"] == {"infra_error": 3, "user_stop": 3}
    # counted as failures they would have halved pass^k
    assert pass_hat_k({"move-mia": (3, 3), "move-quin": (3, 0)}, 1) == 0.5
    from typer.testing import CliRunner

    from muactl.cli import app

    out = CliRunner().invoke(app, ["runs", "show", store.id], env={"COLUMNS": "200"}).output
    assert re.search(r"move-quin\s*│\s*3\s*│\s*0\s*│\s*3\s*│\s*infra_error 3", out), out
    assert re.search(r"infra_errors\s*│\s*3", out)


def test_no_episode_lost_or_double_counted_under_random_faults(bank):
    tasks = [t for t in bank.tasks if t.split == "test"]
    # a late reply is the right answer, late (Late): on a loaded machine the client may read it, not time out
    faults = [Reply(status=500), Reply(status=429), Reply(status=502), Reply(raw="{not json"), Late(delay=1.0)]
    faulty = Faulty(two_sided(gold_agent([t.task for t in tasks])), faults=faults, p=0.15, seed=7)
    with FakeOpenAI(faulty) as server:
        cfg = EvalConfig("bank", agent="openai/fake", user="openai/fake", api_base=server.base,
                         user_api_base=server.base, split="test", trials=3, concurrency=16, retries=6,
                         backoff_s=0.01, llm_timeout_s=0.4)
        store, summary = run_eval(cfg)
    assert faulty.injected >= 20
    rows = list(store.db.query("SELECT task_id, trial, termination, reward, id FROM episodes"))
    keys = [(r["task_id"], r["trial"]) for r in rows]
    assert len(rows) == len(set(keys)) == 60
    assert set(keys) == {(t.task.id, k) for t in tasks for k in range(3)}
    # every message of every episode is stored once, under its own episode
    n_msgs = store.db.execute("SELECT count(*), count(DISTINCT episode_id) FROM messages").fetchone()
    assert n_msgs[1] == 60 and n_msgs[0] == sum(
        store.db.execute("SELECT count(*) FROM messages WHERE episode_id = ?", [r["id"]]).fetchone()[0] for r in rows)
    # with retries a fault never changes an outcome (6 retries at p=0.15: an infra error is ~1e-6 per call)
    assert summary["episodes"] == 60 and summary["infra_errors"] == 0 and summary["pass^3"] == 1.0


def test_episode_timeout_when_the_model_is_too_slow_overall(bank):
    task = bank.task("move-mia")
    slow = lambda body: Reply(content=None, delay=0.3, tool_calls=[{"name": "find_customer", "arguments": {"name": "Mia"}}])
    with FakeOpenAI(two_sided(slow)) as server:
        ep, = run_jobs([task], bank, *api_parts(server), cfg=RolloutConfig(timeout_s=1.0))
    assert ep.termination == "timeout" and ep.reward == 0.0 and ep.counted
    assert 1 <= ep.tool_calls <= 3


# ---------------------------------------------------------------- isolation at concurrency 128


def test_128_concurrent_episodes_never_see_each_others_writes(bank):
    tasks = bank.tasks  # 64 tasks x 2 trials = 128 episodes, all in flight at once
    assert len(tasks) == 64
    template = new_env(bank.compiled)
    before = template.state_hash()
    template.close()

    def slow(responder):
        # the opening line takes 1.5 s, so every episode (sandbox already forked) is open at once before
        # any writes; later answers take 20 ms, so the episodes' tool calls interleave
        def respond(body):
            reply = responder(body)
            opening = is_user_request(body) and not any(m["role"] == "assistant" for m in body["messages"][1:])
            reply.delay = 1.5 if opening else 0.02
            return reply
        return respond

    with FakeOpenAI(slow(two_sided(gold_agent([t.task for t in tasks])))) as server:
        eps = run_jobs(tasks, bank, *api_parts(server), trials=2, concurrency=128)
    assert len(eps) == 128
    assert server.max_inflight >= 100, server.max_inflight
    bad = [(e.task_id, e.trial, e.termination, e.breakdown) for e in eps if e.reward != 1.0]
    assert not bad, bad
    for e in eps:  # each ends exactly where its own gold path ends, whatever the others wrote meanwhile
        task = bank.task(e.task_id)
        assert e.final_hash == gold_hash(task, bank.compiled)
        assert (e.final_hash != before) == (writes(bank, task) or bool(task.task.setup))
    by_task = {}
    for e in eps:
        by_task.setdefault(e.task_id, set()).add(e.final_hash)
    assert all(len(h) == 1 for h in by_task.values())  # the two trials of a task agree
    write_hashes = {next(iter(by_task[t.task.id])) for t in tasks if writes(bank, t)}
    gold = {gold_hash(t, bank.compiled) for t in tasks if writes(bank, t)}
    assert len(write_hashes) == len(gold) >= 20  # distinct writes -> distinct end states
    template = new_env(bank.compiled)
    assert template.state_hash() == before  # and the template was never written
    template.close()


# ---------------------------------------------------------------- simulated tools

WEATHER = {
    "domains/wx/domain.yaml": """\
        name: wx
        version: 0.1.0
        description: A weather service that tells callers the forecast for a city.
        policy: Look the forecast up with get_forecast and tell the caller what it says.
        database:
          tables:
            cities:
              columns: {city: text}
              primary_key: city
          seed:
            cities: [{city: Oslo}]
        tools:
          get_forecast:
            description: Tomorrow's forecast for a city.
            params:
              city: {type: string, description: The city.}
            simulated: 'Returns {"city": ..., "sky": one of sunny, cloudy, rainy, "high_c": integer}.'
            returns_json: true
        personas:
          calm: You are calm.
        """,
    "tasks/wx/test.yaml": """\
        - id: oslo
          persona: calm
          user:
            reason: You want to know tomorrow's weather in Oslo.
          expect:
            actions: []
            outputs: [sunny]
        """,
}


@pytest.fixture
def wx(tmp_path, monkeypatch):
    for rel, text in WEATHER.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(textwrap.dedent(text))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def forecast_agent(body):
    tools = [m for m in body["messages"] if m["role"] == "tool"]
    if not tools:
        return Reply(tool_calls=[{"name": "get_forecast", "arguments": {"city": "Oslo"}}])
    return Reply(content=f"All done. The forecast says: {tools[-1]['content']}")


def run_wx(tool_replies):
    """One wx episode; the simulated tool's answers come from `tool_replies` in order."""
    replies = iter(tool_replies)
    with FakeOpenAI(two_sided(forecast_agent, tool=lambda body: next(replies))) as server:
        cfg = EvalConfig("wx", agent="openai/fake", user="openai/fake", api_base=server.base,
                         user_api_base=server.base, tool_model="openai/fake", retries=1, backoff_s=0.01)
        store, _ = run_eval(cfg)
    ep, = store.episodes()
    return ep, store.messages(ep["id"]), [r for r in server.requests if is_tool_request(r)]


def test_simulated_tool_is_played_by_the_llm(wx):
    ep, msgs, tool_reqs = run_wx([Reply(content='```json\n{"city": "Oslo", "sky": "sunny", "high_c": 21}\n```')])
    assert ep["reward"] == 1.0, ep["breakdown"]
    tool_msg, = [m for m in msgs if m["role"] == "tool"]
    assert json.loads(tool_msg["content"]) == {"city": "Oslo", "sky": "sunny", "high_c": 21} and not tool_msg["error"]
    req, = tool_reqs
    system = req["messages"][0]["content"]
    assert "weather service" in system and "get_forecast" in system and "must be valid JSON" in system
    assert '"sky": one of sunny' in system
    assert req["messages"][1]["content"] == 'get_forecast({"city": "Oslo"})'


def test_simulated_tool_invalid_json_gets_one_retry(wx):
    ep, msgs, tool_reqs = run_wx([Reply(content="It will be sunny."), Reply(content='{"sky": "sunny"}')])
    assert ep["reward"] == 1.0
    assert len(tool_reqs) == 2 and "not valid JSON" in tool_reqs[1]["messages"][-1]["content"]
    assert [m["content"] for m in msgs if m["role"] == "tool"] == ['{"sky": "sunny"}']


def test_simulated_tool_invalid_json_twice_is_an_error_the_agent_sees(wx):
    ep, msgs, tool_reqs = run_wx([Reply(content="sunny"), Reply(content="still sunny, honestly")])
    assert len(tool_reqs) == 2
    tool_msg, = [m for m in msgs if m["role"] == "tool"]
    assert tool_msg["error"] and tool_msg["content"] == "Error: get_forecast returned invalid JSON."
    assert ep["termination"] == "user_stop" and ep["tool_errors"] == 1  # the episode went on
    assert "returned invalid JSON" in [m["content"] for m in msgs if m["role"] == "assistant"][-1]


def test_simulated_tool_whose_request_is_refused_is_an_error_the_agent_sees(wx):
    """A 400 for the tool player's request (built from the agent's arguments) is tool data, not infra."""
    ep, msgs, tool_reqs = run_wx([Reply(status=400)])
    assert len(tool_reqs) == 1  # not retried
    tool_msg, = [m for m in msgs if m["role"] == "tool"]
    assert tool_msg["error"] and tool_msg["content"].startswith("Error: get_forecast could not answer: openai/fake: "
                                                                "BadRequestError")
    assert ep["termination"] == "user_stop" and ep["outcome"] == "failure"


# ---------------------------------------------------------------- reproducibility


def greedy_bank_agent(body):
    """A deterministic API 'model' for bank that needs no task knowledge: asks the name, looks the
    customer up, lists the accounts, reports them. Its wording depends on the request's seed."""
    msgs = body["messages"]
    tools = [m["content"] for m in msgs if m["role"] == "tool"]
    said = " ".join(m["content"] for m in msgs if m["role"] == "user")
    name = re.search(r"name is (\w+)", said)
    if not name:
        return Reply(content="May I have your name, please?")
    if not tools:
        return Reply(tool_calls=[{"name": "find_customer", "arguments": {"name": name.group(1)}}])
    if len(tools) == 1:
        return Reply(tool_calls=[{"name": "list_accounts", "arguments": {"customer_id": tools[0]}}])
    return Reply(content=f"Your accounts: {tools[1]}. Reference {body.get('seed', 0) % 9973}. Goodbye.")


def test_same_seed_gives_identical_episodes(bank):
    tasks = bank.tasks[:24]

    def run(seed, concurrency):
        with FakeOpenAI(greedy_bank_agent) as server:
            agent = make_agent("openai/fake", api_base=server.base, **FAST)
            eps = run_jobs(tasks, bank, agent, ScriptedUser, trials=2, concurrency=concurrency,
                           cfg=RolloutConfig(seed=seed))
        return [(e.task_id, e.trial, e.seed, e.messages, e.termination, e.reward, e.breakdown, e.final_hash,
                 e.records, e.turns) for e in eps]

    a, b = run(3, 1), run(3, 16)
    assert a == b  # episode for episode, whatever the concurrency
    assert any(ep[5] == 1.0 for ep in a) and any(ep[5] == 0.0 for ep in a)  # informative, not trivially equal
    c = run(4, 16)
    assert [x[2] for x in c] != [x[2] for x in a]  # another seed: other episode seeds...
    assert [x[3] for x in c] != [x[3] for x in a]  # ...which reach the model


def test_oracle_and_scripted_user_are_reproducible(bank):
    def run():
        eps = run_jobs(bank.tasks, bank, OracleAgent(), ScriptedUser, trials=2, cfg=RolloutConfig(seed=11))
        return [(e.task_id, e.trial, e.seed, e.messages, e.reward, e.final_hash) for e in eps]

    first = run()
    assert first == run() and all(x[4] == 1.0 for x in first)


def test_infra_error_episode_is_stored_and_summarized_as_excluded(bank):
    """summarize() on stored rows: infra errors are counted in the report, not in pass^k."""
    task = bank.task("move-mia")
    faulty = Faulty(two_sided(gold_agent([task.task])), fault=Reply(status=500), first=10**6, only=is_user_request)
    with FakeOpenAI(faulty) as server:
        agent, users = api_parts(server, retries=0)
        ep = asyncio.run(run_episode(task, bank.compiled, agent, users(), RolloutConfig()))
    store = RunStore.create("eval", "bank", {"agent": "test"})
    store.save_episode(ep)
    good = run_jobs([task], bank, OracleAgent(), ScriptedUser)[0]
    good.trial = 1
    store.save_episode(good)
    s = summarize(store.episodes(), 2)
    assert s["episodes"] == 2 and s["counted"] == 1 and s["infra_errors"] == 1
    # one counted trial of two: the task is left out of every pass^k (one set for all k), and named
    assert s["pass^1"] is None and s["pass^2"] is None
    assert s["left_out_of_pass_k"] == [{"task_id": "move-mia", "scored": 1}]


# ---------------------------------------------------------------- Ctrl-C with API episodes in flight


def test_ctrl_c_mid_flight_saves_finished_episodes_and_resume_completes(bank, tmp_path, ctrl_c_interrupts):
    """A real SIGINT arrives (from the server's thread, as from a terminal) while 8 API episodes are
    waiting on the model: the finished ones are kept, the interrupted ones are not half-saved, and
    `muactl eval --resume` runs exactly the rest."""
    import signal
    import threading

    from typer.testing import CliRunner

    from muactl.cli import app

    tasks = [t for t in bank.tasks if t.split == "test"]
    fired = threading.Event()
    handler = []
    gold = two_sided(gold_agent([t.task for t in tasks]))

    def respond(body):
        reply = gold(body)
        reply.delay = 0.01
        if len(server.requests) == 60 and not fired.is_set():
            fired.set()
            handler.append(signal.getsignal(signal.SIGINT))
            signal.raise_signal(signal.SIGINT)
        return reply

    runner = CliRunner()
    with FakeOpenAI(respond) as server:
        base = ["--agent", "openai/fake", "--api-base", server.base, "--user", "openai/fake",
                "--user-api-base", server.base]
        r = runner.invoke(app, ["eval", "bank", *base, "--trials", "2", "--concurrency", "8"], env={"COLUMNS": "200"})
        assert fired.is_set()
        assert r.exit_code == 130, f"SIGINT handler when raised: {handler}\n{r.output}"
        assert "interrupted; finished episodes are saved" in r.output and "Traceback" not in r.output
        run_id = re.search(r"muactl eval --resume (\S+)", r.output).group(1)
        store = RunStore.open(run_id)
        saved = store.episodes()
        assert store.info()["status"] == "interrupted" and 0 < len(saved) < 40
        assert all(e["reward"] == 1.0 for e in saved)  # no cut-off episode was stored as a failure
        n_requests = len(server.requests)
        r = runner.invoke(app, ["eval", "--resume", run_id], env={"COLUMNS": "200"})
        assert r.exit_code == 0, r.output
    rows = RunStore.open(run_id).episodes()
    keys = [(e["task_id"], e["trial"]) for e in rows]
    assert len(rows) == len(set(keys)) == 40 and all(e["reward"] == 1.0 for e in rows)
    assert len(server.requests) - n_requests <= 6 * (40 - len(saved))  # only the missing episodes ran
    assert json.loads((store.path / "summary.json").read_text())["pass^2"] == 1.0
