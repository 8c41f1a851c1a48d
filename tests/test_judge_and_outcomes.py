"""`muactl eval` end to end for what the reward and the summary say: natural-language assertions judged
over the local OpenAI-compatible test server (only the judge model is fake: a Python function reading
the transcript), and the excluded outcome classes (reported with reasons, retried on resume, exit 1
when nothing could be scored)."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.episode.judge import Judge
from muactl.runs.store import RunStore
from tests.fakes.openai_server import FakeOpenAI, Faulty, Reply, gold_agent, is_user_request, two_sided

ROOT = Path(__file__).resolve().parent.parent
WIDE = {"COLUMNS": "200"}
runner = CliRunner()

NL_TASK = """
- id: refuse-overdraft-judged
  persona: brief
  user:
    reason: You want to move 5000 from your checking account to your savings account.
    known: Your name is Ned.
    instructions: If the agent says there is not enough money, accept that and end the conversation.
  expect:
    actions:
      - find_customer: {name: Ned}
    nl_assertions:
      - The agent greets the user.
      - The agent tells the user the request is complete.
"""


@pytest.fixture
def bank_copy(tmp_path, monkeypatch) -> Path:
    """The built-in bank domain copied into a project, with one task that has NL assertions."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MUACTL_NO_PROGRESS", "1")
    shutil.copytree(ROOT / "domains" / "bank", tmp_path / "domains" / "bank")
    shutil.copytree(ROOT / "tasks" / "bank", tmp_path / "tasks" / "bank")
    with open(tmp_path / "tasks" / "bank" / "test.yaml", "a") as f:
        f.write(NL_TASK)
    return tmp_path


def is_judge(body) -> bool:
    return "You check statements" in body["messages"][0]["content"]


def fake_judge(body) -> Reply:
    """Holds a statement when the transcript's agent lines contain its key word."""
    text = body["messages"][1]["content"]
    agent = " ".join(line for line in text.splitlines() if line.startswith("agent:")).lower()
    statements = re.findall(r"^\d+\. (.*)$", text, re.M)
    verdicts = [{"id": i, "met": ("greets" in s and "hello" in agent) or ("complete" in s and "complete" in agent),
                 "reason": f"checked {s[:20]}"} for i, s in enumerate(statements, 1)]
    return Reply(content=json.dumps({"verdicts": verdicts}))


def last_episode(run_id: str) -> dict:
    return RunStore.open(run_id).episodes()[-1]


def run_id_of(output: str) -> str:
    return re.search(r"(\d{8}-\d{6}-eval-bank-[0-9a-f]{4})", output).group(1)


def test_nl_assertions_are_judged_only_with_a_judge(bank_copy):
    base = ["eval", "bank", "--task", "refuse-overdraft-judged"]
    r = runner.invoke(app, base, env=WIDE)
    assert r.exit_code == 0, r.output
    ep = last_episode(run_id_of(r.output))
    assert ep["reward"] == 1.0 and ep["breakdown"]["nl_judged"] is False  # oracle: "Your request is complete."
    assert [v["ok"] for v in ep["breakdown"]["nl_assertions"]] == [None, None]

    with FakeOpenAI(fake_judge) as server:
        r = runner.invoke(app, [*base, "--judge", "openai/judge", "--judge-api-base", server.base,
                                "--max-tokens", "300"], env=WIDE)
        assert r.exit_code == 0, r.output
        judge_requests = [b for b in server.requests if is_judge(b)]
    assert len(judge_requests) == 1
    assert judge_requests[0]["max_tokens"] == 300  # the judge takes the API-call settings like agents and users
    assert "agent: Your request is complete." in judge_requests[0]["messages"][1]["content"]
    assert "tool" not in judge_requests[0]["messages"][1]["content"]  # what was said only, no tool calls
    run_id = run_id_of(r.output)
    ep = last_episode(run_id)
    # the oracle never says hello: the first statement fails, so the episode pays 0 though the DB matches
    assert ep["reward"] == 0.0 and ep["breakdown"]["db_match"] and ep["breakdown"]["nl_judged"]
    assert [(v["ok"], v["reason"]) for v in ep["breakdown"]["nl_assertions"]] == [
        (False, "checked The agent greets the"), (True, "checked The agent tells the ")]
    out = runner.invoke(app, ["runs", "show", run_id, "--episode", "1"], env=WIDE).output
    assert "nl assertion fails: The agent greets the user. (checked The agent greets the)" in out


def test_a_judge_that_answers_nonsense_makes_the_episode_infra_error(bank_copy):
    with FakeOpenAI(lambda body: Reply(content="I think it went well.")) as server:
        r = runner.invoke(app, ["eval", "bank", "--task", "refuse-overdraft-judged", "--judge", "openai/judge",
                                "--judge-api-base", server.base], env=WIDE)
        assert len(server.requests) == 2  # one second chance, then it gives up
    assert r.exit_code == 4, r.output  # the only episode could not be scored
    ep = last_episode(run_id_of(r.output))
    assert ep["outcome"] == "infra_error" and "judge: openai/judge gave no usable verdicts" in ep["error"]
    assert "1 infra_error (not scored): judge: openai/judge gave no usable verdicts" in r.output


NO_CHOICES = json.dumps({"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "judge", "choices": []})


@pytest.mark.parametrize("reply,error", [
    (Reply(raw=NO_CHOICES), "judge: openai/judge: malformed reply: the reply has no 'choices'"),
    (Reply(content="x" * 2_000_000), "judge: openai/judge: malformed reply: the reply holds 2,000,000 characters, "
                                     "over muactl's limit of 1,048,576 (limits.MAX_REPLY_CHARS)"),
])
def test_a_judge_reply_without_choices_or_too_big_is_infra_error_saying_so(bank_copy, reply, error):
    with FakeOpenAI(lambda body: reply) as server:
        r = runner.invoke(app, ["eval", "bank", "--task", "refuse-overdraft-judged", "--judge", "openai/judge",
                                "--judge-api-base", server.base, "--retries", "1", "--backoff", "0"], env=WIDE)
        assert len(server.requests) == 2  # retried like a 5xx, then given up
    assert r.exit_code == 4, r.output
    ep = last_episode(run_id_of(r.output))
    assert ep["outcome"] == "infra_error" and ep["error"].startswith(error), ep["error"]
    assert "IndexError" not in r.output and "Traceback" not in r.output


class CrashingJudge(Judge):
    """A judge whose model crashes (a local hf: judge out of memory, say): the fake LLM raises."""

    def __init__(self):
        super().__init__("hf:crashing")

    async def _ask(self, messages, domain):
        raise RuntimeError("CUDA out of memory")


def test_a_judge_that_crashes_is_infra_error_and_the_run_goes_on(bank_copy):
    import asyncio

    from muactl.domain.open import open_domain
    from muactl.env.sandbox import new_env
    from muactl.episode.agents.oracle import OracleAgent
    from muactl.episode.rollout import Job, RolloutConfig, run_episode, run_many
    from muactl.episode.user import ScriptedUser

    bank = open_domain("bank")
    judged, plain = bank.task("refuse-overdraft-judged"), bank.task("move-mia")
    eps = asyncio.run(run_many([Job(judged, 0), Job(plain, 0), Job(judged, 1)], bank.compiled, OracleAgent(),
                               ScriptedUser, RolloutConfig(), concurrency=3, judge=CrashingJudge()))
    assert [e.outcome for e in eps] == ["infra_error", "success", "infra_error"]
    assert eps[0].error == "judge: RuntimeError: CUDA out of memory" and eps[0].reward == 0.0
    env = new_env(bank.compiled)
    ep = asyncio.run(run_episode(judged, bank.compiled, OracleAgent(), ScriptedUser(), RolloutConfig(), env=env,
                                 judge=CrashingJudge()))
    assert ep.outcome == "infra_error"
    with pytest.raises(sqlite3.ProgrammingError):  # closed: its database went back to the pool
        env.conn.execute("SELECT 1")


def api_args(server) -> list[str]:
    return ["--agent", "openai/fake", "--api-base", server.base, "--user", "openai/fake", "--user-api-base", server.base]


def test_summary_reports_excluded_classes_and_tasks_not_scored_and_resume_retries_them(bank_copy):
    tasks = ["move-mia", "move-quin", "balance-pia"]
    from muactl.domain.open import open_domain

    opened = open_domain("bank")
    gold = two_sided(gold_agent([opened.task(t).task for t in tasks]))
    quin = opened.task("move-quin").task.user.reason
    pia = opened.task("balance-pia").task.user.reason
    # move-quin: the user's model refuses every request (user_error); balance-pia: the key is bad (infra)
    broken = Faulty(gold, fault=Reply(status=400), first=10**6, only=lambda b: is_user_request(b) and quin in json.dumps(b))
    broken = Faulty(broken, fault=Reply(status=401), first=10**6, only=lambda b: pia in json.dumps(b))
    with FakeOpenAI(broken) as server:
        args = ["eval", "bank", *sum([["--task", t] for t in tasks], []), "--trials", "2", *api_args(server)]
        r = runner.invoke(app, args, env=WIDE)
        assert r.exit_code == 0, r.output
        run_id = run_id_of(r.output)
        summary = RunStore.open(run_id).info()["summary"]
        assert summary["outcomes"] == {"success": 2, "user_error": 2, "infra_error": 2}
        assert summary["counted"] == 2 and summary["tasks"] == 1 and summary["pass^1"] == 1.0
        assert summary["excluded"]["user_error"]["count"] == 2
        assert summary["excluded"]["user_error"]["reasons"][0][0].startswith("RequestRejected: openai/fake: BadRequestError")
        assert summary["excluded"]["infra_error"]["reasons"][0][0].startswith("openai/fake: AuthenticationError")
        assert summary["tasks_not_scored"] == [{"task_id": "balance-pia", "outcomes": {"infra_error": 2}},
                                               {"task_id": "move-quin", "outcomes": {"user_error": 2}}]
        assert re.search(r"2 user_error \(not scored\): RequestRejected: openai/fake: BadRequestError.*\(2\)", r.output)
        assert re.search(r"2 infra_error \(not scored\): openai/fake: AuthenticationError.*\(2\)", r.output)
        assert "2 tasks not scored (infra_error 1, user_error 1): balance-pia, move-quin" in r.output
        shown = runner.invoke(app, ["runs", "show", run_id], env=WIDE).output
        assert re.search(r"move-quin\s*│\s*2\s*│\s*0\s*│\s*2\s*│", shown) and "user_error" in shown

        # the causes are fixed: --resume plays the excluded episodes again, and only those
        server.responder = gold
        server.requests.clear()
        r = runner.invoke(app, ["eval", "--resume", run_id], env=WIDE)
        assert r.exit_code == 0, r.output
        users = [b for b in server.requests if is_user_request(b)]
    assert {t for t in tasks if any(opened.task(t).task.user.reason in json.dumps(b) for b in users)} == {
        "move-quin", "balance-pia"}
    rows = RunStore.open(run_id).episodes()
    assert len(rows) == 6 and all(e["outcome"] == "success" for e in rows)
    summary = RunStore.open(run_id).info()["summary"]
    assert summary["tasks"] == 3 and summary["tasks_not_scored"] == [] and summary["excluded"] == {}


def test_tasks_short_of_scored_trials_leave_every_pass_k_and_are_named_where_it_is_shown(bank_copy):
    from muactl.domain.open import open_domain

    opened = open_domain("bank")
    mia, quin = opened.task("move-mia").task, opened.task("move-quin").task
    # the agent solves move-mia only; move-quin's first user request fails (401: infra_error at once), so
    # move-quin has one scored trial (a failure) of two
    broken = Faulty(two_sided(gold_agent([mia])), fault=Reply(status=401), first=1,
                    only=lambda b: is_user_request(b) and quin.user.reason in json.dumps(b))
    with FakeOpenAI(broken) as server:
        r = runner.invoke(app, ["eval", "bank", "--task", "move-mia", "--task", "move-quin", "--trials", "2",
                                *api_args(server)], env=WIDE)
    assert r.exit_code == 0, r.output
    run_id = run_id_of(r.output)
    summary = RunStore.open(run_id).info()["summary"]
    assert summary["pass^1"] == summary["pass^2"] == 1.0  # both over move-mia; was 0.5 and 1.0
    assert summary["left_out_of_pass_k"] == [{"task_id": "move-quin", "scored": 1}]
    note = "pass^1..2 are over the 1 tasks with 2 scored trials; 1 left out for fewer scored trials"
    assert note in r.output and "move-quin (1 of 2)" in r.output
    shown = runner.invoke(app, ["runs", "show", run_id], env=WIDE).output
    assert note in shown and "move-quin (1 of 2)" in shown
    assert runner.invoke(app, ["report", run_id], env=WIDE).exit_code == 0
    page = (RunStore.open(run_id).path / "report" / "index.html").read_text()
    assert note in page and "move-quin (1 of 2)" in page


def test_eval_exits_4_not_internal_errors_1_when_every_episode_was_excluded(bank_copy):
    """Exit 1 is an internal error (README, "Errors"): a run whose every episode was excluded is the documented 4."""
    with FakeOpenAI(lambda body: Reply(status=401)) as server:
        r = runner.invoke(app, ["eval", "bank", "--task", "move-mia", "--task", "move-quin", *api_args(server)], env=WIDE)
    assert r.exit_code == 4 and "internal error" not in r.output, r.output
    assert "2 infra_error (not scored): openai/fake: AuthenticationError" in r.output
    assert "no episode was scored: every one ended in infra_error" in r.output and "Traceback" not in r.output
    assert "2 tasks not scored (infra_error 2): move-mia, move-quin" in r.output


# ---------------------------------------------------------------- who broke: the simulator, the machine


class CrashingUser:
    """A simulator that breaks on its second turn (a bug, or its reply being empty)."""

    name = "crashing"

    def __init__(self, failure):
        self.failure, self.turns = failure, 0

    async def respond(self, ctx):
        from muactl.episode.user import ScriptedUser, UserReply

        self.turns += 1
        if self.turns == 2:
            if self.failure == "empty":
                return UserReply("   ")
            raise ValueError("the simulator's parser failed")
        return await ScriptedUser().respond(ctx)


@pytest.mark.parametrize("failure,error", [("crash", "ValueError: the simulator's parser failed"),
                                           ("empty", "the user simulator sent an empty message")])
def test_a_broken_user_simulator_is_a_user_error_not_the_agents_failure(bank, failure, error):
    import asyncio

    from muactl.episode.agents.oracle import OracleAgent
    from muactl.episode.rollout import RolloutConfig, run_episode

    ep = asyncio.run(run_episode(bank.task("move-mia"), bank.compiled, OracleAgent(), CrashingUser(failure), RolloutConfig()))
    assert ep.outcome == "user_error" and ep.error == error and not ep.counted


def test_a_local_generate_call_that_crashes_is_an_infra_error():
    import asyncio

    from muactl.errors import InfraError
    from muactl.models.batcher import Batcher

    def out_of_memory(prompts, max_new_tokens, temperature, seed):
        raise RuntimeError("CUDA out of memory")

    with pytest.raises(InfraError, match="local generation failed: RuntimeError: CUDA out of memory"):
        asyncio.run(Batcher(out_of_memory).submit([1, 2, 3], 4, 0.0, 0))


def test_a_run_written_before_outcome_classes_still_opens_and_reports_them(tmp_path, monkeypatch, bank):
    import asyncio

    from muactl.episode.agents.oracle import OracleAgent
    from muactl.episode.user import ScriptedUser
    from muactl.runs.summary import summarize
    from muactl.episode.rollout import RolloutConfig, run_episode

    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))

    store = RunStore.create("eval", "bank", {})
    store.db.conn.execute("ALTER TABLE episodes DROP COLUMN outcome")  # the old layout
    ep = asyncio.run(run_episode(bank.task("move-mia"), bank.compiled, OracleAgent(), ScriptedUser(), RolloutConfig()))
    assert "outcome" not in store.db["episodes"].columns_dict
    store.db["episodes"].insert({"run_id": store.id, "task_id": "move-mia", "trial": 0, "seed": 0, "reward": 0.0,
                                 "termination": "infra_error", "success": 0, "turns": 1, "tool_calls": 0,
                                 "tool_errors": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0,
                                 "error": "openai/x: Timeout", "step": 0})
    reopened = RunStore.open(store.id)
    assert "outcome" in reopened.db["episodes"].columns_dict
    ep.trial = 1
    reopened.save_episode(ep)
    assert [e["outcome"] for e in reopened.episodes()] == ["infra_error", "success"]
    assert summarize(reopened.episodes(), 1)["outcomes"] == {"success": 1, "infra_error": 1}


@pytest.mark.parametrize("name,kind", [
    ("ContextWindowExceededError", "rejected"), ("ContentPolicyViolationError", "rejected"),
    ("BadRequestError", "rejected"), ("UnprocessableEntityError", "rejected"),
    ("AuthenticationError", "service"), ("NotFoundError", "service"), ("PermissionDeniedError", "service"),
    ("UnsupportedParamsError", "service"),  # a parameter the provider does not take: setup, not the agent
    ("RateLimitError", "transient"), ("InternalServerError", "transient"), ("ServiceUnavailableError", "transient"),
    ("APIConnectionError", "transient"), ("Timeout", "transient"),
])
def test_litellm_errors_are_classified(name, kind):
    from muactl.models.llm import classify, litellm

    cls = getattr(litellm(), name)
    try:
        exc = cls(message="x", model="m", llm_provider="openai")
    except TypeError:  # some take a response or no provider
        exc = cls.__new__(cls)
    assert classify(exc) == kind
