"""benchmarks/rl_gain.py: the table from recorded results (fast), and the whole harness on tiny (slow)."""

import importlib.util
import json
import sqlite3
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _module():
    spec = importlib.util.spec_from_file_location("rl_gain", ROOT / "benchmarks" / "rl_gain.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _args(**kw):
    base = dict(model="tiny", user="scripted", seeds=[0, 1], arms=["base", "sft", "sft+grpo", "grpo"], heldout=40,
                eval_seed=7, grpo_steps=2, tasks_per_step=2, group_size=4, grpo_lr=5e-6, sft_user=None, fixed=True)
    return Namespace(**{**base, **kw})


def test_table_pairs_arms_over_seeds_and_instances():
    rl = _module()
    tasks = [f"i{k}" for k in range(40)]
    # SFT solves the first 10 instances; GRPO after it 10 more on both seeds; GRPO alone nothing; base 2
    results = {"base": {"heldout": {t: int(k < 2) for k, t in enumerate(tasks)}, "fixed": {"a": 0}}}
    for s in (0, 1):
        results[f"sft:{s}"] = {"heldout": {t: int(k < 10) for k, t in enumerate(tasks)}, "fixed": {"a": 1}}
        results[f"sft+grpo:{s}"] = {"heldout": {t: int(k < 20) for k, t in enumerate(tasks)}, "fixed": {"a": 1}}
        results[f"grpo:{s}"] = {"heldout": {t: 0 for t in tasks}, "fixed": {"a": 0}}
    results["cost"] = {"train:sft:0": {"cpu_min": 2.0, "wall_min": 1.0}, "train:sft+grpo:0": {"cpu_min": 4.0, "wall_min": 2.0}}
    text = rl.report(results, _args())
    assert "| sft | 2 | 0.250 |" in text and "| sft+grpo | 2 | 0.500 |" in text and "| base | 1 | 0.050 |" in text
    assert "| (SFT then GRPO) - (SFT only), paired | 2 | +0.250 |" in text
    assert "held-out instances: a gain: the interval excludes 0" in text
    assert "| sft+grpo | 1 | 4.0 | 2.0 |" in text  # CPU minutes per seed of the GRPO stage


def test_a_seed_that_did_not_finish_is_left_out_not_guessed():
    rl = _module()
    results = {"sft:0": {"heldout": {"a": 1, "b": 0}, "fixed": {}}}
    text = rl.report(results, _args(seeds=[0, 1], arms=["sft", "sft+grpo"]))
    assert "| sft | 1 | 0.500 |" in text and "paired" not in text
    assert "arm (fixed test tasks)" not in text  # none evaluated (--no-fixed): no empty table


def test_per_template_view_and_grpo_signal(tmp_path):
    rl = _module()
    # SFT solves balance and fails the refusal; GRPO after it gives the balance back and passes the refusal
    results = {"sft:0": {"heldout": {"balance-a1": 1, "balance-b2": 1, "refuse-c3": 0}, "fixed": {}},
               "sft+grpo:0": {"heldout": {"balance-a1": 0, "balance-b2": 0, "refuse-c3": 1}, "fixed": {}}}
    run = tmp_path / "runs" / "sft-grpo-0"
    run.mkdir(parents=True)
    with sqlite3.connect(run / "runs.sqlite") as db:
        db.execute("CREATE TABLE metrics (step INTEGER, name TEXT, value REAL)")
        rows = [(1, "rollout/equal_after_resample", 2), (2, "rollout/equal_after_resample", 1), (3, "rollout/equal_after_resample", 2),
                (1, "rollout/success", 0.0), (2, "rollout/success", 0.5), (3, "rollout/success", 1.0),
                (0, "heldout/success", 0.4), (3, "heldout/success", 0.3)]
        db.executemany("INSERT INTO metrics VALUES (?, ?, ?)", rows)
    text = rl.report(results, _args(seeds=[0], arms=["sft", "sft+grpo"], tasks_per_step=2), tmp_path)
    assert "| balance | 2/2 | 0/2 |" in text and "| refuse | 0/1 | 1/1 |" in text
    assert "| sft+grpo | 0 | 1/3 | 0.50 | 0.40 -> 0.30 |" in text  # only step 2 had a group that was not all-equal


@pytest.mark.slow
def test_harness_runs_every_arm_on_tiny(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl_gain.py"), "--model", "tiny", "--seeds", "0",
                          "--heldout", "3", "--sft-instances", "4", "--grpo-steps", "1", "--group-size", "2",
                          "--tasks-per-step", "1", "--max-turns", "3", "--max-new-tokens", "8", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    for arm in ("base", "sft", "sft+grpo", "grpo"):
        assert f"| {arm} | " in out.stdout
    assert "(SFT then GRPO) - (SFT only), paired" in out.stdout
    assert (tmp_path / "results.json").is_file() and (tmp_path / "table.md").is_file()


@pytest.mark.slow
def test_harness_with_an_llm_user_in_the_loop_on_tiny(tmp_path):
    """MUA-RL's setting: SFT on the scripted user's oracle conversations, then GRPO and evaluation with a local
    LLM user (tiny plays it): the GRPO run's episodes and the eval's were played against the LLM user."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl_gain.py"), "--model", "tiny", "--user", "hf:tiny",
                          "--sft-user", "scripted", "--seeds", "0", "--arms", "sft", "sft+grpo", "--no-fixed",
                          "--heldout", "2", "--sft-instances", "4", "--grpo-steps", "1", "--group-size", "2",
                          "--tasks-per-step", "1", "--max-turns", "3", "--max-new-tokens", "8", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "user hf:tiny (SFT data: scripted user)" in out.stdout and "| sft+grpo | 1 |" in out.stdout
    assert "arm (fixed test tasks)" not in out.stdout

    def user(run: str):
        with sqlite3.connect(tmp_path / "runs" / run / "runs.sqlite") as con:
            return json.loads(con.execute("SELECT config FROM runs").fetchone()[0])["user"]

    results = json.loads((tmp_path / "results.json").read_text())
    assert user(results["sft+grpo:0"]["heldout_run"]) == "hf:tiny"  # an eval run's config
    assert user("sft-grpo-0")["model"] == "hf:tiny" and user("sft-0")["kind"] == "scripted"  # train recipes


def test_a_larger_heldout_grows_the_recorded_eval_run(tmp_path):
    """--heldout raised on a finished --out: each model's held-out eval run grows in place, the instances it had
    keep their episodes, and the table counts the new ones (tiny, base arm only)."""
    def run(n: int) -> dict:
        out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl_gain.py"), "--model", "tiny", "--arms", "base",
                              "--seeds", "0", "--heldout", str(n), "--max-turns", "2", "--max-new-tokens", "4",
                              "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
        return json.loads((tmp_path / "results.json").read_text())

    first = run(2)["base"]
    held = tmp_path / "runs" / first["heldout_run"] / "runs.sqlite"
    with sqlite3.connect(held) as db:
        ids = dict(db.execute("SELECT task_id, id FROM episodes").fetchall())
    grown = run(5)["base"]
    assert grown["heldout_run"] == first["heldout_run"] and len(grown["heldout"]) == 5
    assert set(first["heldout"]) < set(grown["heldout"])
    with sqlite3.connect(held) as db:
        after = dict(db.execute("SELECT task_id, id FROM episodes").fetchall())
    assert len(after) == 5 and {t: after[t] for t in ids} == ids  # the first two were not played again
    assert len(list((tmp_path / "runs").iterdir())) == 2  # the held-out run and the fixed test tasks' run
