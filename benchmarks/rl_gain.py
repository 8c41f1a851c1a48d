"""Does the RL phase help? MUA-RL's ordering measured on this machine: base, SFT only, SFT then GRPO, GRPO
only, over several seeds, on held-out task instances. Prints a table with 95% bootstrap intervals and
writes a learning-curve PNG; asserts nothing.

Setting (the RL-evidence issue): bank, the scripted user (or --user for an LLM user in the loop), the
model from --model. Training draws template instances on random databases from the train seed stream
(SFT data: the oracle, or --sft-agent oracle:varied, on --sft-instances of them, --sft-epochs; GRPO: a fresh
instance per group). Held out: --heldout
instances of the same templates on random databases from the test stream (disjoint by construction, the
same instances for every arm and seed, so arms are paired) and the 20 fixed test tasks; greedy.

Every training seed gets its own SFT run, GRPO continues that seed's SFT checkpoint, and GRPO only starts
from the base model. The base model is evaluated once (greedy decoding and the scripted user are
deterministic). Finished pieces are kept in --out, so a rerun continues where it stopped; a rerun with a
larger --heldout grows each model's held-out eval run in place and plays only the new instances.

results.json in --out is all the tables read: each evaluation's outcome and tool calls per instance and each GRPO
run's metrics, beside the run folders. Copied into a new --out (a fresh machine, a later session), it carries a
sweep on: the arms and seeds it holds are reported and not run again (no checkpoint needed), and the ones it lacks
are trained and added. benchmarks/results/ keeps the sweeps the README reports, in that form. It also keeps the settings
the sweep was made with (cold_start, grpo_settings, eval_settings): a later sitting with other ones is refused, since its
models would be reported as the same arm; so is training anew a model that a recorded evaluation was made from.

Statistics: pass^1 per arm with a 95% interval from a two-level bootstrap (seeds, then held-out
instances, resampled with replacement); the paired difference (SFT then GRPO) - (SFT only) bootstrapped
the same way; CPU minutes per arm and seed (training and evaluation, children's user+system time). What each
model does: tool calls per held-out episode per template, and how much its sequence of calls tells the templates
apart (mutual information over the template's entropy; the oracle on the same instances as the reference).

    .venv/bin/python benchmarks/rl_gain.py                                   # 3 seeds, 200 held out
    .venv/bin/python benchmarks/rl_gain.py --seeds 0 --heldout 60 --grpo-steps 6     # a pilot
    .venv/bin/python benchmarks/rl_gain.py --user hf:smollm2-135m           # an LLM user in the loop
    .venv/bin/python benchmarks/rl_gain.py --user hf:smollm2-135m --sft-user scripted   # ... after a scripted cold start
    .venv/bin/python benchmarks/rl_gain.py --probe --heldout 100 --grpo-steps 20   # is the signal learnable at all?
    .venv/bin/python benchmarks/rl_gain.py --arms sft --no-fixed --sft-agent oracle:varied --sft-instances 96 --out out/cold  # a cold start

--probe (learnability): each seed's SFT checkpoint plays --probe-k sampled episodes per template (train stream, at
--temperature); the templates whose pooled pass rate is in --band are trained on with GRPO (--grpo-steps, each
seed from its SFT); printed: the screening table, train success over the first 5 steps against the last 5 (paired
over seeds and the place in the window, bootstrapped), the paired held-out difference (SFT then GRPO - SFT only)
on --heldout test-stream instances of those templates, and a mechanics line (some group with signal, train reward
logged at every step and moving) that says BROKEN when one of them fails.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from muactl.runs.stats import bootstrap, paired, verdict  # noqa: E402  (the same intervals as the before/after table)

ARMS = ("base", "sft", "sft+grpo", "grpo")
TEST_TASKS = "test"  # the domain's fixed test split, reported beside the held-out instances
REFERENCE = "reference"  # --out's folder for the oracle's eval runs, apart from the models' runs/
# a GRPO run cut off (a sitting's end) resumes from its last checkpoint, not from step 1; two kept (save_total_limit)
GRPO_SAVE_EVERY = 2


def cpu_minutes() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r.ru_utime + r.ru_stime) / 60


def muactl(args: list[str], work: Path, log) -> str:
    log("$ muactl " + " ".join(args))
    env = dict(os.environ, MUACTL_NO_PROGRESS="1", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "muactl", *args], cwd=work, env=env, capture_output=True, text=True)
    if out.returncode not in (0, 1):  # eval exits 1 when nothing could be scored: that is a figure, not a crash
        raise SystemExit(f"muactl {' '.join(args)} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return out.stdout


def run_folder(stdout: str, work: Path) -> Path:
    m = re.search(r"(?:run|results): (runs/[^/\s]+)/", stdout)
    if not m:
        raise SystemExit(f"no run folder in muactl's output:\n{stdout[-2000:]}")
    return work / m.group(1)


# the episodes an eval run scored: infra and user errors are excluded (NULL: a store from before outcomes were kept)
SCORED = "(e.outcome IN ('success', 'failure') OR e.outcome IS NULL)"


def successes(run: Path) -> dict[str, int]:
    """task id -> 1/0 for every scored episode of an eval run (infra and user errors are not scored)."""
    with sqlite3.connect(run / "runs.sqlite") as db:
        rows = db.execute(f"SELECT e.task_id, e.success FROM episodes e WHERE {SCORED}").fetchall()
    return {t: int(s) for t, s in rows}


def tool_sequences(run: Path) -> dict[str, tuple[str, ...]]:
    """task id -> the tools its scored episode called, in order: what a model does, beside whether it passed."""
    with sqlite3.connect(run / "runs.sqlite") as db:
        rows = db.execute("SELECT e.task_id, m.name FROM episodes e LEFT JOIN messages m ON m.episode_id = e.id AND m.role = 'tool' "
                          f"WHERE {SCORED} ORDER BY e.id, m.idx").fetchall()
    seqs: dict[str, list[str]] = {}
    for task, name in rows:
        seqs.setdefault(task, [])
        if name:
            seqs[task].append(name)
    return {t: tuple(v) for t, v in seqs.items()}


def run_config(run: Path) -> dict:
    with sqlite3.connect(run / "runs.sqlite") as db:
        return json.loads(db.execute("SELECT config FROM runs").fetchone()[0])


def run_metrics(run: Path) -> dict[str, dict[str, float]]:
    """A training run's metrics: name -> step (as text, as JSON keeps it) -> value."""
    by: dict[str, dict[str, float]] = {}
    with sqlite3.connect(run / "runs.sqlite") as con:
        for step, name, value in con.execute("SELECT step, name, value FROM metrics ORDER BY step"):
            by.setdefault(name, {})[str(step)] = value
    return by


def eval_record(run: Path) -> dict:
    """What results.json keeps of an eval run: per-instance success, the tools each episode called, its size."""
    return {"heldout": successes(run), "calls": {t: list(seq) for t, seq in tool_sequences(run).items()},
            "heldout_run": run.name, "n": run_config(run)["n"]}


GRPO_RUN = re.compile(r"(sft-grpo|grpo|probe)-\d+")  # the GRPO run folders this benchmark makes (arm-seed)
# results' keys (before ':<seed>') of the evaluations made from seed S's SFT checkpoint, directly or through GRPO
SFT_BUILT = ("sft", "sft+grpo", "screen", "probe-sft", "probe-grpo")
# results' key (before ':<seed>') of the evaluations of each GRPO arm's checkpoint
GRPO_EVALUATED = {"sft+grpo": "sft+grpo", "grpo": "grpo", "probe": "probe-grpo"}


def run_name(arm: str, seed: int) -> str:
    """The training run that makes an arm's model of a seed (sft, sft+grpo, grpo, probe)."""
    return f"{arm.replace('+', '-')}-{seed}"


def checkpoint(work: Path, arm: str, seed: int) -> Path:
    """Where an arm's model of a seed lives in --out: SFT inside its recipe's stage folder, a GRPO arm in its run's."""
    run = work / "runs" / run_name(arm, seed)
    return (run / "sft" if arm == "sft" else run) / "checkpoint-final"


def template_of(instance: str) -> str:
    return instance.rsplit("-", 1)[0]  # template instances are named <template>-<hash>


def played_on(r: dict) -> int:
    """How many held-out instances an evaluation was played on: its recorded `n`, or, in a record written before `n`
    was kept, the instances it scored (fewer where episodes were excluded)."""
    return r.get("n", len(r["heldout"]))


def kept_store(run: Path) -> bool:
    """Whether a run folder still has its store (sqlite3.connect on a missing one would create it empty)."""
    return (run / "runs.sqlite").is_file()


def not_paired(results_path: Path, keys: list[str], checkpoint: str, run_id: str, work: Path) -> SystemExit:
    """The refusal to train anew a checkpoint that recorded evaluations were made from: the new one would be another
    model, and the arms built on it would no longer be paired with those evaluations."""
    one = len(keys) == 1
    return SystemExit(f"{results_path}: {', '.join(keys)} {'was' if one else 'were'} made from {checkpoint} (runs/{run_id}), "
                      f"which is not in {work}; one trained anew would be another model, not paired with {'it' if one else 'them'}: "
                      f"copy the run folder runs/{run_id} into --out, or use a new --out")


class Experiment:
    def __init__(self, a):
        self.a = a
        self.work = Path(a.out).resolve()
        self.work.mkdir(parents=True, exist_ok=True)
        self.results_path = self.work / "results.json"
        self.results = json.loads(self.results_path.read_text()) if self.results_path.exists() else {}
        self.logf = open(self.work / "log.txt", "a")
        self.record_run_folders()

    def record_run_folders(self) -> None:
        """results.json written before it kept the tool calls and the GRPO metrics: take them from the run folders
        still in --out, so that the file alone carries the sweep from now on."""
        for key, r in self.results.items():
            if isinstance(r, dict) and "calls" not in r and self.eval_run_kept(key, r):
                r.update({k: v for k, v in eval_record(self.eval_run(key, r)).items() if k != "heldout"})
        for run in sorted((self.work / "runs").glob("*/runs.sqlite")):
            if GRPO_RUN.fullmatch(run.parent.name) and (run.parent / "checkpoint-final").is_dir():
                self.results.setdefault("grpo_runs", {}).setdefault(run.parent.name, run_metrics(run.parent))
        self.save()

    def eval_run(self, key: str, r: dict) -> Path:
        return self.work / (REFERENCE if key == "oracle" else ".") / "runs" / r["heldout_run"]

    def eval_run_kept(self, key: str, r: dict) -> bool:
        """Whether a recorded evaluation's run folder is in --out with its store (a fresh machine has neither)."""
        return bool(r.get("heldout_run")) and kept_store(self.eval_run(key, r))

    def recorded_on(self, seed: int, arms) -> list[str]:
        """The recorded evaluations of these arms (results' key before ':<seed>') and seed, against any user."""
        return sorted(k for k in self.results for arm in arms if k == f"{arm}:{seed}" or k.startswith(f"{arm}:{seed}@"))

    def log(self, msg: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {msg}"
        print(line, flush=True)
        self.logf.write(line + "\n")
        self.logf.flush()

    def save(self) -> None:
        self.results_path.write_text(json.dumps(self.results, indent=1, sort_keys=True))

    # ------------------------------------------------------------ recipe

    def common(self, user: str | None = None) -> list[str]:
        a = self.a
        user = user or a.user
        return ["domain=bank", f"model.max_new_tokens={a.max_new_tokens}", f"user={'scripted' if user == 'scripted' else 'litellm'}",
                *([] if user == "scripted" else [f"user.model={user}"])]

    def sft(self, seed: int) -> Path:
        a = self.a
        self.same_cold_start()
        run_id, ckpt = run_name("sft", seed), checkpoint(self.work, "sft", seed)
        made_from = self.recorded_on(seed, SFT_BUILT)
        if not ckpt.is_dir() and made_from:
            # results.json carried into a new --out: SFT trained again is another model than the one these came from
            raise not_paired(self.results_path, made_from, f"seed {seed}'s SFT checkpoint", run_id, self.work)
        if not ckpt.is_dir():
            self.timed(f"train:sft:{seed}", self.resumed_or(run_id, [
                "train", str(ROOT / "examples" / "quickstart.yaml"), f"run_id={run_id}", f"seed={seed}",
                "stages=[synth,sft]", f"model={a.model}", *self.common(a.sft_user), "synth.tasks=template:all",
                f"synth.n={a.sft_instances}", "synth.db=random", f"synth.agent={a.sft_agent}", f"sft.epochs={a.sft_epochs:g}"]))
        return ckpt

    def same_cold_start(self, making: bool = True) -> None:
        """The SFT settings an --out's checkpoints were made with; other settings in the same --out would compare
        models from two cold starts as one arm. `making`: an SFT checkpoint is about to be used or made (else only
        checked, so that an --out of the base arm alone does not keep a cold start it never made)."""
        a = self.a
        made = [k for k in self.results if k.split(":")[0] in SFT_BUILT]
        self.same_settings("cold_start", {"agent": a.sft_agent, "instances": a.sft_instances, "epochs": a.sft_epochs},
                           "its SFT checkpoints were made", made, making)

    def same_grpo_settings(self) -> None:
        """The GRPO settings an --out's GRPO runs were trained with; a run trained with others would be reported in
        the same arm as theirs."""
        a = self.a
        asked = {"steps": a.grpo_steps, "lr": a.grpo_lr, "extra": list(a.grpo_extra), "temperature": a.temperature,
                 "band": list(a.band), "group_size": a.group_size, "tasks_per_step": a.tasks_per_step}
        made = [k for k in self.results if k.split(":")[0] in GRPO_EVALUATED.values()] + sorted(self.results.get("grpo_runs", {}))
        self.same_settings("grpo_settings", asked, "its GRPO runs were trained", made)

    def same_eval_settings(self) -> None:
        """The settings an --out's evaluations were played with (GRPO plays with the same user, turns and tokens);
        an evaluation played with others would be paired with theirs as if it were comparable."""
        a = self.a
        asked = {"user": a.user, "eval_seed": a.eval_seed, "max_turns": a.max_turns, "max_new_tokens": a.max_new_tokens}
        made = [k for k, v in self.results.items() if k.startswith("screen:") or isinstance(v, dict) and "heldout" in v]
        self.same_settings("eval_settings", asked, "its evaluations were played", made)

    def same_settings(self, name: str, asked: dict, made: str, recorded: list[str], making: bool = True) -> None:
        """results[name] is the settings this --out's pieces were made with: recorded the first time one is made
        (`making`), a later sitting asking for others is refused. `recorded`: what results.json already holds that
        was made with them."""
        kept = self.results.get(name)
        if kept is None and (recorded or making):
            if recorded:  # the file's writer did not record these settings yet; the sweep is taken to have used these
                self.log(f"{self.results_path} has no {name} (written before they were recorded) but holds {', '.join(sorted(recorded))}: "
                         f"taking this sitting's {asked} as the ones they were made with")
            self.results[name] = asked
            self.save()
        elif kept is not None and kept != asked:
            raise SystemExit(f"{self.results_path}: {made} with {name} {kept}, not {asked}; use a new --out")

    def may_train_grpo(self, seed: int, arm: str) -> None:
        """Refuse to train arm's GRPO run of seed when an evaluation of its checkpoint is recorded (the new run would
        be another model) or when the settings differ from the recorded ones."""
        made_from = self.recorded_on(seed, (GRPO_EVALUATED[arm],))
        if made_from:
            raise not_paired(self.results_path, made_from, f"seed {seed}'s {arm} GRPO checkpoint", run_name(arm, seed),
                             self.work)
        self.same_grpo_settings()
        self.same_eval_settings()

    def grpo(self, seed: int, start: str, arm: str, tasks: str = "template:all") -> Path:
        a = self.a
        run_id, done = run_name(arm, seed), checkpoint(self.work, arm, seed)
        trained = not done.is_dir()
        if trained:
            self.may_train_grpo(seed, arm)
            curve = [f"grpo.eval_every={a.eval_every}", f"grpo.eval_tasks={tasks}", f"grpo.eval_n={a.curve_n}"] if a.eval_every else []
            self.timed(f"train:{arm}:{seed}", self.resumed_or(run_id, [
                "train", "grpo", f"model={start}", f"run_id={run_id}", f"seed={seed}", *self.common(),
                f"tasks={tasks}", "db=random", f"grpo.steps={a.grpo_steps}", f"grpo.group_size={a.group_size}",
                f"grpo.tasks_per_step={a.tasks_per_step}", f"grpo.lr={a.grpo_lr}", f"grpo.max_turns={a.max_turns}",
                f"grpo.max_new_tokens={a.max_new_tokens}", f"grpo.save_steps={GRPO_SAVE_EVERY}", f"grpo.temperature={a.temperature}",
                f"grpo.band_low={a.band[0]}", f"grpo.band_high={a.band[1]}", *curve, *self.sft_data(seed, arm), *a.grpo_extra]))
        # a run trained now replaces whatever an earlier run of that id left in results.json
        if done.is_dir() and kept_store(done.parent) and (trained or run_id not in self.results.get("grpo_runs", {})):
            self.results.setdefault("grpo_runs", {})[run_id] = run_metrics(done.parent)
            self.save()
        return done

    def sft_data(self, seed: int, arm: str) -> list[str]:
        """For an arm that starts from SFT: its cold start's data, which the SFT anchor reads (grpo.sft_coef in
        --grpo-extra); GRPO without the anchor ignores it."""
        if arm == "grpo":
            return []
        return [f"data={self.work / 'runs' / run_name('sft', seed) / 'sft.jsonl'}"]

    def evaluate(self, key: str, model, user: str | None = None) -> None:
        """Held-out instances and the fixed test tasks, greedy; per-task successes into results[key]. Against another
        user than the trained-with one (--cross-user), the held-out instances only, into results['<key>@<user>'].
        `model()` gives the checkpoint, trained only when an evaluation needs it."""
        a = self.a
        if user is not None:
            key = f"{key}@{user}"
        if key in self.results:
            return self.grow(key)
        self.same_eval_settings()  # before model(): a refused evaluation trains nothing
        agent = f"hf:{model()}"
        common = ["eval", "bank", f"--agent={agent}", *self.user_flag(user), f"--max-turns={a.max_turns}",
                  f"--max-new-tokens={a.max_new_tokens}", f"--concurrency={a.concurrency}"]
        t0, c0 = time.time(), cpu_minutes()
        held = run_folder(muactl([*common, "--tasks=template:all", f"--n={a.heldout}", "--db=random", "--split=test",
                                  f"--seed={a.eval_seed}"], self.work, self.log), self.work)
        fixed = run_folder(muactl([*common, f"--split={TEST_TASKS}"], self.work, self.log), self.work) if a.fixed and user is None else None
        self.results[key] = {**eval_record(held), "fixed": successes(fixed) if fixed else {}, "eval_cpu_min": cpu_minutes() - c0,
                             "eval_wall_min": (time.time() - t0) / 60}
        self.save()
        self.logged(key)

    def grow(self, key: str) -> None:
        """A finished evaluation with fewer held-out instances than --heldout gets the missing ones: its eval
        run grows in place (`muactl eval --resume RUN --n N`), so the instances it has are not played again."""
        a, r = self.a, self.results[key]
        if not self.needs_growth(key, r):
            return
        self.same_eval_settings()
        run = r["heldout_run"]
        t0, c0 = time.time(), cpu_minutes()
        muactl(["eval", "--resume", run, f"--n={a.heldout}", f"--concurrency={a.concurrency}"], self.work, self.log)
        r.update(eval_record(self.work / "runs" / run))
        # one model's evaluation, first part and growth together (results from before the probe recorded it: growth only)
        r["eval_cpu_min"] = r.get("eval_cpu_min", 0.0) + cpu_minutes() - c0
        r["eval_wall_min"] = r.get("eval_wall_min", 0.0) + (time.time() - t0) / 60
        self.save()
        self.logged(key)

    def needs_growth(self, key: str, r: dict) -> bool:
        """Whether a recorded evaluation has fewer held-out instances than --heldout (its size `n` counts the
        excluded episodes, which are not scored); growing it plays the new instances in its run folder."""
        if played_on(r) >= self.a.heldout:
            return False
        if "n" not in r and not self.eval_run_kept(key, r):
            # recorded before results.json kept the size: the scored instances can be fewer than it was played on
            # (excluded episodes), so their count says nothing about a shortfall; the pass^1 tables use what is shared
            self.log(f"{key}: recorded without the number of instances it was played on and its eval run is not in {self.work}: "
                     f"its size is unknown, the {len(r['heldout'])} recorded instances are used")
            return False
        if not self.eval_run_kept(key, r):
            raise SystemExit(f"{self.results_path}: {key} was evaluated on {played_on(r)} held-out instances and "
                             f"its eval run is not in {self.work}; --heldout {self.a.heldout} needs it (or a new --out)")
        return True

    def logged(self, key: str) -> None:
        r = self.results[key]
        fixed = f", fixed test {mean(r['fixed'].values()):.3f}" if r["fixed"] else ""
        self.log(f"{key}: held-out pass^1 {mean(r['heldout'].values()):.3f} ({len(r['heldout'])} instances){fixed}")

    def resumed_or(self, run_id: str, args: list[str]) -> list[str]:
        """`args`, or `train --resume RUN` where an earlier part of this benchmark started that run and was stopped
        (it goes on from its last checkpoint, with the settings it was started with)."""
        return ["train", "--resume", run_id] if (self.work / "runs" / run_id / "config.yaml").is_file() else args

    def timed(self, key: str, args: list[str]) -> None:
        """Run muactl; its cost is added to key's (a resumed part adds to the parts before it that finished)."""
        t0, c0 = time.time(), cpu_minutes()
        muactl(args, self.work, self.log)
        cost = self.results.setdefault("cost", {}).setdefault(key, {"cpu_min": 0.0, "wall_min": 0.0})
        cost["cpu_min"] += cpu_minutes() - c0
        cost["wall_min"] += (time.time() - t0) / 60
        self.save()

    def oracle_reference(self) -> None:
        """The oracle on the same held-out instances (seconds: no model), the behaviour table's reference; its
        eval run lives apart from the models' (--out/reference/runs/) and grows with --heldout as theirs do."""
        a, where = self.a, self.work / REFERENCE
        where.mkdir(exist_ok=True)
        kept = self.results.get("oracle")
        if kept is None:
            self.same_eval_settings()
            run = run_folder(muactl(["eval", "bank", "--agent=oracle", *self.user_flag(), "--tasks=template:all", f"--n={a.heldout}",
                                     "--db=random", "--split=test", f"--seed={a.eval_seed}", f"--max-turns={a.max_turns}"],
                                    where, self.log), where)
        elif self.needs_growth("oracle", kept):
            self.same_eval_settings()
            run = self.eval_run("oracle", kept)
            muactl(["eval", "--resume", run.name, f"--n={a.heldout}"], where, self.log)
        else:
            return
        self.results["oracle"] = {**eval_record(run), "fixed": {}}
        self.save()

    def run(self) -> None:
        a = self.a
        # here, not only when an SFT is trained: the finished seeds' models are reported under these settings
        self.same_cold_start(making=False)
        self.oracle_reference()
        if "base" in a.arms:
            self.evaluate_all("base", lambda: a.model)
        for seed in a.seeds:  # each model is trained only when one of its evaluations is missing from results.json
            if "sft" in a.arms:
                self.evaluate_all(f"sft:{seed}", partial(self.sft_model, seed))
            if "sft+grpo" in a.arms:
                self.evaluate_all(f"sft+grpo:{seed}", partial(self.grpo_model, seed, partial(self.sft_model, seed), "sft+grpo"))
            if "grpo" in a.arms:
                self.evaluate_all(f"grpo:{seed}", partial(self.grpo_model, seed, lambda: a.model, "grpo"))

    def sft_model(self, seed: int) -> str:
        return str(self.sft(seed))

    def grpo_model(self, seed: int, start, arm: str, tasks: str = "template:all") -> str:
        """The GRPO checkpoint of arm and seed, trained (from `start()`) if it is not in --out yet."""
        done = checkpoint(self.work, arm, seed)
        if done.is_dir():
            return str(done)
        self.may_train_grpo(seed, arm)  # before start(): a refused GRPO run trains no SFT for it
        return str(self.grpo(seed, start(), arm, tasks))

    def evaluate_all(self, key: str, model) -> None:
        """Against the user it trained with, then (UserRL's check that the gain is not the user's quirks) the other one."""
        self.evaluate(key, model)
        if self.a.cross_user:
            self.evaluate(key, model, user=self.a.cross_user)

    # ------------------------------------------------------------ --probe: is the signal learnable?

    def probe(self) -> None:
        """Screen each template's sampled pass rate after SFT, keep the ones in the band, GRPO on them, and
        evaluate SFT and SFT then GRPO on test-stream instances of those templates (greedy)."""
        a = self.a
        self.same_cold_start(making=False)
        for seed in a.seeds:  # each model is trained only when one of its evaluations is missing from results.json
            self.screen(seed, partial(self.sft_model, seed))
        chosen = trained_templates(self.results, a)
        kept = self.results.get("probe", {}).get("templates")
        # a GRPO run's metrics are kept even when its evaluations are not (a sitting cut short after the training)
        finished = [k for k in self.results if k.startswith("probe-")]
        finished += [run for run in self.results.get("grpo_runs", {}) if run.startswith("probe-")]
        if kept is not None and kept != chosen and finished:
            # more seeds' screens moved the pooled band: the finished GRPO runs trained on another template set
            raise SystemExit(f"{self.results_path}: the screens now choose {chosen}, but the finished probe runs "
                             f"trained on {kept}; use a new --out (or the seeds they were chosen with)")
        self.results.setdefault("probe", {})["templates"] = chosen
        self.save()
        if not chosen:
            self.log(f"probe: no template's sampled pass rate is in [{a.band[0]}, {a.band[1]}]: nothing to train on")
            return
        spec = "template:" + ",".join(chosen)
        # every missing GRPO run first: the train windows are read from the runs' metrics alone, so a sitting cut short
        # during the evaluations still has them; then the held-out evaluations, which a later --heldout N grows
        for seed in a.seeds:
            if f"probe-grpo:{seed}" not in self.results:
                self.grpo_model(seed, partial(self.sft_model, seed), "probe", spec)
        for seed in a.seeds:
            self.probe_eval(f"probe-sft:{seed}", partial(self.sft_model, seed), spec)
            self.probe_eval(f"probe-grpo:{seed}", partial(self.grpo_model, seed, partial(self.sft_model, seed), "probe", spec), spec)

    def screen(self, seed: int, model) -> None:
        """--probe-k sampled episodes per template (train stream, at GRPO's temperature): results['screen:<seed>']
        is template -> [successes, episodes]. `model()` gives the SFT checkpoint, trained only when the screen is missing."""
        a, key = self.a, f"screen:{seed}"
        if key in self.results:
            return
        self.same_eval_settings()
        templates = template_ids()
        run = run_folder(muactl(["eval", "bank", f"--agent=hf:{model()}", *self.user_flag(), "--tasks=template:all",
                                 f"--n={a.probe_k * len(templates)}", "--db=random", "--split=train", f"--seed={a.eval_seed + seed}",
                                 f"--temperature={a.temperature}", f"--max-turns={a.max_turns}", f"--max-new-tokens={a.max_new_tokens}",
                                 f"--concurrency={a.concurrency}"], self.work, self.log), self.work)
        counts: dict[str, list[int]] = {}
        for inst, ok in successes(run).items():
            c = counts.setdefault(template_of(inst), [0, 0])
            c[0], c[1] = c[0] + ok, c[1] + 1
        self.results[key] = counts
        self.save()
        self.log(f"screen (seed {seed}): " + ", ".join(f"{t} {k}/{n}" for t, (k, n) in sorted(counts.items())))

    def probe_eval(self, key: str, model, spec: str) -> None:
        """Held-out test-stream instances of the trained templates, greedy; `model()` gives the checkpoint."""
        a = self.a
        if key in self.results:
            return self.grow(key)
        self.same_eval_settings()
        agent = f"hf:{model()}"
        t0, c0 = time.time(), cpu_minutes()
        run = run_folder(muactl(["eval", "bank", f"--agent={agent}", *self.user_flag(), f"--tasks={spec}", f"--n={a.heldout}",
                                 "--db=random", "--split=test", f"--seed={a.eval_seed}", f"--max-turns={a.max_turns}",
                                 f"--max-new-tokens={a.max_new_tokens}", f"--concurrency={a.concurrency}"], self.work, self.log), self.work)
        self.results[key] = {**eval_record(run), "fixed": {}, "eval_cpu_min": cpu_minutes() - c0,
                             "eval_wall_min": (time.time() - t0) / 60}
        self.save()
        self.logged(key)

    def user_flag(self, user: str | None = None) -> list[str]:
        user = user or self.a.user
        return [] if user == "scripted" else [f"--user={user}"]


# ---------------------------------------------------------------- statistics


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def arm_keys(arm: str, seeds) -> list[str]:
    """results' keys of an arm: one per seed, except the models that are evaluated once (base, the oracle)."""
    return [arm] if arm in ("base", "oracle") else [f"{arm}:{s}" for s in seeds]


def arm_table(results: dict, arms, seeds, part: str, user: str | None = None) -> dict[str, dict[str, dict[str, float]]]:
    """arm -> seed -> instance -> success, for the arms and seeds that finished (base: one 'seed'); with `user`, the
    evaluations against that (--cross-user) user."""
    out = {}
    for arm in arms:
        keys = [f"{k}@{user}" if user else k for k in arm_keys(arm, seeds)]
        got = {k: {t: float(v) for t, v in results[k][part].items()} for k in keys if k in results and results[k][part]}
        if got:
            out[arm] = got
    return out


def shared(per: dict[str, dict]) -> set[str]:
    """The instances every one of these evaluations (one arm's seeds) has: what its pass^1 is computed on."""
    return set.intersection(*(set(v) for v in per.values())) if per else set()


def sizes(records: list[dict]) -> str:
    """The held-out size these evaluations were played on, as recorded (`n`, or the scored instances where a record
    predates it): a record can be smaller than --heldout asks (one that could not grow)."""
    ns = sorted({played_on(r) for r in records})
    return f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"


def heldout_size(records: list[dict]) -> str:
    """sizes() in words, and how many instances every one of the evaluations scored where fewer (excluded episodes)."""
    common = len(shared({str(i): r["heldout"] for i, r in enumerate(records)}))
    least = min(played_on(r) for r in records)
    return f"{sizes(records)} template instances" + (f" ({common} scored by every model)" if common < least else "")


def report(results: dict, a) -> str:
    """The tables, from results.json alone. The header gives the settings results.json recorded (the models were
    made with those, whatever this sitting's options), and falls back to the options where it has none."""
    cs = results.get("cold_start", {"agent": a.sft_agent, "instances": a.sft_instances, "epochs": a.sft_epochs})
    gs = results.get("grpo_settings", {"steps": a.grpo_steps, "tasks_per_step": a.tasks_per_step, "group_size": a.group_size,
                                       "lr": a.grpo_lr})
    es = results.get("eval_settings", {"user": a.user, "eval_seed": a.eval_seed})
    sft_user = f" (SFT data: {a.sft_user} user)" if a.sft_user and a.sft_user != es["user"] else ""
    grpo = (f", GRPO {gs['steps']} steps x {gs['tasks_per_step']} tasks x {gs['group_size']} rollouts at lr {gs['lr']:g}"
            if {"sft+grpo", "grpo"} & set(a.arms) else "")
    cold = (f", SFT on {cs['instances']} {cs['agent']} conversations x {cs['epochs']:g} epochs"
            if {"sft", "sft+grpo"} & set(a.arms) else "")
    evaluated = [results[k] for arm in a.arms for k in arm_keys(arm, a.seeds) if k in results]
    held = heldout_size(evaluated) if evaluated else f"{a.heldout} template instances"
    lines = [f"rl_gain: {a.model} on bank, user {es['user']}{sft_user}, seeds {a.seeds}{cold}{grpo}, held-out {held} on "
             f"random databases (test stream, eval seed {es['eval_seed']}){' + the 20 fixed test tasks' if a.fixed else ''}; "
             "95% bootstrap intervals", ""]
    tables = [("heldout", "held-out instances", None), ("fixed", "fixed test tasks", None)]
    if a.cross_user:
        tables.append(("heldout", f"held-out instances, {a.cross_user} user", a.cross_user))
    for part, title, user in tables:
        table = arm_table(results, a.arms, a.seeds, part, user)
        if not table:  # --no-fixed
            continue
        lines += [f"| arm ({title}) | seeds | pass^1 | 95% interval |", "|---|---|---|---|"]
        for arm, per in table.items():
            p, lo, hi = bootstrap(per)
            lines.append(f"| {arm} | {len(per)} | {p:.3f} | [{lo:.3f}, {hi:.3f}] |")
        if "sft" in table and "sft+grpo" in table:
            after = {k.split("@")[0].split(":")[1]: v for k, v in table["sft+grpo"].items()}
            before = {k.split("@")[0].split(":")[1]: v for k, v in table["sft"].items()}
            p, lo, hi = paired(after, before)
            lines.append(f"| (SFT then GRPO) - (SFT only), paired | {len(set(after) & set(before))} | {p:+.3f} | [{lo:+.3f}, {hi:+.3f}] |")
            lines.append(f"GRPO after SFT on the {title}: {verdict(lo, hi)}.")
        lines.append("")
    lines += by_template(results, a.arms, a.seeds)
    lines += behaviour(results, ["oracle", *a.arms], a.seeds)
    lines += signal(results, a.seeds, a.tasks_per_step)
    cost = results.get("cost", {})
    if cost:
        lines += ["| training stage | seeds | CPU min per seed (mean) | wall min per seed |", "|---|---|---|---|"]
        for stage in ("sft", "sft+grpo", "grpo"):
            rows = [v for k, v in cost.items() if k.split(":")[1] == stage]
            if rows:
                lines.append(f"| {stage} | {len(rows)} | {mean(r['cpu_min'] for r in rows):.1f} | {mean(r['wall_min'] for r in rows):.1f} |")
        evals = [v for k, v in results.items() if isinstance(v, dict) and "eval_cpu_min" in v and "@" not in k]
        if evals:
            lines.append(f"| evaluation of one model ({sizes(evals)}{' + 20' if a.fixed else ''} episodes) | {len(evals)} | "
                         f"{mean(e['eval_cpu_min'] for e in evals):.1f} | {mean(e['eval_wall_min'] for e in evals):.1f} |")
        cross = [v for k, v in results.items() if isinstance(v, dict) and "eval_cpu_min" in v and "@" in k]
        if cross:
            lines.append(f"| evaluation of one model against the {a.cross_user} user ({sizes(cross)} episodes) | {len(cross)} | "
                         f"{mean(e['eval_cpu_min'] for e in cross):.1f} | {mean(e['eval_wall_min'] for e in cross):.1f} |")
    return "\n".join(lines)


def by_template(results: dict, arms, seeds) -> list[str]:
    """Held-out successes per task template (an instance id is `<template>-<hash>`), summed over seeds: where
    an arm gains or loses, which pass^1 alone hides (e.g. a policy that stops acting still passes the refusals).
    Each arm on the instances all its seeds have, as its pass^1."""
    table = arm_table(results, arms, seeds, "heldout")
    if not table:
        return []
    counts: dict[str, dict[str, list[float]]] = {}
    for arm, per in table.items():
        common = shared(per)
        for instances in per.values():
            for inst in sorted(common):
                counts.setdefault(template_of(inst), {}).setdefault(arm, []).append(instances[inst])
    lines = ["| template (held out, all seeds) | " + " | ".join(table) + " |", "|---|" + "---|" * len(table)]
    for template, per_arm in sorted(counts.items()):
        cells = [f"{int(sum(per_arm[arm]))}/{len(per_arm[arm])}" if arm in per_arm else "-" for arm in table]
        lines.append(f"| {template} | " + " | ".join(cells) + " |")
    return lines + [""]


def behaviour(results: dict, arms, seeds) -> list[str]:
    """Per model, what it does on each template of the held-out instances: tool calls per episode, and how much
    its sequence of tool calls says about which template it was asked (mutual information over the template's
    entropy: 0 when it does the same whatever the user asked, 1 when its calls tell every template apart). A
    policy that is blind to the request can only be reweighted by GRPO, not taught to tell requests apart.
    Each model on the instances all its arm's seeds have, as the arm's pass^1."""
    seqs = {}
    for arm in arms:
        per = {k: results[k]["calls"] for k in arm_keys(arm, seeds) if "calls" in results.get(k, {})}
        common = shared(per)
        seqs.update({k: {t: tuple(calls) for t, calls in v.items() if t in common} for k, v in per.items()})
    if not seqs:
        return []
    templates = sorted({template_of(t) for s in seqs.values() for t in s})
    lines = ["| model | " + " | ".join(templates) + " | distinct call sequences | template told apart (MI / H) |",
             "|---|" + "---|" * (len(templates) + 2)]
    for k, per_task in seqs.items():
        by: dict[str, list[tuple[str, ...]]] = {}
        for task, seq in per_task.items():
            by.setdefault(template_of(task), []).append(seq)
        cells = [f"{mean(len(x) for x in by[t]):.1f}" if t in by else "-" for t in templates]
        lines.append(f"| {k} | " + " | ".join(cells) + f" | {len(set(per_task.values()))} | {told_apart(by):.2f} |")
    return ["tool calls per held-out episode, per template:", ""] + lines + [""]


def told_apart(by_template: dict[str, list[tuple[str, ...]]]) -> float:
    """I(template; call sequence) / H(template), from the counts: 0 when the calls carry nothing about the template."""
    pairs = [(t, seq) for t, seqs in by_template.items() for seq in seqs]
    n = len(pairs)
    if n == 0 or len(by_template) < 2:
        return float("nan")

    def entropy(items) -> float:
        return -sum(c / n * math.log(c / n) for c in Counter(items).values())

    h_t, h_s, h_ts = entropy(t for t, _ in pairs), entropy(s for _, s in pairs), entropy(pairs)
    return (h_t + h_s - h_ts) / h_t


def grpo_metrics(results: dict, seeds, arms=("sft-grpo", "grpo")) -> dict[tuple[str, int], dict[str, dict[int, float]]]:
    """(GRPO run folder's arm, seed) -> metric name -> step -> value, for the finished GRPO runs in results.json."""
    kept = results.get("grpo_runs", {})
    return {(arm, s): {name: {int(step): v for step, v in by.items()} for name, by in kept[f"{arm}-{s}"].items()}
            for arm in arms for s in seeds if f"{arm}-{s}" in kept}


def signal(results: dict, seeds, tasks_per_step: int) -> list[str]:
    """Per GRPO run: the steps that carried a gradient (some group not all-equal after resampling), the mean
    rollout success, and the held-out curve's first and last points. A GRPO step whose groups all got the same
    reward has zero advantage everywhere; Adam's momentum still moves the weights after an earlier step."""
    lines = []
    for (arm, s), by in grpo_metrics(results, seeds).items():
        groups = by.get("rollout/equal_after_resample", by.get("rollout/all_equal_groups", {}))
        steps = sorted(by.get("rollout/success", {}))
        if not steps:
            continue
        if "rollout/groups_with_signal" in by:
            with_signal = sum(1 for st in steps if by["rollout/groups_with_signal"].get(st, 0) > 0)
        else:  # runs from before the figure: a step draws tasks_per_step groups
            with_signal = sum(1 for st in steps if groups.get(st, 0) < tasks_per_step)
        held = [v for _, v in sorted(by.get("heldout/success", {}).items())]
        curve_txt = f"{held[0]:.2f} -> {held[-1]:.2f}" if held else "-"
        lines.append(f"| {arm.replace('-', '+')} | {s} | {with_signal}/{len(steps)} | "
                     f"{mean(by['rollout/success'][st] for st in steps):.2f} | {curve_txt} |")
    if not lines:
        return []
    return ["| GRPO run | seed | steps with a gradient | rollout success | held-out curve (first -> last) |",
            "|---|---|---|---|---|", *lines, ""]


def template_ids() -> list[str]:
    from muactl.domain.open import open_domain

    return [ts.id for ts in open_domain("bank").templates]


def probe_templates(results: dict, seeds, band) -> list[str]:
    """The templates whose sampled pass rate after SFT, pooled over the seeds' screens, is in the band."""
    pooled: dict[str, list[int]] = {}
    for s in seeds:
        for t, (k, n) in results.get(f"screen:{s}", {}).items():
            c = pooled.setdefault(t, [0, 0])
            c[0], c[1] = c[0] + k, c[1] + n
    return sorted(t for t, (k, n) in pooled.items() if n and band[0] <= k / n <= band[1])


def trained_templates(results: dict, a) -> list[str]:
    """What the probe trains on: --templates when given (e.g. the set an earlier seed's screen chose, so that
    seeds added later train on the same templates), else the pooled band."""
    return sorted(a.templates) if getattr(a, "templates", None) else probe_templates(results, a.seeds, a.band)


def train_windows(by: dict[str, dict[int, float]], width: int = 5) -> tuple[dict[str, float], dict[str, float]]:
    """A GRPO run's train success (rollout/success) over its first and its last `width` steps, keyed by the
    place in the window (so that the bootstrap pairs the k-th first step with the k-th last); fewer than
    2 x width steps: half the steps each."""
    series = [v for _, v in sorted(by.get("rollout/success", {}).items())]
    w = min(width, len(series) // 2)
    if not w:
        return {}, {}
    return ({str(k): v for k, v in enumerate(series[:w])}, {str(k): v for k, v in enumerate(series[-w:])})


def mechanics(runs: dict) -> list[str]:
    """What must hold for GRPO to learn anything at all, from the runs' metrics: some group with signal,
    train reward logged at every step, and moving."""
    problems = []
    for (arm, s), by in runs.items():
        steps = sorted(by.get("rollout/success", {}))
        signal = sum(1 for st in steps if by.get("rollout/groups_with_signal", {}).get(st, 0) > 0)
        if not steps:
            problems.append(f"{arm} seed {s}: no train reward logged")
            continue
        if len(steps) < steps[-1]:
            problems.append(f"{arm} seed {s}: train reward logged at {len(steps)} of {max(steps)} steps")
        if not signal:
            problems.append(f"{arm} seed {s}: no group with signal in {len(steps)} steps")
        if len({round(by['rollout/success'][st], 6) for st in steps}) < 2:
            problems.append(f"{arm} seed {s}: train reward never moved ({by['rollout/success'][steps[0]]:.2f} at every step)")
    return problems


def probe_report(results: dict, a) -> str:
    lines = [f"rl_gain --probe: {a.model} on bank, user {a.user}, seeds {a.seeds}; screening {a.probe_k} sampled episodes per "
             f"template after SFT at temperature {a.temperature:g}; band [{a.band[0]:g}, {a.band[1]:g}]; GRPO {a.grpo_steps} steps x "
             f"{a.tasks_per_step} tasks x {a.group_size} rollouts at lr {a.grpo_lr:g}; 95% bootstrap intervals", ""]
    screens = {s: results[f"screen:{s}"] for s in a.seeds if f"screen:{s}" in results}
    chosen = trained_templates(results, a)
    if getattr(a, "templates", None):
        lines += [f"trained on --templates {','.join(chosen)} (the pooled band would choose "
                  f"{', '.join(probe_templates(results, a.seeds, a.band)) or 'none'})", ""]
    if screens:
        names = sorted({t for c in screens.values() for t in c})
        lines += ["| template | " + " | ".join(f"seed {s}" for s in screens) + " | trained |", "|---|" + "---|" * (len(screens) + 1)]
        for t in names:
            cells = [f"{c[t][0]}/{c[t][1]}" if t in c else "-" for c in screens.values()]
            lines.append(f"| {t} | " + " | ".join(cells) + f" | {'yes' if t in chosen else 'no'} |")
        lines.append("")
    if not chosen:
        return "\n".join(lines + ["no template in the band: nothing was trained"])
    runs = grpo_metrics(results, a.seeds, arms=("probe",))
    first, last = {}, {}
    for (_, s), by in runs.items():
        f, la = train_windows(by)
        if f:
            first[str(s)], last[str(s)] = f, la
    if first:
        p0, lo0, hi0 = bootstrap(first)
        p1, lo1, hi1 = bootstrap(last)
        d, lo, hi = paired(last, first)
        lines += [f"train success (sampled), {', '.join(chosen)}: first steps {p0:.3f} [{lo0:.3f}, {hi0:.3f}], last steps "
                  f"{p1:.3f} [{lo1:.3f}, {hi1:.3f}]; last - first {d:+.3f} [{lo:+.3f}, {hi:+.3f}] over {len(first)} seeds: {verdict(lo, hi)}"]
    before = {s: results[f"probe-sft:{s}"]["heldout"] for s in a.seeds if f"probe-sft:{s}" in results}
    after = {s: results[f"probe-grpo:{s}"]["heldout"] for s in a.seeds if f"probe-grpo:{s}" in results}
    if before and after:
        b, _, _ = bootstrap({str(k): v for k, v in before.items()})
        g, _, _ = bootstrap({str(k): v for k, v in after.items()})
        d, lo, hi = paired({str(k): v for k, v in after.items()}, {str(k): v for k, v in before.items()})
        n = len(shared({f"{part}{s}": v for part, per in (("sft", before), ("grpo", after)) for s, v in per.items()}))
        lines.append(f"held out ({n} test-stream instances of those templates, greedy): SFT {b:.3f}, SFT then GRPO {g:.3f}; "
                     f"paired difference {d:+.3f} [{lo:+.3f}, {hi:+.3f}]: {verdict(lo, hi)}")
    lines += behaviour(results, ["probe-sft", "probe-grpo"], a.seeds)
    lines += probe_cost(results)
    problems = mechanics(runs)
    lines.append("mechanics: " + ("ok (a group with signal in some step, train reward logged at every step and moving)"
                                  if runs and not problems else "BROKEN: " + "; ".join(problems or ["no GRPO run found"])))
    return "\n".join(lines)


def probe_cost(results: dict) -> list[str]:
    """CPU minutes (children's user+system) per seed of each training stage and per held-out evaluation."""
    cost = results.get("cost", {})
    parts = []
    for stage, label in (("sft", "SFT"), ("probe", "GRPO")):
        rows = [v["cpu_min"] for k, v in cost.items() if k.split(":")[1] == stage]
        if rows:
            parts.append(f"{label} {mean(rows):.1f} per seed ({len(rows)})")
    evals = [v["eval_cpu_min"] for k, v in results.items() if k.startswith("probe-") and "eval_cpu_min" in v]
    if evals:
        parts.append(f"held-out evaluation {mean(evals):.1f} per model ({len(evals)})")
    return ["CPU minutes: " + ", ".join(parts)] if parts else []


def curve(results: dict, seeds, png: Path) -> bool:
    """Held-out success, train reward, all-equal groups and KL per GRPO step, from the GRPO runs' metrics."""
    series: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for (arm, s), by in grpo_metrics(results, seeds).items():
        for name in ("heldout/success", "reward", "rollout/all_equal_groups", "kl"):
            if name in by:
                series.setdefault(name, {})[f"{arm} seed {s}"] = sorted(by[name].items())
    if "heldout/success" not in series:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    names = [n for n in ("heldout/success", "reward", "rollout/all_equal_groups", "kl") if n in series]
    labels = {"heldout/success": "held-out success (greedy)", "reward": "train reward (mean of the step)",
              "rollout/all_equal_groups": "groups with all-equal rewards", "kl": "KL to the start"}
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.4))
    for ax, name in zip(axes if len(names) > 1 else [axes], names):
        for label, pts in sorted(series[name].items()):
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        ax.set_title(labels[name], fontsize=10)
        ax.set_xlabel("GRPO step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if name in ("heldout/success", "reward"):
            ax.set_ylim(0, 1)
    axes[0].legend(fontsize=7) if len(names) > 1 else axes.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--user", default="scripted", help="scripted, or an LLM user (hf:smollm2-135m, a litellm id)")
    ap.add_argument("--cross-user", default=None, help="also evaluate every model on the held-out instances against this "
                    "user (UserRL: against another user than the trained-with one), e.g. scripted")
    ap.add_argument("--sft-user", default=None, help="the user of the SFT data's oracle conversations (default: --user); "
                    "MUA-RL's setting is a cold start on curated data, then an LLM user in the RL loop")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=ARMS)
    ap.add_argument("--heldout", type=int, default=200, help="held-out template instances (fewer cannot separate 10 points)")
    ap.add_argument("--eval-seed", type=int, default=7)
    ap.add_argument("--no-fixed", dest="fixed", action="store_false",
                    help="skip the 20 fixed test tasks (an LLM user on a CPU makes every episode count)")
    ap.add_argument("--sft-instances", type=int, default=48, help="template instances the oracle plays for the SFT data")
    ap.add_argument("--sft-agent", default="oracle", help="the teacher of the SFT data: oracle, or oracle:varied "
                    "(two to four phrasings per situation, drawn per episode)")
    ap.add_argument("--sft-epochs", type=float, default=1.0, help="SFT epochs over the oracle conversations")
    ap.add_argument("--grpo-steps", type=int, default=24)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--tasks-per-step", type=int, default=2)
    ap.add_argument("--grpo-lr", type=float, default=5e-6)
    ap.add_argument("--max-turns", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=0, help="held-out success every K GRPO steps (grpo.eval_every), 0: off")
    ap.add_argument("--curve-n", type=int, default=40, help="held-out instances per curve point")
    ap.add_argument("--grpo-extra", nargs="*", default=[], help="more GRPO overrides, e.g. grpo.lora=true")
    ap.add_argument("--temperature", type=float, default=1.0, help="GRPO's sampling temperature (grpo.temperature), "
                    "also the screening's with --probe")
    ap.add_argument("--band", type=float, nargs=2, default=[0.1, 0.9], metavar=("LOW", "HIGH"),
                    help="pass-rate band of GRPO's curriculum (grpo.band_low/high) and of --probe's screening")
    ap.add_argument("--probe", action="store_true", help="learnability instead of the arms: screen each template's "
                    "sampled pass rate after SFT, GRPO on those in --band, train success first vs last steps, held out")
    ap.add_argument("--templates", type=lambda v: v.split(","), default=None,
                    help="with --probe: train on these templates (comma-separated) instead of the pooled band's")
    ap.add_argument("--probe-k", type=int, default=8, help="with --probe: sampled episodes per template in the screening")
    ap.add_argument("--out", default=str(ROOT / "out" / "rl_gain"))
    ap.add_argument("--report-only", action="store_true")
    a = ap.parse_args()
    if "grpo" in a.arms and not a.probe and any(x.startswith("grpo.sft_coef=") and x.split("=", 1)[1] not in ("0", "0.0")
                                                for x in a.grpo_extra):
        ap.error("grpo.sft_coef anchors GRPO to a cold start's data, which the grpo arm (GRPO only) has none of; "
                 "leave grpo out of --arms")
    exp = Experiment(a)
    if a.probe:
        if not a.report_only:
            exp.probe()
        text = probe_report(exp.results, a)
        print(text)
        (exp.work / "probe.md").write_text(text + "\n")
        return
    if not a.report_only:
        exp.run()
    text = report(exp.results, a)
    print(text)
    (exp.work / "table.md").write_text(text + "\n")
    if curve(exp.results, a.seeds, exp.work / "curve.png"):
        print(f"learning curve: {exp.work / 'curve.png'}")


if __name__ == "__main__":
    main()
