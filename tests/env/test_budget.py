"""Runaway SQL is stopped by the budget (muactl/env/budget.py) wherever a domain's statements run, and a
tool returns only what a tool may return. Real SQLite; each runaway would run for minutes unstopped."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.errors import SpecError
from muactl.domain.open import open_domain
from muactl.domain.validate import validate_domain
from muactl.env.sandbox import new_env

runner = CliRunner()
pytestmark = pytest.mark.timeout(120, method="thread")  # unbudgeted, SQLite runs on in C, past any signal

FOREVER = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
CROSS = "SELECT count(*) FROM n a, n b, n c, n d"  # 100^4 rows

RUNAWAY_YAML = f"""\
name: runaway
description: Statements that never finish unless something stops them.
policy: None.
LIMITS
database:
  tables:
    n:
      columns: {{x: integer}}
      primary_key: x
  seed:
    n: [{", ".join(f"{{x: {i}}}" for i in range(100))}]
tools:
  count_forever:
    description: A recursive CTE without an end.
    query: {FOREVER}
    returns: value
  cross_join:
    description: Four copies of n joined.
    query: {CROSS}
    returns: value
  checked_forever:
    description: A check that never ends.
    checks:
      - query: SELECT ({FOREVER}) > 0
        error: never
    query: SELECT 1
    returns: value
  write_forever:
    description: A write that never ends.
    writes:
      - UPDATE n SET x = x + ({FOREVER}) WHERE x = 0
    message: done
  bump:
    description: A cheap write.
    writes:
      - UPDATE n SET x = x + 1000 WHERE x = 99
    message: done
  blob:
    description: Returns binary data.
    query: SELECT randomblob(4) AS b
    returns: value
  infinite:
    description: Returns an infinite number.
    query: SELECT 9e999 AS v
    returns: row
  many_rows:
    description: Returns 100^2 rows.
    query: SELECT a.x FROM n a, n b
    returns: rows
"""

TASKS = f"""\
- id: slow-assert
  user: {{reason: r}}
  expect:
    assert:
      - query: {FOREVER}
"""

TEMPLATES = f"""\
- id: slow-sample
  sample: {FOREVER}
  user: {{reason: r}}
- id: slow-derive
  sample: SELECT x FROM n
  derive:
    y: SELECT ({CROSS}) + :x
  user: {{reason: r}}
"""


@pytest.fixture
def runaway(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "domains" / "runaway"
    folder.mkdir(parents=True)
    (folder / "domain.yaml").write_text(RUNAWAY_YAML.replace("LIMITS", ""))
    return folder


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


@pytest.mark.parametrize("tool", ["count_forever", "cross_join", "checked_forever", "write_forever"])
def test_a_runaway_tool_call_is_a_tool_error_naming_the_budget(runaway, tool):
    env = new_env(open_domain("runaway").compiled)
    before = env.state_hash()
    result, took = _timed(lambda: env.call(tool, {}))
    assert result.error and "budget of 10,000,000 SQLite steps" in result.content and "limits.sql_steps" in result.content
    assert took < 10
    assert env.state_hash() == before  # a stopped write rolled back
    ok = env.call("bump", {})  # and the sandbox goes on working
    assert not ok.error and ok.changed


# the budget's two stops: its steps, or its wall time when each step is slow (as on a loaded machine)
BUDGET_STOP = r"ran past (the budget|[0-9.]+ seconds, the wall time of its budget)"


def _budget_stop(text: str) -> bool:
    return re.search(BUDGET_STOP, text) is not None


def test_muactl_call_on_a_runaway_returns_quickly(runaway):
    """A tool stopped by the budget answers with an error: exit 3, as any tool that refuses (README "call")."""
    r, took = _timed(lambda: runner.invoke(app, ["call", "runaway", "count_forever", "{}"]))
    assert r.exit_code == 3 and _budget_stop(r.output)
    assert took < 10


def test_a_domain_raises_its_budget_within_the_cap(runaway):
    (runaway / "domain.yaml").write_text(RUNAWAY_YAML.replace("LIMITS", "limits: {sql_steps: 1000}"))
    env = new_env(open_domain("runaway").compiled)
    assert env.budget.steps == 1000
    assert "budget of 1,000 SQLite steps" in env.call("many_rows", {}).content  # 10,000 rows take more
    (runaway / "domain.yaml").write_text(RUNAWAY_YAML.replace("LIMITS", "limits: {sql_steps: 10000000000}"))
    with pytest.raises(SpecError) as e:
        open_domain("runaway")
    assert "domain.yaml:4:" in str(e.value) and "limits.sql_steps" in str(e.value) and "200000000" in str(e.value)


def test_interrupt_from_another_thread_stops_the_running_statement(runaway):
    env = new_env(open_domain("runaway").compiled)
    env.budget.steps = 10**12  # would run for hours
    threading.Timer(0.3, env.interrupt).start()
    result, took = _timed(lambda: env.call("count_forever", {}))
    assert result.error and "stopped" in result.content and took < 5
    assert "stopped" in env.call("bump", {}).content  # and nothing runs after it until settle()


def test_validate_reports_runaway_assertions_samples_and_derives(runaway):
    tasks = runaway.parent.parent / "tasks" / "runaway"
    tasks.mkdir(parents=True)
    (tasks / "train.yaml").write_text(TASKS)
    (tasks / "templates.yaml").write_text(TEMPLATES)
    with pytest.raises(SpecError) as e:
        _, took = _timed(lambda: validate_domain("runaway"))
    text = str(e.value)
    assert "train.yaml:5:" in text and "expect.assert[0]" in text
    assert "templates.yaml:2:" in text and "[0].sample" in text and "[1].derive" in text
    assert len(re.findall(BUDGET_STOP, text)) >= 3, text
    r, took = _timed(lambda: runner.invoke(app, ["validate", "runaway"]))
    assert r.exit_code == 2 and took < 60


def test_a_tool_result_is_json_values_only(runaway):
    env = new_env(open_domain("runaway").compiled)
    blob = env.call("blob", {})
    assert blob.error and "BLOB" in blob.content and "column 'b'" in blob.content
    inf = env.call("infinite", {})
    assert inf.error and "non-finite" in inf.content
    rows = env.call("many_rows", {})
    assert not rows.error and len(rows.content) > 10_000
    r = runner.invoke(app, ["call", "runaway", "blob", "{}"])
    assert r.exit_code == 3 and "BLOB" in r.output and "Traceback" not in r.output


def test_muactl_schema_documents_the_limits():
    import json

    r = runner.invoke(app, ["schema"])
    schema = json.loads(r.output)
    assert schema["$defs"]["Limits"]["properties"]["sql_steps"]["maximum"] == 200_000_000
    assert "limits.sql_steps" in schema["$comment"] and "1,048,576 bytes" in schema["$comment"]
