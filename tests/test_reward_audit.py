"""The adversarial agents (muactl/episode/agents/adversarial.py) over every task of the built-in domains, from
the task files and from template instances on the fixed and on random databases, with the scripted user: none
may pass more than BOUND of any domain's tasks from any source, and the oracle passes all of them. A task
whose right outcome changes nothing pays only for evidence of the work (the look-ups in
expect.required_calls, the reason or answer in expect.outputs). The figures are in
benchmarks/reward_audit.py."""

from __future__ import annotations

import asyncio

import pytest

from muactl.episode.agents import make_agent
from muactl.episode.agents.adversarial import ADVERSARIES
from muactl.episode.user import ScriptedUser, make_user
from muactl.env.gold import changes_nothing
from muactl.episode.rollout import Job, RolloutConfig, run_many
from muactl.domain.task_templates import domain_for, draw_stream
from tests.fakes.openai_server import FakeOpenAI, Reply

BOUND = 0.05


@pytest.fixture(autouse=True)
def _runs_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))


def task_sources(opened, n: int) -> dict[str, list]:
    """The task files, and n template instances on the fixed database and n on random ones (where the
    domain can make them)."""
    sources = {"task files": list(opened.tasks),
               "templates (fixed db)": draw_stream(opened, "template:all", n, 3, "fixed", "test").tasks}
    if opened.spec.domain.database.generate:
        sources["templates (random db)"] = draw_stream(opened, "template:all", n, 3, "random", "test").tasks
    return sources


def play(opened, tasks, agent: str, user=ScriptedUser):
    jobs = [Job(t, 0, domain_for(opened, t)) for t in tasks]
    eps = asyncio.run(run_many(jobs, opened.compiled, make_agent(agent), user, RolloutConfig(), concurrency=16))
    assert all(e.counted for e in eps), [(e.task_id, e.termination, e.error) for e in eps if not e.counted]
    return eps


def passed(opened, tasks, agent: str, user=ScriptedUser) -> set[str]:
    return {e.task_id for e in play(opened, tasks, agent, user) if e.reward > 0}


@pytest.mark.parametrize("domain,n", [("bank", 60), pytest.param("retail", 60, marks=pytest.mark.slow)])
def test_no_adversary_passes_more_than_the_bound_and_the_oracle_passes_all(domain, n, request):
    opened = request.getfixturevalue(domain)
    for source, tasks in task_sources(opened, n).items():
        no_change = {t.task.id for t in tasks if changes_nothing(t, domain_for(opened, t))}
        assert len(no_change) / len(tasks) > 0.3, source  # the bound is not met by having no such tasks
        for name in ADVERSARIES:
            won = passed(opened, tasks, f"adversary:{name}")
            assert won <= no_change, (source, name, sorted(won - no_change))  # they never write
            assert len(won) / len(tasks) <= BOUND, (source, name, sorted(won))
        assert passed(opened, tasks, "oracle") == {t.task.id for t in tasks}, source
        assert passed(opened, tasks, "oracle:varied") == {t.task.id for t in tasks}, source


def test_the_look_ups_alone_earn_nothing(bank):
    """The number-sprayer makes every required look-up of the bank's test tasks and lists every number and
    id it saw; what it lacks is the answer or the reason, so it passes none of them."""
    tasks = [t for t in bank.tasks if t.split == "test" and t.task.expect.required_calls]
    eps = play(bank, tasks, "adversary:number-sprayer")
    assert all(all(e.breakdown["required_calls"].values()) for e in eps)
    assert [e.task_id for e in eps if e.reward > 0] == []
    assert not any(all(e.breakdown["outputs"].values()) for e in eps if e.breakdown["outputs"])


def test_the_oracle_says_why_it_refuses(bank):
    """Its refusal names the value that blocks the request (the SFT data teaches that), and the scripted
    user ends the conversation after it."""
    task = next(t for t in bank.tasks if t.task.id == "refuse-overdraft-ned")
    ep, = play(bank, [task], "oracle")
    said = [m["content"] for m in ep.messages if m["role"] == "assistant" and not m.get("tool_calls")]
    assert said[-1] == ("I am sorry, I cannot do that. Your checking account holds 195, less than the 300 you "
                        "asked to move, so I cannot make this transfer.")
    assert ep.reward == 1.0 and ep.termination == "user_stop"


def test_a_declined_change_pays_only_the_proposal_with_its_evidence(retail):
    """decline-exchange: the user says no to the exchange (user.consent: false), so the right end state is the
    look-ups' alone; what pays is the proposal carrying the price difference worked out from them. The oracle
    passes and its user's refusal is checked; an agent that reads and lists every number, or does nothing,
    or makes the exchange when its user says yes, does not."""
    from muactl.episode.fidelity import user_fidelity

    tasks = draw_stream(retail, "template:decline-exchange", 4, 3, "fixed", "test").tasks
    assert all(not t.task.user.consent for t in tasks)
    eps = play(retail, tasks, "oracle")
    assert [e.reward for e in eps] == [1.0] * 4
    proposals = [m["content"] for e in eps for m in e.messages if "(yes/no)" in (m.get("content") or "")]
    assert len(proposals) == 4 and all(t.task.expect.outputs[0] in p for t, p in zip(tasks, proposals))
    assert all(user_fidelity(t, e, retail.compiled)["refused"] is True for t, e in zip(tasks, eps))
    for agent in ("adversary:number-sprayer", "adversary:do-nothing"):
        assert passed(retail, tasks, agent) == set(), agent
    assert [e.reward for e in play(retail, tasks, "oracle", SaysYes)] == [0.0] * 4  # the exchange made: wrong


class SaysYes(ScriptedUser):
    """A scripted user that consents whatever its task says."""

    def say(self, ctx, situation: str, **fields: str) -> str:
        return super().say(ctx, "yes" if situation == "no" else situation, **fields)


def test_the_users_transfer_token_earns_nothing(bank):
    """A do-nothing agent whose user gives up with ###TRANSFER### is not paid on transfer tasks."""
    tasks = [bank.task("human-quin"), bank.task("human-wes")]
    with FakeOpenAI(lambda body: Reply(content="Just get me a human. ###TRANSFER###")) as server:
        won = passed(bank, tasks, "adversary:do-nothing", lambda: make_user("openai/fake", api_base=server.base))
    assert won == set()


def test_the_varied_oracle_says_things_more_than_one_way(bank):
    """`oracle:varied` (SFT data with more than one phrasing per situation) draws its phrasing from the
    episode's seed: across the bank's template instances every situation it meets is said at least two ways,
    the same episode played again says the same, and the plain oracle keeps its one phrasing."""
    from muactl.episode.agents.oracle import PHRASES

    tasks = draw_stream(bank, "template:all", 40, 3, "random", "test").tasks

    def texts(agent):
        return [[m["content"] for m in e.messages if m["role"] == "assistant" and m.get("content")]
                for e in play(bank, tasks, agent)]

    def situations(conversations):
        used: dict[str, set[int]] = {}
        for text in (t for c in conversations for t in c):
            for situation, options in PHRASES.items():
                for i, option in enumerate(options):
                    head = option.split("{")[0]
                    if head and text.startswith(head):
                        used.setdefault(situation, set()).add(i)
        return used

    varied = texts("oracle:varied")
    used = situations(varied)
    assert {"ask", "confirm", "refusal", "outputs"} <= set(used)
    assert all(len(picks) >= 2 for picks in used.values()), used
    assert texts("oracle:varied") == varied
    assert all(picks == {0} for picks in situations(texts("oracle")).values())
