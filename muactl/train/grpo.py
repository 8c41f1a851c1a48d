"""GRPO with the simulated user in the loop (MUA-RL's RL phase), on TRL's GRPOTrainer.

Each training prompt names a task. TRL repeats it `group_size` times and hands the batch to
`rollout_func`, which runs that many full conversations with the current policy through the episode
engine (policy <-> simulated user <-> tools on a sandboxed database) and returns, per episode:

    prompt_ids      everything before the policy's first sampled token (system, tools, greeting, user)
    completion_ids  the rest of the conversation: the policy's turns AND the user/tool turns between them
    env_mask        1 on tokens the policy sampled (its turns and their <|im_end|>), 0 on user/tool tokens
    logprobs        the sampling logprobs (0 where env_mask is 0)

so the policy-gradient loss touches only the policy's own tokens while conditioning on everything.
Steps: rollout (this file) -> rewards -> group-normalized advantages and the clipped update (TRL, with
log-probs computed at the policy's tokens only: policy_tokens.py).

Rewards:
- binary (default, MUA-RL): 1 if the task succeeded (docs/contracts.md, "Reward"), else 0.
- userrl (UserRL's turn-level shaping): per-turn rewards r_t from the episode's records,
      r_t = (d_{t-1} - d_t) / max(d_0, 1)  - 0.1 * [tool error in turn t],  plus the task reward on the last turn,
  where d_t is the number of rows that differ from the gold end state after turn t. Turn credit:
      equalized:   c_t = (1/T) * sum_k r_k                       (every turn the same)
      exponential: c_t = gamma^(T-t) * r_t                        (later turns weigh more)
      r2g:         c_t = sum_{k>=t} gamma^(k-t) * r_k             (reward-to-go)
  Trajectory score: mean_t c_t, or r2g: c_1 (the discounted return from the first turn).
  TRL normalizes the scores within each group (mean and std), which gives the advantage.
Departures from the paper: advantages are per sequence (TRL), so turn credit acts through the
trajectory score rather than per-token advantages. Excluded episodes (infra_error, user_error) get reward None
(TRL drops them from the group baseline, their advantage is 0) and an all-zero env_mask.
Groups whose rewards are all equal carry no signal; they are counted, and with `resample_equal_groups`
(the default) re-run once on another training task (`Rollouts._other_jobs`).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from pathlib import Path
from typing import Any

from ..runs.store import RunStore
from .heldout import HeldOut
from .shaping import episode_reward


# ---------------------------------------------------------------- rollouts


class Rollouts:
    """The rollout_func: task ids in, token-exact episodes out (see the module docstring)."""

    def __init__(self, cfg, opened, store: RunStore, tokenizer, make_user, log=print):
        self.cfg, self.opened, self.store, self.tokenizer, self.make_user, self.log = cfg, opened, store, tokenizer, make_user, log
        self.tasks = {t.task.id: t for t in opened.tasks}
        # rollout calls so far in the current step: seeds derive from (step, call), so a run resumed from a
        # checkpoint draws what the uninterrupted run drew
        self.step, self.calls = None, 0
        self.judge = None
        if cfg.grpo.judge:
            from .recipes import api_options
            from ..episode.judge import Judge

            self.judge = Judge(cfg.grpo.judge, api_base=cfg.grpo.judge_api_base, **api_options(cfg))

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        from ..episode.agents.local import HFAgent
        from ..models.generation import LocalLM
        from ..episode.rollout import Job, run_many

        g = self.cfg.grpo
        t0 = time.perf_counter()
        model = trainer.accelerator.unwrap_model(trainer.model)
        lm = LocalLM.from_model(model, self.tokenizer)
        lm.autocast = bool(trainer.args.bf16) and lm.device == "cpu"  # sample as the update computes: bf16 matmuls
        task_ids = [_task_id(p) for p in prompts]
        step = trainer.state.global_step
        if step != self.step:
            self.step, self.calls = step, 0
        rcfg = rollout_config(self.cfg, seed=self.cfg.seed * 1_000_003 + step * 1009 + self.calls)
        self.calls += 1
        jobs = self._jobs(task_ids, step, Job)
        agent = HFAgent("policy", lm=lm, temperature=g.temperature, max_new_tokens=g.max_new_tokens, max_batch=len(jobs))
        was_training = model.training
        model.eval()
        try:
            episodes = self._run(run_many, jobs, agent, rcfg)
            groups = _groups(episodes, g.group_size)
            equal = [i for i, grp in enumerate(groups) if _all_equal(grp)]
            still_equal = len(equal)
            if g.resample_equal_groups and equal:
                redo = self._other_jobs([task_ids[i * g.group_size] for i in equal], set(task_ids), step, Job)
                rcfg.seed += 7919
                again = self._run(run_many, redo, agent, rcfg)
                for k, i in enumerate(equal):
                    groups[i] = again[k * g.group_size:(k + 1) * g.group_size]
                episodes = [e for grp in groups for e in grp]
                still_equal = sum(_all_equal(groups[i]) for i in equal)
        finally:
            if was_training:
                model.train()
        gen_s = time.perf_counter() - t0
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "episode_reward": []}
        for ep in episodes:
            tr = ep.trace
            if tr is None or not tr.prompt_len:  # the policy never generated (setup failure): nothing to learn
                ids, mask, lps, plen = (tr.ids if tr else [self.tokenizer.eos_token_id]), None, None, None
            else:
                ids, mask, lps, plen = tr.ids, tr.mask, tr.logprobs, tr.prompt_len
            if plen is None:
                out["prompt_ids"].append(list(ids))
                out["completion_ids"].append([self.tokenizer.eos_token_id])
                out["logprobs"].append([0.0])
                out["env_mask"].append([0])
            else:
                out["prompt_ids"].append(list(ids[:plen]))
                out["completion_ids"].append(list(ids[plen:]))
                out["logprobs"].append(list(lps[plen:]))
                out["env_mask"].append(list(mask[plen:]) if ep.counted else [0] * (len(ids) - plen))
            out["episode_reward"].append(episode_reward(ep, g))
        self.store.forget_step(step + 1)  # left over from a run killed before this step's checkpoint
        for ep in episodes:
            self.store.save_episode(ep, step=step + 1, keep_trace=False)
        counted = [e for e in episodes if e.counted]
        calls = sum(e.tool_calls for e in counted)
        metrics = {
            "rollout/success": sum(e.reward for e in counted) / max(1, len(counted)),
            "rollout/turns": sum(e.turns for e in counted) / max(1, len(counted)),
            "rollout/tool_errors": sum(e.tool_errors for e in counted) / max(1, len(counted)),
            "rollout/tool_error_rate": sum(e.tool_errors for e in counted) / calls if calls else 0.0,
            **interaction_figures(counted),
            "rollout/all_equal_groups": float(len(equal)),
            "rollout/all_equal_share": len(equal) / max(1, len(groups)),  # before resampling: what the task mix gives
            "rollout/equal_after_resample": float(still_equal),
            "rollout/infra_errors": float(sum(e.termination == "infra_error" for e in episodes)),
            "rollout/user_errors": float(sum(e.termination == "user_error" for e in episodes)),
            "rollout/policy_tokens": sum(sum(m) for m in out["env_mask"]) / max(1, len(episodes)),
            "rollout/sequence_tokens": sum(len(p) + len(c) for p, c in zip(out["prompt_ids"], out["completion_ids"])) / max(1, len(episodes)),
            "time/generation_s": gen_s,
        }
        for k, v in metrics.items():  # TRL logs these with its own (reward, kl, entropy ...)
            trainer._metrics["train"][k].append(v)
        return out

    def _jobs(self, task_ids: list[str], step: int, Job) -> list:
        """One job per prompt. A `template:<id>` prompt gets a fresh instance per group (TRL puts a group's
        prompts next to each other), drawn from the train seed stream at a place fixed by step and call."""
        from ..domain.task_templates import domain_for, draw, select_templates, stream_seed

        size = self.cfg.grpo.group_size
        db = getattr(self.cfg, "db", "fixed")
        jobs, current = [], None
        for i, tid in enumerate(task_ids):
            if not tid.startswith("template:"):
                t = self.tasks[tid]
                jobs.append(Job(t, trial=i, domain=domain_for(self.opened, t)))
                continue
            if i % size == 0 or current is None:
                base = step * 100_000 + (self.calls % 100) * 1000 + (i // size) * 10

                def seed_of(j: int, base=base) -> tuple[int, int | None]:
                    s = stream_seed("train", self.cfg.seed, base + j)
                    return s, (s if db == "random" else None)

                drawn = draw(self.opened, select_templates(self.opened, tid), 1, seed_of, "train", max_tries=10)
                if not drawn.tasks:
                    raise RuntimeError(f"no instance of {tid} could be drawn: {drawn.dropped[-1][3]}")
                current = drawn.tasks[0]
            jobs.append(Job(current, trial=i, domain=domain_for(self.opened, current)))
        return jobs

    def _other_jobs(self, task_ids: list[str], used: set[str], step: int, Job) -> list:
        """Replacements for groups without signal (all rewards equal): a task the model always solves or
        always fails teaches nothing, so each such group is re-run once on another training task not in
        this step (a template group on a fresh instance of its template), DAPO's dynamic sampling, simplified."""
        import random

        size = self.cfg.grpo.group_size
        pool = sorted({t.task.id for t in _training_tasks(self.opened, self.cfg.synth.tasks)} - used)
        random.Random(self.cfg.seed * 7919 + step * 31 + self.calls).shuffle(pool)
        self.calls += 1  # template groups draw at a new place in the seed stream
        chosen = []
        for tid in task_ids:
            chosen.append(tid if tid.startswith("template:") or not pool else pool.pop())
        return self._jobs([tid for tid in chosen for _ in range(size)], step, Job)

    def _run(self, run_many, jobs, agent, rcfg):
        return asyncio.run(run_many(jobs, self.opened.compiled, agent, self.make_user, rcfg, concurrency=len(jobs),
                                    judge=self.judge))


def rollout_config(cfg, seed: int):
    """The episode limits of GRPO's rollouts: grpo.max_turns and the shared `episode` settings."""
    from ..episode.rollout import RolloutConfig

    e = cfg.episode
    return RolloutConfig(max_turns=cfg.grpo.max_turns, max_tool_errors=e.max_tool_errors, timeout_s=e.timeout_s,
                         opening=e.opening, seed=seed, track_progress=cfg.grpo.reward == "userrl")


def user_factory(cfg):
    """A fresh user simulator per episode: scripted, or an LLM with the `api` settings."""
    from .recipes import api_options
    from ..episode.user import make_user

    u = cfg.user
    if u.kind == "scripted":
        return lambda: make_user("scripted")
    options = api_options(cfg)
    return lambda: make_user(str(u.model), api_base=u.api_base, temperature=u.temperature, **options)


def interaction_figures(episodes: list) -> dict[str, float]:
    """UserRL's interaction figures of a step's episodes (muactl/episode/fidelity.py), and how often the
    simulated user behaved (every fidelity check that applied held)."""
    from ..episode.fidelity import faithful

    n = max(1, len(episodes))
    out = {"rollout/effective_turns": sum(e.interaction["effective_turns"] for e in episodes) / n,
           "rollout/user_turns": sum(e.interaction["user_turns"] for e in episodes) / n,
           "rollout/user_faithful": sum(faithful(e.fidelity) for e in episodes) / n}
    firsts = [e.interaction["first_correct_write"] for e in episodes if e.interaction["first_correct_write"] is not None]
    if firsts:  # a turn number: no write, no figure (TRL averages what is logged)
        out["rollout/first_correct_write"] = sum(firsts) / len(firsts)
    return out


def _training_tasks(opened, synth_tasks) -> list:
    """The task files GRPO draws from: the split the synth stage used (train unless it named another),
    else every task outside the test split. Never the test split by accident."""
    split = synth_tasks if isinstance(synth_tasks, str) and not synth_tasks.startswith("template:") else "train"
    tasks = [t for t in opened.tasks if split == "all" or t.split == split]
    tasks = tasks or [t for t in opened.tasks if t.split != "test"]
    if not tasks:
        from ..errors import UsageError

        raise UsageError(f"{opened.ref.name} has no tasks to train on outside its test split; add tasks/{opened.ref.name}/train.yaml "
                         "or train on templates (tasks=template:all)")
    return tasks


def _task_id(prompt: Any) -> str:
    if isinstance(prompt, list):
        return prompt[-1]["content"]
    return str(prompt)


def _all_equal(group: list) -> bool:
    return len({e.reward for e in group if e.termination != "infra_error"}) <= 1


def _groups(episodes: list, size: int) -> list[list]:
    return [episodes[i:i + size] for i in range(0, len(episodes), size)]


def reward_from_episode(prompts, completions, episode_reward, **kwargs) -> list[float | None]:
    """TRL reward function: the rollout already scored each episode."""
    return list(episode_reward)


# ---------------------------------------------------------------- training


def run_grpo(cfg, store: RunStore, model_path: str | Path, log=print,
             final: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """GRPO from `model_path` (a checkpoint, tiny or smollm2-135m); returns checkpoint-final and stats."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from ..models.folder import load_tokenizer
    from ..models.precision import gradient_checkpointing, import_torch, precision_note, training_precision
    from ..models.registry import resolve
    from ..domain.open import open_domain

    torch = import_torch()
    import datasets
    from datasets import Dataset

    datasets.disable_progress_bars()  # one-off map/filter bars of a few ms each only clutter the log
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig

    from .policy_tokens import PolicyTokenGRPOTrainer

    g = cfg.grpo
    opened = open_domain(cfg.domain, trust=cfg.trust)
    from ..domain.task_templates import is_template_spec, select_templates

    if is_template_spec(cfg.tasks):  # prompts name templates; Rollouts draws an instance per group
        names = [f"template:{ts.id}" for ts in select_templates(opened, cfg.tasks)]
    else:
        names = [t.task.id for t in _training_tasks(opened, cfg.synth.tasks)]
    path = resolve(str(model_path), opened.compiled)
    tokenizer = load_tokenizer(path)
    cuda = torch.cuda.is_available()
    dtype, bf16 = training_precision(cfg.model.dtype)
    log(f"grpo: {precision_note(cfg.model.dtype)}")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": name}]} for name in names])
    out_dir = store.path / "grpo"
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(store.path / "tensorboard" / "grpo")
    batch = g.group_size * g.tasks_per_step
    args = GRPOConfig(
        output_dir=str(out_dir), max_steps=g.steps, learning_rate=g.lr, beta=g.beta, epsilon=g.epsilon,
        temperature=g.temperature, num_generations=g.group_size, per_device_train_batch_size=batch,
        gradient_accumulation_steps=g.grad_accum, generation_batch_size=batch * g.grad_accum,
        max_completion_length=g.max_turns * (g.max_new_tokens + 256), logging_steps=1, save_steps=g.save_steps,
        save_total_limit=2, seed=cfg.seed, data_seed=cfg.seed, report_to=["tensorboard"], use_cpu=not cuda,
        bf16=bf16, gradient_checkpointing=gradient_checkpointing(cfg.model.gradient_checkpointing, "grpo"), loss_type="dapo", scale_rewards="group", log_completions=False,
        disable_tqdm=os.environ.get("MUACTL_NO_PROGRESS") == "1", shuffle_dataset=True,
    )
    rollouts = Rollouts(cfg, opened, store, tokenizer, user_factory(cfg), log)
    heldout = HeldOut(cfg, opened, store, tokenizer, user_factory(cfg), rollouts.judge, log) if g.eval_every else None
    peft_config = None
    if g.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")

    class ToRunStore(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs:
                store.log_metrics(state.global_step, {k: v for k, v in logs.items() if isinstance(v, (int, float)) and math.isfinite(v)})

    class HeldOutEvery(TrainerCallback):
        """Held-out success before the first step, every grpo.eval_every steps and after the last one."""

        def on_train_begin(self, args, state, control, **kw):
            if state.global_step == 0:
                heldout(trainer, 0)

        def on_step_end(self, args, state, control, **kw):
            if state.global_step % g.eval_every == 0 or state.global_step >= state.max_steps:
                heldout(trainer, state.global_step)

    from .checkpoints import card_on_save, train_and_save

    trainer = PolicyTokenGRPOTrainer(model=model, args=args, reward_funcs=[reward_from_episode], train_dataset=dataset,
                                     processing_class=tokenizer, rollout_func=rollouts, peft_config=peft_config,
                                     callbacks=[ToRunStore(), card_on_save(tokenizer)] + ([HeldOutEvery()] if heldout else []))

    final = final or store.path / "checkpoint-final"
    result, seconds = train_and_save(trainer, tokenizer, out_dir, final, g.lora, True, log, "grpo")
    stats = {"steps": result.global_step, "seconds": round(seconds, 1), "train_loss": result.training_loss}
    log(f"grpo: {stats}")
    return final, stats
