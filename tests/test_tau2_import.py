"""`muactl import tau2` checked against τ²-bench's own tools (issue 14).

The ground truth (tests/data/tau2/<domain>.json) was recorded by benchmarks/tau2_record.py running
τ²'s Python tools; it holds digests only. The import itself needs τ²'s data: set TAU2_BENCH to a
τ²-bench checkout (README, "τ²-bench") to run those tests; without it they are skipped.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.importers.tau2 import HERE

runner = CliRunner()
TRUTH = Path(__file__).parent / "data" / "tau2"
CHECKOUT = os.environ.get("TAU2_BENCH")
needs_tau2 = pytest.mark.skipif(not CHECKOUT, reason="set TAU2_BENCH to a τ²-bench checkout to import its data")
SHIPPED = sorted(p.stem for p in HERE.glob("*.yaml"))


def truth(domain: str) -> dict:
    return json.loads((TRUTH / f"{domain}.json").read_text())


@pytest.mark.parametrize("domain, tasks, calls, failing", [
    ("retail", 114, 550, 18), ("airline", 50, 142, 0), ("telecom", 114, 516, 0)])
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


@needs_tau2
@pytest.mark.slow
@pytest.mark.parametrize("domain", SHIPPED)
def test_import_matches_tau2s_own_tools(domain, tmp_path, monkeypatch):
    from muactl.importers.tau2 import tool_docs, verify
    from muactl.domain.validate import validate_domain

    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["import", "tau2", CHECKOUT, "--domain", domain])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["import", "tau2", CHECKOUT, "--domain", domain])
    assert r.exit_code == 2 and "--force" in r.output  # an earlier import is never overwritten silently
    opened = validate_domain(f"tau2-{domain}")  # every gold path replays, expected failures included
    code = Path(CHECKOUT) / "src" / "tau2" / "domains" / domain
    for file, tool in (("tools.py", "get_customer_by_id" if domain == "telecom" else "get_user_details"),
                       ("user_tools.py", "toggle_data" if domain == "telecom" else None)):
        if tool:  # τ²'s own text, for the agent's tools and the user's
            assert opened.compiled.tools[tool].description == tool_docs(code / file)[tool][0]
    got = verify(opened, truth(domain))
    assert got["mismatches"] == []
    assert got["db_same"] == got["tasks"] == len(truth(domain)["tasks"])
    assert got["error_same"] == got["calls"]
    assert got["output_same"] >= 0.99 * got["outputs"]
    assert got["probe_same"] == got["probes"] == (640 if domain == "telecom" else 0)  # calls off the gold paths
    r = runner.invoke(app, ["eval", f"tau2-{domain}", "--agent", "oracle", "--user", "scripted", "--split", "all"])
    assert r.exit_code == 0, r.output
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    assert summary["avg_reward"] == 1.0 and summary["episodes"] == len(opened.tasks)


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
