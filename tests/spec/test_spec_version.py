"""What a domain file means does not move under it (issue 25.5): `spec_version` names the format it was
written for, old versions keep their meaning, unknown ones are refused; and inputs that used to be
silently misread (a complex YAML key, a YAML 1.1 boolean as a name, negative row counts, a duplicate key
in a JSON seed row, a folder inside a task folder) are refused at their file and line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.domain.open import open_domain
from muactl.env.sandbox import new_env
from muactl.errors import SpecError
from muactl.spec.models import SPEC_VERSION, SPEC_VERSIONS

from test_sql_features import DOMAIN, write  # tests/spec is on sys.path (no __init__.py)

runner = CliRunner()

# the shape of the domain in the issue: a computed JSON column the author never typed, read last month as a value
DETAILS = """\
  details:
    description: An item with its price, as one JSON object.
    params:
      item_id: {type: string}
    query: SELECT item_id, json_object('name', name, 'price', price) AS info FROM items WHERE item_id = :item_id
    returns: row
"""


def _shop(tmp_path: Path, version: str | None) -> str:
    """The test shop plus `details`, with `spec_version: VERSION` (None: the line left out)."""
    text = DOMAIN.replace("tools:\n", "tools:\n" + DETAILS, 1).replace("spec_version: 2\n", "")
    if version is not None:
        text += f"spec_version: {version}\n"
    write(tmp_path, text)
    return text


def _call(name: str, args: dict) -> dict:
    env = new_env(open_domain("shop", with_tasks=False).compiled)
    try:
        return json.loads(env.call(name, args).content)
    finally:
        env.close()


@pytest.mark.parametrize("version", [None, "1"])
def test_an_old_domain_keeps_the_meaning_it_was_written_for(tmp_path, monkeypatch, version):
    """Before the fix `info` came back as JSON-encoded text whatever the file was written for (the change of
    cccd0d4, typed tool results); version 1 decoded it, and a file without spec_version means version 1."""
    monkeypatch.chdir(tmp_path)
    _shop(tmp_path, version)
    assert _call("details", {"item_id": "a"}) == {"item_id": "a", "info": {"name": "[not json", "price": 5.0}}
    item = _call("get_item", {"item_id": "a"})
    assert item["ok"] == 1 and item["ok"] is not True  # version 1's booleans: 0/1
    assert item["name"] == "[not json" and item["meta"] == {"b": 1, "a": 2}
    assert _call("summary", {}) == {"ids": ["a", "b"], "n_cheap": 1}  # what the author typed holds in every version


def test_the_current_version_types_results_by_column(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _shop(tmp_path, str(SPEC_VERSION))
    assert _call("details", {"item_id": "a"})["info"] == '{"name":"[not json","price":5.0}'
    assert _call("get_item", {"item_id": "a"})["ok"] is True


def test_validate_names_each_tool_an_old_version_changes_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = _shop(tmp_path, None)
    r = runner.invoke(app, ["validate", "shop"])
    assert r.exit_code == 0, r.output
    warnings = [line for line in r.output.splitlines() if line.startswith("warning:")]
    assert any("domain.yaml:1:1: name: no spec_version: read with version 1's meaning" in w for w in warnings), r.output
    by_tool = {m[1]: w for w in warnings if (m := re.search(r"tools\.(\w+)\.query:", w))}
    assert set(by_tool) == {"details", "get_item", "get_owner", "summary", "rounded", "arithmetic"}, r.output
    line = text.splitlines().index("  details:") + 1
    assert f"domain.yaml:{line + 4}:5: tools.details.query:" in by_tool["details"]
    assert "info (computed" in by_tool["details"] and "`types: {info: json}`" in by_tool["details"]
    assert "ok (boolean" in by_tool["get_item"] and "meta (json" in by_tool["get_item"]
    assert "ids" not in by_tool["summary"]  # typed by its author: the same in both versions
    assert "could not be read without running it" in by_tool["rounded"]  # py_round: named all the same
    assert all(f"set `spec_version: {SPEC_VERSION}`" in w for w in by_tool.values())
    _shop(tmp_path, str(SPEC_VERSION))
    r = runner.invoke(app, ["validate", "shop"])
    assert r.exit_code == 0 and "warning" not in r.output, r.output


@pytest.mark.parametrize("value, message", [
    ("99999999999999999999999", "spec_version 99999999999999999999999 is newer than this muactl reads (1 to 2)"),
    (str(SPEC_VERSION + 1), f"spec_version {SPEC_VERSION + 1} is newer than this muactl reads"),
    ("0", "spec_version 0 is not a version of the domain format (1 to 2)"),
    ("-3", "spec_version -3 is not a version"),
    ("'2'", "not '2'"),
    ("true", "not True"),
    ("2.0", "not 2.0"),
])
def test_an_unknown_spec_version_is_refused_at_its_line(tmp_path, monkeypatch, value, message):
    monkeypatch.chdir(tmp_path)
    text = _shop(tmp_path, value)
    line = len(text.splitlines())
    r = runner.invoke(app, ["validate", "shop"])
    assert r.exit_code == 2, r.output
    assert f"domain.yaml:{line}:1: spec_version: " in r.output and message in r.output, r.output
    assert "Traceback" not in r.output


def test_built_ins_the_scaffold_and_the_schema_carry_the_current_version(tmp_path, monkeypatch):
    for name in ("bank", "retail"):
        assert open_domain(name, with_tasks=False).spec.domain.spec_version == SPEC_VERSION
    monkeypatch.chdir(tmp_path)
    for name in ("clinic", "helpdesk"):
        assert runner.invoke(app, ["init", name]).exit_code == 0
        assert open_domain(name, with_tasks=False).spec.domain.spec_version == SPEC_VERSION
        r = runner.invoke(app, ["validate", name])
        assert r.exit_code == 0 and "spec_version" not in r.output, r.output
    schema = json.loads(runner.invoke(app, ["schema"]).output)
    described = schema["properties"]["spec_version"]["description"]
    assert all(meaning in described for meaning in SPEC_VERSIONS.values())
    assert "Without it a file means version 1" in described


# ---------------------------------------------------------------- inputs that were silently misread


def _edit(project: Path, rel: str, old: str, new: str) -> int:
    """Replace `old` by `new` in a scaffolded file; the line where `new` starts."""
    path = project / rel
    text = path.read_text()
    assert old in text, old
    text = text.replace(old, new, 1)
    path.write_text(text)
    return text[: text.index(new)].count("\n") + 1


def _validate_fails(expected: str) -> str:
    r = runner.invoke(app, ["validate", "clinic"])
    assert r.exit_code == 2 and expected in r.output, r.output
    assert "Traceback" not in r.output
    return r.output


def test_a_persona_key_that_is_a_list_is_refused(project):
    line = _edit(project, "domains/clinic/domain.yaml", "personas:\n", "personas:\n  ? [a, b]\n  : A list as a name.\n")
    _validate_fails(f"domain.yaml:{line + 1}:5: personas: a key here is a list ([a, b]); keys are plain text")
    line = _edit(project, "domains/clinic/domain.yaml", "  ? [a, b]\n", "  ? {first: a}\n")
    _validate_fails(f"domain.yaml:{line}:5: personas: a key here is a mapping ({{first: a}})")


@pytest.mark.parametrize("name", ["yes", "No", "off", "ON"])
def test_a_yaml_1_1_boolean_word_is_no_table_name(project, name):
    line = _edit(project, "domains/clinic/domain.yaml", "  tables:\n",
                 f"  tables:\n    {name}:\n      columns: {{x: text}}\n")
    _validate_fails(f"domain.yaml:{line + 1}:5: database.tables.{name}: a table or column name "
                    f"'{name}' is not allowed: YAML 1.1 readers")


def test_a_yaml_1_1_boolean_word_is_no_persona_or_tool_name(project):
    line = _edit(project, "domains/clinic/domain.yaml", "personas:\n", "personas:\n  on: Always on.\n")
    _validate_fails(f"domain.yaml:{line + 1}:3: personas.on")


@pytest.mark.parametrize("rows, message", [
    ("-5", "`rows` cannot be negative (-5): give 0 or more"),
    ("[-1, 3]", "`rows` cannot be negative (-1)"),
    ("true", "`rows` is a whole number of rows, or [min, max], not True"),
    ("2.5", "not 2.5"),
])
def test_a_generated_row_count_out_of_range_is_refused(project, rows, message):
    line = _edit(project, "domains/clinic/domain.yaml", "  seed: data/\n",
                 f"  seed: data/\n  generate:\n    patients:\n      rows: {rows}\n"
                 "      columns: {patient_id: {pattern: 'p{nnn}'}, name: Ann, phone: {pattern: '555{nnnn}'}}\n")
    out = _validate_fails("database.generate.patients.rows")
    assert f"domain.yaml:{line + 3}:" in out and message in out, out


def test_a_duplicate_key_in_a_json_seed_row_is_refused(project):
    path = project / "domains" / "clinic" / "data" / "patients.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('{"patient_id"', '{"name": "Shadowed", "patient_id"', 1)
    assert '"name": "Shadowed"' in lines[1]
    path.write_text("\n".join(lines) + "\n")
    _validate_fails("patients.jsonl:2:1: duplicate key 'name' in one JSON object; each key may appear once")


def test_a_folder_inside_a_task_folder_is_refused(project):
    sub = project / "tasks" / "clinic" / "held-out"
    sub.mkdir()
    (sub / "test.yaml").write_text((project / "tasks" / "clinic" / "test.yaml").read_text())
    (project / "tasks" / "clinic" / ".git").mkdir()  # hidden folders are tools', not tasks
    out = _validate_fails("held-out/ is a folder inside")
    assert "sub-folders are never read" in out and ".git" not in out


def test_the_refusals_reach_open_domain_too(project):
    _edit(project, "domains/clinic/domain.yaml", "personas:\n", "personas:\n  ? [a, b]\n  : x\n")
    with pytest.raises(SpecError, match="a key here is a list"):
        open_domain("clinic")
