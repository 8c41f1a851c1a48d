"""The adversarial agents (muactl/episode/agents/adversarial.py) over every task of the built-in domains, from
the task files and from template instances, with the scripted user: none may be paid for a task whose
correct outcome changes the database, and each only where its trick is the right answer. The figures
for every domain are in benchmarks/reward_audit.py."""

from __future__ import annotations

import asyncio

import pytest

from muactl.episode.agents import make_agent
from muactl.episode.user import ScriptedUser, make_user
from muactl.env.gold import changes_nothing
from muactl.episode.rollout import Job, RolloutConfig, run_many
from muactl.domain.task_templates import domain_for, draw_stream
from tests.fakes.openai_server import FakeOpenAI, Reply


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))


def all_tasks(opened):
    drawn = draw_stream(opened, "template:all", 12, 3, "fixed", "test").tasks
    return list(opened.tasks) + drawn


def passed(opened, tasks, agent: str, user=ScriptedUser) -> set[str]:
    jobs = [Job(t, 0, domain_for(opened, t)) for t in tasks]
    eps = asyncio.run(run_many(jobs, opened.compiled, make_agent(agent), user, RolloutConfig(), concurrency=16))
    assert all(e.counted for e in eps), [(e.task_id, e.termination, e.error) for e in eps if not e.counted]
    return {e.task_id for e in eps if e.reward > 0}


# what each adversary may be paid for: its trick has to be the right answer
ALLOWED = {
    "do-nothing": lambda e: not e.transfer and not e.outputs,
    "transfer-at-once": lambda e: e.transfer and not e.outputs,
    "number-sprayer": lambda e: not e.transfer,
    "id-echo": lambda e: not e.transfer,
}


@pytest.mark.parametrize("domain", ["bank", pytest.param("retail", marks=pytest.mark.slow)])
def test_no_adversary_is_paid_beyond_its_trick(domain, request):
    opened = request.getfixturevalue(domain)
    tasks = all_tasks(opened)
    by_id = {t.task.id: t for t in tasks}
    no_change = {i for i, t in by_id.items() if changes_nothing(t, domain_for(opened, t))}
    assert 0 < len(no_change) < len(tasks)
    for name, allowed in ALLOWED.items():
        won = passed(opened, tasks, f"adversary:{name}")
        assert won <= no_change, (name, sorted(won - no_change))
        bad = sorted(i for i in won if not allowed(by_id[i].task.expect))
        assert not bad, (name, bad)
        assert len(won) / len(tasks) <= len(no_change) / len(tasks)
    assert passed(opened, tasks, "oracle") == set(by_id)


def test_do_nothing_and_transfer_are_paid_exactly_on_their_tasks(bank):
    """The bound is tight where it should be: refusals pay do-nothing, transfer tasks pay an immediate
    transfer whose gold path only reads (so the audit measures the reward, not broken agents)."""
    tasks = [t for t in bank.tasks if t.split == "test"]
    assert passed(bank, tasks, "adversary:do-nothing") == {
        "refuse-overdraft-ned", "refuse-overdraft-ola", "refuse-close-nonempty-cy", "refuse-send-other-vic"}
    assert passed(bank, tasks, "adversary:transfer-at-once") == {"human-quin", "human-wes"}
    assert passed(bank, tasks, "adversary:number-sprayer") >= {"balance-pia", "balance-vic"}  # it did look them up


def test_the_users_transfer_token_earns_nothing(bank):
    """A do-nothing agent whose user gives up with ###TRANSFER### is not paid on transfer tasks."""
    tasks = [bank.task("human-quin"), bank.task("human-wes")]
    with FakeOpenAI(lambda body: Reply(content="Just get me a human. ###TRANSFER###")) as server:
        won = passed(bank, tasks, "adversary:do-nothing", lambda: make_user("openai/fake", api_base=server.base))
    assert won == set()
