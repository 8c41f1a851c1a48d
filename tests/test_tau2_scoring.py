"""`scoring: tau2`: muactl's reward equal to τ²-bench's evaluator (issue 28 §2).

tests/data/tau2/<domain>_rewards.json holds what τ²'s own evaluator paid (benchmarks/tau2_reward_record.py,
τ²'s LLM judge stubbed as "every assertion met") on the trajectories of importers/tau2_trajectories.py:
booleans and digests only. Comparing muactl with them needs τ²'s data (TAU2_BENCH, README "τ²-bench");
re-recording them needs a Python with τ²'s evaluator dependencies too (TAU2_PYTHON). The rules themselves
are checked here on the invented checkout (tests/data/tau2/checkout), the judge on a local fake
OpenAI-compatible server (the only fake: the LLM).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.episode.tau2_scoring import STOPS, action_matches, communicated, play_trajectory, score_tau2
from muactl.episode.types import TERMINATIONS, Episode
from muactl.importers.tau2_trajectories import KINDS, trajectories
from tests.fakes.openai_server import FakeOpenAI, Reply

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "tau2"
FAKE = DATA / "checkout"
CHECKOUT = os.environ.get("TAU2_BENCH")
TAU2_PYTHON = os.environ.get("TAU2_PYTHON")
needs_tau2 = pytest.mark.skipif(not CHECKOUT, reason="set TAU2_BENCH to a τ²-bench checkout to import its data")
DOMAINS = ("retail", "airline", "telecom", "mock", "banking_knowledge")
WIDE = {"COLUMNS": "200"}


def recorded(domain: str) -> dict:
    return json.loads((DATA / f"{domain}_rewards.json").read_text())


@pytest.mark.parametrize("domain", DOMAINS)
def test_recorded_tau2_rewards_cover_every_rule_and_hold_no_tau2_data(domain):
    rec = recorded(domain)
    rows = [r for rows in rec["tasks"].values() for r in rows]
    assert rec["trajectories"] == len(rows) >= 80 and rec["judge"].startswith("stub")
    kinds = {r["kind"] for r in rows}
    assert kinds <= set(KINDS)
    assert kinds >= {"gold", "missing_write", "wrong_argument", "extra_write", "early_transfer", "empty", "max_turns"}
    if domain not in ("telecom", "banking_knowledge"):  # their tasks communicate nothing
        assert {"omitted_info", "info_inside_words"} <= kinds
    # τ²'s own gold paths pay, but where they leave one of the task's env assertions false (mock)
    assert all(r["reward"] == 1.0 or False in r["env_assertions"] for r in rows if r["kind"] == "gold")
    assert all(r["reward"] == 0.0 and r["reward_breakdown"] is None for r in rows if r["kind"] == "max_turns")
    failed = [r for r in rows if "error" in r]  # τ²'s evaluator itself failed (mock: an assertion on no task)
    assert all(set(r) == {"kind", "digest", "error"} for r in failed) and (domain == "mock") == bool(failed)
    rows = [r for r in rows if "error" not in r]
    for r in rows:
        assert re.fullmatch(r"[0-9a-f]{16}", r["digest"])
        for key in ("env_assertions", "actions", "communicate", "nl_assertions"):
            assert r[key] is None or all(isinstance(x, bool) for x in r[key])
        assert r["db_match"] in (None, True, False)
    assert {r["reward"] for r in rows} == {0.0, 1.0}


# ---------------------------------------------------------------- τ²'s rules, one at a time


def episode(texts=(), calls=(), user_calls=(), termination="user_stop") -> Episode:
    messages = [{"role": "assistant", "content": t} for t in texts]
    messages += [{"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "name": n, "arguments": a}]}
                 for i, (n, a) in enumerate(calls)]
    ep = Episode("t", 0, 0, messages, termination)
    ep.user_calls = [{"name": n, "arguments": a} for n, a in user_calls]
    return ep


def test_communicate_is_a_case_blind_substring_with_commas_removed_from_the_message_only():
    ep = episode(["Your refund of 1,234.50 DOLLARS is on its way; order #W112."])
    assert communicated("1234.50", ep) and communicated("dollars", ep)
    assert communicated("12", ep)  # inside "#W112": τ² counts it (muactl's own reward does not)
    assert not communicated("1,234.50", ep)  # the info keeps its comma, the message lost it
    assert not communicated("order #W113", ep)
    assert not communicated("x", episode(calls=[("x", {})]))  # a call is no text


def test_an_action_matches_on_compare_args_or_on_the_keys_the_call_carries():
    gold = {"order_id": "#W1", "reason": "no longer needed"}
    assert action_matches("cancel", gold, None, "cancel", {"order_id": "#W1"})  # the call's keys only
    assert not action_matches("cancel", gold, None, "cancel", {"order_id": "#W1", "reason": "ordered by mistake"})
    assert not action_matches("cancel", gold, None, "cancel", {"order_id": "#W1", "extra": 1})  # a key gold lacks
    assert action_matches("cancel", gold, None, "cancel", {})  # no arguments: the name decides
    assert action_matches("cancel", gold, ["order_id"], "cancel", {"order_id": "#W1", "reason": "other"})
    assert action_matches("transfer", {"summary": "a"}, [], "transfer", {"summary": "b"})
    assert not action_matches("cancel", gold, [], "return", {})
    assert action_matches("refuel", {"gb": 2}, None, "refuel", {"gb": 2.0})  # numbers by value, as Python compares


def import_fake(project: Path) -> None:
    project.mkdir(exist_ok=True)
    r = runner.invoke(app, ["import", "tau2", str(FAKE), "--domain", "retail", "--dir", str(project)])
    assert r.exit_code == 0, r.output


@pytest.fixture(scope="module")
def fake_import(tmp_path_factory):
    """The invented checkout imported once (opened domain, raw τ² tasks by id); tests only read it."""
    from muactl.domain.open import open_domain

    project = tmp_path_factory.mktemp("tau2fake")
    import_fake(project)
    raw = {t["id"]: t for t in json.loads((FAKE / "data/tau2/domains/retail/tasks.json").read_text())}
    return open_domain(str(project / "domains" / "tau2-retail")), raw


def with_basis(task, basis):
    import dataclasses

    expect = task.task.expect.model_copy(update={"reward_basis": basis})
    return dataclasses.replace(task, task=task.task.model_copy(update={"expect": expect}))


def scored(opened, raw, tid, kind, basis=None):
    task = next(t for t in opened.tasks if t.task.id == tid)
    task = with_basis(task, basis) if basis else task
    traj = next(t for t in trajectories(raw[tid], opened.compiled.writes) if t["kind"] == kind)
    ep, env = play_trajectory(task, opened.compiled, traj)
    try:
        return score_tau2(task, opened.compiled, env, ep)
    finally:
        env.close()


def test_the_reward_is_the_product_of_the_basis_and_the_other_checks_are_reported_only(fake_import):
    opened, raw = fake_import
    # task 0: two reads, communicate "pending". Left unsaid, it costs nothing under [DB], everything under COMMUNICATE
    reward, b = scored(opened, raw, "0", "omitted_info", ["DB"])
    assert reward == 1.0 and b["reward_breakdown"] == {"DB": 1.0} and b["checks"]["communicate"] == [False]
    reward, b = scored(opened, raw, "0", "omitted_info", ["DB", "COMMUNICATE"])
    assert reward == 0.0 and b["reward_breakdown"] == {"DB": 1.0, "COMMUNICATE": 0.0}
    reward, b = scored(opened, raw, "0", "info_inside_words", ["DB", "COMMUNICATE"])
    assert reward == 1.0  # "refpending9" holds "pending"
    # reads are never checked: without them the state is the gold one, and only ACTION (not in the basis) fails
    reward, b = scored(opened, raw, "0", "no_reads", ["DB"])
    assert reward == 1.0 and b["checks"]["actions"] == [False, False]
    reward, b = scored(opened, raw, "0", "no_reads", ["DB", "ACTION"])
    assert reward == 0.0 and b["reward_breakdown"] == {"DB": 1.0, "ACTION": 0.0}


def test_only_a_stop_is_scored_and_the_users_transfer_is_one(fake_import):
    opened, raw = fake_import
    reward, b = scored(opened, raw, "0", "max_turns")
    assert reward == 0.0 and b["checks"] is None and b["reward_breakdown"] is None
    reward, b = scored(opened, raw, "0", "user_transfer")
    assert reward == 1.0 and b["termination"] == "user_transfer"
    assert set(STOPS) == {"user_stop", "user_transfer", "out_of_scope", "transfer"}
    for termination in set(TERMINATIONS) - set(STOPS):  # max turns, too many errors, a timeout, any error
        reward, b = score_tau2(opened.tasks[0], opened.compiled, None, episode(termination=termination))
        assert reward == 0.0 and b["checks"] is None and not b["success"], termination


def test_a_transfer_task_is_met_by_the_agents_transfer_wherever_it_comes(fake_import):
    opened, raw = fake_import
    transfer_task = next(tid for tid, t in raw.items()
                         if any(a["name"] == "transfer_to_human_agents" for a in t["evaluation_criteria"]["actions"]))
    reward, b = scored(opened, raw, transfer_task, "gold", ["DB", "ACTION"])
    assert reward == 1.0 and b["termination"] == "transfer" and all(b["checks"]["actions"])
    reward, b = scored(opened, raw, "0", "early_transfer", ["DB"])
    assert reward == 1.0  # task 0 writes nothing: transferring at once leaves the gold state, and DB is the basis


def with_expect(task, **update):
    import dataclasses

    expect = task.task.expect.model_validate({**task.task.expect.model_dump(by_alias=True, exclude_unset=True), **update})
    return dataclasses.replace(task, task=task.task.model_copy(update={"expect": expect}))


def task_0(opened):
    return next(t for t in opened.tasks if t.task.id == "0")


def played(opened, raw, task, kind, scorer):
    traj = next(t for t in trajectories(raw[task.task.id], opened.compiled.writes) if t["kind"] == kind)
    ep, env = play_trajectory(task, opened.compiled, traj)
    try:
        return scorer(task, opened.compiled, env, ep)
    finally:
        env.close()


def test_an_env_assertion_whose_call_fails_fails_tau2s_evaluation_so_the_episode_is_not_scored(fake_import):
    from muactl.episode.tau2_scoring import scored_as_recorded
    from muactl.errors import Tau2ScoringFailed

    opened, raw = fake_import
    task = with_expect(task_0(opened), reward_basis=["DB", "ENV_ASSERTION"],
                       **{"assert": [{"call": {"get_order_details": {"order_id": "#W9999999"}}}]})
    with pytest.raises(Tau2ScoringFailed, match="get_order_details fails"):  # τ²'s evaluator raises here (mock)
        played(opened, raw, task, "gold", score_tau2)
    got = played(opened, raw, task, "gold", lambda *a: scored_as_recorded(*a, None))
    assert got["error"] is True and got["reward"] is None and got["reward_breakdown"] is None


def test_an_assertion_the_gold_path_leaves_false_counts_for_tau2_only(fake_import):
    from muactl.episode.reward import score

    opened, raw = fake_import
    task = with_expect(task_0(opened), reward_basis=["DB", "ENV_ASSERTION"],
                       **{"assert": [{"query": "SELECT 1"}, {"query": "SELECT 0", "holds_after_gold": False}]})
    reward, b = played(opened, raw, task, "gold", score_tau2)
    assert reward == 0.0 and b["checks"]["env_assertions"] == [True, False]  # τ² counts what its gold path fails
    own, breakdown = played(opened, raw, task, "gold", score)
    assert own == 1.0 and len(breakdown["assertions"]) == 1  # muactl's reward leaves it out: the oracle still pays


def test_each_difference_of_muactls_own_reward_from_tau2s_gets_the_reason_the_readme_gives(fake_import):
    from muactl.episode.reward import score
    from muactl.episode.tau2_scoring import own_reward_differs_because

    opened, raw = fake_import

    def why(task, kind, **tau2_row):
        _, own = played(opened, raw, task, kind, score)
        return own_reward_differs_because(task, {"kind": kind, **tau2_row}, own)

    task = task_0(opened)  # writes nothing, communicates "pending"
    assert why(task, "user_transfer", communicate=[True]) == "user_transfer"
    assert why(task, "info_inside_words", communicate=[True]) == "info_inside_word"
    assert why(task, "omitted_info", communicate=[False]) == "info_unsaid"
    assert why(task, "empty", communicate=[False]) == "unchanged_task"
    assert why(task, "early_transfer", communicate=[False]) == "unchanged_task"
    assert why(with_expect(task, reward_basis=["ACTION"], compare_db=False, outputs=[]), "empty",
               actions=[False]) == "actions_unchecked"  # nothing but the ending is checked: muactl pays
    false_after_gold = with_expect(task, reward_basis=["DB", "ENV_ASSERTION"],
                                   **{"assert": [{"query": "SELECT 0", "holds_after_gold": False}]})
    assert why(false_after_gold, "gold", env_assertions=[False]) == "assertion_false_after_gold"
    wrote_more = {"success": False, "termination": "user_stop", "ended_normally": True, "db_compared": True,
                  "db_match": False, "outputs": {}}  # task 0 writes nothing: an extra write's breakdown, as scored
    assert own_reward_differs_because(with_expect(task, reward_basis=["ACTION"], outputs=[]), {"kind": "extra_write"},
                                      wrote_more) == "db_beyond_basis"  # the DB the import keeps where τ²'s has none
    assert why(task, "gold") == "other"  # it pays as τ² does: no reason applies


def test_a_task_without_actions_or_env_assertions_skips_tau2s_environment_check(fake_import):
    opened, raw = fake_import
    task = with_expect(task_0(opened), reward_basis=["DB", "COMMUNICATE"], env_unchecked=True)
    reward, b = played(opened, raw, task, "early_transfer", score_tau2)  # "pending" unsaid, the state untouched
    assert b["reward_breakdown"] == {"COMMUNICATE": 0.0} and b["checks"]["env_assertions"] is None
    assert b["checks"]["db_match"] is True and reward == 0.0


def test_a_task_tau2_rewards_by_its_actions_alone_pays_muactls_reward_only_for_them(tmp_path):
    """τ²'s [ACTION]-basis tasks without env assertions (banking_knowledge's 004, 083, ...): import keeps the DB
    check and requires the gold calls on their compare_args, so an empty conversation no longer earns 1."""
    from muactl.domain.open import open_domain
    from muactl.episode.reward import score

    checkout = tmp_path / "checkout"
    shutil.copytree(FAKE, checkout)
    tasks_json = checkout / "data/tau2/domains/retail/tasks.json"
    split = "data/tau2/domains/retail/split_tasks.json"
    tasks = json.loads(tasks_json.read_text())
    tasks.append({"id": "3", "user_scenario": {"instructions": "You want your order #W0000001 looked at."},
                  "evaluation_criteria": {"reward_basis": ["ACTION"], "actions": [
                      {"action_id": "3_0", "name": "find_user_id_by_email", "arguments": {"email": "ada@example.com"}},
                      {"action_id": "3_1", "name": "get_order_details", "arguments": {"order_id": "#W0000001"},
                       "compare_args": []}]}})
    tasks_json.write_text(json.dumps(tasks))
    (checkout / split).write_text(json.dumps({"train": ["0", "2", "3"], "test": ["1"], "base": ["0", "1", "2", "3"]}))
    project = tmp_path / "project"
    project.mkdir()
    r = runner.invoke(app, ["import", "tau2", str(checkout), "--domain", "retail", "--dir", str(project)])
    assert r.exit_code == 0, r.output
    opened = open_domain(str(project / "domains" / "tau2-retail"))
    task = next(t for t in opened.tasks if t.task.id == "3")
    expect = task.task.expect
    assert expect.compare_db and expect.required_calls == [{"find_user_id_by_email": {"email": "ada@example.com"}},
                                                           {"get_order_details": {}}]  # compare_args []: the name
    raw = {t["id"]: t for t in tasks}
    empty, breakdown = played(opened, raw, task, "empty", score)
    assert empty == 0.0 and not any(breakdown["required_calls"].values())
    assert played(opened, raw, task, "gold", score)[0] == 1.0
    assert played(opened, raw, task, "empty", score_tau2)[0] == 0.0  # τ²'s evaluator: ACTION fails, as before


# ---------------------------------------------------------------- import, eval, the judge


def test_import_sets_scoring_tau2_from_tau2s_tasks(fake_import):
    opened, _ = fake_import
    assert opened.spec.domain.scoring == "tau2" and opened.spec.domain.judge_prompt is None  # no evaluator source here
    assert all(t.task.expect.reward_basis == ["DB", "COMMUNICATE"] for t in opened.tasks)  # none named: τ²'s default
    assert [t.task.expect.compare_args for t in opened.tasks] == [{}, {}, {}]


@pytest.mark.slow
def test_eval_says_which_scoring_it_used_and_old_imports_keep_muactls(tmp_path, monkeypatch):
    from muactl.domain.open import open_domain

    import_fake(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MUACTL_NO_PROGRESS", "1")
    opened = open_domain("tau2-retail")
    assert all(t.task.expect.reward_basis == ["DB", "COMMUNICATE"] for t in opened.tasks)  # none named: τ²'s default
    r = runner.invoke(app, ["eval", "tau2-retail", "--split", "all"], env=WIDE)
    assert r.exit_code == 0, r.output
    assert "tau2 (τ²-bench's evaluator)" in r.output
    run_id = re.search(r"runs show (\S+)\)", r.output)[1]
    shown = runner.invoke(app, ["runs", "show", run_id], env=WIDE)
    assert "tau2 (τ²-bench's evaluator)" in shown.output
    r = runner.invoke(app, ["eval", "tau2-retail", "--split", "all", "--scoring", "muactl"], env=WIDE)
    assert r.exit_code == 0 and "muactl (muactl's reward)" in r.output, r.output
    r = runner.invoke(app, ["eval", "tau2-retail", "--scoring", "tau3"], env=WIDE)
    assert r.exit_code == 2 and "--scoring must be one of muactl, tau2" in r.output, r.output
    # a folder imported before scoring: existed keeps muactl's reward
    yaml = tmp_path / "domains" / "tau2-retail" / "domain.yaml"
    yaml.write_text(re.sub(r"(?m)^scoring: tau2\n", "", yaml.read_text()))
    r = runner.invoke(app, ["eval", "tau2-retail", "--split", "all"], env=WIDE)
    assert r.exit_code == 0 and "muactl (muactl's reward)" in r.output, r.output


JUDGE_SOURCE = '''
class NLAssertionsEvaluator:
    @classmethod
    def evaluate_nl_assertions(cls, trajectory, nl_assertions):
        trajectory_str = "\\n".join([f"{m.role}: {m.content}" for m in trajectory])
        system_prompt = """
        Grade each expected outcome. Reply {"results": [...]}
        """
        user_prompt = f"""
        conversation:
        {trajectory_str}
        expectedOutcomes:
        {nl_assertions}
        """
        raise SystemExit("never run")
'''


@pytest.mark.slow
def test_nl_assertions_go_to_the_judge_with_tau2s_prompt_read_from_the_checkout(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    shutil.copytree(FAKE, checkout)
    (checkout / "src/tau2/evaluator").mkdir(parents=True)
    (checkout / "src/tau2/evaluator/evaluator_nl_assertions.py").write_text(JUDGE_SOURCE)
    tasks_json = checkout / "data/tau2/domains/retail/tasks.json"
    tasks = json.loads(tasks_json.read_text())
    tasks[0]["evaluation_criteria"].update(nl_assertions=["The agent says the order is pending.", "The agent sings."],
                                           reward_basis=["DB", "NL_ASSERTION"])
    tasks_json.write_text(json.dumps(tasks))
    (tmp_path / "p").mkdir()
    r = runner.invoke(app, ["import", "tau2", str(checkout), "--domain", "retail", "--dir", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    monkeypatch.chdir(tmp_path / "p")
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MUACTL_NO_PROGRESS", "1")

    def judge(body) -> Reply:  # the fake LLM: holds the outcomes that mention "pending"
        asked = body["messages"][1]["content"].split("expectedOutcomes:")[1].strip()
        outcomes = json.loads(asked.replace("'", '"'))
        return Reply(content=json.dumps({"results": [
            {"expectedOutcome": o, "reasoning": "read", "metExpectation": "pending" in o} for o in outcomes]}))

    r = runner.invoke(app, ["eval", "tau2-retail", "--task", "0"], env=WIDE)
    assert r.exit_code == 0 and "1 episode(s) have NL assertions in τ²'s reward basis that no judge checked" in r.output

    with FakeOpenAI(judge) as server:
        r = runner.invoke(app, ["eval", "tau2-retail", "--task", "0", "--judge", "openai/j", "--judge-api-base",
                                server.base], env=WIDE)
        assert r.exit_code == 0, r.output
        system, user = server.requests[0]["messages"]
    assert system["content"] == '\n        Grade each expected outcome. Reply {"results": [...]}\n        '
    assert user["content"].startswith("\n        conversation:\n        assistant: Hi! How can I help you today?\n")
    assert "\n        expectedOutcomes:\n        ['The agent says the order is pending.', 'The agent sings.']" in user["content"]
    assert "tool: " in user["content"]  # τ²'s judge reads the whole trajectory, tool results included
    from muactl.runs.store import RunStore

    run_id = re.search(r"runs show (\S+)\)", r.output)[1]
    ep = RunStore.open(run_id).episodes()[-1]
    assert ep["reward"] == 0.0 and ep["breakdown"]["reward_breakdown"] == {"DB": 1.0, "NL_ASSERTION": 0.0}
    assert ep["breakdown"]["checks"]["nl_assertions"] == [True, False]
    out = runner.invoke(app, ["runs", "show", run_id, "--episode", "1"], env=WIDE).output
    assert "τ² reward breakdown: basis=['DB', 'NL_ASSERTION'] counted={'DB': 1.0, 'NL_ASSERTION': 0.0}" in out
    assert "nl assertion fails: The agent sings. (read)" in out


# ---------------------------------------------------------------- against τ²'s recorded rewards


# the README's table of why muactl's own reward differs from τ²'s on the recorded trajectories
OWN_REWARD_DIFFERS = {
    "retail": {"user_transfer": 110, "info_unsaid": 36, "info_inside_word": 36, "unchanged_task": 15},
    "airline": {"user_transfer": 49, "info_inside_word": 6, "unchanged_task": 23},
    "telecom": {"user_transfer": 94},
    "mock": {"user_transfer": 7, "info_inside_word": 1, "unchanged_task": 1, "assertion_false_after_gold": 7},
    "banking_knowledge": {"user_transfer": 84, "db_beyond_basis": 3},
}


@pytest.mark.slow
@needs_tau2
@pytest.mark.parametrize("domain", DOMAINS)
def test_scoring_tau2_equals_tau2s_evaluator_on_every_recorded_trajectory(domain, tmp_path, monkeypatch):
    from muactl.domain.open import open_domain
    from muactl.episode.tau2_scoring import agreement
    from muactl.importers.tau2_input import read_task_folder, read_tasks

    checkout = Path(CHECKOUT).resolve()
    r = runner.invoke(app, ["import", "tau2", str(checkout), "--domain", domain, "--dir", str(tmp_path)])
    assert r.exit_code == 0, r.output
    monkeypatch.chdir(tmp_path)
    folder = checkout / f"data/tau2/domains/{domain}"  # banking_knowledge: τ²'s get_tasks reads tasks/task_*.json
    raw = read_task_folder(checkout, folder / "tasks") if domain == "banking_knowledge" else read_tasks(checkout, folder / "tasks.json")
    got = agreement(open_domain(f"tau2-{domain}"), raw, recorded(domain))
    assert got["mismatches"] == [] and got["same"] == got["trajectories"] == recorded(domain)["trajectories"]
    # README, "Where muactl's own reward differs from τ²'s": every difference has its reason
    assert got["muactl_differs_by_reason"] == OWN_REWARD_DIFFERS[domain]


@pytest.mark.slow
@pytest.mark.skipif(not (CHECKOUT and TAU2_PYTHON), reason="set TAU2_BENCH and TAU2_PYTHON (a Python with τ²'s "
                    "evaluator dependencies, benchmarks/tau2_reward_record.py) to record again")
@pytest.mark.parametrize("domain", DOMAINS)
def test_recording_again_with_tau2s_evaluator_gives_the_stored_rewards(domain, tmp_path):
    rec = recorded(domain)
    subprocess.run([TAU2_PYTHON, str(ROOT / "benchmarks" / "tau2_reward_record.py"), CHECKOUT, "--domain", domain,
                    "--every", str(rec["every"]), *(["--communicating"] if rec.get("communicating") else []),
                    "--limit", "3", "--out", str(tmp_path)], check=True,
                   capture_output=True, timeout=900, env={**os.environ, "PYTHONPATH": ""})
    again = json.loads((tmp_path / f"{domain}_rewards.json").read_text())["tasks"]
    assert again and again == {tid: rec["tasks"][tid] for tid in again}

