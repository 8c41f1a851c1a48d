"""benchmarks/rl_gain.py: the table from recorded results (fast), and the whole harness on tiny (slow)."""

import importlib.util
import json
import sqlite3
import subprocess
import sys
from argparse import Namespace
from functools import partial
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _module():
    return _benchmark("rl_gain")


def _args(**kw):
    base = dict(model="tiny", user="scripted", seeds=[0, 1], arms=["base", "sft", "sft+grpo", "grpo"], heldout=40,
                eval_seed=7, grpo_steps=2, tasks_per_step=2, group_size=4, grpo_lr=5e-6, sft_user=None, fixed=True,
                sft_agent="oracle", sft_instances=48, sft_epochs=1.0, cross_user=None)
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


def _grpo_run(results: dict, run_id: str, rows) -> None:
    """A finished GRPO run's metrics as results.json keeps them: name -> step (text) -> value."""
    by = results.setdefault("grpo_runs", {}).setdefault(run_id, {})
    for step, name, value in rows:
        by.setdefault(name, {})[str(step)] = value


def test_per_template_view_and_grpo_signal():
    rl = _module()
    # SFT solves balance and fails the refusal; GRPO after it gives the balance back and passes the refusal
    results = {"sft:0": {"heldout": {"balance-a1": 1, "balance-b2": 1, "refuse-c3": 0}, "fixed": {}},
               "sft+grpo:0": {"heldout": {"balance-a1": 0, "balance-b2": 0, "refuse-c3": 1}, "fixed": {}}}
    _grpo_run(results, "sft-grpo-0", [(1, "rollout/equal_after_resample", 2), (2, "rollout/equal_after_resample", 1),
                                      (3, "rollout/equal_after_resample", 2), (1, "rollout/success", 0.0), (2, "rollout/success", 0.5),
                                      (3, "rollout/success", 1.0), (0, "heldout/success", 0.4), (3, "heldout/success", 0.3)])
    text = rl.report(results, _args(seeds=[0], arms=["sft", "sft+grpo"], tasks_per_step=2))
    assert "| balance | 2/2 | 0/2 |" in text and "| refuse | 0/1 | 1/1 |" in text
    assert "| sft+grpo | 0 | 1/3 | 0.50 | 0.40 -> 0.30 |" in text  # only step 2 had a group that was not all-equal


def test_the_cross_user_evaluations_get_their_own_paired_table():
    """UserRL's check: the models trained with one user, evaluated against another; its rows never mix with the
    trained-with user's (the LLM user solves less, which would bias either arm's mean)."""
    rl = _module()
    tasks = [f"i{k}" for k in range(20)]
    results = {}
    for s in (0, 1):
        results[f"sft:{s}"] = {"heldout": {t: int(k < 2) for k, t in enumerate(tasks)}, "fixed": {}}
        results[f"sft+grpo:{s}"] = {"heldout": {t: int(k < 4) for k, t in enumerate(tasks)}, "fixed": {}}
        results[f"sft:{s}@scripted"] = {"heldout": {t: int(k < 10) for k, t in enumerate(tasks)}, "fixed": {}, "eval_cpu_min": 1.0,
                                        "eval_wall_min": 0.5}
        results[f"sft+grpo:{s}@scripted"] = {"heldout": {t: int(k < 8) for k, t in enumerate(tasks)}, "fixed": {}}
    results["cost"] = {f"train:sft:{s}": {"cpu_min": 3.0, "wall_min": 2.0} for s in (0, 1)}
    text = rl.report(results, _args(arms=["sft", "sft+grpo"], user="hf:u", cross_user="scripted"))
    mine, cross = text.split("held-out instances, scripted user", 1)
    assert "| sft | 2 | 0.100 |" in mine and "| (SFT then GRPO) - (SFT only), paired | 2 | +0.100 |" in mine
    assert "| sft | 2 | 0.500 |" in cross and "| (SFT then GRPO) - (SFT only), paired | 2 | -0.100 |" in cross
    # the 20 instances recorded, not --heldout's 40
    assert "| evaluation of one model against the scripted user (20 episodes) | 2 | 1.0 | 0.5 |" in text


def test_the_sft_anchor_gets_its_seeds_cold_start_data_and_grpo_only_is_refused(tmp_path):
    from types import SimpleNamespace

    rl_gain = _module()
    exp = SimpleNamespace(work=tmp_path)
    assert rl_gain.Experiment.sft_data(exp, 2, "sft+grpo") == [f"data={tmp_path}/runs/sft-2/sft.jsonl"]
    assert rl_gain.Experiment.sft_data(exp, 2, "grpo") == []
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl_gain.py"), "--grpo-extra", "grpo.sft_coef=0.1",
                          "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "the grpo arm (GRPO only) has none of" in out.stderr, out.stderr
    assert not (tmp_path / "results.json").exists()


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
                          "--sft-user", "scripted", "--cross-user", "scripted", "--seeds", "0", "--arms", "sft", "sft+grpo", "--no-fixed",
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
    assert user(results["sft+grpo:0@scripted"]["heldout_run"]) == "scripted"  # and the other user's
    assert "held-out instances, scripted user" in out.stdout
    assert user("sft-grpo-0")["model"] == "hf:tiny" and user("sft-0")["kind"] == "scripted"  # train recipes


@pytest.mark.slow  # about 20-40 s quiet: the default run stays under 10 minutes
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


# ---------------------------------------------------------------- --probe


def test_probe_report_screens_trains_and_checks_the_mechanics():
    rl = _module()
    a = _args(seeds=[0, 1], band=[0.1, 0.9], probe_k=4, temperature=1.0, grpo_steps=10)
    results = {"screen:0": {"move": [0, 4], "balance": [2, 4], "refuse": [4, 4]},
               "screen:1": {"move": [1, 4], "balance": [1, 4], "refuse": [4, 4]}}
    assert rl.probe_templates(results, [0, 1], [0.1, 0.9]) == ["balance", "move"]  # move pooled: 1/8
    for s in (0, 1):
        results[f"probe-sft:{s}"] = {"heldout": {f"i{k}": int(k < 4) for k in range(10)}}
        results[f"probe-grpo:{s}"] = {"heldout": {f"i{k}": int(k < 8) for k in range(10)}}
        rising = [(st, "rollout/success", 0.2 + 0.06 * st) for st in range(1, 11)]
        _grpo_run(results, f"probe-{s}", rising + [(st, "rollout/groups_with_signal", 1.0) for st in range(1, 11)])
    text = rl.probe_report(results, a)
    assert "| balance | 2/4 | 1/4 | yes |" in text and "| refuse | 4/4 | 4/4 | no |" in text
    assert "last - first +0.300" in text and "a gain: the interval excludes 0" in text
    assert "paired difference +0.400" in text
    assert "mechanics: ok" in text
    # a run whose groups never had signal and whose reward sits still: the mechanics are broken
    del results["grpo_runs"]["probe-1"]
    _grpo_run(results, "probe-1", [(st, "rollout/success", 0.5) for st in range(1, 11)]
              + [(st, "rollout/groups_with_signal", 0.0) for st in range(1, 11)])
    text = rl.probe_report(results, a)
    assert "mechanics: BROKEN: probe seed 1: no group with signal in 10 steps; probe seed 1: train reward never moved" in text


def test_probe_with_nothing_in_the_band_trains_nothing():
    rl = _module()
    a = _args(seeds=[0], band=[0.1, 0.9], probe_k=2, temperature=1.0)
    text = rl.probe_report({"screen:0": {"move": [0, 2], "refuse": [2, 2]}}, a)
    assert "| move | 0/2 | no |" in text and "no template in the band: nothing was trained" in text


class _ParityPolicy:
    """A fake policy over the real one (tiny): the policy samples every turn as GRPO trains on it (tokens,
    log-probs, env_mask), but what the episode does is fixed by the parity of its first sampled token: even,
    the oracle's replies stand in for its text (the task is solved); odd, its own text (it is not). An untrained
    tiny model solves such a template about half the time, and raising the even first tokens' probability,
    which GRPO's update can do, raises the train reward: a controllable setting for the probe's mechanics,
    since the tiny model cannot solve a real template by itself."""

    @staticmethod
    def wrap(base):
        from muactl.episode.agents.oracle import OracleAgent

        class Parity(base):
            async def act(self, ctx):
                own = await super().act(ctx)
                if "parity" not in ctx.state:
                    ctx.state["parity"] = ctx.trace.ids[ctx.trace.prompt_len] % 2 == 0
                if not ctx.state["parity"]:
                    return own
                ctx.state.setdefault("oracle_agent", OracleAgent())
                return await ctx.state["oracle_agent"].act(ctx)

        return Parity


@pytest.mark.slow
def test_probe_mechanics_hold_on_a_template_the_policy_solves_half_the_time(in_tmp, monkeypatch):
    """GRPO as the probe runs it (template groups, dynamic sampling, curriculum in its default band) with the fake
    parity policy above on `balance`: some group has signal, the train reward is logged at every step and moves;
    the probe's mechanics check and train windows read the run. Breaks if the signal or its logging does."""
    from typer.testing import CliRunner

    import muactl.episode.agents.local as local
    from muactl.cli import app

    rl = _module()
    monkeypatch.setattr(local, "HFAgent", _ParityPolicy.wrap(local.HFAgent))
    r = CliRunner().invoke(app, ["train", "grpo", "domain=bank", "run_id=probe-0", "tasks=template:balance", "db=random",
                                 "grpo.steps=8", "grpo.group_size=4", "grpo.tasks_per_step=1", "grpo.max_turns=8",
                                 "grpo.max_new_tokens=4", "grpo.lr=3e-3", "grpo.save_steps=100"])
    assert r.exit_code == 0, r.output
    runs = rl.grpo_metrics({"grpo_runs": {"probe-0": rl.run_metrics(in_tmp / "runs" / "probe-0")}}, [0], arms=("probe",))
    by = runs[("probe", 0)]
    print({st: round(v, 2) for st, v in sorted(by["rollout/success"].items())})
    assert rl.mechanics(runs) == []
    assert sorted(by["rollout/success"]) == list(range(1, 9))
    assert 0 < sum(by["rollout/success"].values()) / 8 < 1  # solved about half the time, not never or always
    assert "rollout/pass_rate/balance" in by
    first, last = rl.train_windows(by)
    assert len(first) == len(last) == 4


@pytest.mark.slow
def test_probe_runs_end_to_end_on_tiny(tmp_path):
    """--probe on tiny, real parts throughout (SFT, the screening eval, GRPO, held-out evals): the band 0-1 takes
    every template, so GRPO runs, and every part of the report is printed (tiny solves next to nothing, so what
    its mechanics line says is not asserted here: the parity test above checks that the mechanics hold)."""
    args = ["--probe", "--model", "tiny", "--seeds", "0", "--probe-k", "1", "--band", "0", "1", "--heldout", "2",
            "--sft-instances", "4", "--grpo-steps", "2", "--group-size", "2", "--tasks-per-step", "1", "--max-turns", "3",
            "--max-new-tokens", "8", "--grpo-extra", "grpo.draw_rounds=1", "--out", str(tmp_path)]
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl_gain.py"), *args], capture_output=True, text=True,
                         timeout=1500)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "rl_gain --probe: tiny on bank" in out.stdout and "| trained |" in out.stdout
    assert "train success (sampled)" in out.stdout and "held out (2 test-stream instances" in out.stdout
    assert "mechanics: " in out.stdout
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["probe"]["templates"] and "probe-grpo:0" in results and (tmp_path / "probe.md").is_file()
    assert "CPU minutes:" in out.stdout
    # a later sitting with a larger --heldout grows the recorded held-out runs (nothing is trained again)
    runs_before = sorted(p.name for p in (tmp_path / "runs").iterdir())
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "rl_gain.py"), *args[:args.index("--heldout")], "--heldout", "3",
                          *args[args.index("--heldout") + 2:]], capture_output=True, text=True, timeout=1500)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    grown = json.loads((tmp_path / "results.json").read_text())
    assert len(grown["probe-sft:0"]["heldout"]) == len(grown["probe-grpo:0"]["heldout"]) == 3
    assert grown["probe-sft:0"]["heldout_run"] == results["probe-sft:0"]["heldout_run"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == runs_before


def test_probe_trains_on_the_templates_named_when_given():
    """--templates fixes the trained set (an earlier seed's choice), and the report says what the pooled band
    would have chosen instead."""
    rl = _module()
    a = _args(seeds=[0, 1], band=[0.1, 0.9], probe_k=4, temperature=1.0, templates=["refuse", "balance"])
    results = {"screen:0": {"move": [1, 4], "balance": [2, 4], "refuse": [4, 4]},
               "screen:1": {"move": [1, 4], "balance": [1, 4], "refuse": [4, 4]}}
    assert rl.trained_templates(results, a) == ["balance", "refuse"]
    text = rl.probe_report(results, a)
    assert "trained on --templates balance,refuse (the pooled band would choose balance, move)" in text
    assert "| refuse | 4/4 | 4/4 | yes |" in text and "| move | 1/4 | 1/4 | no |" in text


def test_probe_refuses_finished_runs_trained_on_another_template_set(tmp_path):
    """Adding seeds pools more screens, which can move the band: the finished probe runs were trained on the
    old set, so reporting them under the new one would be wrong; the probe stops and says so."""
    rl = _module()
    a = _args(seeds=[0, 1], band=[0.1, 0.9], probe_k=4, temperature=1.0, out=str(tmp_path))
    for seed in (0, 1):
        (tmp_path / "runs" / f"sft-{seed}" / "sft" / "checkpoint-final").mkdir(parents=True)
    results = {"screen:0": {"move": [0, 4], "balance": [2, 4]}, "screen:1": {"move": [0, 4], "balance": [2, 4]},
               "probe": {"templates": ["balance", "move"]}, "probe-sft:0": {"heldout": {"i0": 1}}}
    (tmp_path / "results.json").write_text(json.dumps(results))
    with pytest.raises(SystemExit, match=r"now choose \['balance'\], but the finished probe runs trained on \['balance', 'move'\]"):
        rl.Experiment(a).probe()


def _eval_run(folder: Path, episodes: dict[str, list[str]]) -> None:
    """An eval run's store with the columns results.json is filled from: each task's tool calls, in order, its size."""
    folder.mkdir(parents=True)
    with sqlite3.connect(folder / "runs.sqlite") as db:
        db.execute("CREATE TABLE runs (config TEXT)")
        db.execute("INSERT INTO runs VALUES (?)", (json.dumps({"n": len(episodes)}),))
        db.execute("CREATE TABLE episodes (id INTEGER, task_id TEXT, outcome TEXT, success INTEGER)")
        db.execute("CREATE TABLE messages (episode_id INTEGER, idx INTEGER, role TEXT, name TEXT)")
        for eid, (task, tools) in enumerate(episodes.items()):
            db.execute("INSERT INTO episodes VALUES (?, ?, 'failure', 0)", (eid, task))
            db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?)",
                           [(eid, 0, "user", None)] + [(eid, i + 1, "tool", name) for i, name in enumerate(tools)])


def test_behaviour_table_says_whether_a_model_tells_the_templates_apart(tmp_path):
    """Issue 26: the cold start made the same calls on every template; the table measures that per model. The calls
    come from the eval runs' stores (results.json from before it kept them is filled in from the run folders)."""
    rl = _module()
    reads, writes = ["find_customer", "list_accounts"], ["find_customer", "list_accounts", "transfer"]
    _eval_run(tmp_path / "runs" / "eval-blind", {"balance-a": writes, "balance-b": writes, "move-c": writes, "move-d": writes})
    _eval_run(tmp_path / "runs" / "eval-reads", {"balance-a": reads, "balance-b": reads, "move-c": writes, "move-d": writes})
    _eval_run(tmp_path / rl.REFERENCE / "runs" / "eval-oracle", {"balance-a": reads, "move-c": writes})  # apart from runs/
    (tmp_path / "results.json").write_text(json.dumps({"sft:0": {"heldout": {}, "heldout_run": "eval-blind", "fixed": {}},
                                                       "sft:1": {"heldout": {}, "heldout_run": "eval-reads", "fixed": {}},
                                                       "oracle": {"heldout": {}, "heldout_run": "eval-oracle", "fixed": {}}}))
    results = rl.Experiment(_args(out=str(tmp_path))).results
    assert results["sft:1"]["calls"]["balance-a"] == reads and results["sft:1"]["n"] == 4 and results["oracle"]["n"] == 2
    text = "\n".join(rl.behaviour(results, ["oracle", "sft"], [0, 1]))
    assert "| oracle | 2.0 | 3.0 | 2 | 1.00 |" in text
    assert "| model | balance | move | distinct call sequences | template told apart (MI / H) |" in text
    assert "| sft:0 | 3.0 | 3.0 | 1 | 0.00 |" in text  # the same calls whatever was asked
    assert "| sft:1 | 2.0 | 3.0 | 2 | 1.00 |" in text  # its calls say which template it was
    assert rl.told_apart({"balance": [("a",), ("b",)], "move": [("a",), ("b",)]}) == 0.0


def test_an_out_folder_keeps_one_cold_start(tmp_path):
    """Checkpoints made from 48 oracle conversations must not be reported as a varied cold start's."""
    rl = _module()
    (tmp_path / "results.json").write_text(json.dumps({"cold_start": {"agent": "oracle", "instances": 48, "epochs": 1.0}}))
    (tmp_path / "runs" / "sft-0" / "sft" / "checkpoint-final").mkdir(parents=True)
    assert rl.Experiment(_args(out=str(tmp_path))).sft(0).is_dir()  # the same settings: the checkpoint is reused
    with pytest.raises(SystemExit, match=r"made with .*'oracle', .* not .*'oracle:varied'"):
        rl.Experiment(_args(out=str(tmp_path), sft_agent="oracle:varied")).sft(0)


def test_a_stopped_training_run_is_resumed_and_its_parts_costs_add_up(tmp_path, monkeypatch):
    """A sweep killed mid-SFT or mid-GRPO carries on from that run's checkpoints (`train --resume RUN`) instead of
    starting the run again under the same id; the CPU and wall minutes of each finished part add up."""
    rl = _module()
    exp = rl.Experiment(_args(out=str(tmp_path), max_new_tokens=64, max_turns=10, temperature=1.0, band=[0.1, 0.9],
                              eval_every=0, curve_n=40, grpo_extra=[], grpo_steps=8))
    called = []
    monkeypatch.setattr(rl, "muactl", lambda args, where, log: called.append(args))
    exp.sft(0)
    assert called[-1][:2] == ["train", str(ROOT / "examples" / "quickstart.yaml")] and "run_id=sft-0" in called[-1]
    (tmp_path / "runs" / "sft-0").mkdir(parents=True)
    (tmp_path / "runs" / "sft-0" / "config.yaml").write_text("{}")
    exp.sft(0)
    assert called[-1] == ["train", "--resume", "sft-0"]
    exp.grpo(0, "start", "sft+grpo")
    assert called[-1][:2] == ["train", "grpo"] and "run_id=sft-grpo-0" in called[-1]
    # GRPO keeps checkpoints before its last step, so a cut run goes on from one of them, not from step 1
    save_every = int(next(x for x in called[-1] if x.startswith("grpo.save_steps=")).split("=")[1])
    assert save_every < exp.a.grpo_steps
    (tmp_path / "runs" / "sft-grpo-0").mkdir()
    (tmp_path / "runs" / "sft-grpo-0" / "config.yaml").write_text("{}")
    exp.grpo(0, "start", "sft+grpo")
    assert called[-1] == ["train", "--resume", "sft-grpo-0"]
    cost = json.loads((tmp_path / "results.json").read_text())["cost"]
    assert set(cost) == {"train:sft:0", "train:sft+grpo:0"} and all(c["wall_min"] >= 0 for c in cost.values())
    monkeypatch.setattr(rl, "cpu_minutes", iter([0.0, 1.5, 0.0, 2.0]).__next__)
    exp.results["cost"] = {}
    exp.timed("k", ["x"])
    exp.timed("k", ["x"])
    assert exp.results["cost"]["k"]["cpu_min"] == 3.5


def test_results_json_alone_carries_a_sweep_into_a_new_out_folder(tmp_path, monkeypatch):
    """A later session on a fresh machine has no checkpoints or run folders, only the committed results.json: the
    arms and seeds it holds are reported as they were and not trained or played again; a seed it lacks is trained."""
    rl = _module()
    first, later = tmp_path / "first", tmp_path / "later"
    _eval_run(first / "runs" / "eval-sft", {"balance-a": ["find_customer"], "move-b": ["find_customer", "transfer"]})
    _eval_run(first / rl.REFERENCE / "runs" / "eval-oracle", {"balance-a": ["find_customer"], "move-b": ["transfer"]})
    (first / "runs" / "sft-grpo-0" / "checkpoint-final").mkdir(parents=True)
    with sqlite3.connect(first / "runs" / "sft-grpo-0" / "runs.sqlite") as db:
        db.execute("CREATE TABLE metrics (step INTEGER, name TEXT, value REAL)")
        db.executemany("INSERT INTO metrics VALUES (?, ?, ?)", [(1, "rollout/success", 0.25), (1, "rollout/groups_with_signal", 1.0)])
    (first / "results.json").write_text(json.dumps({
        "oracle": {"heldout": {"balance-a": 1, "move-b": 1}, "heldout_run": "eval-oracle", "fixed": {}},
        "sft:0": {"heldout": {"balance-a": 1, "move-b": 0}, "heldout_run": "eval-sft", "fixed": {}},
        "sft+grpo:0": {"heldout": {"balance-a": 1, "move-b": 1}, "heldout_run": "eval-sft", "fixed": {}}}))
    a = _args(seeds=[0], arms=["sft", "sft+grpo"], heldout=2, max_new_tokens=64, max_turns=10, temperature=1.0, band=[0.1, 0.9],
              eval_every=0, curve_n=40, grpo_extra=[], concurrency=4)
    table = rl.report(rl.Experiment(Namespace(**{**vars(a), "out": str(first)})).results, a)
    assert "| sft+grpo | 0 | 1/1 | 0.25 | - |" in table and "| sft:0 | 1.0 | 2.0 | 2 |" in table
    later.mkdir()
    (later / "results.json").write_text((first / "results.json").read_text())  # the file alone: no runs/, no checkpoints
    called = []

    def muactl(args, where, log):  # what a run would start; none is needed for what the file holds
        called.append(args)
        raise RuntimeError("ran")

    monkeypatch.setattr(rl, "muactl", muactl)
    exp = rl.Experiment(Namespace(**{**vars(a), "out": str(later)}))
    exp.run()
    assert called == [] and rl.report(exp.results, a) == table
    with pytest.raises(RuntimeError, match="ran"):  # a seed it lacks: its SFT is trained
        rl.Experiment(Namespace(**{**vars(a), "out": str(later), "seeds": [0, 1]})).run()
    assert called[-1][:2] == ["train", str(ROOT / "examples" / "quickstart.yaml")] and "run_id=sft-1" in called[-1]
    # SFT then GRPO of seed 0 missing: it would start from seed 0's SFT trained anew, another model than sft:0's
    results = json.loads((later / "results.json").read_text())
    del results["sft+grpo:0"]
    (later / "results.json").write_text(json.dumps(results))
    with pytest.raises(SystemExit, match=r"sft:0 was made from seed 0's SFT checkpoint \(runs/sft-0\), which is not in .*later; "
                                          r"one trained anew would be another model, not paired with it: copy the run folder runs/sft-0"):
        rl.Experiment(Namespace(**{**vars(a), "out": str(later)})).run()
    with pytest.raises(SystemExit, match=r"oracle was evaluated on 2 held-out instances and its eval run is not in .*later; --heldout 3 needs it"):
        rl.Experiment(Namespace(**{**vars(a), "out": str(later), "heldout": 3})).run()


# ---------------------------------------------------------------- what a later sitting may add to results.json


def _sweep_args(out: Path, **kw):
    """The options a sitting that trains and evaluates reads (the stub replaces muactl)."""
    return _args(**{"out": str(out), "max_new_tokens": 64, "max_turns": 10, "temperature": 1.0, "band": [0.1, 0.9], "eval_every": 0,
                    "curve_n": 40, "grpo_extra": [], "concurrency": 4, "probe_k": 4, **kw})


class _NoRun:
    """A muactl stub for a sitting that must start nothing: it records the call and stops the sitting."""

    def __init__(self):
        self.called = []

    def __call__(self, args, where, log):
        self.called.append(args)
        raise RuntimeError("ran")


def _finished_grpo_run(folder: Path, rows) -> None:
    """What a finished GRPO run leaves in its folder: the final checkpoint and the metrics in its store."""
    (folder / "checkpoint-final").mkdir(parents=True)
    with sqlite3.connect(folder / "runs.sqlite") as db:
        db.execute("CREATE TABLE metrics (step INTEGER, name TEXT, value REAL)")
        db.executemany("INSERT INTO metrics VALUES (?, ?, ?)", rows)


def _held(outcomes: dict[str, int], **kw) -> dict:
    """An evaluation as results.json keeps it (no run folder: a fresh machine)."""
    return {"heldout": outcomes, "calls": {t: [] for t in outcomes}, "heldout_run": "gone", "n": len(outcomes), "fixed": {}, **kw}


def test_probe_is_lazy_and_no_key_built_on_an_sft_is_left_unpaired(tmp_path, monkeypatch):
    """A probe whose evaluations are all recorded trains nothing; one whose GRPO evaluation is missing would need
    seed 0's SFT trained anew, which would unpair the screen and the SFT evaluation recorded from the old one."""
    rl = _module()
    stub = _NoRun()
    monkeypatch.setattr(rl, "muactl", stub)
    results = {"screen:0": {"balance": [2, 4], "move": [0, 4]}, "probe": {"templates": ["balance"]},
               "probe-sft:0": _held({"balance-a": 0}), "probe-grpo:0": _held({"balance-a": 1})}
    _grpo_run(results, "probe-0", [(1, "rollout/success", 0.5)])
    (tmp_path / "results.json").write_text(json.dumps(results))
    rl.Experiment(_sweep_args(tmp_path, seeds=[0], heldout=1)).probe()
    assert stub.called == []
    del results["probe-grpo:0"]
    (tmp_path / "results.json").write_text(json.dumps(results))
    with pytest.raises(SystemExit, match=r"probe-sft:0, screen:0 were made from seed 0's SFT checkpoint \(runs/sft-0\), which is not in "
                                         r".*; one trained anew would be another model, not paired with them: copy the run folder "
                                         r"runs/sft-0 into --out, or use a new --out"):
        rl.Experiment(_sweep_args(tmp_path, seeds=[0], heldout=1)).probe()
    assert stub.called == []
    # an evaluation against the --cross-user alone is built on the SFT as well
    (tmp_path / "results.json").write_text(json.dumps({"sft+grpo:1@scripted": _held({"balance-a": 1})}))
    with pytest.raises(SystemExit, match=r"sft\+grpo:1@scripted was made from seed 1's SFT checkpoint"):
        rl.Experiment(_sweep_args(tmp_path)).sft(1)


def test_a_recorded_grpo_evaluation_refuses_its_retraining_and_a_retrained_run_replaces_its_metrics(tmp_path, monkeypatch):
    """Seed 0's GRPO run is gone but its evaluation against the --cross-user is recorded: a new run would be another
    model than the one measured. Seed 1's run left metrics and no evaluation: trained again, its new metrics count."""
    rl = _module()
    stub = _NoRun()
    monkeypatch.setattr(rl, "muactl", stub)
    (tmp_path / "runs" / "sft-0" / "sft" / "checkpoint-final").mkdir(parents=True)
    results = {"sft+grpo:0@scripted": _held({"balance-a": 1})}
    _grpo_run(results, "sft-grpo-1", [(1, "rollout/success", 0.0)])  # a run of seed 1 whose evaluation never came
    (tmp_path / "results.json").write_text(json.dumps(results))
    exp = rl.Experiment(_sweep_args(tmp_path, cross_user="scripted", user="hf:u", arms=["sft+grpo"], seeds=[0]))
    with pytest.raises(SystemExit, match=r"sft\+grpo:0@scripted was made from seed 0's sft\+grpo GRPO checkpoint \(runs/sft-grpo-0\), "
                                         r"which is not in .*: copy the run folder runs/sft-grpo-0 into --out"):
        exp.evaluate_all("sft+grpo:0", partial(exp.grpo_model, 0, exp.sft_model, "sft+grpo"))
    assert stub.called == []
    monkeypatch.setattr(rl, "muactl", lambda args, where, log: _finished_grpo_run(tmp_path / "runs" / "sft-grpo-1",
                                                                                  [(1, "rollout/success", 0.75)]))
    exp.grpo(1, "start", "sft+grpo")
    assert exp.results["grpo_runs"]["sft-grpo-1"] == {"rollout/success": {"1": 0.75}}


def test_a_sitting_with_another_cold_start_is_refused_though_it_trains_nothing(tmp_path, monkeypatch):
    """Every evaluation is recorded, so no SFT is trained; the report must still not put the recorded models under
    another cold start's name: the sitting is refused, and the header prints the recorded cold start."""
    rl = _module()
    stub = _NoRun()
    monkeypatch.setattr(rl, "muactl", stub)
    results = {"cold_start": {"agent": "oracle", "instances": 48, "epochs": 1.0}, "oracle": _held({"balance-a": 1}),
               "sft:0": _held({"balance-a": 0})}
    (tmp_path / "results.json").write_text(json.dumps(results))
    varied = _sweep_args(tmp_path, seeds=[0], arms=["sft"], heldout=1, sft_agent="oracle:varied", sft_instances=96, sft_epochs=3.0)
    rl.Experiment(_sweep_args(tmp_path, seeds=[0], arms=["sft"], heldout=1)).run()
    with pytest.raises(SystemExit, match=r"its SFT checkpoints were made with cold_start .*'oracle', .* not .*'oracle:varied'"):
        rl.Experiment(varied).run()
    assert stub.called == []
    text = rl.report(results, varied)
    assert "SFT on 48 oracle conversations x 1 epochs" in text and "oracle:varied" not in text


def test_grpo_and_evaluation_settings_are_recorded_and_another_sittings_are_refused(tmp_path, monkeypatch):
    rl = _module()
    called = []
    monkeypatch.setattr(rl, "muactl", lambda args, where, log: called.append(args))
    # results.json written before the settings were recorded: it adopts this sitting's, and says so
    (tmp_path / "results.json").write_text(json.dumps({"sft+grpo:0": _held({"balance-a": 1}), "oracle": _held({"balance-a": 1})}))
    exp = rl.Experiment(_sweep_args(tmp_path, arms=["sft+grpo"], heldout=1))
    exp.grpo(1, "start", "sft+grpo")
    assert exp.results["grpo_settings"] == {"steps": 2, "lr": 5e-6, "extra": [], "temperature": 1.0, "band": [0.1, 0.9],
                                            "group_size": 4, "tasks_per_step": 2}
    assert exp.results["eval_settings"] == {"user": "scripted", "eval_seed": 7, "max_turns": 10, "max_new_tokens": 64}
    log = (tmp_path / "log.txt").read_text()
    assert "has no grpo_settings (written before they were recorded) but holds sft+grpo:0" in log
    assert "has no eval_settings (written before they were recorded) but holds oracle, sft+grpo:0" in log
    n = len(called)
    with pytest.raises(SystemExit, match=r"its GRPO runs were trained with grpo_settings .*'lr': 5e-06.*, not .*'lr': 1e-05"):
        rl.Experiment(_sweep_args(tmp_path, arms=["sft+grpo"], heldout=1, grpo_lr=1e-5)).grpo(2, "start", "sft+grpo")
    # an evaluation played with fewer turns is refused before anything new is trained or played
    (tmp_path / "runs" / "sft-1" / "sft" / "checkpoint-final").mkdir(parents=True)
    with pytest.raises(SystemExit, match=r"its evaluations were played with eval_settings .*'max_turns': 10.*, not .*'max_turns': 5"):
        rl.Experiment(_sweep_args(tmp_path, arms=["sft"], seeds=[1], heldout=1, max_turns=5)).run()
    assert len(called) == n


def test_a_record_without_its_size_and_without_its_run_is_used_as_recorded(tmp_path, monkeypatch):
    """Written before results.json kept `n`: 3 instances were played, one episode was excluded, 2 are scored. It
    cannot be grown (no run folder) and it is not short of the --heldout it was played with: it is used as it is."""
    rl = _module()
    stub = _NoRun()
    monkeypatch.setattr(rl, "muactl", stub)
    old = {"heldout": {"balance-a": 1, "move-b": 0}, "heldout_run": "eval-old", "fixed": {}}
    (tmp_path / "results.json").write_text(json.dumps({"oracle": old, "sft:0": old}))
    exp = rl.Experiment(_sweep_args(tmp_path, arms=["sft"], seeds=[0], heldout=3))
    exp.run()
    assert stub.called == [] and exp.results["sft:0"]["heldout"] == old["heldout"]
    assert "sft:0: recorded without the number of instances it was played on" in (tmp_path / "log.txt").read_text()


def test_the_report_reads_the_recorded_size_and_the_instances_every_seed_shares():
    """Seed 1's evaluation scored 3 of its 4 instances (one excluded): its pass^1 is on the 3 both seeds have, and so
    are the per-template and behaviour tables; the header and the cost row give the recorded size, not --heldout."""
    rl = _module()
    results = {"sft:0": _held({"balance-a": 1, "balance-b": 0, "move-c": 1, "move-d": 1}, eval_cpu_min=1.0, eval_wall_min=0.5),
               "sft:1": _held({"balance-a": 1, "balance-b": 1, "move-c": 0}, n=4, eval_cpu_min=1.0, eval_wall_min=0.5),
               "cost": {"train:sft:0": {"cpu_min": 2.0, "wall_min": 1.0}}}
    results["sft:0"]["calls"] = {"balance-a": ["x"], "balance-b": ["x"], "move-c": ["y"], "move-d": ["y", "y", "y"]}
    text = rl.report(results, _args(arms=["sft"], heldout=40, fixed=False))
    assert "held-out 4 template instances (3 scored by every model) on random databases" in text
    assert "| balance | 3/4 |" in text and "| move | 1/2 |" in text
    assert "| sft:0 | 1.0 | 1.0 | 2 | 1.00 |" in text  # move-d, which seed 1 lacks, left out
    assert "| evaluation of one model (4 episodes) | 2 |" in text


def test_probe_template_check_reads_the_kept_grpo_runs_too(tmp_path, monkeypatch):
    """A sitting cut short after a probe GRPO run and before its evaluations leaves only the run's metrics: a later
    sitting whose screens move the band must still be refused."""
    rl = _module()
    monkeypatch.setattr(rl, "muactl", _NoRun())
    results = {"screen:0": {"move": [0, 4], "balance": [2, 4]}, "probe": {"templates": ["balance", "move"]}}
    _grpo_run(results, "probe-0", [(1, "rollout/success", 0.5)])
    (tmp_path / "results.json").write_text(json.dumps(results))
    with pytest.raises(SystemExit, match=r"now choose \['balance'\], but the finished probe runs trained on \['balance', 'move'\]"):
        rl.Experiment(_sweep_args(tmp_path, seeds=[0], heldout=1)).probe()


def test_a_run_folder_without_its_store_is_not_read(tmp_path):
    """A folder left without runs.sqlite (a copy cut short) is no source: reading it would create an empty store."""
    rl = _module()
    (tmp_path / "runs" / "eval-x").mkdir(parents=True)
    (tmp_path / "results.json").write_text(json.dumps({"sft:0": {"heldout": {"a-1": 1}, "heldout_run": "eval-x", "fixed": {}}}))
    results = rl.Experiment(_args(out=str(tmp_path))).results
    assert "calls" not in results["sft:0"] and not (tmp_path / "runs" / "eval-x" / "runs.sqlite").exists()


def test_paired_records_counts_passes_and_writes_per_template_on_the_instances_all_played(tmp_path):
    mod = _benchmark("paired_records")
    a = {"heldout": {"move-1": 1, "move-2": 0, "refuse-overdraft-3": 1, "balance-9": 1},
         "calls": {"move-1": ["find_customer", "transfer_funds"], "move-2": ["transfer_funds"], "refuse-overdraft-3": []}}
    b = {"heldout": {"move-1": 1, "move-2": 1, "refuse-overdraft-3": 0},
         "calls": {"move-1": ["transfer_funds"], "move-2": ["transfer_funds"], "refuse-overdraft-3": ["close_account"]}}
    (tmp_path / "r.json").write_text(json.dumps({"sft:1": a, "sft+grpo:1": b}))
    lines = mod.table([mod.load(f"A={tmp_path / 'r.json'}:sft:1"), mod.load(f"B={tmp_path / 'r.json'}:sft+grpo:1")])
    assert lines[0] == "3 held-out instances every model played"  # balance-9 only A played
    assert "| move | 1/2, 2 | 2/2, 2 |" in lines and "| refuse-overdraft | 1/1, 0 | 0/1, 1 |" in lines
    assert "| all, pass^1 | 0.667 | 0.667 |" in lines
    assert any(line.startswith("B - A, paired over instances: +0.000 [") and line.endswith("2 outcomes changed") for line in lines)


def test_paired_records_pools_pairs_as_groups_and_refuses_a_pair_of_unknown_labels():
    mod = _benchmark("paired_records")
    ids = [f"move-{i}" for i in range(10)]
    models = [("SFT 1", {"heldout": {i: 0 for i in ids}}), ("GRPO 1", {"heldout": {i: int(i < "move-4") for i in ids}}),
              ("SFT 2", {"heldout": {i: 1 for i in ids}}), ("GRPO 2", {"heldout": {i: 1 for i in ids}})]
    line = mod.pooled(models, ["GRPO 1=SFT 1", "GRPO 2=SFT 2"])
    assert line.startswith("pooled over 2 pairs (GRPO 1=SFT 1; GRPO 2=SFT 2): +0.200 [") and line.endswith("on 10 instances")
    low = float(line.split("[")[1].split(",")[0])
    assert low <= 0.0  # one pair gained 0.4 and the other nothing: resampling the pairs reaches 0
    with pytest.raises(SystemExit, match="not a label: SFT 3"):
        mod.pooled(models, ["GRPO 1=SFT 1", "GRPO 2=SFT 3"])
    with pytest.raises(SystemExit, match="two or more"):
        mod.pooled(models, ["GRPO 1=SFT 1"])
    with pytest.raises(SystemExit, match="label to differ"):
        mod.pooled(models + [("SFT 1", {"heldout": {i: 1 for i in ids}})], ["GRPO 1=SFT 1", "GRPO 2=SFT 2"])


def test_train_success_compares_each_runs_first_and_last_steps_and_pools_runs_as_groups(tmp_path):
    mod = _benchmark("train_success")
    rising = {"rollout/success": {str(s): 0.2 if s <= 6 else 0.6 for s in range(1, 13)},
              "rollout/pass_rate/move": {"1": 0.0, "4": 0.25, "9": 0.5, "12": 1.0}}
    flat = {"rollout/success": {str(s): 0.4 for s in range(1, 9)}, "rollout/pass_rate/close": {"2": 0.5}}
    (tmp_path / "r.json").write_text(json.dumps({"grpo_runs": {"sft-grpo-1": rising, "sft-grpo-2": flat}}))
    runs = [mod.load(f"up={tmp_path / 'r.json'}:sft-grpo-1"), mod.load(f"flat={tmp_path / 'r.json'}:sft-grpo-2")]
    lines = mod.table(runs, 5)
    # a template logged on 4 steps: windows of 2; one logged once: no windows
    assert "| up | 12 | 0.20 -> 0.60 | - | 0.12 -> 0.75 |" in lines
    assert "| flat | 8 | 0.40 -> 0.40 | - | - |" in lines  # 8 steps: windows of 4
    line = mod.pooled(runs, 5)
    assert line.startswith("success, last - first, pooled over 2 runs: +0.200 [")
    assert float(line.split("[")[1].split(",")[0]) <= 0.0  # one run rose by 0.4, the other not at all
    with pytest.raises(SystemExit, match="no GRPO run 'grpo-1' \\(it has: sft-grpo-1, sft-grpo-2\\)"):
        mod.load(f"x={tmp_path / 'r.json'}:grpo-1")
    with pytest.raises(SystemExit, match="LABEL=FILE:RUN"):
        mod.load(str(tmp_path / "r.json"))


def test_train_success_refuses_runs_that_share_a_label_and_a_file_that_is_not_json(tmp_path):
    runs = tmp_path / "r.json"
    runs.write_text(json.dumps({"grpo_runs": {"sft-grpo-1": {"rollout/success": {"1": 0.5, "2": 0.5}}}}))
    script = str(ROOT / "benchmarks" / "train_success.py")
    shared = subprocess.run([sys.executable, script, f"a={runs}:sft-grpo-1", f"a={runs}:sft-grpo-1"],
                            capture_output=True, text=True)
    assert shared.returncode == 2 and "every run needs its own label" in shared.stderr and not shared.stdout
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(SystemExit, match="bad.json: not an rl_gain results file"):
        _benchmark("train_success").load(f"x={tmp_path / 'bad.json'}:sft-grpo-1")
