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
A wall-clock timeout in a rollout is infra_error too (the machine's speed, not the policy's doing): episodes are
bounded by grpo.max_turns and grpo.max_new_tokens per turn; timeouts are counted per step (rollout/timeouts).

Signal (DAPO's dynamic sampling with a curriculum, `Rollouts._draw`): a group whose scored rewards are all
equal carries no gradient (`has_signal`, the one rule). Each step draws one group per prompt, then re-draws
every group without signal on another template (or training task) for up to grpo.draw_rounds rounds. Pass
rates per template over recent rollouts (`Curriculum`) steer what is drawn: a template whose rate is outside
[grpo.band_low, grpo.band_high] is replaced by one inside (or not yet measured) while there is one. Logged per
step: groups drawn, groups with signal, each template's pass rate, timeouts; TRL's `entropy` is the mean
per-token entropy of the policy's tokens from the update's forward pass (on the weights that sampled them).
`rollout/all_equal_groups` counts groups without signal as first drawn; TRL's `frac_reward_zero_std` is the share
without signal in the update, after re-drawing (`signal_note` says so in the terminal). The terminal shows one
line per step (`step_line`) instead of TRL's raw dicts, which stay in the run's store.

Several domains (a recipe's `domains:`, train/mix.py): one policy; each group's domain is drawn by the domains'
weights from the step's seeded generator, then one of that domain's templates or training tasks (each domain has
its own curriculum, and a re-draw stays in the domain); episodes are stored with their domain, and each step logs
domain/<name>/groups, groups_with_signal, reward and success (`Drawing.domain_figures`).
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..runs.store import RunStore
from .anchor import ANCHOR_LOSSES
from .heldout import HeldOut
from .shaping import episode_reward


# ---------------------------------------------------------------- rollouts


class Rollouts:
    """The rollout_func: task ids in, token-exact episodes out (see the module docstring). Over several domains
    (`playing`, train/mix.py) each group's domain is drawn by the domains' shares, then one of its prompts; a
    group re-drawn for want of signal stays in its domain, so the groups of an update follow the mix."""

    def __init__(self, cfg, opened, store: RunStore, tokenizer, make_user, log=print, playing: list | None = None):
        from .mix import Part, Playing, several

        self.cfg, self.store, self.tokenizer, self.log = cfg, store, tokenizer, log
        g = cfg.grpo
        playing = playing or [Playing(Part(str(cfg.domain), 1.0, cfg), opened, make_user)]
        self.sources = [Source(p, Curriculum(prompt_names(p.part.cfg, p.opened), g.band_low, g.band_high,
                                             window=2 * g.group_size, known=g.group_size, retry=g.band_retry))
                        for p in playing]
        self.several = several(cfg)
        # rollout calls so far in the current step: seeds derive from (step, call), so a run resumed from a
        # checkpoint draws what the uninterrupted run drew
        self.step, self.calls = None, 0
        self.judge = None
        if g.judge:
            from .recipes import api_options
            from ..episode.judge import Judge

            self.judge = Judge(g.judge, api_base=g.judge_api_base, **api_options(cfg))

    # a run over one domain: its one source
    opened = property(lambda self: self.sources[0].opened)
    tasks = property(lambda self: self.sources[0].tasks)
    make_user = property(lambda self: self.sources[0].make_user)

    @property
    def curriculum(self) -> Curriculum:
        return self.sources[0].curriculum

    @curriculum.setter
    def curriculum(self, value: Curriculum) -> None:
        self.sources[0].curriculum = value

    def __call__(self, prompts: list, trainer) -> dict[str, list]:
        from ..episode.agents.local import HFAgent
        from ..models.generation import LocalLM

        g = self.cfg.grpo
        t0 = time.perf_counter()
        model = trainer.accelerator.unwrap_model(trainer.model)
        lm = LocalLM.from_model(model, self.tokenizer)
        lm.autocast = bool(trainer.args.bf16)  # sample as the update computes: bf16 matmuls on float32 weights
        step = trainer.state.global_step
        if step != self.step:
            if self.step is None:  # a fresh or resumed run: the pass rates are those of the episodes stored so far
                self._replay(step)
            self.step, self.calls = step, 0
        self.store.forget_step(step + 1)  # left over from a run killed before this step's checkpoint
        agent = HFAgent("policy", lm=lm, temperature=g.temperature, max_new_tokens=g.max_new_tokens,
                        max_batch=len(prompts), thinking=self.cfg.model.thinking)
        was_training = model.training
        model.eval()
        try:
            drawing = self._draw([_task_id(p) for p in prompts[::g.group_size]], step, agent)
        finally:
            if was_training:
                model.train()
        gen_s = time.perf_counter() - t0
        episodes = [e for grp in drawing.groups for e in grp]
        out = self._batch(episodes)
        for ep, label in zip(drawing.drawn, drawing.origins):  # every episode played, re-drawn groups' too
            self.store.save_episode(ep, step=step + 1, keep_trace=False, domain=label if self.several else None)
        metrics = {**step_figures(episodes, out), **drawing.figures(g), **self._pass_rates(),
                   "rollout/timeouts": float(sum(e.timed_out for e in drawing.drawn)), "time/generation_s": gen_s}
        if self.several:
            metrics.update(drawing.domain_figures(g, [s.label for s in self.sources]))
        for k, v in metrics.items():  # TRL logs these with its own (reward, kl, entropy ...)
            trainer._metrics["train"][k].append(v)
        return out

    def _replay(self, step: int) -> None:
        rows = self.store.episodes()
        for s in self.sources:
            s.curriculum.replay([r for r in rows if r.get("domain") == s.label] if self.several else rows, until_step=step)

    def _pass_rates(self) -> dict[str, float]:
        if not self.several:
            return self.curriculum.figures()
        return {k.replace("rollout/pass_rate/", f"rollout/pass_rate/{s.label}/"): v
                for s in self.sources for k, v in s.curriculum.figures().items()}

    def _first_pick(self, name: str, used: dict[str, set], rng, step: int) -> tuple[Source, str]:
        """A group's domain and what it plays: over one domain the prompt TRL handed in (or another in the
        pass-rate band); over several a domain drawn by share, then one of its prompts, then the band's say."""
        from .mix import draw_part

        if not self.several:
            source = self.sources[0]
        else:
            source = draw_part(rng, self.sources)
            name = rng.choice(source.curriculum.names)
        return source, source.curriculum.choose(name, used[source.label], rng, step)

    def _draw(self, names: list[str], step: int, agent) -> Drawing:
        """DAPO's dynamic sampling over the curriculum: one group per name (a template or a training task), the
        names out of the pass-rate band replaced first; then, up to grpo.draw_rounds rounds, every group without
        signal is drawn again on another name of its domain (a fresh template, not the same one) until each has
        signal."""
        import random

        g = self.cfg.grpo
        size = g.group_size
        rng = random.Random(self.cfg.seed * 7919 + step * 31)
        used: dict[str, set[str]] = {s.label: set() for s in self.sources}
        picks = [self._first_pick(n, used, rng, step) for n in names]
        drawing = Drawing(groups=[[] for _ in picks], domains=[s.label for s, _ in picks])
        pending = list(range(len(picks)))
        for round_ in range(max(1, g.draw_rounds)):
            if round_:
                picks = [(s, s.curriculum.other(n, used[s.label], rng, step)) if i in pending else (s, n)
                         for i, (s, n) in enumerate(picks)]
            rcfg = rollout_config(self.cfg, seed=self.cfg.seed * 1_000_003 + step * 1009 + self.calls)
            jobs = self._jobs([picks[i] for i in pending for _ in range(size)], step)
            played = self._run(jobs, agent, rcfg)
            for k, i in enumerate(pending):
                drawing.groups[i] = played[k * size:(k + 1) * size]
                source, name = picks[i]
                source.curriculum.record(name, drawing.groups[i], step)
            drawing.drawn += played
            drawing.origins += [picks[i][0].label for i in pending for _ in range(size)]
            drawing.rounds += 1
            pending = [i for i in pending if not has_signal(drawing.groups[i], g)]
            if round_ == 0:
                drawing.first_equal = len(pending)
            if not pending:
                break
        drawing.still_equal = len(pending)
        return drawing

    def _batch(self, episodes: list) -> dict[str, list]:
        """TRL's rollout_func output for the episodes, in order."""
        g = self.cfg.grpo
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "episode_reward": []}
        for ep in episodes:
            tr = ep.trace
            if tr is None or not tr.prompt_len:  # the policy never generated (setup failure): nothing to learn
                out["prompt_ids"].append(list(tr.ids if tr and tr.ids else [self.tokenizer.eos_token_id]))
                out["completion_ids"].append([self.tokenizer.eos_token_id])
                out["logprobs"].append([0.0])
                out["env_mask"].append([0])
            else:
                ids, plen = tr.ids, tr.prompt_len
                out["prompt_ids"].append(list(ids[:plen]))
                out["completion_ids"].append(list(ids[plen:]))
                out["logprobs"].append(list(tr.logprobs[plen:]))
                out["env_mask"].append(list(tr.mask[plen:]) if ep.counted else [0] * (len(ids) - plen))
            out["episode_reward"].append(episode_reward(ep, g))
        return out

    def _jobs(self, picks: list[tuple[Source, str]], step: int) -> list:
        """One job per (domain, name). A `template:<id>` name gets a fresh instance per group (a group's names are
        next to each other), or per rollout with grpo.instance_per_rollout, drawn from the train seed stream at a
        place fixed by step and call, on a random database when its domain's db is random."""
        from ..episode.rollout import Job
        from ..domain.task_templates import domain_for, draw, select_templates, stream_seed

        g = self.cfg.grpo
        call = self.calls
        self.calls += 1  # the next call (a re-draw) draws at a new place in the seed stream
        jobs, current = [], None
        for i, (source, name) in enumerate(picks):
            if not name.startswith("template:"):
                t = source.tasks[name]
                jobs.append(Job(t, trial=i, domain=domain_for(source.opened, t), make_user=source.make_user))
                continue
            if i % g.group_size == 0 or g.instance_per_rollout or current is None:
                base = step * 1_000_000 + (call % 100) * 10_000 + i * 10
                db = getattr(source.cfg, "db", "fixed")

                def seed_of(j: int, base=base, db=db) -> tuple[int, int | None]:
                    s = stream_seed("train", self.cfg.seed, base + j)
                    return s, (s if db == "random" else None)

                drawn = draw(source.opened, select_templates(source.opened, name), 1, seed_of, "train", max_tries=10)
                if not drawn.tasks:
                    raise RuntimeError(f"no instance of {name} could be drawn: {drawn.dropped[-1][3]}")
                current = drawn.tasks[0]
            jobs.append(Job(current, trial=i, domain=domain_for(source.opened, current), make_user=source.make_user))
        return jobs

    def _run(self, jobs, agent, rcfg):
        from ..episode.rollout import run_many

        return asyncio.run(run_many(jobs, self.opened.compiled, agent, self.make_user, rcfg, concurrency=len(jobs),
                                    judge=self.judge))


@dataclass
class Source:
    """One domain GRPO draws from: the domain opened for play (its tasks, its users) and the pass rates of
    what its prompts name (its own curriculum)."""

    playing: Any  # train/mix.py's Playing
    curriculum: Curriculum

    def __post_init__(self):
        self.tasks = {t.task.id: t for t in self.playing.opened.tasks}

    label = property(lambda self: self.playing.label)
    share = property(lambda self: self.playing.part.share)
    cfg = property(lambda self: self.playing.part.cfg)
    opened = property(lambda self: self.playing.opened)
    make_user = property(lambda self: self.playing.make_user)


@dataclass
class Drawing:
    """What one step's dynamic sampling drew: the groups it hands TRL (in order) and the domain of each, every
    episode played and the domain of each."""

    groups: list[list]
    domains: list[str] = field(default_factory=list)
    drawn: list = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    rounds: int = 0
    first_equal: int = 0  # groups without signal as first drawn: what the task mix gives
    still_equal: int = 0  # ... in the update

    def figures(self, g) -> dict[str, float]:
        n = max(1, len(self.groups))
        return {"rollout/groups_drawn": len(self.drawn) / g.group_size,
                "rollout/groups_with_signal": float(len(self.groups) - self.still_equal),
                "rollout/draw_rounds": float(self.rounds),
                "rollout/all_equal_groups": float(self.first_equal),
                "rollout/all_equal_share": self.first_equal / n,
                "rollout/equal_after_resample": float(self.still_equal)}

    def domain_figures(self, g, labels: list[str]) -> dict[str, float]:
        """Per domain of a mix: its groups in the update (drawn by share), those with signal, and the reward TRL
        saw and the success of their scored episodes (none when no group of the domain came up)."""
        out = {}
        for label in labels:
            mine = [grp for grp, d in zip(self.groups, self.domains) if d == label]
            scored = [e for grp in mine for e in grp if e.counted]
            out[f"domain/{label}/groups"] = float(len(mine))
            out[f"domain/{label}/groups_with_signal"] = float(sum(has_signal(grp, g) for grp in mine))
            if scored:
                out[f"domain/{label}/reward"] = sum(episode_reward(e, g) for e in scored) / len(scored)
                out[f"domain/{label}/success"] = sum(e.outcome == "success" for e in scored) / len(scored)
        return out


class Curriculum:
    """Pass rates per template (or training task) over its last `window` scored rollouts, and the choice of what
    to draw: names whose rate is in [low, high] or not yet known (fewer than `known` scored rollouts) first.
    With `retry` > 0 a name out of the band is drawn again once `retry` steps passed since it was last played:
    a rate measured on one group (one instance) would otherwise keep its template out for the rest of the run,
    however the policy changes. Rebuilt from the run's stored episodes on resume, so a resumed run draws what
    the uninterrupted one drew."""

    def __init__(self, names: list[str], low: float, high: float, window: int, known: int, retry: int = 0):
        self.names, self.low, self.high, self.window, self.known = sorted(names), low, high, max(1, window), known
        self.retry = retry
        self.recent: dict[str, deque] = {n: deque(maxlen=self.window) for n in self.names}
        self.played_at: dict[str, int] = {}  # the step a name was last played in

    def record(self, name: str, episodes: list, step: int) -> None:
        for ep in episodes:
            if ep.counted:
                self.recent.setdefault(name, deque(maxlen=self.window)).append(float(ep.outcome == "success"))
        self.played_at[name] = step

    def replay(self, stored: list[dict], until_step: int) -> None:
        """Record the stored episodes of steps up to `until_step` (RunStore.episodes rows, in the order saved)."""
        prefixes = sorted(((n.removeprefix("template:") + "-", n) for n in self.names if n.startswith("template:")),
                          key=lambda p: -len(p[0]))
        for row in stored:
            if row["step"] > until_step or row["outcome"] not in ("success", "failure"):
                continue
            tid = row["task_id"]
            name = tid if tid in self.recent else next((n for p, n in prefixes if tid.startswith(p)), None)
            if name is not None:
                self.recent[name].append(float(row["outcome"] == "success"))
                self.played_at[name] = row["step"]

    def rate(self, name: str) -> float | None:
        r = self.recent.get(name)
        return sum(r) / len(r) if r and len(r) >= self.known else None

    def in_band(self, name: str, step: int) -> bool:
        rate = self.rate(name)
        if rate is None or self.low <= rate <= self.high:
            return True
        return self.retry > 0 and step - self.played_at.get(name, step) >= self.retry

    def choose(self, name: str, used: set[str], rng, step: int) -> str:
        """`name` if it is in the band, else another name in the band (one not yet drawn this step first), else `name`."""
        if self.in_band(name, step):
            used.add(name)
            return name
        return self.other(name, used, rng, step, outside_band=False)

    def other(self, name: str, used: set[str], rng, step: int, outside_band: bool = True) -> str:
        """A name other than `name`: in the band and not drawn this step, else in the band; with `outside_band`
        (a re-draw) then one not drawn this step, else any; `name` when there is no other."""
        pool = [n for n in self.names if n != name]
        rng.shuffle(pool)
        tiers = [lambda n: self.in_band(n, step) and n not in used, lambda n: self.in_band(n, step)]
        if outside_band:
            tiers += [lambda n: n not in used, lambda n: True]
        for ok in tiers:
            picked = next((n for n in pool if ok(n)), None)
            if picked is not None:
                used.add(picked)
                return picked
        used.add(name)
        return name

    def figures(self) -> dict[str, float]:
        out = {}
        for name in self.names:
            rate = self.rate(name)
            if rate is not None:
                out[f"rollout/pass_rate/{name.removeprefix('template:')}"] = rate
        return out


def has_signal(group: list, g) -> bool:
    """A group carries a gradient only if the rewards TRL sees differ among its scored episodes: the one rule for
    a group's signal. Excluded episodes (Episode.counted false: infra_error, user_error, a training timeout)
    have no reward, so [1, 1, 1, excluded] has none."""
    return len({episode_reward(e, g) for e in group if e.counted}) > 1


def step_figures(episodes: list, out: dict[str, list]) -> dict[str, float]:
    """The per-step rollout figures of the episodes in the update (TRL averages them over logging steps)."""
    counted = [e for e in episodes if e.counted]
    n = max(1, len(counted))
    calls = sum(e.tool_calls for e in counted)
    return {
        "rollout/success": sum(e.reward for e in counted) / n,
        "rollout/turns": sum(e.turns for e in counted) / n,
        "rollout/tool_errors": sum(e.tool_errors for e in counted) / n,
        "rollout/tool_error_rate": sum(e.tool_errors for e in counted) / calls if calls else 0.0,
        **interaction_figures(counted),
        "rollout/infra_errors": float(sum(e.termination == "infra_error" for e in episodes)),
        "rollout/user_errors": float(sum(e.termination == "user_error" for e in episodes)),
        "rollout/policy_tokens": sum(sum(m) for m in out["env_mask"]) / max(1, len(episodes)),
        "rollout/sequence_tokens": sum(len(p) + len(c) for p, c in zip(out["prompt_ids"], out["completion_ids"])) / max(1, len(episodes)),
    }


def prompt_names(cfg, opened) -> list[str]:
    """What GRPO's prompts name: `template:<id>` per selected template (an instance is drawn per group), or the
    training tasks' ids."""
    from ..domain.task_templates import is_template_spec, select_templates

    if is_template_spec(cfg.tasks):
        return [f"template:{ts.id}" for ts in select_templates(opened, cfg.tasks)]
    return [t.task.id for t in _training_tasks(opened, cfg.synth.tasks)]


def rollout_config(cfg, seed: int):
    """The episode limits of GRPO's rollouts: grpo.max_turns and the shared `episode` settings."""
    from ..episode.rollout import RolloutConfig

    e = cfg.episode
    return RolloutConfig(max_turns=cfg.grpo.max_turns, max_tool_errors=e.max_tool_errors, timeout_s=e.timeout_s,
                         opening=e.opening, seed=seed, track_progress=cfg.grpo.reward == "userrl", timeout_excluded=True)


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


LOSS_TYPES = ("grpo", "dr_grpo", "dapo")


def trainer_args(cfg, out_dir: Path, cuda: bool, bf16: bool):
    """TRL's GRPOConfig from the grpo.* settings. grpo.loss_type says how the token losses of a batch add up:
    grpo (the default) averages each episode over its policy tokens, then over episodes, so a long failure and a
    short success weigh alike; dapo sums over every policy token of the batch (an episode weighs by its length:
    in a refusal group the long tool-calling failures outweighed the short successes about 5:1, issue 26);
    dr_grpo sums and divides by a constant (max_completion_length x episodes)."""
    from trl import GRPOConfig

    from ..models.precision import gradient_checkpointing

    g = cfg.grpo
    batch = g.group_size * g.tasks_per_step
    return GRPOConfig(
        # transformers reads a warmup_steps below 1 as a share of the steps
        output_dir=str(out_dir), max_steps=g.steps, learning_rate=g.lr, warmup_steps=g.warmup_ratio, beta=g.beta,
        epsilon=g.epsilon, temperature=g.temperature, num_generations=g.group_size, per_device_train_batch_size=batch,
        gradient_accumulation_steps=g.grad_accum, generation_batch_size=batch * g.grad_accum,
        max_completion_length=g.max_turns * (g.max_new_tokens + 256), logging_steps=1, save_steps=g.save_steps,
        save_total_limit=2, seed=cfg.seed, data_seed=cfg.seed, report_to=["tensorboard"], use_cpu=not cuda,
        bf16=bf16, gradient_checkpointing=gradient_checkpointing(cfg.model.gradient_checkpointing, "grpo"),
        loss_type=g.loss_type, scale_rewards="group", log_completions=False,
        disable_tqdm=os.environ.get("MUACTL_NO_PROGRESS") == "1", shuffle_dataset=True,
    )


def signal_note(g) -> str:
    """What the step line's groups are, and why two of the run's metrics on them may differ, said once."""
    redraw = (f"is re-drawn on another task (up to {g.draw_rounds} rounds)" if g.draw_rounds > 1
              else "is not re-drawn (grpo.draw_rounds 1)")
    return (f"a step plays {g.tasks_per_step} group{'s' if g.tasks_per_step != 1 else ''} of {g.group_size} rollouts; "
            f"a group whose rewards are all equal has no signal and {redraw}. 'with signal' counts the groups in "
            "the update. In the run's metrics, "
            "rollout/all_equal_groups counts the groups without signal as first drawn, TRL's frac_reward_zero_std "
            "the share without signal in the update, after re-drawing: the two differ when a re-draw found signal.")


FEW_STEPS = 10


def few_steps_note(steps: int) -> str:
    """What a run of a few GRPO steps (the demo's two) can and cannot show, said before it starts."""
    return (f"{steps} step{'s' if steps != 1 else ''} can show that the loop works end to end (rollouts against the "
            "simulated user, rewards, an update, a checkpoint), not whether the policy learns: each step scores a "
            "few episodes of tasks drawn afresh, so a change from one step to the next is mostly which tasks came up. "
            "Whether GRPO helped is the eval stage's before/after (or a held-out curve: grpo.eval_every).")


def step_line(step: int, steps: int, logs: dict, g) -> str:
    """One GRPO step as a line: TRL's ~40 figures for it stay in the run's store (and TensorBoard)."""

    def num(key: str, fmt: str) -> str:
        value = logs.get(key)
        return "-" if value is None else format(float(value), fmt)

    anchor = f", SFT anchor NLL {num('anchor/nll', '.3f')}" if g.sft_coef else ""
    if g.sft_coef and g.sft_loss == "drift":
        anchor += f" (drift {num('anchor/drift', '.3f')} nats per conversation)"
    return (f"grpo step {step}/{steps}: reward {num('reward', '.2f')}, success {num('rollout/success', '.2f')} "
            f"over {g.tasks_per_step * g.group_size} rollouts; groups {num('rollout/groups_drawn', '.0f')} drawn, "
            f"{num('rollout/groups_with_signal', '.0f')} of {g.tasks_per_step} with signal; KL {num('kl', '.4f')}, "
            f"entropy {num('entropy', '.2f')}{anchor}; {num('step_time', '.1f')} s")


def check_settings(cfg) -> None:
    """The grpo.* values TRL or the sampler would reject late, as a UsageError naming the key."""
    from ..errors import UsageError

    g = cfg.grpo
    problems = []
    if g.loss_type not in LOSS_TYPES:
        problems.append(f"grpo.loss_type must be one of {', '.join(LOSS_TYPES)}, not '{g.loss_type}'")
    if g.band_retry < 0:
        problems.append(f"grpo.band_retry must be 0 (never) or a number of steps, not {g.band_retry}")
    if not 0 <= g.band_low <= g.band_high <= 1:
        problems.append(f"grpo.band_low and grpo.band_high must satisfy 0 <= low <= high <= 1, not {g.band_low} and {g.band_high}")
    if g.draw_rounds < 1:
        problems.append(f"grpo.draw_rounds must be >= 1 (1: no re-draw), not {g.draw_rounds}")
    if not 0 <= g.warmup_ratio < 1:
        problems.append(f"grpo.warmup_ratio must be in [0, 1), not {g.warmup_ratio}")
    if g.beta < 0:
        problems.append(f"grpo.beta must be >= 0, not {g.beta}")
    if g.temperature <= 0:
        problems.append(f"grpo.temperature must be > 0 (GRPO samples), not {g.temperature}")
    if not math.isfinite(g.sft_coef) or g.sft_coef < 0:
        problems.append(f"grpo.sft_coef must be a number >= 0 (0: no SFT anchor), not {g.sft_coef}")
    if g.sft_loss not in ANCHOR_LOSSES:
        problems.append(f"grpo.sft_loss must be one of {', '.join(ANCHOR_LOSSES)}, not '{g.sft_loss}'")
    elif g.sft_loss != "nll" and not g.sft_coef:
        problems.append(f"grpo.sft_loss={g.sft_loss} names the SFT anchor's loss, which is off: set grpo.sft_coef > 0 "
                        "(its weight)")
    if g.sft_rows < 1:
        problems.append(f"grpo.sft_rows must be >= 1, not {g.sft_rows}")
    if problems:
        raise UsageError("; ".join(problems))


def sft_anchor(cfg, trainer, tokenizer, sft_data, log):
    """The SFT anchor of grpo.sft_coef (anchor.py), refused before any step where it cannot run."""
    from ..errors import UsageError
    from .anchor import SFTAnchor, check_anchor_data

    check_anchor_data(sft_data, cfg.grpo.sft_coef)
    if (trainer.accelerator.num_processes > 1 or trainer.args.n_gpu > 1
            or trainer.plain_causal_lm(trainer.model) is None):
        raise UsageError("grpo.sft_coef runs in one process on one device and a plain causal LM (no DDP/FSDP/DataParallel, "
                         "no adapter on the LM head, no logit scaling); set grpo.sft_coef=0")
    anchor = SFTAnchor.from_data(Path(sft_data), tokenizer, cfg.sft.max_length, cfg.grpo.sft_coef, cfg.grpo.sft_rows,
                                 cfg.seed, log, cfg.grpo.sft_loss)
    if anchor.loss == "drift":  # before train(): a resumed run loads its checkpoint there, after this
        began = time.monotonic()
        anchor.remember_start(trainer.plain_causal_lm(trainer.model), trainer.args.cast_lm_head_to_fp32,
                              trainer.accelerator.autocast, cfg.grpo.steps, cfg.grpo.grad_accum)
        log(f"grpo: SFT anchor: the starting policy's NLL on the {len(anchor.start)} batches the run will draw "
            f"({time.monotonic() - began:.1f} s)")
    return anchor


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


def reward_from_episode(prompts, completions, episode_reward, **kwargs) -> list[float | None]:
    """TRL reward function: the rollout already scored each episode."""
    return list(episode_reward)


# ---------------------------------------------------------------- training


def run_grpo(cfg, store: RunStore, model_path: str | Path, log=print, final: Path | None = None,
             sft_data: str | Path | None = None) -> tuple[Path, dict[str, Any]]:
    """GRPO from `model_path` (a checkpoint, tiny or smollm2-135m); returns checkpoint-final and stats.
    `sft_data`: the SFT data the anchor (grpo.sft_coef > 0) draws from."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from ..models.folder import load_tokenizer
    from ..models.memory import step_memory
    from ..models.precision import import_torch, precision_note, training_precision
    from ..models.registry import resolve
    from .mix import open_parts, several

    torch = import_torch()
    import datasets
    from datasets import Dataset

    datasets.disable_progress_bars()  # one-off map/filter bars of a few ms each only clutter the log
    from transformers import AutoModelForCausalLM, TrainerCallback

    from .policy_tokens import PolicyTokenGRPOTrainer

    g = cfg.grpo
    check_settings(cfg)
    playing = open_parts(cfg, user_factory)
    opened = playing[0].opened
    # over several domains the prompts only count the steps (each group's domain is drawn by share)
    names = [f"{p.label}/{n}" if several(cfg) else n for p in playing for n in prompt_names(p.part.cfg, p.opened)]
    path = resolve(str(model_path), [p.opened.compiled for p in playing] if several(cfg) else opened.compiled)
    tokenizer = load_tokenizer(path)
    cuda = torch.cuda.is_available()
    dtype, bf16 = training_precision(cfg.model.dtype)
    log(f"grpo: {precision_note(cfg.model.dtype)}")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": name}]} for name in names])
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(store.path / "tensorboard" / "grpo")
    args = trainer_args(cfg, store.path / "grpo", cuda=cuda, bf16=bf16)
    rollouts = Rollouts(cfg, opened, store, tokenizer, playing[0].make_user, log, playing=playing)
    heldout = HeldOut(cfg, opened, store, tokenizer, playing[0].make_user, rollouts.judge, log,
                      playing=playing) if g.eval_every else None
    peft_config = None
    if g.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM")

    class ToRunStore(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs:
                store.log_metrics(state.global_step, {k: v for k, v in logs.items() if isinstance(v, (int, float)) and math.isfinite(v)})

    class MemoryEachStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            store.log_metrics(state.global_step, step_memory())

    class HeldOutEvery(TrainerCallback):
        """Held-out success before the first step, every grpo.eval_every steps and after the last one."""

        def on_train_begin(self, args, state, control, **kw):
            if state.global_step == 0:
                heldout(trainer, 0)

        def on_step_end(self, args, state, control, **kw):
            if state.global_step % g.eval_every == 0 or state.global_step >= state.max_steps:
                heldout(trainer, state.global_step)

    from .checkpoints import card_on_save, quiet_trl_logs, train_and_save

    log(f"grpo: {signal_note(g)}")
    if g.steps < FEW_STEPS:
        log(f"grpo: {few_steps_note(g.steps)}")
    trainer = PolicyTokenGRPOTrainer(model=model, args=args, reward_funcs=[reward_from_episode], train_dataset=dataset,
                                     processing_class=tokenizer, rollout_func=rollouts, peft_config=peft_config,
                                     callbacks=[ToRunStore(), MemoryEachStep(), card_on_save(tokenizer)]
                                     + ([HeldOutEvery()] if heldout else []))
    quiet_trl_logs(trainer, lambda state, logs: log(step_line(state.global_step, state.max_steps, logs, g)))
    if g.sft_coef:
        trainer.anchor = sft_anchor(cfg, trainer, tokenizer, sft_data, log)

    final = final or store.path / "checkpoint-final"
    result, seconds = train_and_save(trainer, tokenizer, store.path / "grpo", final, g.lora, True, log, "grpo")
    stats = {"steps": result.global_step, "seconds": round(seconds, 1), "train_loss": result.training_loss}
    log(f"grpo: {stats}")
    return final, stats
