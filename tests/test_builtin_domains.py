"""The built-in domains: they validate, their gold paths are sound, and they ship inside the wheel."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.spec.library import builtin_root, list_domains
from muactl.spec.models import call_parts
from muactl.domain.open import open_domain
from muactl.domain.validate import domain_warnings, validate_domain
from muactl.env.sandbox import new_env

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def n_writes(opened, task) -> int:
    """How many of the task's gold actions call a tool that writes."""
    tools = opened.compiled.tools
    names = [call_parts(c)[0] for c in task.task.expect.actions]
    return sum(tools[n].kind == "sql" and bool(tools[n].spec.writes) for n in names)


def writes(opened, task) -> bool:
    return n_writes(opened, task) > 0


@pytest.mark.parametrize("name, min_tools, min_tasks", [("retail", 12, 40), ("bank", 1, 60)])
def test_builtin_domain_validates(name, min_tools, min_tasks):
    opened = validate_domain(name)
    assert opened.ref.origin == "builtin"
    assert len(opened.compiled.tools) >= min_tools
    assert len(opened.tasks) >= min_tasks
    assert {t.split for t in opened.tasks} == {"train", "test"}
    assert domain_warnings(opened) == []  # e.g. no user.reason that steers the user (retail's had one)
    if name == "bank":
        assert len(opened.compiled.tools) <= 5


@pytest.mark.parametrize("name", ["retail", "bank"])
def test_gold_paths_change_state_exactly_where_they_should(name):
    """A do-nothing path fails every task that needs a write: its gold end state differs from the start."""
    opened = open_domain(name)
    start = new_env(opened.compiled).state_hash()
    n_write = 0
    for t in opened.tasks:
        env = new_env(opened.compiled)
        env.replay(t.task.setup)
        before = env.state_hash()
        env.replay(t.task.expect.actions)
        if writes(opened, t) and not any("refuse" in tag for tag in t.task.tags):
            n_write += 1
            assert env.state_hash() != before, f"{t.task.id}: gold path writes nothing"
        else:
            assert env.state_hash() == before, f"{t.task.id}: a read-only gold path changed the state"
        if not t.task.setup:
            assert before == start
    assert n_write >= 10


def test_retail_covers_the_task_kinds():
    opened = open_domain("retail")
    kinds = {"write": 0, "multi": 0, "info": 0, "refuse": 0}
    for t in opened.tasks:
        n = n_writes(opened, t)
        if n:
            kinds["write"] += 1
            kinds["multi"] += n > 1
        elif t.task.expect.refusal:
            kinds["refuse"] += 1
        elif t.task.expect.outputs:
            kinds["info"] += 1
        else:
            kinds["refuse"] += 1
    assert kinds["write"] >= 10 and kinds["multi"] >= 3 and kinds["info"] >= 3 and kinds["refuse"] >= 3, kinds


def test_seed_data_is_reproducible_from_the_seeded_script(tmp_path):
    from muactl.seeds import __main__ as seeds
    from muactl.seeds import bank, retail

    for name, module in (("retail", retail), ("bank", bank)):
        seeds.write_tables(module.generate(1, 0), tmp_path / name)
        for f in (ROOT / "domains" / name / "data").iterdir():
            assert (tmp_path / name / f.name).read_text() == f.read_text(), f"{name}/{f.name} differs from the script's output"


def test_domains_command_lists_builtin_and_local(project):
    r = runner.invoke(app, ["domains", "--json"])
    assert r.exit_code == 0, r.output
    rows = {(d["name"], d["origin"]): d for d in json.loads(r.output)}
    assert rows[("clinic", "local")]["tools"] == 3 and rows[("clinic", "local")]["tasks"] == 4
    assert rows[("retail", "builtin")]["tables"] >= 3
    assert rows[("bank", "builtin")]["train"] > 0 and rows[("bank", "builtin")]["test"] > 0


def test_local_domain_shadows_builtin(project):
    from muactl.scaffold import scaffold

    scaffold("bank", project)
    refs = [d for d in list_domains() if d.name == "bank"]
    assert [d.origin for d in refs] == ["local", "builtin"]
    assert open_domain("bank").ref.origin == "local"


def test_init_says_when_it_shadows_a_builtin(in_tmp):
    r = runner.invoke(app, ["init", "bank"])
    assert r.exit_code == 0, r.output
    note = next(ln for ln in r.output.splitlines() if ln.startswith("note:"))
    assert "shadows the built-in domain 'bank'" in note and str(ROOT / "domains" / "bank") in note
    assert open_domain("bank").ref.origin == "local"  # what the note says happened
    r = runner.invoke(app, ["init", "desk"])
    assert r.exit_code == 0 and "shadows" not in r.output


def test_call_prints_a_tool_result_from_a_fresh_sandbox():
    opened = open_domain("retail", with_tasks=False)
    email = new_env(opened.compiled).rows("users")[0]["email"]
    r = runner.invoke(app, ["call", "retail", "find_user_id_by_email", json.dumps({"email": email})])
    assert r.exit_code == 0 and r.output.strip() == new_env(opened.compiled).rows("users")[0]["user_id"]


def test_schema_is_a_json_schema_of_domain_yaml():
    import jsonschema

    r = runner.invoke(app, ["schema"])
    schema = json.loads(r.output)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert "tools" in schema["properties"] and "Task" in schema["$defs"]
    assert schema["properties"]["policy"]["description"]


def test_template_cache_is_keyed_by_content(project):
    first = open_domain("clinic").compiled
    again = open_domain("clinic").compiled
    assert again.template_path == first.template_path
    mtime = first.template_path.stat().st_mtime_ns
    data = project / "domains" / "clinic" / "data" / "patients.jsonl"
    data.write_text(data.read_text().replace("Ana Ruiz", "Ana Ruiz-Diaz"))
    changed = open_domain("clinic").compiled
    assert changed.template_path != first.template_path
    assert first.template_path.stat().st_mtime_ns == mtime  # the old template is untouched


@pytest.mark.slow
def test_wheel_ships_the_builtin_domains(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
                          "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    # a quiet build: no setuptools deprecations, no "absent from the packages configuration" per data folder
    assert "Warning" not in out.stdout + out.stderr, (out.stdout + out.stderr)[-3000:]
    wheel = next(tmp_path.glob("muactl-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("retail", "bank"):
        assert f"muactl/_builtin/domains/{name}/domain.yaml" in names
        assert f"muactl/_builtin/tasks/{name}/test.yaml" in names
    assert "muactl/scaffold/domain/domain.yaml" in names
    # installed from the wheel (not the checkout), the built-ins are found as package data
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)], check=True)
    code = "import muactl.spec.library as l; print(l.builtin_root()); print(sorted(d.name for d in l.list_domains()))"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert res.returncode == 0, res.stderr
    assert "_builtin" in res.stdout and "'bank'" in res.stdout and "'retail'" in res.stdout


def test_builtin_root_is_the_checkout_here():
    assert builtin_root() == ROOT


def test_the_checkout_is_not_a_project(monkeypatch, tmp_path):
    """Run from the source checkout (whose domains/ and tasks/ are the built-ins), nothing writes into the
    built-ins: init and tasks generate refuse with a user error, and the built-in test split stays as it is."""
    monkeypatch.chdir(ROOT)
    before = sorted(p.name for p in (ROOT / "tasks" / "bank").iterdir())
    r = runner.invoke(app, ["init", "clinic"])
    assert r.exit_code == 2 and "built-in domains/ folder" in r.output and "mkdir my-project" in r.output
    assert not (ROOT / "domains" / "clinic").exists() and not (ROOT / "tasks" / "clinic").exists()
    r = runner.invoke(app, ["tasks", "generate", "bank", "--all-templates", "--n", "3", "-o", "tasks/bank/gen-test.yaml"])
    assert r.exit_code == 2 and "built-in tasks/ folder" in r.output
    # an absolute path into the built-ins, from anywhere, is refused as well
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["tasks", "generate", "bank", "--all-templates", "--n", "3", "-o", str(ROOT / "tasks/bank/x.yaml")])
    assert r.exit_code == 2
    assert sorted(p.name for p in (ROOT / "tasks" / "bank").iterdir()) == before
    assert sorted(d.name for d in list_domains() if d.origin == "builtin") == ["bank", "retail"]
