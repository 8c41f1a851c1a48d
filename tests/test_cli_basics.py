import json
import subprocess
import sys
import time

from typer.testing import CliRunner

from muactl.cli import app

runner = CliRunner()


def test_help_is_fast_and_imports_no_heavy_library():
    code = ("import sys, time; t=time.perf_counter(); from muactl.cli import app; "
            "heavy=[m for m in ('torch','transformers','trl','litellm','peft') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "muactl", "--help"], capture_output=True, check=True)
    assert time.perf_counter() - start < 5  # generous for a loaded CI box; the benchmark prints the real figure


def test_init_validate_tools_call(project):
    r = runner.invoke(app, ["validate", "clinic"])
    assert r.exit_code == 0, r.output
    assert "4 tasks" in r.output
    r = runner.invoke(app, ["tools", "clinic", "--json"])
    schemas = json.loads(r.output)
    assert [s["function"]["name"] for s in schemas] == ["find_patient_by_phone", "list_appointments", "cancel_appointment"]
    r = runner.invoke(app, ["call", "clinic", "find_patient_by_phone", '{"phone": "5550101"}'])
    assert r.exit_code == 0 and r.output.strip() == "p1"


def test_init_other_names_get_a_neutral_starter(in_tmp):
    r = runner.invoke(app, ["init", "library"])
    assert r.exit_code == 0, r.output
    written = [p for p in (in_tmp / "domains" / "library").rglob("*") if p.is_file()]
    written += [p for p in (in_tmp / "tasks" / "library").rglob("*") if p.is_file()]
    assert not [p for p in written if "clinic" in p.read_text().lower() or "appointment" in p.read_text().lower()]
    assert "library:" in (in_tmp / "domains" / "library" / "domain.yaml").read_text()  # the description names it
    r = runner.invoke(app, ["validate", "library"])
    assert r.exit_code == 0 and "3 tools, 4 tasks" in r.output, r.output
    r = runner.invoke(app, ["eval", "library", "--agent", "oracle", "--split", "all"])
    assert r.exit_code == 0 and "1.000" in r.output, r.output


def test_init_refuses_to_overwrite(project):
    r = runner.invoke(app, ["init", "clinic"])
    assert r.exit_code == 2 and "--force" in r.output
    r = runner.invoke(app, ["init", "clinic", "--force"])
    assert r.exit_code == 0


def test_call_reports_tool_errors_with_exit_1(project):
    r = runner.invoke(app, ["call", "clinic", "cancel_appointment", '{"appointment_id": "a2"}'])
    assert r.exit_code == 1 and "not scheduled" in r.output


def test_unknown_domain_is_a_clean_error(project):
    r = runner.invoke(app, ["validate", "nope"])
    assert r.exit_code == 2 and "no domain named 'nope'" in r.output and "Traceback" not in r.output
