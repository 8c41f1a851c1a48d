"""Held-out success while GRPO trains (grpo.eval_every): the set, and the greedy pass of the live policy over it."""

from __future__ import annotations

import asyncio
import time

from ..runs.store import RunStore


class HeldOut:
    """Held-out success during training (grpo.eval_every): the live policy plays every held-out task once,
    greedily, with the eval stage's limits (eval.max_turns, model.max_new_tokens), the run's user and judge;
    pass^1 (muactl/runs/summary.py) is logged as heldout/success at the step. The set is drawn once, so every
    point of the curve scores the same tasks: a split or task ids, or template instances from the test seed
    stream, which training never draws from (muactl/domain/task_templates.py), on random databases when db=random.
    Over several domains (`playing`, train/mix.py) each domain's set is its own, played with its user; the figure
    is over all their tasks, and each domain's is logged as domain/<name>/heldout_success."""

    def __init__(self, cfg, opened, store: RunStore, tokenizer, make_user, judge=None, log=print,
                 playing: list | None = None):
        from ..domain.task_templates import domain_for
        from .mix import Part, Playing, several

        self.cfg, self.opened, self.store, self.tokenizer, self.make_user, self.judge, self.log = \
            cfg, opened, store, tokenizer, make_user, judge, log
        self.several = several(cfg)
        playing = playing or [Playing(Part(str(cfg.domain), 1.0, cfg), opened, make_user)]
        # (task, its database, its user, its domain's label)
        self.tasks = [(t, domain_for(p.opened, t), p.make_user, p.label)
                      for p in playing for t in heldout_tasks(p.part.cfg, p.opened)]

    def __call__(self, trainer, step: int) -> float | None:
        from ..episode.agents.local import HFAgent
        from ..episode.rollout import Job, RolloutConfig, run_many
        from ..models.generation import LocalLM
        from ..runs.summary import pass_hat_k

        t0 = time.perf_counter()
        cfg = self.cfg
        model = trainer.accelerator.unwrap_model(trainer.model)
        lm = LocalLM.from_model(model, self.tokenizer)
        lm.autocast = bool(trainer.args.bf16)  # as the rollouts generate
        agent = HFAgent("policy", lm=lm, temperature=0.0, max_new_tokens=cfg.model.max_new_tokens,
                        max_batch=cfg.eval.concurrency, thinking=cfg.model.thinking)
        lim = cfg.episode
        rcfg = RolloutConfig(max_turns=cfg.eval.max_turns, max_tool_errors=lim.max_tool_errors, timeout_s=lim.timeout_s,
                             opening=lim.opening, seed=cfg.seed)  # the same users' draws at every step
        # an evaluation: a wall-clock timeout is scored (`timeout`), as in muactl eval, not excluded as in the rollouts
        jobs = [Job(t, trial=0, domain=d, make_user=u) for t, d, u, _ in self.tasks]
        was_training = model.training
        model.eval()
        try:
            episodes = asyncio.run(run_many(jobs, self.opened.compiled, agent, self.make_user, rcfg,
                                            concurrency=cfg.eval.concurrency, judge=self.judge))
        finally:
            if was_training:
                model.train()
        # task ids are a domain's own: over several, each is counted with its domain's label
        counts = {(label, ep.task_id): (1, int(ep.outcome == "success"))
                  for ep, (*_, label) in zip(episodes, self.tasks) if ep.counted}
        success = pass_hat_k(counts, 1)
        metrics = {"heldout/episodes": float(len(counts)), "time/heldout_s": time.perf_counter() - t0}
        if success is not None:  # every episode excluded (a user or API failing): no figure, not a zero
            metrics["heldout/success"] = success
        for label in dict.fromkeys(label for *_, label in self.tasks) if self.several else ():
            mine = pass_hat_k({k: v for k, v in counts.items() if k[0] == label}, 1)
            if mine is not None:
                metrics[f"domain/{label}/heldout_success"] = mine
        self.store.log_metrics(step, metrics)
        self.log(f"grpo: step {step}: held-out pass^1 {'-' if success is None else f'{success:.3f}'} "
                 f"over {len(counts)} of {len(jobs)} tasks ({metrics['time/heldout_s']:.0f} s)")
        return success


def heldout_tasks(cfg, opened, draw: bool = True) -> list:
    """The held-out set grpo.eval_tasks names (see HeldOut); draw=False only checks the names."""
    from ..errors import UsageError
    from ..domain.task_templates import draw_stream, is_template_spec, select_templates
    from ..eval.evaluate import select_tasks

    g = cfg.grpo
    if g.eval_every < 0 or g.eval_n < 1:
        raise UsageError(f"grpo.eval_every must be >= 0 (0: off) and grpo.eval_n >= 1, not {g.eval_every} and {g.eval_n}")
    spec = g.eval_tasks if isinstance(g.eval_tasks, str) else [str(t) for t in g.eval_tasks]
    try:
        if is_template_spec(spec):
            spec = spec if isinstance(spec, str) else spec[0]
            if not draw:
                select_templates(opened, spec)  # an unknown template is an error before anything runs
                return []
            return draw_stream(opened, spec, g.eval_n, cfg.seed, cfg.db, split="test").tasks
        if isinstance(spec, str):
            return select_tasks(opened, spec, [])
        return select_tasks(opened, None, spec)
    except UsageError as e:
        raise UsageError(f"grpo.eval_tasks: {e}") from None
