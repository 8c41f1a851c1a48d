"""τ²-bench banking_knowledge (τ³) through `muactl import tau2`, on the invented checkout of tests/data/tau2/checkout
(its banking_knowledge folders: one user, one account, two documents, three tasks; no τ² text). Real SQLite, the
real shipped YAML, the real CLI, oracle and eval. The comparison with τ²'s own tools on its real data is in
tests/test_tau2_import.py and tests/test_tau2_seen.py (TAU2_BENCH)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app

runner = CliRunner()
FAKE = Path(__file__).parent / "data" / "tau2" / "checkout"


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def imported(retrieval: str = "bm25"):
    from muactl.domain.validate import validate_domain

    r = runner.invoke(app, ["import", "tau2", str(FAKE), "--domain", "banking_knowledge", "--retrieval", retrieval])
    assert r.exit_code == 0, r.output
    # a task whose gold path needs a tool not ported yet is left out, and said so
    assert "task 'task_003' left out: its gold path calls get_atm_deposit_images_8473, not ported yet" in r.output
    assert "(2 test)" in r.output
    name = "tau2-banking_knowledge" + ("-golden" if retrieval == "golden" else "")
    return validate_domain(name)  # every gold path replays


def gold_outputs(opened, task: str) -> tuple[list[str], object]:
    from muactl.env.sandbox import new_env
    from muactl.spec.models import call_parts

    t = next(x.task for x in opened.tasks if x.task.id == task)
    env = new_env(opened.compiled)
    env.replay(t.setup)
    return [env.call(*call_parts(c)).content for c in t.expect.actions], env


def test_banking_imports_with_its_records_whole_and_tau2s_texts(project):
    from muactl.importers.tau2 import tau2_dump

    opened = imported()
    out, env = gold_outputs(opened, "task_001")
    try:
        # τ²'s query_database_tool: every field of the record in its own order, as Python's str() prints it
        assert out[0] == ("Found 1 record(s) in 'users':\n\n1. Record ID: u1\n   user_id: u1\n   name: Ann Lee\n"
                          "   email: ann@new.example.org\n   vip: True\n")  # the task's initialization_data merged
        assert out[1].startswith("Tool unlocked: open_bank_account_4821\nDescription: Open an invented account.\n\n")
        assert "Parameters:\n  - user_id: string (required) - Whose account\n" in out[1]
        assert out[2].startswith("Bank account opened successfully!\n  - Account ID: ")
        db, _ = tau2_dump(env, "banking_knowledge")
        assert list(db["users"]["data"]["u1"]) == ["user_id", "name", "email", "vip"]
        assert db["users"]["notes"] == "Invented users." and db["payment_history"] == {"data": {}, "notes": ""}
        assert db["task_config"]["data"] == {"dispute_settings": {"auto_resolve_disputes": True}}
        new = [r for k, r in db["accounts"]["data"].items() if k != "chk_u1"]
        assert [(r["account_type"], r["current_holdings"], r["date_opened"]) for r in new] == [
            ("savings", "0.00", "11/14/2025")]
        # the call is logged as τ²'s call_discoverable_agent_tool logs it (a write tool always)
        assert [r["tool_name"] for r in db["agent_discoverable_tools"]["data"].values()] == ["open_bank_account_4821"]
        # τ²'s tools answer a failure with a text, and nothing changes
        before = env.state_hash()
        r = env.call("call_discoverable_agent_tool", {"agent_tool_name": "open_bank_account_4821", "arguments": json.dumps(
            {"user_id": "u1", "account_type": "gold", "account_class": "x"})})
        assert not r.error and r.content.startswith("Error: Invalid account_type. Must be one of: ['checking',")
        assert env.state_hash() == before
        # KB_search ranks the documents by FTS5's bm25
        found = env.call("KB_search", {"query": "open a savings account"}).content
        assert found.startswith("1. Opening a savings account\n   ID: doc_savings_001\n   Score: ")
    finally:
        env.close()


def test_the_user_calls_a_tool_only_once_the_agent_gave_it(project):
    opened = imported()
    by_id = {t.task.id: t.task for t in opened.tasks}  # τ²'s task user_tools: the simulator's tools in the task
    assert [t.name for t in opened.compiled.user_tools(by_id["task_002"])] == ["call_discoverable_user_tool"]
    assert opened.compiled.user_tools(by_id["task_001"]) == [] and len(opened.compiled.user_tools()) == 6
    out, env = gold_outputs(opened, "task_002")
    try:
        assert out[0].startswith("Tool given to user: get_referral_link\nDescription: Make an invented referral link.\n"
                                 "Arguments: (no arguments)\n")
        assert out[1].startswith("Referral link generated successfully.") and '"card_name": "Gold Rewards Card"\n}' in out[1]
        env2 = gold_outputs(opened, "task_001")[1]  # another episode: nothing was given there
        try:
            r = env2.call("call_discoverable_user_tool", {"discoverable_tool_name": "get_referral_link",
                                                          "arguments": '{"user_id": "u1", "card_name": "Gold"}'})
            assert r.content.startswith("Error: Tool 'get_referral_link' has not been given to you by the agent.")
            r = env2.call("call_discoverable_user_tool", {"discoverable_tool_name": "get_referral_link",
                                                          "arguments": '{"user_id": "u1"}'})
            assert r.content == "Error: Missing required parameter: card_name"
        finally:
            env2.close()
    finally:
        env.close()
    r = runner.invoke(app, ["eval", "tau2-banking_knowledge", "--agent", "oracle", "--user", "scripted", "--split", "all"])
    assert r.exit_code == 0, r.output
    summary = json.loads(next(Path("runs").glob("*/summary.json")).read_text())
    assert summary["avg_reward"] == 1.0 and summary["episodes"] == 2 and "tau2" in r.output


def test_golden_retrieval_puts_each_tasks_documents_in_its_prompt(project):
    opened = imported("golden")
    assert "KB_search" not in [t.name for t in opened.compiled.agent_tools()]
    by_id = {t.task.id: t.task for t in opened.tasks}
    first = opened.compiled.system_prompt_for(by_id["task_001"])
    assert "You are the invented bank's agent.\n" in first  # τ²'s prompt components substituted
    assert "## Opening a savings account\n\nTo open a savings account," in first and "Referral links" not in first
    second = opened.compiled.system_prompt_for(by_id["task_002"])  # a document τ² does not have is left out
    assert "## Referral links\n\n" in second and "no_such_doc" not in second and "savings" not in second
    assert "{context}" not in first and "{{required_documents}}" not in first


def test_retrieval_is_banking_knowledges_only(project):
    r = runner.invoke(app, ["import", "tau2", str(FAKE), "--domain", "retail", "--retrieval", "golden"])
    assert r.exit_code == 2 and "no documents" in r.output and not Path("domains").exists()


def test_a_split_too_large_for_one_file_is_written_in_parts(tmp_path, monkeypatch):
    from muactl.importers import tau2

    monkeypatch.setattr(tau2, "MAX_YAML_BYTES", 4000)
    tasks = [{"id": f"t{i}", "split": "test", "user": {"reason": "x" * 900}} for i in range(6)]
    counts = tau2.stage_tasks(tmp_path, tasks, "header", tmp_path / "tasks")
    assert counts == {"test": 6}
    files = sorted(p.name for p in tmp_path.glob("*.yaml"))
    assert files == ["test-2.yaml", "test-3.yaml", "test.yaml"]
    later = (tmp_path / "test-2.yaml").read_text()
    assert "split: test" in later and "split:" not in (tmp_path / "test.yaml").read_text()


def test_py_json_writes_pythons_indented_json():
    import sqlite3

    from muactl.compile.sql import SQL_FUNCTIONS

    conn = sqlite3.connect(":memory:")
    fn, n = SQL_FUNCTIONS["py_json"]
    conn.create_function("py_json", n, fn)
    assert conn.execute("""SELECT py_json('{"a": [1, 2.0], "é": null}', 2)""").fetchone()[0] == json.dumps(
        {"a": [1, 2.0], "é": None}, indent=2)
    assert conn.execute("""SELECT py_json('{"a":1}'), py_json('{"a":1}', 99), py_json('nope', 2)""").fetchone() == (
        '{"a": 1}', None, None)


# banking_knowledge's transfer_to_human_agents ends nothing (as in τ², the conversation goes on); two invented
# tasks whose gold path calls it, as τ²'s task_004 ([ACTION], the reason compared) and task_005 ([DB], the
# transfer first, then a write) do
TRANSFER_TASKS = {
    "task_004": {"actions": [{"action_id": "b0", "requestor": "assistant", "name": "transfer_to_human_agents",
                              "arguments": {"reason": "account_ownership_dispute", "summary": ""},
                              "compare_args": ["reason"]}], "reward_basis": ["ACTION"]},
    "task_005": {"actions": [{"action_id": "c0", "requestor": "assistant", "name": "transfer_to_human_agents",
                              "arguments": {"summary": ""}, "compare_args": []},
                             {"action_id": "c1", "requestor": "assistant", "name": "unlock_discoverable_agent_tool",
                              "arguments": {"agent_tool_name": "open_bank_account_4821"}},
                             {"action_id": "c2", "requestor": "assistant", "name": "call_discoverable_agent_tool",
                              "arguments": {"agent_tool_name": "open_bank_account_4821", "arguments": json.dumps(
                                  {"user_id": "u1", "account_type": "savings", "account_class": "Silver Account"})}}],
                 "reward_basis": ["DB"]},
}


@pytest.fixture
def transfer_import(tmp_path, monkeypatch):
    """The invented checkout with TRANSFER_TASKS added, imported: (opened domain, τ²'s raw tasks by id)."""
    import shutil

    from muactl.domain.validate import validate_domain

    checkout = tmp_path / "checkout"
    shutil.copytree(FAKE, checkout)
    folder = checkout / "data/tau2/domains/banking_knowledge/tasks"
    raw = {p.stem: json.loads(p.read_text()) for p in folder.glob("task_*.json")}
    for tid, crit in TRANSFER_TASKS.items():
        raw[tid] = {"id": tid, "user_scenario": {"persona": None, "instructions": "You are Ann Lee (user id u1)."},
                    "evaluation_criteria": crit, "user_tools": []}
        (folder / f"{tid}.json").write_text(json.dumps(raw[tid]))
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["import", "tau2", str(checkout), "--domain", "banking_knowledge"])
    assert r.exit_code == 0 and "(4 test)" in r.output, r.output
    return validate_domain("tau2-banking_knowledge"), raw


def own_reward(opened, raw, tid: str, kind: str, end: str | None = None, drop_transfer: bool = False):
    """muactl's own reward of one of the task's recorded-trajectory kinds (importers/tau2_trajectories.py) played
    as an episode, its ending replaced by `end` (and its transfer call left out) where given."""
    from muactl.episode.reward import score
    from muactl.episode.tau2_scoring import play_trajectory, tau2_mutating
    from muactl.importers.tau2_trajectories import TRANSFER, trajectories

    task = next(t for t in opened.tasks if t.task.id == tid)
    traj = next(t for t in trajectories(raw[tid], tau2_mutating(opened.compiled)) if t["kind"] == kind)
    if drop_transfer:
        traj = {**traj, "steps": [s for s in traj["steps"] if s.get("call") != TRANSFER]}
    if end is not None:
        traj = {**traj, "end": end}
    ep, env = play_trajectory(task, opened.compiled, traj)
    try:
        reward, breakdown = score(task, opened.compiled, env, ep)
    finally:
        env.close()
    return reward, breakdown["termination"]


def test_a_task_whose_gold_path_transfers_pays_the_users_transfer_after_the_agents(transfer_import):
    """The rule: a task whose gold path makes the agent's transfer call expects the transfer ending. Here the
    transfer tool ends nothing (`hands_over`), so that ending is the user's ###TRANSFER### after the agent's call, as
    τ²'s user says it and τ² pays (muactl used to expect the user's stop here and paid the gold path 0)."""
    opened, raw = transfer_import
    by_id = {t.task.id: t.task for t in opened.tasks}
    assert by_id["task_004"].expect.transfer and by_id["task_005"].expect.transfer
    assert not by_id["task_001"].expect.transfer
    assert opened.compiled.tools["transfer_to_human_agents"].spec.hands_over
    for tid in TRANSFER_TASKS:
        assert own_reward(opened, raw, tid, "gold") == (1.0, "user_transfer"), tid
    # the user's ###TRANSFER### without the agent's, or the user's stop after it, earns nothing
    assert own_reward(opened, raw, "task_005", "gold", drop_transfer=True) == (0.0, "user_transfer")
    assert own_reward(opened, raw, "task_005", "gold", end="user_stop", drop_transfer=True)[0] == 0.0
    assert own_reward(opened, raw, "task_004", "empty", end="user_transfer") == (0.0, "user_transfer")
    # a transfer where none is due still earns nothing, the user's ###TRANSFER### after it included
    assert own_reward(opened, raw, "task_001", "early_transfer") == (0.0, "user_transfer")
    assert own_reward(opened, raw, "task_001", "user_transfer") == (0.0, "user_transfer")
    assert own_reward(opened, raw, "task_001", "gold") == (1.0, "user_stop")
    # an early transfer on a transfer task lacks the work (task_005's write, task_004's reason)
    assert own_reward(opened, raw, "task_005", "early_transfer")[0] == 0.0
    assert own_reward(opened, raw, "task_004", "early_transfer")[0] == 0.0


@pytest.mark.slow
def test_the_oracle_passes_the_transfer_tasks_and_transferring_at_once_passes_none(transfer_import):
    """Through eval with muactl's own reward: the scripted user ends with ###TRANSFER### once the agent handed it
    over, so the oracle passes all four tasks; transfer-at-once hands over on every task and is paid on none."""
    from muactl.runs.store import RunStore

    def run(agent: str) -> list[dict]:
        before = set(Path("runs").glob("*")) if Path("runs").exists() else set()
        r = runner.invoke(app, ["eval", "tau2-banking_knowledge", "--agent", agent, "--user", "scripted",
                                "--split", "all", "--scoring", "muactl"])
        assert r.exit_code == 0, r.output
        [made] = set(Path("runs").glob("*")) - before
        return RunStore.open(made.name).episodes()

    played = run("oracle")
    assert {e["task_id"]: (e["reward"], e["termination"]) for e in played} == {
        "task_001": (1.0, "user_stop"), "task_002": (1.0, "user_stop"),
        "task_004": (1.0, "user_transfer"), "task_005": (1.0, "user_transfer")}
    assert all(e["fidelity"]["right_stop"] for e in played)  # the user's check agrees with the reward's
    adversary = run("adversary:transfer-at-once")
    assert {e["termination"] for e in adversary} == {"user_transfer"} and len(adversary) == 4
    assert [e["task_id"] for e in adversary if e["reward"] > 0] == []


def test_only_an_agent_tool_hands_the_user_over():
    from pydantic import ValidationError

    from muactl.spec.models import SqlTool

    assert SqlTool.model_validate({"description": "x", "query": "SELECT 1", "hands_over": True}).hands_over
    assert not SqlTool.model_validate({"description": "x", "query": "SELECT 1"}).hands_over  # other domains: unchanged
    with pytest.raises(ValidationError, match="only an agent tool can hand the user over"):
        SqlTool.model_validate({"description": "x", "query": "SELECT 1", "side": "user", "hands_over": True})
