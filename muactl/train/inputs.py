"""What `muactl train` checks before a run folder exists: every input a stage would otherwise reject only
after minutes of work (or after the run was created and left behind as "failed"): the domain and its
tasks, the model, the SFT data, the grpo.* values, the held-out set, and any LLM the run calls."""

from __future__ import annotations

from pathlib import Path


def check_train_inputs(cfg, stage: str | None, finished: dict | None = None) -> None:
    """Raise a UsageError, SpecError or ModelError for the first bad input of what `stage` (sft, grpo, or
    None: the recipe's cfg.stages) will run; cheap: nothing is trained, generated or drawn. Over several
    domains each is checked as the stages will run it (its own tasks, db and user), the error naming it.
    `finished`: the stages a resumed recipe run has already finished (runs/<id>/stages.json), so that
    `--resume RUN stages=[sft]` takes its SFT data from the run's own synth, as the pipeline does."""
    from ..errors import UsageError
    from .grpo import check_settings
    from .mix import parts
    from .pipeline import check_stages

    stages = [stage] if stage else list(cfg.stages)
    if stage != "user":  # `train user` is a stage of its own, never part of a recipe's list
        check_stages(stages)
    check_model(str(cfg.model.name))
    if stage == "user":
        from ..domain.open import open_domain

        check_user_sft(cfg, open_domain(cfg.domain, trust=cfg.trust, start_mcp=False))
        return
    finished = finished or {}
    if "sft" in stages and "synth" not in stages and "sft" not in finished:
        check_data(cfg.data or finished.get("synth", {}).get("data"))
    if "synth" in stages:
        from ..eval.preflight import check_backend

        check_backend(str(cfg.synth.agent), None, "synth.agent")
    if "grpo" in stages:
        check_settings(cfg)
        if cfg.grpo.sft_coef and "grpo" not in finished:
            from .anchor import check_anchor_data, check_anchor_model

            if "synth" not in stages:
                check_anchor_data(cfg.data or finished.get("synth", {}).get("data"), cfg.grpo.sft_coef)
            check_anchor_model(str(cfg.model.name), cfg.grpo.sft_loss)
    domains = parts(cfg)
    for part in domains:
        try:
            check_domain_inputs(part.cfg, stages)
        except UsageError as e:
            raise UsageError(str(e) if len(domains) == 1 else f"domain {part.name}: {e}") from None


def check_domain_inputs(cfg, stages: list[str]) -> None:
    """One domain's inputs (a one-domain recipe, or one domain's view of a mix: train/mix.py)."""
    from ..domain.open import open_domain
    from ..eval.preflight import check_backend

    opened = open_domain(cfg.domain, trust=cfg.trust, start_mcp=False)
    # an LLM user that cannot answer fails here, not as infra errors in the run
    if cfg.user.kind != "scripted":
        check_backend(str(cfg.user.model), cfg.user.api_base, "user.model")
    if "synth" in stages:
        check_tasks(opened, cfg.synth.tasks, "synth.tasks")
    if "grpo" in stages:
        from .grpo import prompt_names

        prompt_names(cfg, opened)  # the templates named by `tasks`, or training tasks outside the test split
        if cfg.grpo.eval_every:
            from .heldout import heldout_tasks

            heldout_tasks(cfg, opened, draw=False)
    if "eval" in stages:
        check_tasks(opened, cfg.eval.tasks or cfg.eval.split, "eval.tasks" if cfg.eval.tasks else "eval.split")


def check_model(ref: str) -> None:
    """A checkpoint folder, a built-in name or a Hugging Face id (`tiny` is built from the domain later)."""
    if ref == "tiny":
        return
    from ..models.registry import resolve

    resolve(ref)


def check_data(data: str | None) -> None:
    """The SFT data: given, present, and one JSON object with `messages` per line."""
    from ..errors import UsageError
    from .synth import read_jsonl

    if not data:
        raise UsageError("sft needs data=FILE.jsonl (make one with `muactl synth DOMAIN -o FILE.jsonl`)")
    if not read_jsonl(Path(data)):
        raise UsageError(f"data file {data} holds no examples")


def check_tasks(opened, tasks, key: str) -> None:
    """A stage's `tasks` (a split, task ids, or template:<id>|all) names tasks the domain has."""
    from ..errors import UsageError
    from ..domain.task_templates import is_template_spec, select_templates
    from ..eval.evaluate import select_tasks
    from .pipeline import split_or_ids

    if tasks is not None and not isinstance(tasks, str):
        tasks = [str(t) for t in tasks]  # a recipe's list (an omegaconf ListConfig) as the stages read it
    try:
        if is_template_spec(tasks):
            select_templates(opened, tasks if isinstance(tasks, str) else tasks[0])
            return
        split, ids = split_or_ids(tasks)
        select_tasks(opened, split, ids)
    except UsageError as e:
        raise UsageError(f"{key}: {e}") from None


def check_user_sft(cfg, opened) -> None:
    """`train user`'s inputs: the runs it reads (each a run of this domain), or the synth it would run; the held-out set."""
    from ..errors import UsageError
    from ..eval.preflight import check_backend
    from ..runs.store import RunStore

    u = cfg.user_sft
    for ref in u.runs:
        domain = RunStore.open(str(ref)).info().get("domain")
        if domain != opened.spec.domain.name:
            raise UsageError(f"user_sft.runs: run {ref} is on domain {domain}, not {opened.spec.domain.name}")
    if not u.runs:
        check_backend(str(u.agent), None, "user_sft.agent")
        check_backend(str(u.user), None, "user_sft.user")
        check_tasks(opened, u.tasks, "user_sft.tasks")
    check_tasks(opened, u.eval_tasks, "user_sft.eval_tasks")
    if not 1 <= u.draws <= 16:
        raise UsageError(f"user_sft.draws: {u.draws} is not between 1 and 16 (1: a sampled reply is never drawn again)")
