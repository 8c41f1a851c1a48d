"""`muactl import acebench` checked against ACEBench's own classes (issue 29).

The ground truth (tests/data/acebench/<language>.json) was recorded by benchmarks/acebench_record.py
running ACEBench's Python classes and checker offline; it holds digests only. The import of the real data
needs a checkout: set ACEBENCH to one (ACEBench/ACEBench at e6db74b) to run those tests; without it they are
skipped. tests/data/acebench/checkout is an ACEBench-shaped tree of invented data, imported end to end here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "acebench"
FAKE = DATA / "checkout"
CHECKOUT = os.environ.get("ACEBENCH")
needs_acebench = pytest.mark.skipif(not CHECKOUT, reason="set ACEBENCH to an ACEBench checkout to import its data")
WIDE = {"COLUMNS": "200"}


def truth(language: str) -> dict:
    return json.loads((DATA / f"{language}.json").read_text())


def test_recorded_ground_truth_is_complete_and_small():
    t = truth("en")["tasks"]
    assert len(t) == 50 and sum(x["category"] == "multi_step" for x in t.values()) == 20
    assert sum(x["gold_passes"] for x in t.values()) == 28  # ACEBench's own milestones, as given
    assert sum(x["oracle_passes"] and bool(x["repairs"]) for x in t.values()) == 19
    assert sorted(k for k, x in t.items() if not x["oracle_passes"]) == [
        f"agent_multi_step_{i}" for i in (0, 1, 12, 13, 14, 15, 16, 17)]
    z = truth("zh")["tasks"]
    assert len(z) == 50 and sum(x["gold_passes"] for x in z.values()) == 40
    assert sorted(k for k, x in z.items() if not x["oracle_passes"]) == [
        *(f"agent_multi_step_{i}" for i in range(12, 18)), "agent_multi_turn_6"]
    for language, recorded in (("en", t), ("zh", z)):
        digests = [d for x in recorded.values() for s in x["steps"] for d in s.get("outputs", [])] + \
            [d for x in recorded.values() for d in [x["state"], *x["probes"]]]
        assert len(digests) > 3000 and all(re.fullmatch(r"[0-9a-f]{16}", d) for d in digests)
        assert (DATA / f"{language}.json").stat().st_size < 200_000  # digests, not ACEBench's data


def test_import_of_a_folder_that_is_not_acebench_is_a_clear_error(tmp_path):
    r = runner.invoke(app, ["import", "acebench", str(tmp_path), "--dir", str(tmp_path)])
    assert r.exit_code == 2 and "not an ACEBench checkout" in r.output and "data_agent_multi_step.json" in r.output
    assert not (tmp_path / "domains").exists()
    r = runner.invoke(app, ["import", "acebench", str(FAKE), "--language", "fr", "--dir", str(tmp_path)])
    assert r.exit_code == 2 and "en, zh" in r.output


def import_fake(tmp_path, *extra: str):
    r = runner.invoke(app, ["import", "acebench", str(FAKE), "--language", "en", "--dir", str(tmp_path), *extra], env=WIDE)
    assert r.exit_code == 0, r.output
    return r.output


@pytest.mark.slow
def test_import_of_an_acebench_shaped_checkout_end_to_end(tmp_path, monkeypatch):
    out = import_fake(tmp_path)
    # the table: per category tasks, ACEBench's milestones passing as given, the oracle's passes, repairs, flags
    assert re.search(r"acebench-phone-en\s+multi_step\s+2\s+0\s+1\s+1\s+1", out), out
    assert re.search(r"acebench-phone-en\s+multi_turn\s+1\s+1\s+1\s+0\s+0", out), out
    assert "repaired agent_multi_step_0: milestone 1: call string mended" in out  # Cy's Cakes, unescaped
    assert "repaired agent_multi_step_1: milestone 1: login_device() added" in out
    assert "flagged  agent_multi_step_1: MessageApi.inbox.2 differs" in out  # deletes the message ground_truth keeps
    tasks = tmp_path / "tasks" / "acebench-phone-en"
    flagged = json.loads((tasks / "flagged.json").read_text())
    assert [f["id"] for f in flagged] == ["agent_multi_step_1"] and flagged[0]["why"] == ["MessageApi.inbox.2 differs"]
    d = tmp_path / "domains" / "acebench-phone-en"
    assert "Invented rules for the phone" in (d / "policy.md").read_text()
    assert "Invented: send a message." in (d / "domain.yaml").read_text()  # ACEBench's descriptions, from its tasks
    assert [json.loads(x)["name"] for x in (d / "data" / "contacts.jsonl").read_text().splitlines()] == ["Ann", "Ben", "Cy"]
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["validate", "acebench-phone-en"], env=WIDE)
    assert r.exit_code == 0 and "2 tasks" in r.output, r.output
    r = runner.invoke(app, ["eval", "acebench-phone-en", "--agent", "oracle", "--user", "scripted", "--split", "test"], env=WIDE)
    assert r.exit_code == 0, r.output
    assert re.search(r"avg_reward\s*│\s*1\.000", r.output) and re.search(r"process\s*│\s*1\.000", r.output), r.output
    assert "agent_done 1" in r.output and "user_stop 1" in r.output
    again = runner.invoke(app, ["import", "acebench", str(FAKE), "--language", "en", "--dir", str(tmp_path)])
    assert again.exit_code != 0 and "--force" in again.output


def test_the_tools_answer_as_acebenchs_classes_print(tmp_path, monkeypatch):
    """A few answers whose bytes the recorded ground truth pins for the real data, on the invented data."""
    import_fake(tmp_path)
    monkeypatch.chdir(tmp_path)
    from muactl.domain.open import open_domain
    from muactl.env.sandbox import new_env

    opened = open_domain("acebench-phone-en")
    env = new_env(opened.compiled)
    env.replay([{"load_scenario": {"category": "multi_step", "classes": ["BaseApi", "MessageApi", "FoodPlatform"],
                                   "wifi": True, "logged_in": True}}])
    call = lambda name, **args: env.call(name, args).content  # noqa: E731
    assert call("get_products", merchant_name="Cy's Cakes") == "[{'product': 'Plum Cake', 'price': 12.5}, {'product': 'Tart', 'price': 7.0}]"
    assert call("check_balance", user_name="Nobody") == "0.0"
    assert call("login_food_platform", username="Ann", password="ann-pw") == \
        '{"status": true, "message": "User Ann has successfully logged in!"}'
    assert call("add_food_delivery_order", username="Ann", merchant_name="Cy's Cakes",
                items=[{"product": "Tart", "quantity": 0}]) == \
        '{"status": false, "message": "Invalid quantity 0 for product Tart"}'
    assert call("add_food_delivery_order", username="Ann", merchant_name="Cy's Cakes",
                items=[{"product": "Plum Cake", "quantity": 3}, {"product": "Tart"}]) == \
        '{"status": true, "message": "Food delivery order successfully placed with Cy\'s Cakes. Total amount: 44.5 yuan"}'
    assert call("check_balance", user_name="Ann") == "55.5"
    assert call("view_reminder_by_title", title="x").startswith("Error during execution: cannot access local variable")
    assert call("send_message", sender_name="Ann", receiver_name="Ben", message="Caf\u00e9?") == \
        '{"status": true, "message": "Message successfully sent to Ben."}'
    assert call("search_messages", user_name="Ben", keyword="CAF") == \
        '{"status": true, "messages": [{"id": 3, "sender_id": "U1", "receiver_id": "U2", "message": "Caf\\u00e9?"}]}'
    assert call("get_latest_message_id") == "Error during execution: 'time'"  # the sent message has no time
    env.close()


def test_acebench_check_is_acebenchs_rule_and_strict_is_stricter(tmp_path, monkeypatch):
    import_fake(tmp_path)
    monkeypatch.chdir(tmp_path)
    from muactl.domain.open import open_domain
    from muactl.env.sandbox import new_env

    env = new_env(open_domain("acebench-phone-en").compiled)
    env.replay([{"load_scenario": {"category": "multi_turn", "classes": ["BaseApi", "ReminderApi"],
                                   "wifi": False, "logged_in": True}}])
    state = [{k: v} for entry in json.loads(env.call("acebench_state", {}).content) for k, v in entry.items()]
    assert state[0] == {"BaseApi": {"wifi": False, "logged_in": True}}

    def check(gt, strict=False):
        return json.loads(env.call("acebench_check", {"ground_truth": gt, "strict": strict}).content)

    assert check(state) and check(state, strict=True)
    reminders = state[1]["ReminderApi"]["reminder_list"]
    assert check([state[0], {"ReminderApi": {"reminder_list": {}}}])  # a dict attribute: only the keys listed
    assert not check([state[0], {"ReminderApi": {"reminder_list": {}}}], strict=True)
    assert check([state[0], {"ReminderAPI": {"reminder_list": {"9": 1}}}])  # a misspelt class: skipped, as ACEBench
    assert not check([state[0], {"ReminderAPI": {"reminder_list": reminders}}], strict=True)
    assert not check([state[0]])  # wrong number of classes
    assert not check([{"BaseApi": {"wifi": True, "logged_in": True}}, state[1]])
    assert not check([{"BaseApi": {"wifi": False}}, state[1]])  # a saved attribute ground_truth leaves out
    one = dict(reminders["1"], reminder_id=501.0)  # 501 == 501.0, as Python compares
    assert check([state[0], {"ReminderApi": {"reminder_list": {"1": one}}}])
    assert not check([state[0], {"ReminderApi": {"reminder_list": {"1": dict(one, title="Flights")}}}])
    env.close()


def test_checkout_code_is_read_never_run(tmp_path):
    fake = tmp_path / "checkout"
    shutil.copytree(FAKE, fake)
    reminder = fake / "model_inference/multi_step/scenariosen/phone_platform/reminder.py"
    marker = tmp_path / "ran"
    reminder.write_text(f"open({str(marker)!r}, 'w').write('x')\n" + reminder.read_text().replace(
        "self.reminder_id_counter = 1", "self.reminder_id_counter = len('ab')"))
    r = runner.invoke(app, ["import", "acebench", str(fake), "--language", "en", "--dir", str(tmp_path)])
    assert r.exit_code == 2 and "reminder.py" in r.output and "self.reminder_id_counter" in r.output, r.output
    assert "literal" in r.output and not marker.exists() and not (tmp_path / "domains").exists()


def test_a_malformed_task_file_names_file_and_line(tmp_path):
    fake = tmp_path / "checkout"
    shutil.copytree(FAKE, fake)
    path = fake / "data_all/data_en/data_agent_multi_step.json"
    path.write_text(path.read_text() + "{not json\n")
    r = runner.invoke(app, ["import", "acebench", str(fake), "--language", "en", "--dir", str(tmp_path)], env=WIDE)
    assert r.exit_code == 2 and "data_agent_multi_step.json:3:" in r.output and "not valid JSON" in r.output, r.output


def test_process_score_is_the_best_paths_share_of_steps_in_order():
    from muactl.episode.reward import process_score

    def turn(*calls):
        return {"role": "assistant", "content": "", "tool_calls": [{"name": n, "arguments": a} for n, a in calls]}

    a, b, c = ("a", {}), ("b", {"x": 1}), ("c", {"y": [1]})
    step = lambda *calls: [{n: args} for n, args in calls]  # noqa: E731
    msgs = [{"role": "user", "content": "go"}, turn(b), turn(a), turn(c), {"role": "assistant", "content": "done"}]
    # ACEBench's search: a step looked for from the last match on; one not found uses up the rest (b, then c)
    assert process_score([[step(a), step(b), step(c)]], msgs) == pytest.approx(1 / 3)
    assert process_score([[step(a), step(c)]], msgs) == 1.0
    assert process_score([[step(a), step(b), step(c)], [step(b), step(c)]], msgs) == 1.0  # the best alternative
    assert process_score([[step(("b", {"x": 1.0}))]], msgs) == 1.0  # 1 == 1.0
    assert process_score([[step(a, c)]], msgs) == 0.0  # a two-call step needs one turn making both
    assert process_score([[step(a, c)]], [turn(a, c)]) == 1.0


@pytest.mark.slow
@needs_acebench
def test_import_matches_acebenchs_own_classes(tmp_path, monkeypatch):
    from muactl.domain.validate import validate_domain
    from muactl.importers.acebench import verify

    r = runner.invoke(app, ["import", "acebench", CHECKOUT, "--dir", str(tmp_path)], env=WIDE)
    assert r.exit_code == 0, r.output
    monkeypatch.chdir(tmp_path)
    for language, world, tasks in (("en", "phone", 40), ("en", "travel", 10), ("zh", "phone", 40), ("zh", "travel", 10)):
        result = verify(validate_domain(f"acebench-{world}-{language}"), truth(language))
        assert result["mismatches"] == []
        assert result["tasks"] == result["same_state"] == result["same_verdict"] == tasks
        assert result["calls"] == result["same_output"] > 2 * tasks and result["probes"] == result["probe_same"] > 40 * tasks


@pytest.mark.slow  # litellm's import alone takes seconds
def test_multi_turn_users_get_acebenchs_prompt_and_stop_on_finish_conversation(tmp_path, monkeypatch):
    """The domain's user_prompt and user_stop (any domain may set them): an LLM user (a fake model behind a real
    local OpenAI-compatible server) is prompted with ACEBench's user prompt, the task's instruction in place, and
    its 'finish conversation' ends the episode as the user's stop."""
    import asyncio

    from muactl.domain.open import open_domain
    from muactl.episode.agents.oracle import OracleAgent
    from muactl.episode.rollout import RolloutConfig, run_episode
    from muactl.episode.user import make_user
    from tests.fakes.openai_server import FakeOpenAI, Reply

    import_fake(tmp_path)
    monkeypatch.chdir(tmp_path)
    opened = open_domain("acebench-phone-en")
    task = opened.task("agent_multi_turn_0")
    seen = []

    def user_model(body):
        seen.append(body["messages"])
        if len(seen) == 1:
            return Reply("Remind me to buy milk on 2024-05-04 at 09:00, title Milk, description Buy milk.")
        return Reply("Thanks, that is all.\nfinish conversation")

    with FakeOpenAI(user_model) as server:
        user = make_user("openai/fake-user", api_base=server.base)
        ep = asyncio.run(run_episode(task, opened.compiled, OracleAgent(), user, RolloutConfig()))
    system = seen[0][0]["content"]
    assert system == ("Invented user prompt. You play this instruction: " + task.task.user.reason +
                      "\nWrite 'finish conversation' when it is done.")
    assert seen[0][1] == {"role": "user", "content": "Anything I can do for you?"}  # ACEBench's opening line
    assert ep.termination == "user_stop", ep.error
    assert ep.messages[-1] == {"role": "user", "content": "Thanks, that is all."}  # the phrase is not shown


@pytest.mark.slow
def test_strict_import_flags_what_only_acebenchs_loose_rule_passes(tmp_path, monkeypatch):
    fake = tmp_path / "checkout"
    shutil.copytree(FAKE, fake)
    answers = fake / "data_all/data_en/possible_answer/data_agent_multi_turn.json"
    answers.write_text(answers.read_text().replace('"ReminderApi"', '"ReminderAPI"'))  # misspelt, as ACEBench's own
    loose = runner.invoke(app, ["import", "acebench", str(fake), "--language", "en", "--dir", str(tmp_path / "a")], env=WIDE)
    assert re.search(r"multi_turn\s+1\s+1\s+1\s+0\s+0", loose.output), loose.output  # ACEBench's checker skips it
    strict = runner.invoke(app, ["import", "acebench", str(fake), "--language", "en", "--strict", "--dir", str(tmp_path / "b")],
                           env=WIDE)
    assert re.search(r"multi_turn\s+1\s+1\s+0\s+0\s+1", strict.output), strict.output
    assert "flagged  agent_multi_turn_0: ReminderAPI: not the task's class name" in strict.output
    monkeypatch.chdir(tmp_path / "b")
    r = runner.invoke(app, ["validate", "acebench-phone-en"], env=WIDE)
    assert r.exit_code == 0 and "1 tasks" in r.output, r.output
    assert "strict: true" in (tmp_path / "b/tasks/acebench-phone-en/multi_step.yaml").read_text()
