"""`muactl train CONFIG`: the MUA-RL recipe in one run folder.

    synth (cold-start data) -> sft -> grpo -> eval (base, after SFT, after GRPO)

Each stage named in `stages` runs in order; a finished stage is recorded in runs/<id>/stages.json and
skipped when the run is resumed (`--resume RUN_ID`), and a stage that was cut off resumes from its own
checkpoints (synth and eval skip finished episodes; sft and grpo restart from their last checkpoint).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from ..runs.stages import save_stages, stages_state
from ..runs.store import RunStore
from ..runs.summary import per_task_success


STAGES = ("synth", "sft", "grpo", "eval")


def check_stages(stages: list[str]) -> None:
    unknown = set(stages) - set(STAGES)
    if unknown:
        from ..errors import UsageError

        raise UsageError(f"unknown stages {sorted(unknown)}: use {', '.join(STAGES)}")


def local_agent(model: str) -> str:
    return model if model.startswith(("hf:", "vllm:")) else f"hf:{model}"


def run_pipeline(cfg, store: RunStore, log: Callable[[str], None] = print,
                 on_progress: Callable[[dict], None] | None = None) -> dict[str, Any]:
    from ..eval.evaluate import run_eval
    from .synth import run_synth

    state = stages_state(store)
    stages = list(cfg.stages)
    check_stages(stages)
    model = str(cfg.model.name)

    if "synth" in stages and "synth" not in state:
        scfg = synth_config(cfg, store.path / "sft.jsonl")
        log("== synth: cold-start data from the teacher")
        sub = substore(store, "synth", cfg, asdict_cfg=scfg)
        t0 = time.perf_counter()
        _, stats = run_synth(scfg, resume=sub, on_progress=on_progress)
        from .synth import describe

        log(f"synth: {describe(stats)} ({took(t0)})")
        state["synth"] = {"data": stats["output"], "kept": stats["kept"], "episodes": stats["episodes"]}
        save_stages(store, state)

    data = cfg.data or state.get("synth", {}).get("data")
    if "sft" in stages and "sft" not in state:
        from ..errors import UsageError
        from .sft import run_sft

        if not data:
            raise UsageError("the sft stage needs data=FILE.jsonl or a synth stage before it")
        log("== sft: supervised fine-tuning on the kept episodes")
        final, stats = run_sft(cfg, store, Path(data), log=log, final=store.path / "sft" / "checkpoint-final")
        state["sft"] = {"checkpoint": str(final), **stats}
        save_stages(store, state)

    start = state.get("sft", {}).get("checkpoint", model)
    if "grpo" in stages and "grpo" not in state:
        from .grpo import run_grpo

        log(f"== grpo: {cfg.grpo.steps} steps, {cfg.grpo.group_size} rollouts per task, from {start}")
        final, stats = run_grpo(cfg, store, start, log=log, final=store.path / "grpo" / "checkpoint-final")
        state["grpo"] = {"checkpoint": str(final), **stats}
        save_stages(store, state)

    if "eval" in stages:
        rows = state.setdefault("eval", {})
        models = [("base", model)]
        if "sft" in state:
            models.append(("sft", state["sft"]["checkpoint"]))
        if "grpo" in state:
            models.append(("grpo", state["grpo"]["checkpoint"]))
        for label, ref in models:
            if label in rows:
                continue
            ecfg = eval_config(cfg, ref)
            where = ", ".join(ecfg.tasks) if ecfg.tasks else f"the {ecfg.split} split"
            log(f"== eval: {label} ({ref}) on {where}")
            sub = substore(store, f"eval-{label}", cfg, asdict_cfg=ecfg)
            t0 = time.perf_counter()
            estore, summary = run_eval(ecfg, resume=sub, on_progress=on_progress)
            log(f"eval {label}: pass^1 {figure(summary.get('pass^1'))} over {summary.get('episodes')} episodes ({took(t0)})")
            rows[label] = {"model": ref, **{k: summary.get(k) for k in ("pass^1", "avg_reward", "first_call_right",
                                                                          "gold_calls_made", "avg_turns", "episodes")},
                           "per_task": per_task_success(estore.episodes())}
            save_stages(store, state)
    return state


def took(t0: float) -> str:
    """The wall time since perf_counter() read t0, as a stage reports it."""
    seconds = time.perf_counter() - t0
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def figure(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def synth_config(cfg, default_output: Path):
    """The synth stage's SynthConfig from a composed train config (each field's recipe key says where)."""
    from .recipes import from_recipe
    from .synth_config import SynthConfig

    split, ids = split_or_ids(cfg.synth.tasks)
    return from_recipe(SynthConfig, cfg, user=_user_spec(cfg), split=split, tasks=ids,
                       output=cfg.synth.output or str(default_output))


def eval_config(cfg, ref: str):
    """An eval stage's EvalConfig (the agent: checkpoint `ref`) from a composed train config."""
    from ..eval.config import EvalConfig
    from .recipes import from_recipe

    e = cfg.eval
    split, ids = split_or_ids(e.tasks or e.split)
    # template instances come from the eval split's seed stream (test: disjoint from what synth drew)
    return from_recipe(EvalConfig, cfg, agent=local_agent(ref), user=_user_spec(cfg), split=split or e.split, tasks=ids)


def split_or_ids(tasks) -> tuple[str | None, list[str]]:
    """A stage's `tasks`: a split name, a list of task ids, or template:<id>|all (drawn instances)."""
    if isinstance(tasks, str) and not tasks.startswith("template:"):
        return tasks, []
    return None, [tasks] if isinstance(tasks, str) else list(tasks)


def _user_spec(cfg) -> str:
    return "scripted" if cfg.user.kind == "scripted" else str(cfg.user.model)


def substore(store: RunStore, name: str, cfg, asdict_cfg) -> str:
    """A stage's own run folder inside the pipeline's (runs/<id>/<name>/), created once, then resumed."""
    from dataclasses import asdict

    path = store.path / name
    if not (path / "runs.sqlite").is_file():
        RunStore.create(name, str(cfg.domain), asdict(asdict_cfg), path=path)
    return str(path)
