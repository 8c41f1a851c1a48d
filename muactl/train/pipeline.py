"""`muactl train CONFIG`: the MUA-RL recipe in one run folder.

    synth (cold-start data) -> sft -> grpo -> eval (base, after SFT, after GRPO)

Each stage named in `stages` runs in order; a finished stage is recorded in runs/<id>/stages.json and
skipped when the run is resumed (`--resume RUN_ID`), and a stage that was cut off resumes from its own
checkpoints (synth and eval skip finished episodes; sft and grpo restart from their last checkpoint). Once sft or
grpo is recorded as finished its checkpoint-N folders are removed (keep_checkpoints=true keeps them): later stages
and commands load its checkpoint-final.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from ..runs.stages import save_stages, stages_state
from ..runs.store import RunStore
from ..runs.summary import per_task_success
from .checkpoints import drop_resumable


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
    state = stages_state(store)
    stages = list(cfg.stages)
    check_stages(stages)
    if "synth" in stages and "synth" not in state:
        log("== synth: cold-start data from the teacher")
        state["synth"] = synth_stage(cfg, store, log, on_progress)
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
        release()
    if "sft" in state:  # removed once recorded: a crash before that resumes from them
        drop_resumable(store.path / "sft", cfg.keep_checkpoints, log, "sft")

    start = state.get("sft", {}).get("checkpoint", str(cfg.model.name))
    if "grpo" in stages and "grpo" not in state:
        from .grpo import run_grpo

        log(f"== grpo: {cfg.grpo.steps} steps, {cfg.grpo.group_size} rollouts per task, from {start}")
        final, stats = run_grpo(cfg, store, start, log=log, final=store.path / "grpo" / "checkpoint-final", sft_data=data)
        state["grpo"] = {"checkpoint": str(final), **stats}
        save_stages(store, state)
        release()
    if "grpo" in state:
        drop_resumable(store.path / "grpo", cfg.keep_checkpoints, log, "grpo")

    if "eval" in stages:
        rows = state.setdefault("eval", {})
        models = [("base", base_model(cfg))]
        if "sft" in state:
            models.append(("sft", state["sft"]["checkpoint"]))
        if "grpo" in state:
            models.append(("grpo", state["grpo"]["checkpoint"]))
        for label, ref in models:
            if label not in rows:
                rows[label] = eval_stage(cfg, store, label, ref, log, on_progress)
                save_stages(store, state)
                release()  # the next model's eval does not need this one in memory
    return state


def synth_stage(cfg, store: RunStore, log, on_progress) -> dict[str, Any]:
    """Cold-start data: a teacher's reward-1 episodes in runs/<id>/sft.jsonl. Over several domains each domain's
    synth runs alone (runs/<id>/synth-<domain>/, sft-<domain>.jsonl) and sft.jsonl is their mix by weight."""
    from .mix import mix_rows, parts
    from .synth import describe, read_jsonl, run_synth, write_jsonl

    domains = parts(cfg)
    one = len(domains) == 1
    outputs, stats = {}, {}
    for part in domains:
        name = "synth" if one else f"synth-{part.label}"
        default = store.path / ("sft.jsonl" if one else f"sft-{part.label}.jsonl")
        scfg = synth_config(part.cfg, default)
        sub = substore(store, name, part.cfg, asdict_cfg=scfg)
        t0 = time.perf_counter()
        _, stats[part.name] = run_synth(scfg, resume=sub, on_progress=on_progress)
        log(f"synth{'' if one else f' {part.name}'}: {describe(stats[part.name])} ({took(t0)})")
        outputs[part.name] = Path(stats[part.name]["output"])
    if one:
        only = stats[domains[0].name]
        return {"data": only["output"], "kept": only["kept"], "episodes": only["episodes"]}
    mixed, figures = mix_rows({d: read_jsonl(path) for d, path in outputs.items()},
                              {p.name: p.share for p in domains}, cfg.seed)
    data = Path(cfg.synth.output) if cfg.synth.output else store.path / "sft.jsonl"
    write_jsonl(data, mixed)
    log("synth: the mix by weight: " + ", ".join(f"{d} {f['mixed']} of {f['kept']} kept rows" for d, f in figures.items())
        + f" -> {data}")
    for d, f in figures.items():
        figures[d]["episodes"] = stats[d]["episodes"]
    return {"data": str(data), "kept": len(mixed), "episodes": sum(s["episodes"] for s in stats.values()),
            "domains": figures}


def eval_stage(cfg, store: RunStore, label: str, ref: str, log, on_progress) -> dict[str, Any]:
    """One model's row of the before/after table: pass^1 and friends on the held-out tasks; over several domains
    each domain is evaluated alone (runs/<id>/eval-<label>-<domain>/) and the row is over all their tasks, with
    each domain's own figures under `domains`."""
    from ..eval.evaluate import run_eval
    from ..runs.summary import summarize
    from .mix import parts

    domains = parts(cfg)
    one = len(domains) == 1
    episodes, figures = [], {}
    for part in domains:
        ecfg = eval_config(part.cfg, ref)
        where = ", ".join(ecfg.tasks) if ecfg.tasks else f"the {ecfg.split} split"
        log(f"== eval: {label} ({ref}) on {where}{'' if one else f' of {part.name}'}")
        sub = substore(store, f"eval-{label}" if one else f"eval-{label}-{part.label}", part.cfg, asdict_cfg=ecfg)
        t0 = time.perf_counter()
        estore, summary = run_eval(ecfg, resume=sub, on_progress=on_progress)
        log(f"eval {label}{'' if one else f' {part.name}'}: pass^1 {figure(summary.get('pass^1'))} over "
            f"{summary.get('episodes')} episodes ({took(t0)})")
        figures[part.name] = {k: summary.get(k) for k in EVAL_FIGURES}
        # task ids are a domain's own: over several, each is named with its domain
        episodes += [e if one else {**e, "task_id": f"{part.name}/{e['task_id']}"} for e in estore.episodes()]
    if one:
        return {"model": ref, **figures[domains[0].name], "per_task": per_task_success(episodes)}
    overall = summarize(episodes, cfg.eval.trials)
    log(f"eval {label}: pass^1 {figure(overall.get('pass^1'))} over all {len(domains)} domains' "
        f"{overall.get('episodes')} episodes")
    return {"model": ref, **{k: overall.get(k) for k in EVAL_FIGURES}, "per_task": per_task_success(episodes),
            "domains": figures}


EVAL_FIGURES = ("pass^1", "avg_reward", "first_call_right", "gold_calls_made", "avg_turns", "episodes")


def base_model(cfg) -> str:
    """The model the run starts from, as the eval stage loads it: over several domains `tiny` is the one built
    from all their text (models/tiny.py), the model SFT and GRPO train."""
    from .mix import model_domains, several

    if str(cfg.model.name) != "tiny" or not several(cfg):
        return str(cfg.model.name)
    from ..models.registry import resolve

    return str(resolve("tiny", model_domains(cfg)))


def release() -> None:
    """Between stages: the models an eval loaded, cycles and free heap pages go back, so that the recipe's peak
    is its largest stage's, not their sum (the demo's stages peaked at 7.8, 4.4 and 2.9 GB, the demo at 13.0)."""
    from ..models.generation import release_models
    from ..models.memory import give_back

    release_models()
    give_back()


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
