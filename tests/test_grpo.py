"""GRPO with the simulated user in the loop: reward shaping formulas, the rollout_func contract
(env_mask, infra errors), a short real run on tiny, resume after kill -9, the pipeline and the report."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.train.grpo import Rollouts
from muactl.train.shaping import trajectory_score, turn_credit, turn_rewards

runner = CliRunner()
FAST = ["domain=bank", "grpo.group_size=2", "grpo.tasks_per_step=2", "grpo.max_turns=3", "grpo.max_new_tokens=12",
        "grpo.temperature=1.0"]



# ---------------------------------------------------------------- UserRL shaping, by hand


def test_turn_rewards_from_records():
    records = [{"turn": 1, "tool": "find", "error": False, "changed": False},
               {"turn": 2, "tool": "move", "error": False, "changed": True, "distance_before": 4, "distance_after": 2},
               {"turn": 3, "tool": "move", "error": True, "changed": False},
               {"turn": 3, "tool": "move", "error": False, "changed": True, "distance_before": 2, "distance_after": 0}]
    assert turn_rewards(records, 4, final=1.0) == pytest.approx([0.0, 0.5, -0.1 + 0.5, 1.0])


def test_turn_credit_modes():
    r = [0.0, 0.5, 0.4, 1.0]
    assert turn_credit(r, "equalized", 0.9) == pytest.approx([0.475] * 4)
    assert turn_credit(r, "exponential", 0.5) == pytest.approx([0.0, 0.5 * 0.25, 0.4 * 0.5, 1.0])
    g = 0.9
    assert turn_credit(r, "r2g", g) == pytest.approx([0.0 + g * (0.5 + g * (0.4 + g * 1.0)), 0.5 + g * (0.4 + g), 0.4 + g, 1.0])
    assert trajectory_score([1.0, 2.0, 3.0], "mean") == 2.0
    assert trajectory_score([3.0, 2.0], "r2g") == 3.0
    with pytest.raises(ValueError):
        turn_credit(r, "nope", 0.9)


# ---------------------------------------------------------------- the rollout_func contract


class FakeTrainer:
    """Only what rollout_func reads from TRL's trainer (the model is real)."""

    def __init__(self, model):
        self.model = model
        self.accelerator = SimpleNamespace(unwrap_model=lambda m: m)
        self.state = SimpleNamespace(global_step=0)
        self.args = SimpleNamespace(bf16=False)
        self._metrics = {"train": defaultdict(list)}


def make_rollouts(tmp_path, user_factory=None, **grpo):
    from muactl.train.recipes import compose
    from muactl.episode.user import ScriptedUser
    from muactl.models.generation import load_model
    from muactl.runs.store import RunStore
    from muactl.domain.open import open_domain

    cfg = compose(None, FAST + [f"grpo.{k}={v}" for k, v in grpo.items()])
    opened = open_domain("bank")
    lm = load_model("tiny", opened.compiled)
    store = RunStore.create("grpo", "bank", {}, path=tmp_path / "run")
    return Rollouts(cfg, opened, store, lm.tokenizer, user_factory or ScriptedUser), lm


def test_rollout_func_returns_token_exact_episodes_with_env_mask(tmp_path):
    rollouts, lm = make_rollouts(tmp_path, draw_rounds=1)
    ids = ["move-quin", "move-quin", "close-ned", "close-ned"]
    trainer = FakeTrainer(lm.model)
    out = rollouts([[{"role": "user", "content": t}] for t in ids], trainer)
    assert set(out) == {"prompt_ids", "completion_ids", "logprobs", "env_mask", "episode_reward"}
    assert all(len(out[k]) == 4 for k in out)
    tok = lm.tokenizer
    for p, c, m, lp in zip(out["prompt_ids"], out["completion_ids"], out["env_mask"], out["logprobs"]):
        assert len(c) == len(m) == len(lp) and m[0] == 1  # the completion starts with the policy's first token
        assert tok.decode(p).endswith("<|im_start|>assistant\n")
        # every stretch with mask 0 inside the completion is template text around user or tool turns
        text0 = tok.decode([t for t, k in zip(c, m) if k == 0])
        assert "<|im_start|>" not in tok.decode([t for t, k in zip(c, m) if k == 1])
        if 0 in m:
            assert "<|im_start|>user" in text0 or text0.strip("\n") == "<|im_end|>"
        assert all(x == 0.0 for x, k in zip(lp, m) if k == 0)
    assert all(r in (0.0, 1.0) for r in out["episode_reward"])
    assert trainer._metrics["train"]["rollout/success"]
    # UserRL's interaction figures, and how the (scripted) user behaved
    metrics = trainer._metrics["train"]
    assert metrics["rollout/user_turns"][0] >= 1 and metrics["rollout/user_faithful"] == [1.0]
    assert 0 <= metrics["rollout/effective_turns"][0] <= metrics["rollout/turns"][0]
    saved = rollouts.store.episodes(step=1)
    assert sorted(e["task_id"] for e in saved) == sorted(ids)


def test_a_redone_step_forgets_what_the_crashed_run_logged_at_it(tmp_path):
    """After a kill the step after the last checkpoint is played again; a figure the killed run logged there
    (the held-out curve, a domain's pass rate) must not stay beside the redone step's figures."""
    from muactl.runs.store import RunStore

    store = RunStore.create("grpo", "bank", {}, path=tmp_path / "run")
    store.log_metrics(1, {"reward": 0.5})
    store.log_metrics(2, {"reward": 0.25, "heldout/success": 0.1})
    store.forget_step(2)
    assert {(r["step"], r["name"]) for r in store.db["metrics"].rows} == {(1, "reward")}


@pytest.mark.parametrize("failure", ["infra", "user"])
def test_excluded_episodes_are_dropped_not_scored_zero(tmp_path, failure):
    from muactl.errors import InfraError
    from muactl.episode.user import UserSimulator

    class Down(UserSimulator):
        async def respond(self, ctx):
            if failure == "infra":
                raise InfraError("user model unreachable")
            raise KeyError("the simulator crashed")  # a user_error, not the policy's failure

    rollouts, lm = make_rollouts(tmp_path, user_factory=Down)
    out = rollouts([[{"role": "user", "content": "move-quin"}]] * 2, FakeTrainer(lm.model))
    assert out["episode_reward"] == [None, None]  # TRL leaves None out of the group baseline
    assert all(sum(m) == 0 for m in out["env_mask"])
    assert {e["outcome"] for e in rollouts.store.episodes(step=1)} == {f"{failure}_error"}


def test_all_equal_groups_are_counted(tmp_path):
    rollouts, lm = make_rollouts(tmp_path, draw_rounds=1)
    trainer = FakeTrainer(lm.model)
    # one task played by the untrained policy twice: both rollouts end alike (the tiny model never acts)
    rollouts([[{"role": "user", "content": "refuse-overdraft-fay"}]] * 2, trainer)
    assert trainer._metrics["train"]["rollout/all_equal_groups"] == [1.0]
    assert trainer._metrics["train"]["rollout/groups_with_signal"] == [0.0]


def test_groups_without_signal_are_rerun_on_another_training_task(tmp_path):
    rollouts, lm = make_rollouts(tmp_path, draw_rounds=2)
    trainer = FakeTrainer(lm.model)
    out = rollouts([[{"role": "user", "content": "refuse-overdraft-fay"}]] * 2, trainer)
    assert len(out["episode_reward"]) == 2
    saved = [e["task_id"] for e in rollouts.store.episodes(step=1)]
    train_ids = {t.task.id for t in rollouts.opened.tasks if t.split == "train"}
    # both groups are stored (the one replaced for want of signal too); the re-draw is another training task
    assert saved[:2] == ["refuse-overdraft-fay"] * 2 and len(saved) == 4
    assert saved[2] == saved[3] != "refuse-overdraft-fay" and saved[2] in train_ids  # never a test task
    assert trainer._metrics["train"]["rollout/groups_drawn"] == [2.0]
    assert trainer._metrics["train"]["rollout/equal_after_resample"][0] in (0.0, 1.0)


# ---------------------------------------------------------------- signal: one rule, dynamic sampling, curriculum


def fake_episode(job, success: bool, termination: str = "user_stop"):
    """An episode as the engine returns it, without a model: what the fake policy below 'played'."""
    from muactl.episode.types import Episode

    return Episode(job.task.task.id, job.trial, 0, [], termination, reward=float(success), breakdown={"success": success},
                   interaction={"effective_turns": 1, "user_turns": 1, "first_correct_write": None})


def fake_policy(rollouts, play):
    """Replace the rollouts' episode engine with `play(job, k) -> Episode` (k: the job's place in its call):
    a fake model whose outcomes the test controls. The batching, grouping, re-drawing and logging are real."""
    calls = []

    def run(*args):
        jobs = args[-3]  # (jobs, agent, rollout config), before issue 25 also run_many in front
        calls.append([j.task.task.id for j in jobs])
        return [play(j, k) for k, j in enumerate(jobs)]

    rollouts._run = run
    return calls


def on_templates(rollouts, spec: str, window: int = 4, known: int = 2):
    """Rollouts whose prompts name the templates of `spec` (tasks=template:...), with a short pass-rate window."""
    from muactl.train.grpo import Curriculum, prompt_names

    rollouts.cfg.tasks = spec
    g = rollouts.cfg.grpo
    rollouts.curriculum = Curriculum(prompt_names(rollouts.cfg, rollouts.opened), g.band_low, g.band_high, window, known,
                                     retry=g.band_retry)


def test_an_excluded_episode_does_not_make_an_equal_group_a_signal(tmp_path):
    """Issue 25 1.4: rewards [1, 1, 1, user_error] carry no signal (the excluded one has no reward): the group is
    counted as all-equal, and re-drawn. Before the fix the user_error's 0 made it look informative."""
    rollouts, lm = make_rollouts(tmp_path, draw_rounds=1, group_size=4)
    fake_policy(rollouts, lambda job, k: fake_episode(job, k < 3, "user_stop" if k < 3 else "user_error"))
    trainer = FakeTrainer(lm.model)
    out = rollouts([[{"role": "user", "content": "move-quin"}]] * 4, trainer)
    assert out["episode_reward"] == [1.0, 1.0, 1.0, None]
    assert trainer._metrics["train"]["rollout/all_equal_groups"] == [1.0]


def test_has_signal_is_judged_on_scored_episodes_only():
    from types import SimpleNamespace as NS

    from muactl.train.grpo import has_signal

    g = NS(reward="binary")

    def ep(r, term="user_stop"):
        return NS(reward=r, termination=term, counted=term not in ("infra_error", "user_error"))

    assert not has_signal([ep(1.0), ep(1.0), ep(1.0), ep(0.0, "user_error")], g)
    assert not has_signal([ep(0.0), ep(1.0, "infra_error")], g)
    assert not has_signal([ep(1.0)], g)
    assert has_signal([ep(1.0), ep(0.0), ep(0.0, "infra_error")], g)


def test_an_all_equal_group_is_redrawn_on_a_fresh_template_and_the_curriculum_skips_it(tmp_path):
    """Dynamic sampling: `move` is always solved by the fake policy (no signal), `balance` half the time. The
    all-equal group is drawn again on another template, never on `move` again; once move's pass rate (1.0) is
    known, the next step draws an in-band template in its place. Per-template pass rates are logged."""
    rollouts, lm = make_rollouts(tmp_path, draw_rounds=3, group_size=2)
    on_templates(rollouts, "template:move,balance,close")

    def play(job, k):
        template = job.task.task.origin.template
        return fake_episode(job, template == "move" or (template == "balance" and k % 2 == 0))

    calls = fake_policy(rollouts, play)
    trainer = FakeTrainer(lm.model)
    out = rollouts([[{"role": "user", "content": "template:move"}]] * 2, trainer)
    templates = [[tid.rsplit("-", 1)[0] for tid in call] for call in calls]
    assert templates[0] == ["move", "move"] and "move" not in templates[1]
    assert len(set(calls[0])) == 1  # a group plays one instance ...
    assert set(out["episode_reward"]) == {0.0, 1.0} or templates[1][0] == "close"
    m = trainer._metrics["train"]
    assert m["rollout/pass_rate/move"] == [1.0] and m["rollout/groups_drawn"][0] == len(calls)
    assert m["rollout/all_equal_groups"] == [1.0]
    # the next step: move is out of the band, so its prompt is played on another template from the start
    trainer.state.global_step = 1
    calls.clear()
    rollouts([[{"role": "user", "content": "template:move"}]] * 2, trainer)
    assert "move" not in calls[0][0]


@pytest.mark.parametrize("retry", [0, 2])
def test_a_template_out_of_the_band_is_drawn_again_after_band_retry_steps(tmp_path, retry):
    """Issue 26 sweep: sampled, each writing template failed its one group (one instance) and was never drawn again,
    so no gradient ever came from one. With grpo.band_retry=2 a template out of the band is played again two steps
    after it last was; with 0 (the default) it is not."""
    rollouts, lm = make_rollouts(tmp_path, draw_rounds=1, group_size=2, band_retry=retry)
    on_templates(rollouts, "template:move,balance")
    calls = fake_policy(rollouts, lambda job, k: fake_episode(job, job.task.task.origin.template == "balance" and k == 0))
    trainer = FakeTrainer(lm.model)
    played = []
    for step in range(4):
        trainer.state.global_step = step
        calls.clear()
        rollouts([[{"role": "user", "content": "template:move"}]] * 2, trainer)
        played.append(calls[0][0].rsplit("-", 1)[0])
    assert played == (["move", "balance", "move", "balance"] if retry else ["move", "balance", "balance", "balance"])


def test_instance_per_rollout_plays_each_rollout_on_its_own_instance(tmp_path):
    rollouts, lm = make_rollouts(tmp_path, draw_rounds=1, group_size=4, instance_per_rollout=True)
    on_templates(rollouts, "template:move")
    calls = fake_policy(rollouts, lambda job, k: fake_episode(job, False))
    rollouts([[{"role": "user", "content": "template:move"}]] * 4, FakeTrainer(lm.model))
    assert len(set(calls[0])) == 4 and all(t.startswith("move-") for t in calls[0])


def test_the_curriculum_replays_stored_episodes_as_it_recorded_them(tmp_path):
    """A resumed run rebuilds the pass rates from the run store, so it draws what the uninterrupted run drew."""
    from muactl.train.grpo import Curriculum

    rollouts, lm = make_rollouts(tmp_path, draw_rounds=1, group_size=2)
    on_templates(rollouts, "template:all")
    fake_policy(rollouts, lambda job, k: fake_episode(job, k == 0))
    trainer = FakeTrainer(lm.model)
    for step in range(3):
        trainer.state.global_step = step
        rollouts([[{"role": "user", "content": "template:move"}]] * 2 + [[{"role": "user", "content": "template:close"}]] * 2,
                 trainer)
    live = rollouts.curriculum
    again = Curriculum(live.names, live.low, live.high, live.window, live.known)
    again.replay(rollouts.store.episodes(), until_step=3)
    assert again.recent == live.recent and any(live.recent.values())
    early = Curriculum(live.names, live.low, live.high, live.window, live.known)
    early.replay(rollouts.store.episodes(), until_step=1)  # stored as step 1: the first call's episodes only
    assert sum(len(v) for v in early.recent.values()) == 4


# ---------------------------------------------------------------- wall-clock timeouts in training


def test_a_wall_clock_timeout_in_training_is_excluded_and_counted(tmp_path):
    """A rollout cut off by the wall clock says how loaded the machine is, not how good the policy is: infra_error
    (no reward, not in the baseline), counted as rollout/timeouts. Eval keeps scoring it (termination timeout)."""
    import asyncio

    from muactl.episode.rollout import RolloutConfig, run_episode
    from muactl.episode.user import ScriptedUser
    from muactl.train.grpo import rollout_config

    class Slow(ScriptedUser):  # a simulated user on a loaded machine
        async def respond(self, ctx):
            await asyncio.sleep(5)
            return await super().respond(ctx)

    rollouts, lm = make_rollouts(tmp_path, user_factory=Slow, draw_rounds=1)
    rollouts.cfg.episode.timeout_s = 0.3
    assert rollout_config(rollouts.cfg, 0).timeout_excluded
    trainer = FakeTrainer(lm.model)
    out = rollouts([[{"role": "user", "content": "move-quin"}]] * 2, trainer)
    assert out["episode_reward"] == [None, None] and all(sum(m) == 0 for m in out["env_mask"])
    assert trainer._metrics["train"]["rollout/timeouts"] == [2.0]
    stored = rollouts.store.episodes(step=1)
    assert {e["outcome"] for e in stored} == {"infra_error"} and all("wall-clock timeout" in e["error"] for e in stored)
    # eval: the same episode is the agent's timeout, scored
    from muactl.episode.agents.oracle import OracleAgent

    ep = asyncio.run(run_episode(rollouts.opened.task("move-quin"), rollouts.opened.compiled, OracleAgent(), Slow(),
                                 RolloutConfig(timeout_s=0.3)))
    assert ep.termination == "timeout" and ep.counted and ep.timed_out


# ---------------------------------------------------------------- real runs


def test_train_grpo_short_run_logs_metrics_and_writes_a_checkpoint(in_tmp):
    r = runner.invoke(app, ["train", "grpo", *FAST, "grpo.steps=2", "grpo.save_steps=1", "grpo.loss_type=dr_grpo",
                            "grpo.beta=0.1", "grpo.warmup_ratio=0.5", "keep_checkpoints=true", "run_id=g1"])
    assert r.exit_code == 0, r.output
    # issue 27.1: one line per step, not TRL's two raw dicts of ~40 keys; what two steps can show, said up front
    steps = [line for line in r.output.splitlines() if line.startswith("grpo step ")]
    assert [line.split(":")[0] for line in steps] == ["grpo step 1/2", "grpo step 2/2"], r.output
    assert all("with signal; KL " in line and " entropy " in line and line.endswith(" s") for line in steps), steps
    assert "'rollout/success'" not in r.output and "frac_reward_zero_std': " not in r.output
    assert "2 steps can show that the loop works end to end" in r.output and "frac_reward_zero_std the share" in r.output
    run = in_tmp / "runs" / "g1"
    assert (run / "checkpoint-final" / "config.json").is_file()
    # keep_checkpoints=true: the finished stage keeps its resumable checkpoints (by default they are removed)
    assert sorted(p.name for p in (run / "grpo").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    assert "removed" not in r.output
    import torch

    # the settings reach TRL's trainer: the arguments it saved with its checkpoint
    args = torch.load(run / "grpo" / "checkpoint-1" / "training_args.bin", weights_only=False)
    assert (args.loss_type, args.beta, args.warmup_steps, args.temperature) == ("dr_grpo", 0.1, 0.5, 1.0)  # a share of the steps
    from muactl.runs.store import RunStore

    store = RunStore.open("g1")
    names = {row["name"] for row in store.db["metrics"].rows}
    assert {"reward", "rollout/success", "rollout/turns", "rollout/all_equal_groups", "time/generation_s",
            "entropy", "kl", "rollout/effective_turns", "rollout/user_turns", "rollout/tool_errors", "rollout/groups_drawn",
            "rollout/groups_with_signal", "rollout/timeouts", "rollout/draw_rounds", "memory/rss_gb",
            "memory/peak_rss_gb"} <= names
    assert any(n.startswith("rollout/pass_rate/") for n in names)  # 4 rollouts per task: a rate is known
    assert {e["step"] for e in store.episodes()} == {1, 2}
    assert list((run / "tensorboard" / "grpo").rglob("events.out.tfevents*"))
    r = runner.invoke(app, ["report", "g1"])
    assert r.exit_code == 0 and (run / "report" / "index.html").is_file() and (run / "report" / "reward.png").is_file()
    assert (run / "report" / "effective_turns.png").is_file() and (run / "report" / "user_turns.png").is_file()
    assert "Interaction" in (run / "report" / "index.html").read_text()


@pytest.mark.slow
def test_two_runs_with_one_seed_train_the_same_weights_and_log_the_same_figures(in_tmp):
    """Issue 27.1 (reproducibility): on one machine a seed gives one run, weights and metrics alike (tiny model,
    shaped reward so that groups have signal and the update moves the weights)."""
    import torch
    from safetensors.torch import load_file

    from muactl.runs.store import RunStore

    for run_id in ("same-a", "same-b"):
        r = runner.invoke(app, ["train", "grpo", *FAST, "grpo.steps=2", "grpo.reward=userrl", "grpo.beta=0.1",
                                f"run_id={run_id}"])
        assert r.exit_code == 0, r.output
    a, b = (load_file(in_tmp / "runs" / rid / "checkpoint-final" / "model.safetensors") for rid in ("same-a", "same-b"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)

    def figures(run_id):  # wall-clock figures aside
        rows = RunStore.open(run_id).db["metrics"].rows
        return sorted((r["step"], r["name"], r["value"]) for r in rows
                      if not r["name"].startswith(("time/", "train_")) and r["name"] not in ("step_time",))

    assert figures("same-a") == figures("same-b")
    assert any(v for _, name, v in figures("same-a") if name == "grad_norm")  # the update did something


def test_userrl_reward_runs(in_tmp):
    r = runner.invoke(app, ["train", "grpo", *FAST, "grpo.steps=1", "grpo.reward=userrl", "grpo.turn_credit=r2g",
                            "grpo.trajectory_score=r2g", "run_id=g2"])
    assert r.exit_code == 0, r.output


def _steps_and_tasks(run_id):
    from muactl.runs.store import RunStore

    by_step = defaultdict(list)
    for e in RunStore.open(run_id).episodes():
        by_step[e["step"]].append(e["task_id"])
    return {s: sorted(v) for s, v in by_step.items()}


def test_resume_after_kill_9_continues_with_the_same_data_order(in_tmp):
    env = dict(os.environ, MUACTL_RUNS=str(in_tmp / "runs"), MUACTL_NO_PROGRESS="1", MUACTL_THREADS="1")
    base = [sys.executable, "-m", "muactl", "train", "grpo", *FAST, "grpo.steps=4", "grpo.save_steps=1"]
    # an uninterrupted run for reference, beside the one to kill: two processes, so a 2-core machine runs both
    ref_err = (in_tmp / "ref.err").open("w")
    ref = subprocess.Popen(base + ["run_id=ref"], env=env, cwd=in_tmp, stdout=subprocess.DEVNULL, stderr=ref_err)
    proc = subprocess.Popen(base + ["run_id=killed"], env=env, cwd=in_tmp, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    ck = in_tmp / "runs" / "killed" / "grpo" / "checkpoint-2"
    deadline = time.time() + 600  # ~115 s to checkpoint-2 at load 5 on 2 cores: 120 s was too tight
    while not ck.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.2)
    time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert ck.exists(), "the run never reached its second checkpoint"
    ref.wait(timeout=600)
    ref_err.close()
    assert ref.returncode == 0, (in_tmp / "ref.err").read_text()[-3000:]
    assert not (in_tmp / "runs" / "killed" / "checkpoint-final").exists()
    out = subprocess.run([sys.executable, "-m", "muactl", "train", "grpo", "--resume", "killed"], env=env, cwd=in_tmp,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "resuming from" in out.stdout
    assert (in_tmp / "runs" / "killed" / "checkpoint-final").is_dir()
    from muactl.runs.store import RunStore

    assert RunStore.open("killed").info()["summary"]["grpo"]["steps"] == 4
    # finished: the resumable checkpoints it was resumed from are removed, checkpoint-final is what stays
    assert "grpo: finished; removed its 2 resumable checkpoints" in out.stdout, out.stdout[-3000:]
    assert not list((in_tmp / "runs" / "killed" / "grpo").glob("checkpoint-*"))
    # resumed again, the finished stage is skipped, not trained from scratch
    again = subprocess.run([sys.executable, "-m", "muactl", "train", "grpo", "--resume", "killed"], env=env, cwd=in_tmp,
                           capture_output=True, text=True)
    assert again.returncode == 0 and "its grpo finished already" in again.stdout, again.stdout + again.stderr[-3000:]
    assert "grpo step" not in again.stdout
    ref, resumed = _steps_and_tasks("ref"), _steps_and_tasks("killed")
    # steps after the checkpoint see the same tasks in the same order as the uninterrupted run
    assert resumed[3] == ref[3] and resumed[4] == ref[4]


def test_pipeline_config_runs_every_stage_and_resumes(in_tmp):
    cfg = in_tmp / "exp.yaml"
    cfg.write_text(
        "domain: bank\nstages: [synth, sft, grpo, eval]\n"
        "synth: {trials: 1, tasks: train}\n"
        "sft: {max_steps: 2, batch_size: 2, save_steps: 100, logging_steps: 1}\n"
        "grpo: {steps: 1, group_size: 2, tasks_per_step: 1, max_turns: 2, max_new_tokens: 8, sft_coef: 0.1}\n"
        "eval: {split: test, max_turns: 2, concurrency: 20}\n"
        "model: tiny\n")
    r = runner.invoke(app, ["train", str(cfg), "run_id=p1", "model.max_new_tokens=8"])
    assert r.exit_code == 0, r.output
    # the SFT anchor reads the recipe's own synth data
    assert re.search(r"SFT anchor \(nll\), weight 0.1: 2 of \d+ conversations of \S+/runs/p1/sft.jsonl", r.output), r.output
    stages = json.loads((in_tmp / "runs" / "p1" / "stages.json").read_text())
    assert set(stages) == {"synth", "sft", "grpo", "eval"}
    assert set(stages["eval"]) == {"base", "sft", "grpo"}
    assert "before / after" in r.output and "95% interval" in r.output
    # issue 27.1: synth and each eval say how long they took, as sft and grpo do
    assert re.search(r"^synth: kept .* \(\d+(\.\d)? s\)$|^synth: kept .* min .* s\)$", r.output, re.M), r.output
    assert len(re.findall(r"^eval (base|sft|grpo): pass\^1 \d\.\d\d over 20 episodes \(", r.output, re.M)) == 3, r.output
    # each model's per-task outcomes are kept, so the table can give intervals and paired differences
    assert len(stages["eval"]["base"]["per_task"]) == 20
    assert "sft vs base: " in r.output and "grpo vs sft: " in r.output and "over the tasks: " in r.output
    r = runner.invoke(app, ["report", "p1"])
    assert r.exit_code == 0, r.output
    page = (in_tmp / "runs" / "p1" / "report" / "index.html").read_text()
    assert all(f"<td>{stage}</td>" in page for stage in ("base", "sft", "grpo"))  # each row keeps its stage
    assert "95% interval" in page and "grpo vs sft: " in page and "per_task" not in page
    # each finished training stage keeps its checkpoint-final only (the evals above loaded those)
    for stage in ("sft", "grpo"):
        folder = in_tmp / "runs" / "p1" / stage
        assert [p.name for p in folder.glob("checkpoint-*")] == ["checkpoint-final"], list(folder.iterdir())
        assert stages[stage]["checkpoint"].endswith(f"p1/{stage}/checkpoint-final")
    # resuming a finished pipeline runs nothing again
    r = runner.invoke(app, ["train", str(cfg), "--resume", "p1"])
    assert r.exit_code == 0 and "== synth" not in r.output and "== sft" not in r.output
    assert "== grpo" not in r.output and "removed" not in r.output


@pytest.mark.slow  # ~95 s on a loaded 2-core machine: SFT and two evals of tiny
def test_pipeline_evals_hold_one_model_at_a_time(in_tmp, monkeypatch):
    """Issue 27: the recipe's eval stage loaded the base, SFT and GRPO models in turn, and each stayed in memory (with
    its cached prefixes) for the rest of the process, on top of what training had left. Each model is now given
    back when its eval ends. (tiny stands in for the model.)"""
    from muactl.models import generation

    held_at_load = []
    load = generation.LocalLM.__init__

    def counting(self, *a, **kw):
        held_at_load.append(len(generation._LOADED))
        load(self, *a, **kw)

    monkeypatch.setattr(generation.LocalLM, "__init__", counting)
    cfg = in_tmp / "exp.yaml"
    cfg.write_text("domain: bank\nstages: [synth, sft, eval]\nmodel: tiny\nsynth: {trials: 1, tasks: train}\n"
                   "sft: {max_steps: 1, batch_size: 2, save_steps: 100}\n"
                   "eval: {tasks: [move-quin, close-ned], max_turns: 2}\n")
    r = runner.invoke(app, ["train", str(cfg), "run_id=p3", "model.max_new_tokens=8"])
    assert r.exit_code == 0, r.output
    assert held_at_load == [0, 0], held_at_load  # base, then sft: neither finds the other still loaded
    assert not generation._LOADED


def test_pipeline_synth_and_eval_stages_draw_template_instances(in_tmp):
    cfg = in_tmp / "exp.yaml"
    cfg.write_text(
        "domain: bank\nstages: [synth, eval]\nmodel: tiny\n"
        "synth: {trials: 1, tasks: 'template:all', n: 7, db: random}\n"
        "eval: {tasks: 'template:balance', n: 3, db: random, max_turns: 2}\n")
    r = runner.invoke(app, ["train", str(cfg), "run_id=p2", "model.max_new_tokens=8"])
    assert r.exit_code == 0, r.output
    stages = json.loads((in_tmp / "runs" / "p2" / "stages.json").read_text())
    assert stages["synth"]["kept"] == 7
    assert "synth: kept 7 of 7 episodes: 0 duplicates dropped, 0 failed (reward 0)" in r.output
    records = [json.loads(line) for line in open(stages["synth"]["data"])]
    templates = {rec["task_id"].rsplit("-", 1)[0] for rec in records}
    assert templates == {"move", "move-all", "close", "balance", "refuse-overdraft", "refuse-close-nonempty", "human"}
    assert stages["eval"]["base"]["episodes"] == 3
    assert "on template:balance" in r.output
    from muactl.runs.store import RunStore

    # eval instances come from the test seed stream, never the train stream synth drew from
    assert RunStore.open(str(in_tmp / "runs" / "p2" / "eval-base")).info()["config"]["split"] == "test"


def test_run_many_returns_episodes_in_job_order_not_finishing_order():
    """GRPO slices consecutive episodes into groups: a short episode finishing first must not move."""
    import asyncio

    from muactl.episode.agents.oracle import OracleAgent
    from muactl.episode.user import ScriptedUser
    from muactl.episode.rollout import Job, RolloutConfig, run_many
    from muactl.domain.open import open_domain

    opened = open_domain("bank")
    ids = ["move-ivy", "human-max", "move-zed", "human-max"]  # long, short, long, short
    jobs = [Job(opened.task(t), trial=i) for i, t in enumerate(ids)]
    finished = []
    class SlowOnMoves(OracleAgent):  # a model answering long conversations more slowly
        async def act(self, ctx):
            await asyncio.sleep(0.01 if ctx.task.task.id.startswith("move") else 0)
            return await super().act(ctx)

    eps = asyncio.run(run_many(jobs, opened.compiled, SlowOnMoves(), ScriptedUser, RolloutConfig(), concurrency=4,
                               on_done=lambda ep: finished.append(ep.task_id)))
    assert finished != ids  # the short ones did finish first
    assert [e.task_id for e in eps] == ids and [e.trial for e in eps] == [0, 1, 2, 3]


def test_grpo_never_falls_back_to_the_test_split():
    from muactl.train.grpo import _training_tasks
    from muactl.domain.open import open_domain

    opened = open_domain("bank")
    for synth_tasks in ("train", "template:all", ["move-ivy"]):  # a template or id list: GRPO uses train
        assert {t.split for t in _training_tasks(opened, synth_tasks)} == {"train"}
    assert {t.split for t in _training_tasks(opened, "all")} == {"train", "test"}  # asked for explicitly


# ---------------------------------------------------------------- log-probs at the policy's tokens only


def _policy_token_trainer(tmp_path, rollout_func=None, reward=None, lora=False, bf16=False, **config):
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig

    from muactl.domain.open import open_domain
    from muactl.models.folder import load_tokenizer
    from muactl.models.registry import resolve
    from muactl.train.policy_tokens import PolicyTokenGRPOTrainer

    path = resolve("tiny", open_domain("bank", with_tasks=False).compiled)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    args = GRPOConfig(output_dir=str(tmp_path / "out"), use_cpu=True, bf16=bf16, per_device_train_batch_size=4,
                      num_generations=4, temperature=0.7, report_to=[], max_steps=1, logging_steps=1, save_strategy="no",
                      loss_type="dapo", **config)
    peft = None
    if lora:
        from peft import LoraConfig

        peft = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    return PolicyTokenGRPOTrainer(model=model, args=args, train_dataset=Dataset.from_list([{"prompt": "p"}] * 4),
                                  reward_funcs=[reward or (lambda completions, **k: [0.0] * len(completions))],
                                  processing_class=load_tokenizer(path), rollout_func=rollout_func, peft_config=peft)


@pytest.mark.parametrize("lora", [False, True])
def test_policy_token_logps_equal_a_plain_forward_pass(tmp_path, lora):
    """At env_mask=1 positions: log_softmax(model(...).logits / temperature) of the next token, as a full
    forward computes it; elsewhere 0 (never read). Left-padded prompts, right-padded completions, as TRL pads."""
    import torch
    from trl import GRPOTrainer

    trainer = _policy_token_trainer(tmp_path, lora=lora)
    model = trainer.model
    torch.manual_seed(0)
    P, K = 7, 20
    ids = torch.randint(5, 1000, (3, P + K))
    attention = torch.ones_like(ids)
    attention[0, :2] = 0  # a shorter prompt
    attention[1, -5:] = 0  # a shorter completion
    env_mask = [[1] * 4 + [0] * 6 + [1] * 10, [0] * 3 + [1] * 12, [1, 0] * 10]
    trainer._scored = env_mask
    logps, entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, K, batch_size=2,
                                                                    compute_entropy=True)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attention).logits[:, P - 1:-1] / 0.7
    plain = torch.log_softmax(logits, -1).gather(-1, ids[:, P:, None])[..., 0]
    scored = torch.zeros(3, K, dtype=torch.bool)
    for i, m in enumerate(env_mask):
        scored[i, :len(m)] = torch.tensor(m, dtype=torch.bool)
    scored &= attention[:, P:].bool()
    assert scored.sum() == 14 + 12 + 10
    assert torch.allclose(logps[scored], plain[scored], atol=1e-5)
    assert (logps[~scored] == 0).all()
    # the entropy TRL logs, the same as TRL's own path computes it
    _, stock_entropy, _ = GRPOTrainer._get_per_token_logps_and_entropies(trainer, model, ids, attention, K,
                                                                          compute_entropy=True)
    assert torch.allclose(entropy[scored], stock_entropy[scored], atol=1e-5)
    # a micro-batch with no policy token still gives a loss that backpropagates (a zero gradient)
    trainer._scored = [[0] * K] * 3
    none, _, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, K)
    (none.sum() * 1.0).backward()


def test_policy_token_logps_under_bf16_autocast_match_trl(tmp_path):
    """bf16 autocast on the CPU (muactl's default where the CPU has it): within bf16 rounding of TRL's path."""
    import torch
    from trl import GRPOTrainer

    trainer = _policy_token_trainer(tmp_path, bf16=True)
    torch.manual_seed(1)
    ids = torch.randint(5, 1000, (2, 30))
    attention = torch.ones_like(ids)
    trainer._scored = None  # no env_mask: every completion token is scored
    ours, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attention, 18)
    stock, _, _ = GRPOTrainer._get_per_token_logps_and_entropies(trainer, trainer.model, ids, attention, 18)
    assert (ours != 0).all() and torch.allclose(ours, stock, atol=2e-2)


def _group_batch(seed: int = 0):
    """A GRPO-like batch as TRL pads it (prompts left, completions right): rows 0-3 one group's rollouts (the
    same 40-token prompt, one pair also the same first 6 completion tokens), row 4 another task's prompt that
    shares only the first 30 tokens (the system prompt), row 5 nothing. Returns ids, attention, env_mask, K."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def toks(n):
        return torch.randint(5, 1000, (n,), generator=g).tolist()

    system, group = toks(30), toks(10)
    first = toks(6)
    prompts = [system + group] * 4 + [system + toks(14), toks(25)]
    completions = [first + toks(12), first + toks(17), toks(9), toks(14), toks(11), toks(16)]
    P, K = max(map(len, prompts)), max(map(len, completions))
    ids = torch.zeros(len(prompts), P + K, dtype=torch.long)
    attention = torch.zeros_like(ids)
    env_mask = []
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, P - len(p):P + len(c)] = torch.tensor(p + c)
        attention[i, P - len(p):P + len(c)] = 1
        env_mask.append((torch.rand(len(c), generator=g) < 0.6).int().tolist())
    return ids, attention, env_mask, K


@pytest.mark.parametrize("checkpointing", ["non-reentrant", "reentrant", "off"])
def test_shared_prefix_logps_and_gradients_equal_a_plain_forward_pass(tmp_path, checkpointing):
    """Each prefix that rows share is computed once (muactl/train/shared_prefix.py): the log-probs at the
    policy's tokens and the gradients of a loss over them equal a plain full forward pass's in float32, in
    training mode with gradient checkpointing as GRPO runs it; the body saw fewer tokens than the batch holds.
    Reentrant checkpointing would detach the prefix's keys/values, so there the plain pass runs (same figures)."""
    import torch

    trainer = _policy_token_trainer(tmp_path)
    model = trainer.model
    model.train()
    if checkpointing == "off":
        model.gradient_checkpointing_disable()
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": checkpointing == "reentrant"})
    ids, attention, env_mask, K = _group_batch()
    weights = torch.randn(ids.size(0), K, generator=torch.Generator().manual_seed(1))
    seen = []
    hook = model.get_input_embeddings().register_forward_hook(lambda m, args, out: seen.append(args[0].numel()))

    def grads(loss):
        model.zero_grad(set_to_none=True)
        loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    trainer._scored = env_mask
    logps, entropy, _ = trainer._get_per_token_logps_and_entropies(model, ids, attention, K, compute_entropy=True)
    shared_grads = grads((logps * weights).sum())
    body_tokens = sum(seen)
    hook.remove()
    logits = model(input_ids=ids, attention_mask=attention).logits[:, -K - 1:-1] / 0.7
    plain = torch.log_softmax(logits, -1).gather(-1, ids[:, -K:, None])[..., 0]
    scored = torch.zeros(ids.size(0), K, dtype=torch.bool)
    for i, m in enumerate(env_mask):
        scored[i, :len(m)] = torch.tensor(m, dtype=torch.bool)
    plain_entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    plain_grads = grads((plain * scored * weights).sum())

    assert torch.allclose(logps[scored], plain[scored].detach(), atol=1e-5)
    assert torch.allclose(entropy[scored], plain_entropy[scored].detach(), atol=1e-5)
    for name, g in plain_grads.items():
        assert torch.allclose(shared_grads[name], g, atol=1e-5 * max(1.0, g.abs().max().item())), name
    if checkpointing == "reentrant":
        assert body_tokens >= ids.numel()  # the plain pass (after a prefix pass found detached)
    else:  # the group's 40-token prompt once, not four times
        assert body_tokens <= ids.numel() - 3 * 40, (body_tokens, ids.numel())


def test_plan_shares_groups_rollouts_by_what_they_share():
    """Two groups of one step share their system prompt with each other and their prompt within the group: a
    share per group beats one share of the system prompt; a row sharing little with the rest runs plain."""
    from muactl.train.shared_prefix import MIN_SHARED, Share, plan_shares

    system, a, b = list(range(100)), list(range(1000, 1300)), list(range(2000, 2300))
    rows = [system + a + [7, i] for i in range(3)] + [system + b + [8, i] for i in range(3)] + [list(range(5000, 5400))]
    rows.insert(2, system + b + [8, 9])
    plan = plan_shares(rows)
    assert plan == [Share([0, 1, 3], 401), Share([2, 4, 5, 6], 401), Share([7], 0)]
    assert plan_shares([system[:MIN_SHARED - 1] + [1], system[:MIN_SHARED - 1] + [2]]) == [Share([0, 1], 0)]
    # identical rows keep one token of their own each
    assert plan_shares([system, system]) == [Share([0, 1], 99)]


HEAD_PEAK = """
import resource, sys, torch
from muactl.train.policy_tokens import head_logps
torch.manual_seed(0)
n, vocab = 2048, 32768
head = torch.nn.Linear(16, vocab, bias=False)
rows = torch.randn(n, 16, requires_grad=True)
targets = torch.randint(0, vocab, (n,))
def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
torch.log_softmax(head(rows[:8]), -1)  # allocator and kernels warmed up on a few rows
before = rss()
lp, ent = head_logps(rows, head, targets, 0.7, True, torch.autocast("cpu", enabled=False))
(lp.sum() + ent.sum()).backward()
grew = rss() - before
logits = head(rows[:600]).detach() / 0.7
plain = torch.log_softmax(logits, -1).gather(-1, targets[:600, None])[:, 0]
entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
assert torch.allclose(lp[:600].detach(), plain, atol=1e-5) and torch.allclose(ent[:600].detach(), entropy, atol=1e-4)
print(grew)
"""


@pytest.mark.slow  # a fresh process importing torch and trl
def test_the_lm_head_pass_on_a_cpu_does_not_grow_with_the_batch():
    """The policy tokens' log-probs through the LM head (2,048 tokens, a 32,768 vocabulary): the same as
    log_softmax, and the peak memory bounded by fixed tiles, not by the batch (TRL's CPU tiles of 4,096 rows x
    32,768 made several 256 MB float32 copies here: 2.4 GB). In a fresh process, so that the peak RSS is its own;
    a fixed mmap threshold returns freed tiles to the system at once, so that the figure does not vary by run."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": str(2**20)}
    out = subprocess.run([sys.executable, "-c", HEAD_PEAK], capture_output=True, text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.split()[-1]) < 300, out.stdout  # MB


def test_one_grpo_step_with_policy_token_logps_trains(tmp_path):
    """A real TRL GRPO step (rollout_func with env_mask, as muactl's) through the narrowed log-prob pass:
    finite loss, and the weights move. The episodes are fixed token lists (no environment needed here)."""
    import math

    import torch

    def rollout(prompts, trainer):
        g = torch.Generator().manual_seed(len(prompts))
        completions = [torch.randint(5, 1000, (24,), generator=g).tolist() for _ in prompts]
        masks = [[1] * 6 + [0] * 10 + [1] * 8 for _ in prompts]  # policy turn, user/tool turn, policy turn
        return {"prompt_ids": [[11, 12, 13]] * len(prompts), "completion_ids": completions,
                "logprobs": [[0.0] * 24] * len(prompts), "env_mask": masks}

    def reward(completions, completion_ids, **kw):
        return [float(ids[0] % 2) + 0.1 * i for i, ids in enumerate(completion_ids)]  # differ within the group

    trainer = _policy_token_trainer(tmp_path, rollout_func=rollout, reward=reward, learning_rate=1e-3)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert losses and all(math.isfinite(x) for x in losses)
    moved = [n for n, p in trainer.model.named_parameters() if not torch.equal(p, before[n])]
    assert len(moved) == len(before)


def test_the_sft_anchor_adds_its_weighted_nll_scaled_for_gradient_accumulation(tmp_path):
    """grpo.sft_coef x the NLL of the rows drawn for (global step, micro-batch), divided by the accumulation as TRL
    divides its own loss; the NLL itself is what is logged."""
    import contextlib

    import torch

    from muactl.train.anchor import SFTAnchor

    trainer = _policy_token_trainer(tmp_path)
    rows = [{"input_ids": list(range(10 + i, 40 + 2 * i)), "assistant_masks": [0] * 10 + [1] * (20 + i)} for i in range(6)]
    trainer.anchor = SFTAnchor(rows, coef=0.5, per_update=2, seed=0, pad_id=0)
    trainer.current_gradient_accumulation_steps = 2
    trainer.state.global_step, trainer._step = 3, 5  # the second micro-batch of step 3
    trainer.model.train()
    loss = trainer._anchor_loss(trainer.model)
    with torch.no_grad():
        nll = trainer.anchor.losses(trainer.model, 3, 1, False, contextlib.nullcontext)[0].item()
        other = trainer.anchor.losses(trainer.model, 3, 0, False, contextlib.nullcontext)[0].item()
    assert nll != other  # the micro-batch picks the rows
    assert loss.item() == pytest.approx(0.5 * nll / 2, rel=1e-5)
    assert trainer._metrics["train"]["anchor/nll"] == [pytest.approx(nll, rel=1e-5)]


# ---------------------------------------------------------------- held-out success during training


def test_heldout_set_draws_from_the_test_stream_and_logs_pass1(tmp_path):
    """Template instances for grpo.eval_tasks come from the test seed stream (training never draws there),
    the same ones at every call; the live policy plays each greedily and pass^1 lands in the run's metrics."""
    from muactl.domain.open import open_domain
    from muactl.domain.task_templates import TEST_BASE
    from muactl.episode.user import ScriptedUser
    from muactl.models.generation import load_model
    from muactl.runs.store import RunStore
    from muactl.train.heldout import HeldOut, heldout_tasks
    from muactl.train.recipes import compose

    cfg = compose(None, FAST + ["grpo.eval_every=1", "grpo.eval_tasks=template:all", "grpo.eval_n=3", "db=random",
                                "eval.max_turns=2", "model.max_new_tokens=8"])
    opened = open_domain("bank")
    tasks = heldout_tasks(cfg, opened)
    assert len(tasks) == 3 and all(t.task.origin.db_seed >= TEST_BASE for t in tasks)
    assert [t.task.id for t in heldout_tasks(cfg, opened)] == [t.task.id for t in tasks]  # the same set every time
    lm = load_model("tiny", opened.compiled)
    store = RunStore.create("grpo", "bank", {}, path=tmp_path / "run")
    heldout = HeldOut(cfg, opened, store, lm.tokenizer, ScriptedUser, log=lambda m: None)
    trainer = FakeTrainer(lm.model)
    lm.model.train()
    assert heldout(trainer, 4) == 0.0  # an untrained tiny model solves none
    assert lm.model.training  # left as training found it
    rows = {r["name"]: r for r in store.db["metrics"].rows}
    assert rows["heldout/success"]["step"] == 4 and rows["heldout/success"]["value"] == 0.0
    assert rows["heldout/episodes"]["value"] == 3.0


@pytest.mark.parametrize("override, message", [("grpo.eval_tasks=template:nope", "no template 'nope'"),
                                               ("grpo.loss_type=bnpo", "grpo.loss_type must be one of grpo, dr_grpo, dapo"),
                                               ("grpo.band_low=0.95", "grpo.band_low and grpo.band_high"),
                                               ("grpo.draw_rounds=0", "grpo.draw_rounds must be >= 1"),
                                               ("grpo.eval_tasks=[template:nope]", "no template 'nope'"),
                                               ("grpo.eval_tasks=[no-such-task]", "no task 'no-such-task'"),
                                               ("grpo.eval_every=-1", "grpo.eval_every must be >= 0")])
def test_a_bad_heldout_set_fails_before_a_run_exists(in_tmp, override, message):
    r = runner.invoke(app, ["train", "grpo", *FAST, "grpo.eval_every=2", override, "run_id=bad"])
    assert r.exit_code == 2 and message in r.output, r.output
    assert not (in_tmp / "runs" / "bad").exists()


@pytest.mark.slow
def test_train_grpo_eval_every_logs_a_heldout_curve_and_the_report_draws_it(in_tmp):
    r = runner.invoke(app, ["train", "grpo", *FAST, "grpo.steps=3", "grpo.eval_every=2", "grpo.eval_tasks=[close-ned,move-quin]",
                            "eval.max_turns=3", "model.max_new_tokens=12", "run_id=h1"])
    assert r.exit_code == 0, r.output
    from muactl.runs.store import RunStore

    rows = [r for r in RunStore.open("h1").db["metrics"].rows if r["name"] == "heldout/success"]
    assert sorted(r["step"] for r in rows) == [0, 2, 3]  # before training, every 2 steps, and at the end
    assert "held-out pass^1" in r.output
    r = runner.invoke(app, ["report", "h1"])
    assert r.exit_code == 0
    report = in_tmp / "runs" / "h1" / "report"
    assert (report / "heldout.png").is_file() and "Held-out success during GRPO" in (report / "index.html").read_text()


def test_step_line_reads_the_step_from_trls_logs():
    g = SimpleNamespace(tasks_per_step=2, group_size=4, sft_coef=0.0)
    logs = {"reward": 0.25, "rollout/success": 0.25, "rollout/groups_drawn": 3.0, "rollout/groups_with_signal": 1.0,
            "kl": 0.00123, "entropy": 1.5, "step_time": 12.34, "rollout/all_equal_groups": 2.0, "frac_reward_zero_std": 0.5}
    from muactl.train.grpo import step_line

    assert step_line(3, 10, logs, g) == ("grpo step 3/10: reward 0.25, success 0.25 over 8 rollouts; groups 3 drawn, "
                                         "1 of 2 with signal; KL 0.0012, entropy 1.50; 12.3 s")
    assert "KL -" in step_line(1, 1, {"reward": 0.0}, g)  # beta 0: TRL logs no KL
    anchored = step_line(3, 10, {**logs, "anchor/nll": 0.4567},
                         SimpleNamespace(tasks_per_step=2, group_size=4, sft_coef=1.0, sft_loss="nll"))
    assert anchored.endswith("entropy 1.50, SFT anchor NLL 0.457; 12.3 s"), anchored
    drift = step_line(3, 10, {**logs, "anchor/nll": 0.4567, "anchor/drift": 1.25},
                      SimpleNamespace(tasks_per_step=2, group_size=4, sft_coef=1.0, sft_loss="drift"))
    assert drift.endswith("SFT anchor NLL 0.457 (drift 1.250 nats per conversation); 12.3 s"), drift
    from muactl.train.grpo import signal_note

    note = signal_note(SimpleNamespace(tasks_per_step=1, group_size=4, draw_rounds=1))
    assert note.startswith("a step plays 1 group of 4 rollouts") and "is not re-drawn (grpo.draw_rounds 1)" in note
    assert "re-drawn on another task (up to 3 rounds)" in signal_note(SimpleNamespace(tasks_per_step=2, group_size=4, draw_rounds=3))


def test_a_rollout_plot_names_each_points_tasks_and_says_when_it_has_too_few_points(in_tmp):
    """Issue 27.1: "success 0.5 -> 0.25" drawn from two different tasks read as a decline."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from muactl.runs.report import figure

    fig = figure(plt, [1, 2], [0.5, 0.25], "Task success per GRPO step", "share", "unit",
                 {1: ["move-bo"], 2: ["close-eva", "human-gus"]})
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert "move-bo" in texts and "close-eva, human-gus" in texts
    assert "only 2 points: too few to read a trend" in texts
    many = figure(plt, list(range(1, 41)), [0.5] * 40, "t", "share", "unit", {s: ["move-bo"] for s in range(1, 41)})
    assert not many.axes[0].texts  # 40 points: a curve to read, unlabelled
    plt.close("all")


def test_heldout_curve_has_integer_steps_and_the_training_figures_beside_it(in_tmp):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from muactl.runs.report import heldout_figure, metric_series
    from muactl.runs.store import RunStore

    store = RunStore.create("grpo", "bank", {"grpo": {"eval_every": 2, "eval_tasks": "test"}}, run_id="c")
    for step in (0, 2, 4):
        store.log_metrics(step, {"heldout/success": 0.1 * step})
    for step in (1, 2, 3, 4):
        store.log_metrics(step, {"reward": 0.25 * step, "rollout/all_equal_share": 0.5, "kl": 0.01 * step})
    fig = heldout_figure(plt, metric_series(store))
    success, equal, kl = fig.axes
    assert [line.get_label() for line in success.get_lines()] == ["held-out pass^1 (greedy)", "training reward (sampled)"]
    assert list(success.get_lines()[0].get_xdata()) == [0, 2, 4]
    assert all(float(t).is_integer() for ax in fig.axes for t in ax.get_xticks())
    assert success.get_ylim() == (-0.05, 1.05) and success.get_xlabel() == "training step"
    assert equal.get_ylabel() == "share of groups" and kl.get_ylim()[0] == 0.0
    plt.close("all")
    store.update(status="finished")
    from muactl.runs.report import write_report

    page = write_report("c").read_text()
    assert "<img class=wide src='heldout.png'" in page and "every 2 steps" in page
