"""`muactl eval` and `muactl runs`: pass^k, the run directory, resume after Ctrl-C, and what the
commands print. Real domains, real SQLite; the agents here are the oracle and a do-nothing one."""

from __future__ import annotations

import asyncio
import json
import signal
from math import comb
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from muactl.episode.agents.base import Agent, AgentReply
from muactl.cli import app
from muactl.episode.user import ScriptedUser
from muactl.eval.config import EvalConfig
from muactl.eval.evaluate import run_eval
from muactl.runs.summary import pass_hat_k, summarize
from muactl.episode.rollout import Job, RolloutConfig, run_many
from muactl.runs.store import RunStore
from muactl.domain.open import open_domain

runner = CliRunner()
WIDE = {"COLUMNS": "220"}  # rich tables would truncate run ids at 80 columns


@pytest.fixture(autouse=True)
def runs_root(in_tmp) -> Path:
    return in_tmp / "runs"  # conftest's in_tmp: a private cwd and runs folder


# ---------------------------------------------------------------- pass^k


def test_pass_hat_k_against_hand_computed_values():
    one = {"t": (4, 2)}  # 4 trials, 2 successes
    assert pass_hat_k(one, 1) == pytest.approx(0.5)
    assert pass_hat_k(one, 2) == pytest.approx(1 / 6)  # C(2,2)/C(4,2): both drawn trials succeed
    assert pass_hat_k(one, 3) == 0.0 and pass_hat_k(one, 4) == 0.0
    many = {"a": (4, 2), "b": (4, 4), "c": (4, 0), "d": (4, 3)}
    assert pass_hat_k(many, 1) == pytest.approx((2 / 4 + 1 + 0 + 3 / 4) / 4)
    assert pass_hat_k(many, 2) == pytest.approx((1 / 6 + 1 + 0 + 3 / 6) / 4)
    assert pass_hat_k(many, 3) == pytest.approx((0 + 1 + 0 + 1 / 4) / 4)
    assert pass_hat_k(many, 4) == pytest.approx(1 / 4)
    # tasks with fewer than k counted trials say nothing about pass^k
    assert pass_hat_k({"a": (1, 1), "b": (3, 1)}, 2) == pytest.approx(comb(1, 2) / comb(3, 2))
    assert pass_hat_k({"a": (1, 1)}, 2) is None and pass_hat_k({}, 1) is None


def test_every_pass_k_is_over_one_task_set_naming_the_tasks_left_out():
    def row(task, success, termination="user_stop"):
        return {"task_id": task, "success": int(success), "reward": float(success), "termination": termination,
                "tool_calls": 2, "tool_errors": 0, "turns": 3, "prompt_tokens": 10, "completion_tokens": 5, "cost": 0.0}

    # the case: A 4/4; B 3 failures and 1 infra error. Each k over "tasks with k scored trials"
    # gave pass^1 0.5 (A and B) but pass^4 1.0 (A alone)
    eps = [row("A", 1)] * 4 + [row("B", 0, "max_turns")] * 3 + [row("B", 0, "infra_error")]
    s = summarize(eps, 4)
    assert [s[f"pass^{k}"] for k in range(1, 5)] == [1.0, 1.0, 1.0, 1.0]  # all over {A}
    assert all(s[f"pass^{k}"] <= s["pass^1"] for k in range(2, 5))
    assert s["tasks_in_pass_k"] == 1 and s["left_out_of_pass_k"] == [{"task_id": "B", "scored": 3}]
    assert s["tasks"] == 2 and s["counted"] == 7  # the other figures still count B's scored trials
    from muactl.runs.summary import pass_k_note

    assert pass_k_note(s) == ("pass^1..4 are over the 1 tasks with 4 scored trials; 1 left out for fewer scored "
                              "trials (excluded ones; --resume plays them again): B (3 of 4)")
    # once B's fourth trial is scored, B is in every pass^k again
    s = summarize(eps[:-1] + [row("B", 1)], 4)
    assert s["pass^1"] == pytest.approx((1 + 1 / 4) / 2) and s["pass^4"] == pytest.approx(1 / 2)
    assert s["left_out_of_pass_k"] == [] and pass_k_note(s) is None


def test_summarize_excludes_infra_errors_from_pass_k():
    def row(task, success, termination="user_stop"):
        return {"task_id": task, "success": int(success), "reward": float(success), "termination": termination,
                "tool_calls": 2, "tool_errors": 0, "turns": 3, "prompt_tokens": 10, "completion_tokens": 5, "cost": 0.0}

    eps = [row("a", 1), row("a", 0, "max_turns"), row("a", 0, "infra_error"), row("a", 1),
           row("b", 0, "infra_error"), row("b", 0, "infra_error")]
    s = summarize(eps, 3)
    assert s["episodes"] == 6 and s["counted"] == 3 and s["infra_errors"] == 3 and s["tasks"] == 1
    assert s["pass^1"] == pytest.approx(2 / 3) and s["pass^2"] == pytest.approx(1 / 3) and s["pass^3"] == 0.0
    assert s["avg_reward"] == pytest.approx(2 / 3)
    assert s["terminations"] == {"infra_error": 3, "max_turns": 1, "user_stop": 2}


# ---------------------------------------------------------------- muactl eval


def only_run(root: Path) -> Path:
    run, = [p for p in root.iterdir() if p.is_dir()]
    return run


def test_cli_eval_bank_oracle_scripted_writes_the_run(runs_root):
    r = runner.invoke(app, ["eval", "bank", "--agent", "oracle", "--user", "scripted"], env=WIDE)
    assert r.exit_code == 0, r.output
    assert "pass^1" in r.output and "1.000" in r.output
    run = only_run(runs_root)
    assert {p.name for p in run.iterdir()} >= {"config.yaml", "runs.sqlite", "summary.json"}
    assert f"muactl runs show {run.name}" in r.output
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["domain"] == "bank" and config["agent"] == "oracle" and config["user"] == "scripted"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["pass^1"] == 1.0 and summary["episodes"] == summary["counted"] == 20
    store = RunStore.open(run.name)
    assert store.info()["status"] == "finished"
    assert len(store.episodes()) == 20 and all(e["reward"] == 1.0 for e in store.episodes())


@pytest.mark.parametrize("split", ["train", "test"])
def test_cli_eval_retail_oracle_is_perfect_on_every_split(runs_root, split):
    r = runner.invoke(app, ["eval", "retail", "--agent", "oracle", "--split", split, "--concurrency", "16"], env=WIDE)
    assert r.exit_code == 0, r.output
    summary = json.loads((only_run(runs_root) / "summary.json").read_text())
    assert summary["pass^1"] == 1.0 and summary["avg_reward"] == 1.0 and summary["infra_errors"] == 0
    assert summary["episodes"] == {"train": 28, "test": 16}[split]


class DoNothing(Agent):
    """Never calls a tool; says goodbye to everything."""

    name = "do-nothing"

    async def act(self, ctx) -> AgentReply:
        return AgentReply("Goodbye.")


@pytest.mark.parametrize("domain", ["bank", "retail"])
def test_do_nothing_agent_scores_0_on_every_task_that_writes(domain):
    opened = open_domain(domain)
    eps = asyncio.run(run_many([Job(t, 0) for t in opened.tasks], opened.compiled, DoNothing(), ScriptedUser,
                               RolloutConfig(), concurrency=16))
    reward = {e.task_id: e.reward for e in eps}
    writing = [t.task.id for t in opened.tasks
               if any(opened.compiled.writes(next(iter(a))) for a in t.task.expect.actions)]
    assert len(writing) >= 10
    assert {t: reward[t] for t in writing} == {t: 0.0 for t in writing}
    # By design a do-nothing agent passes the refusal tasks: their gold outcome is "no change" and they
    # require no output, so declining is the right answer. Everything else it fails.
    passed = {t for t, r in reward.items() if r == 1.0}
    refusals = {t.task.id for t in opened.tasks if not t.task.expect.outputs and not t.task.expect.transfer
                and t.task.id not in writing}
    assert passed == refusals


# ---------------------------------------------------------------- resume after Ctrl-C


@pytest.mark.slow
def test_ctrl_c_on_a_local_model_eval_exits_within_seconds(tmp_path, ctrl_c_interrupts):
    """Issue 27.4: a real SIGINT to `muactl eval --agent hf:tiny` while the model loads or generates took
    ~55-60 s to end (asyncio.run waited for the generate thread's whole batch). The model is the tiny test model."""
    import os
    import subprocess
    import sys
    import time

    env = dict(os.environ, MUACTL_RUNS=str(tmp_path / "runs"), MUACTL_NO_PROGRESS="1")
    proc = subprocess.Popen([sys.executable, "-m", "muactl", "eval", "bank", "--agent", "hf:tiny", "--split", "test",
                             "--trials", "4"], env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not list((tmp_path / "runs").glob("*/runs.sqlite")) and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(8)  # the model loads, then generates the first batch of 80 turns
    assert proc.poll() is None, proc.communicate()
    sent = time.time()
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    waited = time.time() - sent
    assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err[-2000:])
    assert waited < 5, f"took {waited:.1f} s to stop after Ctrl-C"
    (run,) = (tmp_path / "runs").iterdir()
    assert RunStore.read(run).info()["status"] == "interrupted"


def test_ctrl_c_then_resume_finishes_the_rest_once(runs_root, ctrl_c_interrupts):
    cfg = EvalConfig("bank", split="test", trials=2, concurrency=1)
    seen = []

    handler = []  # what SIGINT called when it was raised

    def ctrl_c_after_5(state):  # a real SIGINT, delivered while episodes are running
        if state["last"] is not None:
            seen.append(state["last"])
            if len(seen) == 5:
                handler.append(signal.getsignal(signal.SIGINT))
                signal.raise_signal(signal.SIGINT)

    try:
        run_eval(cfg, on_progress=ctrl_c_after_5)
    except KeyboardInterrupt:
        pass
    else:
        pytest.fail(f"the SIGINT did not stop the run (SIGINT handler when raised: {handler}, "
                    f"episodes seen {len(seen)})")
    run = only_run(runs_root)
    store = RunStore.open(run.name)
    info = store.info()
    saved = store.episodes()
    assert info["status"] == "interrupted" and 5 <= len(saved) < 40
    assert info["summary"]["episodes"] == len(saved)  # the partial summary is written too
    assert (run / "summary.json").is_file()
    before = {(e["task_id"], e["trial"]): e["id"] for e in saved}

    progress = []
    store2, summary = run_eval(EvalConfig("bank", concurrency=8), resume=run.name, on_progress=progress.append)
    assert store2.id == run.name
    assert progress[0]["done"] == len(saved) and progress[-1]["done"] == 40  # it skipped the finished ones
    rows = store2.episodes()
    keys = [(e["task_id"], e["trial"]) for e in rows]
    assert len(rows) == len(set(keys)) == 40
    assert {k: i for k, i in before.items()} == {k: e["id"] for k, e in zip(keys, rows) if k in before}  # kept, not redone
    assert summary["episodes"] == 40 and summary["pass^1"] == summary["pass^2"] == 1.0
    assert store2.info()["status"] == "finished"
    # the same final numbers as an uninterrupted run
    _, clean = run_eval(EvalConfig("bank", split="test", trials=2, concurrency=8))
    assert {k: clean[k] for k in ("pass^1", "pass^2", "episodes", "avg_reward")} == \
           {k: summary[k] for k in ("pass^1", "pass^2", "episodes", "avg_reward")}
    # resuming a finished run does nothing
    _, again = run_eval(EvalConfig("bank"), resume=run.name)
    assert again["episodes"] == 40 and len(RunStore.open(run.name).episodes()) == 40


def test_cli_resume_uses_the_saved_config(runs_root):
    store, _ = run_eval(EvalConfig("bank", split="test", tasks=["move-mia", "move-quin"], trials=2))
    with store.db.conn:  # as if the run had stopped before the second trials
        store.db.execute("DELETE FROM messages WHERE episode_id IN (SELECT id FROM episodes WHERE trial = 1)")
        store.db.execute("DELETE FROM episodes WHERE trial = 1")
    r = runner.invoke(app, ["eval", "--resume", store.id], env=WIDE)
    assert r.exit_code == 0, r.output
    rows = RunStore.open(store.id).episodes()
    assert sorted((e["task_id"], e["trial"]) for e in rows) == [("move-mia", 0), ("move-mia", 1),
                                                                  ("move-quin", 0), ("move-quin", 1)]


def test_resuming_counts_the_successes_already_stored(runs_root):
    """A resumed run's progress starts from what it had (it showed `16/16 success 0`), and resuming a finished
    run says there was nothing left to play before showing its stored results."""
    store, _ = run_eval(EvalConfig("bank", split="test", tasks=["move-mia", "move-quin", "human-quin"], trials=2))
    with store.db.conn:  # as if the run had stopped before move-mia's second trial
        store.db.execute("DELETE FROM messages WHERE episode_id IN (SELECT id FROM episodes WHERE trial = 1 "
                         "AND task_id = 'move-mia')")
        store.db.execute("DELETE FROM episodes WHERE trial = 1 AND task_id = 'move-mia'")
    seen: list[dict] = []
    run_eval(EvalConfig("bank"), resume=store.id, on_progress=seen.append)
    assert (seen[0]["done"], seen[0]["successes"]) == (5, 5) and (seen[-1]["done"], seen[-1]["successes"]) == (6, 6)
    r = runner.invoke(app, ["eval", "--resume", store.id], env=WIDE)
    assert r.exit_code == 0, r.output
    assert f"nothing left to play: {store.id} had finished all 6 episodes (success 6)" in r.output
    assert "pass^1" in r.output  # the stored results follow


# ---------------------------------------------------------------- muactl runs


def test_piped_tables_are_not_cut_at_80_columns(runs_root):
    """Piped (CliRunner's output is no terminal) and with no COLUMNS, a table keeps every cell whole: run ids
    were cut with "…" at 80 columns."""
    store, _ = run_eval(EvalConfig("bank", split="test", tasks=["move-mia"]))
    for args in (["runs"], ["runs", "show", store.id], ["domains"]):
        r = runner.invoke(app, args, env={"COLUMNS": None})
        assert r.exit_code == 0, r.output
        assert "…" not in r.output, (args, r.output)
    assert store.id in runner.invoke(app, ["runs"], env={"COLUMNS": None}).output
    r = runner.invoke(app, ["runs"], env={"COLUMNS": "60"})  # a width that is set is still obeyed
    assert max(len(line) for line in r.output.splitlines()) <= 60


def test_runs_list_show_and_episode(runs_root):
    r = runner.invoke(app, ["runs"], env=WIDE)
    assert r.exit_code == 0 and "no runs" in r.output
    store, _ = run_eval(EvalConfig("bank", split="test", tasks=["move-mia"], trials=2))
    r = runner.invoke(app, ["runs"], env=WIDE)
    assert r.exit_code == 0, r.output
    assert store.id in r.output and "finished" in r.output and "oracle" in r.output and "1.000" in r.output

    r = runner.invoke(app, ["runs", "show", store.id], env=WIDE)
    assert r.exit_code == 0, r.output
    assert "pass^1" in r.output and "pass^2" in r.output and "move-mia" in r.output and "user_stop" in r.output
    assert r.output.count("move-mia") == 4  # the per-task row, its user-fidelity row and one row per episode

    r = runner.invoke(app, ["runs", "show", store.id, "--episode", "1"], env=WIDE)
    assert r.exit_code == 0, r.output
    out = r.output
    assert "move-mia" in out and "reward 1.0" in out and "(user_stop)" in out
    assert "-> find_customer" in out and "-> transfer_funds" in out and '"amount": 150' in out
    assert "<- c84" in out  # a tool result
    assert "user:" in out and "agent:" in out and "Shall I proceed?" in out
    assert "reward breakdown:" in out and "db_match=True" in out

    r = runner.invoke(app, ["runs", "show", store.id, "--episode", "9"], env=WIDE)
    assert r.exit_code == 2 and "episodes 1..2" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["runs", "show", "no-such-run"], env=WIDE)
    assert r.exit_code == 2 and "no run 'no-such-run'" in r.output and "Traceback" not in r.output


# ---------------------------------------------------------------- CLI errors


@pytest.mark.parametrize("args,message", [
    (["eval", "nope"], "no domain named 'nope'"),
    (["eval", "bank", "--opening", "sideways"], "--opening must be 'agent' or 'user'"),
    (["eval", "bank", "--split", "holdout"], "no tasks in split 'holdout'"),
    (["eval", "bank", "--task", "no-such-task"], "no task 'no-such-task'"),
    (["eval"], "give a domain"),
    (["eval", "--resume", "no-such-run"], "no run 'no-such-run'"),
])
def test_cli_errors_exit_2_without_traceback(runs_root, args, message):
    r = runner.invoke(app, args, env=WIDE)
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit)
    assert not runs_root.exists() or not any(runs_root.iterdir())  # a failed start leaves no run behind


def test_partial_credit_moves_before_success(tmp_path, monkeypatch):
    """first_call_right and gold_calls_made: 1.0 for the oracle, 0.0 for an agent that never calls a tool."""
    from muactl.eval.config import EvalConfig
    from muactl.eval.evaluate import run_eval

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    _, summary = run_eval(EvalConfig(domain="bank", split="test"))
    assert summary["first_call_right"] == 1.0 and summary["gold_calls_made"] == 1.0
    from muactl.episode.agents.base import Agent, AgentReply
    import muactl.eval.evaluate as ev

    class Quits(Agent):
        async def act(self, ctx):
            return AgentReply("Goodbye.")

    orig = ev.build_parts
    monkeypatch.setattr(ev, "build_parts", lambda cfg, opened: (Quits(), orig(cfg, opened)[1]))
    _, summary = run_eval(EvalConfig(domain="bank", split="test"))
    assert summary["first_call_right"] == 0.0 and summary["gold_calls_made"] == 0.0


# ---------------------------------------------------------------- damaged runs, stored configs, two resumes


def _damaged(runs_root, how: str) -> str:
    store, _ = run_eval(EvalConfig("bank", split="test", tasks=["move-mia"]))
    db = store.path / "runs.sqlite"
    store.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.db.conn.close()
    data = db.read_bytes()
    if how == "truncated":
        db.write_bytes(data[: len(data) // 2])
    elif how == "corrupt":
        db.write_bytes(b"\x13" * 5000)
    else:  # a SQLite file that is not a run
        import sqlite3

        db.unlink()
        conn = sqlite3.connect(db)
        conn.execute("CREATE TABLE notes (x)")
        conn.commit()
        conn.close()
    return store.id


@pytest.mark.parametrize("how", ["truncated", "corrupt", "no-tables"])
@pytest.mark.parametrize("command", [["runs", "show"], ["eval", "--resume"], ["report"]])
def test_damaged_runs_sqlite_is_a_clean_error(runs_root, how, command):
    run_id = _damaged(runs_root, how)
    r = runner.invoke(app, command + [run_id], env=WIDE)
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (r.output, r.exception)
    assert "runs.sqlite" in r.output and "internal error" not in r.output
    assert len(r.output.strip().splitlines()) == 1  # one line
    r = runner.invoke(app, ["runs"], env=WIDE)  # the listing shows it as unreadable and goes on
    assert r.exit_code == 0 and "unreadable" in r.output


def test_resume_with_an_unknown_stored_config_key_names_it(runs_root):
    store, _ = run_eval(EvalConfig("bank", split="test", tasks=["move-mia"]))
    config = store.info()["config"]
    store.db["runs"].update(store.id, {"config": json.dumps({**config, "warp_factor": 9})})
    r = runner.invoke(app, ["eval", "--resume", store.id], env=WIDE)
    assert r.exit_code == 2 and "unknown key(s) warp_factor" in r.output and "internal error" not in r.output


def test_two_resumes_of_one_run_the_second_is_told_who_holds_it(runs_root):
    import subprocess
    import sys

    store, _ = run_eval(EvalConfig("bank", split="test", tasks=["move-mia"]))
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from muactl.runs.store import RunStore; RunStore.open(sys.argv[1]).lock(); "
        "print('held', flush=True); time.sleep(60)"), store.id], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        r = runner.invoke(app, ["eval", "--resume", store.id], env=WIDE)
        assert r.exit_code == 2, r.output
        assert f"run {store.id} is in use by pid {holder.pid}" in r.output
    finally:
        holder.kill()
        holder.wait()
    r = runner.invoke(app, ["eval", "--resume", store.id], env=WIDE)  # the holder died: the lock went with it
    assert r.exit_code == 0, r.output


def test_a_run_whose_process_died_shows_as_interrupted_with_its_resume_command(runs_root):
    import os
    import subprocess
    import sys

    code = ("import os, signal, sys; from muactl.runs.store import RunStore; s = RunStore.create('eval', 'bank', {}, run_id=sys.argv[1]); "
            "s.update(status='running'); print('up', flush=True); sys.stdin.readline(); os.kill(os.getpid(), signal.SIGKILL)")
    env = dict(os.environ, MUACTL_RUNS=str(runs_root))
    proc = subprocess.Popen([sys.executable, "-c", code, "r1"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    assert RunStore.open("r1").info()["status"] == "running"  # its process is alive: still running
    proc.communicate("go\n")  # now it dies by SIGKILL, without a word to the run store
    info = RunStore.open("r1").info()
    assert info["status"] == "interrupted" and info["resume"] == "muactl eval --resume r1"
    r = runner.invoke(app, ["runs"], env=WIDE)
    assert "interrupted" in r.output and "continue with: muactl eval --resume r1" in r.output, r.output
    r = runner.invoke(app, ["runs", "show", "r1"], env=WIDE)
    assert "continue with: muactl eval --resume r1" in r.output, r.output


def test_report_plots_have_integer_steps_readable_labels_honest_ranges_and_a_kl_note(runs_root):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from muactl.runs.report import figure, write_report

    store = RunStore.create("grpo", "bank", {"grpo": {"beta": 0.0}}, run_id="g")
    for step in (1, 2, 3):
        store.log_metrics(step, {"reward": 0.5 + 0.001 * step, "rollout/turns": 4.0})
    store.update(status="finished")
    page = write_report("g").read_text()
    assert "grpo.beta is 0" in page and "no KL" in page
    assert (runs_root / "g" / "report" / "reward.png").is_file() and not (runs_root / "g" / "report" / "kl.png").exists()
    fig = figure(plt, [1, 2, 3], [0.501, 0.502, 0.503], "Mean reward per GRPO step", "mean reward", "unit")
    ax = fig.axes[0]
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert ax.get_ylim() == (-0.05, 1.05)  # a flat reward looks flat, not like noise
    assert ax.get_ylabel() == "mean reward" and ax.get_xlabel() == "training step"
    turns = figure(plt, [1, 2], [4.0, 4.0], "Agent turns per episode", "turns", "zero").axes[0]
    assert turns.get_ylim()[0] == 0.0
    plt.close("all")


def test_cli_resume_with_n_grows_a_drawn_run_and_plays_only_the_new_instances(runs_root):
    """A held-out evaluation too small to separate two arms grows in place: the draw is prefix-stable, so the
    run's 6 instances are the first 6 of 12 and keep their episodes; the 12 are those of a fresh 12-instance run."""
    args = ["--tasks", "template:all", "--db", "random", "--seed", "7", "--split", "test"]
    small, _ = run_eval(EvalConfig("bank", tasks=["template:all"], n=6, db="random", seed=7, split="test"))
    before = {e["task_id"]: e["id"] for e in small.episodes()}
    r = runner.invoke(app, ["eval", "--resume", small.id, "--n", "12"], env=WIDE)
    assert r.exit_code == 0, r.output
    grown = RunStore.open(small.id)
    rows = grown.episodes()
    assert len(rows) == 12 and {e["task_id"]: e["id"] for e in rows if e["task_id"] in before} == before
    assert grown.info()["config"]["n"] == 12 and yaml.safe_load((grown.path / "config.yaml").read_text())["n"] == 12
    r = runner.invoke(app, ["eval", "bank", *args, "--n", "12"], env=WIDE)
    assert r.exit_code == 0, r.output
    fresh = [p for p in runs_root.iterdir() if p.name != small.id]
    assert {e["task_id"] for e in RunStore.open(fresh[0].name).episodes()} == {e["task_id"] for e in rows}
    # a plain resume keeps the run's size; --n never shrinks a run nor applies to task files
    r = runner.invoke(app, ["eval", "--resume", small.id], env=WIDE)
    assert r.exit_code == 0 and len(RunStore.open(small.id).episodes()) == 12
    r = runner.invoke(app, ["eval", "--resume", small.id, "--n", "3"], env=WIDE)
    assert r.exit_code == 2 and "can only raise" in r.output and "Traceback" not in r.output
    # episodes of an instance the draw no longer makes (the templates changed): growing would count both
    with grown.db.conn:
        grown.db.execute("UPDATE episodes SET task_id = 'balance-0000' WHERE id = ?", [rows[0]["id"]])
    r = runner.invoke(app, ["eval", "--resume", small.id, "--n", "14"], env=WIDE)
    assert r.exit_code == 2 and "balance-0000" in r.output and "templates changed" in r.output
    assert RunStore.open(small.id).info()["config"]["n"] == 12
    files, _ = run_eval(EvalConfig("bank", split="test", tasks=["move-mia"]))
    r = runner.invoke(app, ["eval", "--resume", files.id, "--n", "5"], env=WIDE)
    assert r.exit_code == 2 and "task files" in r.output
