"""Statements whose steps are few but heavy are bounded too (issue 25, section 3): a query that builds an
8 MB string per row stays far under the step budget, so only the budget's wall time (env/budget.py) and
the cap on value sizes stop it, in `muactl call`, in `muactl validate` (an assertion, a template derive),
in an episode, and when a sandbox is closed mid-call. Real SQLite, domains built in tmp_path; the agent
of the episode test is a fixed script (the model is faked)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.domain.open import open_domain
from muactl.env.sandbox import new_env
from muactl.episode.agents.base import Agent, AgentReply
from muactl.episode.rollout import RolloutConfig, run_episode
from muactl.episode.user import ScriptedUser

runner = CliRunner()
pytestmark = pytest.mark.timeout(120, method="thread")  # unbounded, each of these runs for minutes in C

# issue 25's query: 200 rows, each an 8 MB string doubled by replace(); a few thousand steps in all. Over
# the value cap printf() gives NULL, so the same under the cap: 5,000 rows of 0.5 MB doubled, ~30 s of work
# in ~60,000 steps
ISSUE = ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 200) "
         "SELECT sum(length(replace(printf('%.*c', 8000000 + n, 'x'), 'x', 'yy'))) AS v FROM c")
HEAVY = ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 5000) "
         "SELECT sum(length(replace(printf('%.*c', 500000 + n, 'x'), 'x', 'yy'))) AS v FROM c")

DOMAIN = f"""\
name: heavy
description: Tools whose rows are heavy.
policy: None.
LIMITS
database:
  tables:
    n: {{columns: {{x: integer}}, primary_key: x}}
  seed:
    n: [{{x: 1}}]
tools:
  heavy:
    description: Heavy rows.
    query: {HEAVY}
    returns: value
  issue:
    description: The issue's heavy rows.
    query: {ISSUE}
    returns: value
  twice:
    description: A text joined to itself.
    params:
      s: {{type: string, maxLength: 1000000}}
    query: SELECT length(:s || :s) AS v
    returns: value
"""

TASKS = f"""\
- id: heavy-assertion
  user: {{reason: Nothing.}}
  expect:
    assert:
      - query: {HEAVY}
"""

TEMPLATES = f"""\
- id: heavy-derive
  sample: SELECT x FROM n
  derive:
    y: SELECT ({HEAVY}) + :x
  user: {{reason: "Nothing {{y}}."}}
"""

GOLD_HEAVY = """\
- id: heavy-gold
  user: {reason: Count.}
  expect:
    actions:
      - heavy: {}
"""

NO_GOLD = """\
- id: heavy-gold
  user: {reason: Count.}
  expect: {actions: []}
"""

FAST = "limits: {sql_steps: 1000000}"  # a budget whose wall time is the floor, 1 s: keeps these tests short
SLOW = "limits: {sql_steps: 200000000}"  # the biggest budget: 40 s of wall time


def make(root: Path, limits: str = "", **tasks: str) -> Path:
    (root / "domains" / "heavy").mkdir(parents=True)
    (root / "domains" / "heavy" / "domain.yaml").write_text(DOMAIN.replace("LIMITS", limits))
    if tasks:
        (root / "tasks" / "heavy").mkdir(parents=True)
        for name, text in tasks.items():
            (root / "tasks" / "heavy" / f"{name}.yaml").write_text(text)
    return root / "domains" / "heavy"


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    return tmp_path


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def test_muactl_call_stops_heavy_rows_at_the_budgets_wall_time(project):
    make(project)
    r, took = _timed(lambda: runner.invoke(app, ["call", "heavy", "heavy", "{}"]))
    assert r.exit_code == 3 and "ran past 2 seconds" in r.output and "limits.sql_steps" in r.output, r.output
    assert "Traceback" not in r.output
    assert took < 6, f"muactl call ran {took:.1f} s"


def test_the_issues_query_ends_at_once(project):
    """Its 8 MB strings are over the value cap: printf() gives NULL without repeating its character 8 million
    times (it took ~25 s, 200 rows of 0.12 s, with a 16 MiB cap)."""
    make(project)
    r, took = _timed(lambda: runner.invoke(app, ["call", "heavy", "issue", "{}"]))
    assert r.exit_code == 0 and r.output.strip() == "null", r.output
    assert took < 3, f"muactl call ran {took:.1f} s"


def test_validate_stops_a_heavy_assertion_and_a_heavy_derive(project):
    make(project, FAST, train=TASKS, templates=TEMPLATES)
    r, took = _timed(lambda: runner.invoke(app, ["validate", "heavy"]))
    assert r.exit_code == 2, r.output
    text = " ".join(r.output.split())  # rich wraps long lines
    assert "train.yaml:5:" in text and "expect.assert[0]" in text, text
    assert "templates.yaml:3:" in text and "derive" in text, text
    assert text.count("ran past 1 seconds") >= 2, text
    assert took < 10, f"validate ran {took:.1f} s"


def test_drawing_instances_stops_a_heavy_derive(project):
    make(project, FAST, templates=TEMPLATES)
    r, took = _timed(lambda: runner.invoke(app, ["eval", "heavy", "--tasks", "template:heavy-derive", "--n", "2"]))
    assert r.exit_code != 0 and "ran past 1 seconds" in " ".join(r.output.split()), r.output
    assert "Traceback" not in r.output
    assert took < 10, f"eval ran {took:.1f} s"


def test_an_episode_whose_gold_and_calls_are_heavy_ends_soon_after_its_timeout(project):
    """The oracle plays the heavy gold call and scoring replays it: each stops at the budget's wall time. A gold
    action that cannot be replayed leaves the right end state unknown, so the episode is not scored (infra_error,
    saying why) rather than passed or failed."""
    make(project, FAST, test=GOLD_HEAVY)
    r, took = _timed(lambda: runner.invoke(app, ["eval", "heavy", "--agent", "oracle", "--episode-timeout", "1"]))
    assert r.exit_code == 4 and "no episode was scored" in r.output, r.output
    assert "infra_error" in r.output and "gold action 1" in r.output and "Traceback" not in r.output, r.output
    assert took < 8, f"eval ran {took:.1f} s"


class CallsHeavy(Agent):
    """Calls the heavy tool until the episode is stopped (the model is faked)."""

    name = "calls-heavy"

    async def act(self, ctx) -> AgentReply:
        return AgentReply(tool_calls=[{"name": "heavy", "arguments": {}}])


def test_the_episode_timeout_interrupts_a_call_whose_budget_allows_longer(project):
    opened = open_domain(str(make(project, SLOW, test=NO_GOLD)))
    cfg = RolloutConfig(timeout_s=1, max_turns=1000, max_tool_errors=1000)
    ep, took = _timed(lambda: asyncio.run(run_episode(opened.task("heavy-gold"), opened.compiled, CallsHeavy(),
                                                      ScriptedUser(), cfg)))
    assert ep.termination == "timeout" and ep.final_hash
    assert took < 3, f"the episode ran {took:.1f} s past a 1 s timeout"


def test_no_sql_value_is_over_the_cap(project):
    env = new_env(open_domain(str(make(project))).compiled)
    out = env.call("twice", {"s": "x" * 600_000})  # 1.2 MB joined
    assert out.error and "too big" in out.content, out.content
    assert env.call("twice", {"s": "x" * 500_000}).content == "1000000"


def test_closing_a_sandbox_mid_call_stops_the_call(project):
    """A session closed while its call runs (an abandoned OpenEnv session): the statement is interrupted
    at once, the call ends as a tool error (not a ProgrammingError on a closed database), and the
    connection is closed after it."""
    env = new_env(open_domain(str(make(project, SLOW))).compiled)

    async def close_mid_call():
        call = asyncio.ensure_future(env.acall("heavy", {}))
        await asyncio.sleep(0.5)
        start = time.perf_counter()
        env.close()
        result = await call
        return result, time.perf_counter() - start

    result, took = asyncio.run(close_mid_call())
    assert result.error and "stopped" in result.content, result.content
    assert took < 1, f"the call ran {took:.1f} s after close()"
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:  # closed by a tool thread once the call has let go of it
        try:
            env.state_hash()
        except sqlite3.ProgrammingError:
            return
        time.sleep(0.01)
    pytest.fail("the environment still works 2 s after close()")


# ---------------------------------------------------------------- counts a command asks for

CHEAP_TEMPLATE = """\
- id: cheap
  sample: SELECT x FROM n
  user: {reason: "Nothing {x}."}
"""


def test_a_huge_count_is_refused_at_once(project):
    """`eval --resume RUN --n 100000000` stalled drawing instances; every count option has a bound."""
    make(project, templates=CHEAP_TEMPLATE)
    r = runner.invoke(app, ["eval", "heavy", "--tasks", "template:cheap", "--n", "1"])
    assert r.exit_code == 0, r.output
    run_id = r.output.split("muactl runs show ")[1].split(")")[0]
    for args in (["eval", "--resume", run_id, "--n", "100000000"], ["eval", "heavy", "--trials", "100000000"],
                 ["eval", "heavy", "--concurrency", "100000000"],
                 ["synth", "heavy", "--tasks", "template:cheap", "--n", "100000000"],
                 ["tasks", "generate", "heavy", "--all-templates", "--n", "100000000", "-o", "out.yaml"]):
        r, took = _timed(lambda: runner.invoke(app, args))
        assert r.exit_code == 2 and "less than or equal to" in r.output, (args, r.output)
        assert took < 3, (args, took)


def test_a_draw_of_too_many_instances_is_refused_where_it_is_made(project):
    """A recipe's eval.n or a run grown through the API reaches the draw without the command line's check."""
    from muactl.domain.task_templates import draw_stream
    from muactl.errors import UsageError

    opened = open_domain(str(make(project, templates=CHEAP_TEMPLATE)))
    with pytest.raises(UsageError, match="at most 100,000 .MAX_INSTANCES in muactl/limits.py"):
        draw_stream(opened, "template:cheap", 10**8, 0, "fixed")


# ---------------------------------------------------------------- printf's one unbounded step

FORMATS = ["printf('%.*c', 5, 'x')", "printf('%5.*c|', 3, 'x')", "printf('%.2f', 3.14159)", "printf('%d %s %%', 3, 'a')",
           "format('%,d', 1234567)", "printf('%.3c', 'ab')", "printf('%*d', -5, 3)", "printf(NULL)", "printf('%s', NULL)",
           "printf('%.2147483648c', 'x')", "printf('%.*c', '7', 'x')", "printf('%.*c', 2.9, 'x')", "printf('%!.20e', 0.1)",
           "printf('%q', 'it''s')", "printf('%.1000001c', 'x')", "printf()", "printf('%.*c', -3, 'x')", "printf(5)",
           "printf('%lld %x %o', 9223372036854775807, 255, 8)", "printf('%.*c', 2000000, 'x') IS NULL"]


def test_printf_is_sqlites_own_except_for_a_repeat_past_the_cap():
    """printf('%.*c', N, 'x') is one SQLite step that keeps working for all N characters after the result
    passed the value cap (no interrupt stops it): ~20 s for N = 2,000,000,000."""
    from muactl.env.budget import SqlBudget, cap_limits

    bounded, plain = sqlite3.connect(":memory:"), sqlite3.connect(":memory:")
    SqlBudget(bounded)
    cap_limits(plain)
    for sql in FORMATS:
        assert bounded.execute(f"SELECT {sql}").fetchone() == plain.execute(f"SELECT {sql}").fetchone(), sql
    for sql in ("printf('%.*c', 2000000000, 'x')", "format('%-3.*c', 2147483647, 'x')"):
        got, took = _timed(lambda: bounded.execute(f"SELECT {sql}").fetchone())
        assert got == (None,) and took < 0.5, (sql, took)
