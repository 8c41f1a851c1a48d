"""`muactl train CONFIG`: the MUA-RL recipe in one run folder.

    synth (cold-start data) -> sft -> grpo -> eval (base, after SFT, after GRPO)

Each stage named in `stages` runs in order; a finished stage is recorded in runs/<id>/stages.json and
skipped when the run is resumed (`--resume RUN_ID`), and a stage that was cut off resumes from its own
checkpoints (synth and eval skip finished episodes; sft and grpo restart from their last checkpoint).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from .runs import RunStore


def stages_state(store: RunStore) -> dict[str, Any]:
    f = store.path / "stages.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def _save_state(store: RunStore, state: dict[str, Any]) -> None:
    tmp = store.path / "stages.json.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(store.path / "stages.json")


def local_agent(model: str) -> str:
    return model if model.startswith(("hf:", "vllm:")) else f"hf:{model}"


def run_pipeline(cfg, store: RunStore, log: Callable[[str], None] = print,
                 on_progress: Callable[[dict], None] | None = None) -> dict[str, Any]:
    from .evaluate import run_eval
    from .train.synth import run_synth

    state = stages_state(store)
    stages = list(cfg.stages)
    unknown = set(stages) - {"synth", "sft", "grpo", "eval"}
    if unknown:
        from .errors import UsageError

        raise UsageError(f"unknown stages {sorted(unknown)}: use synth, sft, grpo, eval")
    model = str(cfg.model.name)

    if "synth" in stages and "synth" not in state:
        scfg = synth_config(cfg, store.path / "sft.jsonl")
        log("== synth: cold-start data from the teacher")
        sub = _substore(store, "synth", cfg, asdict_cfg=scfg)
        _, stats = run_synth(scfg, resume=sub, on_progress=on_progress)
        from .train.synth import describe

        log(f"synth: {describe(stats)}")
        state["synth"] = {"data": stats["output"], "kept": stats["kept"], "episodes": stats["episodes"]}
        _save_state(store, state)

    data = cfg.data or state.get("synth", {}).get("data")
    if "sft" in stages and "sft" not in state:
        from .errors import UsageError
        from .train.sft import run_sft

        if not data:
            raise UsageError("the sft stage needs data=FILE.jsonl or a synth stage before it")
        log("== sft: supervised fine-tuning on the kept episodes")
        final, stats = run_sft(cfg, store, Path(data), log=log, final=store.path / "sft" / "checkpoint-final")
        state["sft"] = {"checkpoint": str(final), **stats}
        _save_state(store, state)

    start = state.get("sft", {}).get("checkpoint", model)
    if "grpo" in stages and "grpo" not in state:
        from .train.grpo import run_grpo

        log(f"== grpo: {cfg.grpo.steps} steps, {cfg.grpo.group_size} rollouts per task, from {start}")
        final, stats = run_grpo(cfg, store, start, log=log, final=store.path / "grpo" / "checkpoint-final")
        state["grpo"] = {"checkpoint": str(final), **stats}
        _save_state(store, state)

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
            sub = _substore(store, f"eval-{label}", cfg, asdict_cfg=ecfg)
            estore, summary = run_eval(ecfg, resume=sub, on_progress=on_progress)
            rows[label] = {"model": ref, **{k: summary.get(k) for k in ("pass^1", "avg_reward", "first_call_right",
                                                                          "gold_calls_made", "avg_turns", "episodes")},
                           "per_task": per_task_success(estore.episodes())}
            _save_state(store, state)
    return state


def synth_config(cfg, default_output: Path):
    """The synth stage's SynthConfig from a composed train config."""
    from .config import eval_limits
    from .train.synth import SynthConfig

    s = cfg.synth
    split, ids = _split_or_ids(s.tasks)
    return SynthConfig(domain=cfg.domain, agent=s.agent, user=_user_spec(cfg), split=split, tasks=ids,
                       n=s.n, db=s.db, trials=s.trials, concurrency=s.concurrency, seed=cfg.seed, trust=cfg.trust,
                       output=s.output or str(default_output), tools=s.tools, tool_model=s.tool_model,
                       api_base=s.api_base, max_turns=s.max_turns, user_api_base=cfg.user.api_base,
                       user_temperature=cfg.user.temperature, **eval_limits(cfg))


def eval_config(cfg, ref: str):
    """An eval stage's EvalConfig (the agent: checkpoint `ref`) from a composed train config."""
    from .config import eval_limits
    from .evaluate import EvalConfig

    e = cfg.eval
    split, ids = _split_or_ids(e.tasks or e.split)
    # template instances come from the eval split's seed stream (test: disjoint from what synth drew)
    return EvalConfig(domain=cfg.domain, agent=local_agent(ref), user=_user_spec(cfg), split=split or e.split, tasks=ids,
                      n=e.n, db=e.db, trials=e.trials, concurrency=e.concurrency, seed=cfg.seed, max_turns=e.max_turns,
                      max_new_tokens=cfg.model.max_new_tokens, temperature=cfg.model.temperature, trust=cfg.trust,
                      user_api_base=cfg.user.api_base, user_temperature=cfg.user.temperature,
                      tool_model=cfg.synth.tool_model, **eval_limits(cfg))


def _split_or_ids(tasks) -> tuple[str | None, list[str]]:
    """A stage's `tasks`: a split name, a list of task ids, or template:<id>|all (drawn instances)."""
    if isinstance(tasks, str) and not tasks.startswith("template:"):
        return tasks, []
    return None, [tasks] if isinstance(tasks, str) else list(tasks)


def _user_spec(cfg) -> str:
    return "scripted" if cfg.user.kind == "scripted" else str(cfg.user.model)


def _substore(store: RunStore, name: str, cfg, asdict_cfg) -> str:
    """A stage's own run folder inside the pipeline's (runs/<id>/<name>/), created once, then resumed."""
    from dataclasses import asdict

    path = store.path / name
    if not (path / "runs.sqlite").is_file():
        RunStore.create(name, str(cfg.domain), asdict(asdict_cfg), path=path)
    return str(path)


def per_task_success(episodes: list[dict[str, Any]]) -> dict[str, float]:
    """task -> mean success over its scored trials: what the before/after intervals resample."""
    by_task: dict[str, list[int]] = {}
    for e in episodes:
        if e["outcome"] in ("success", "failure"):
            by_task.setdefault(e["task_id"], []).append(int(e["success"]))
    return {t: sum(v) / len(v) for t, v in sorted(by_task.items())}


def comparisons(rows: dict[str, Any]) -> list[tuple[str, tuple[float, float, float]]]:
    """Each trained model against the one before it (SFT vs base, GRPO vs SFT), paired over the test tasks."""
    from .stats import paired

    labels = [k for k in ("base", "sft", "grpo") if rows.get(k, {}).get("per_task")]
    return [(f"{b} vs {a}", paired({"0": rows[b]["per_task"]}, {"0": rows[a]["per_task"]}))
            for a, b in zip(labels, labels[1:])]


def before_after_table(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The eval stage's rows for a report: per-task outcomes become pass^1's 95% interval."""
    from .stats import bootstrap

    out = []
    for label, row in state.get("eval", {}).items():
        row = dict(row)
        per_task = row.pop("per_task", None)
        if per_task:
            _, lo, hi = bootstrap({"0": per_task})
            row["95% interval"] = f"[{lo:.2f}, {hi:.2f}]"
        out.append({"stage": label, **row})
    return out
