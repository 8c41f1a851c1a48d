"""Commands that train and report: train, report."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
from .app import command, fail
from .output import print_before_after


@command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def train(
    ctx: typer.Context,
    what: Optional[str] = typer.Argument(None, help="A stage (sft, grpo, user) or an experiment config (YAML) naming "
                                         "several; with --resume it may be left out (the run's own is used)."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue a run (after a crash or kill -9) from its "
                                         "saved config; overrides may extend it (e.g. grpo.steps=N)."),
    show_config: bool = typer.Option(False, "--show-config", "--cfg", help="Print the resolved config and exit "
                                     "(a run saves it as runs/<id>/config.yaml)."),
    domain: Optional[list[str]] = typer.Option(None, "--domain", help="NAME or NAME:WEIGHT; repeat it to train one "
                                               "policy on several domains (the recipe's domains:, weight 1 unless given)."),
) -> None:
    """Train: SFT, GRPO with the simulated user in the loop, a model to play the user, or a whole recipe from a config file.

    Configs are hydra groups from muactl/conf (model, user, synth, sft, grpo, eval) plus a YAML file
    and dotted overrides. Every run writes runs/<id>/ (config.yaml, runs.sqlite, TensorBoard, checkpoints). A stage
    that finished keeps only its checkpoint-final: its resumable checkpoint-N folders are removed, unless
    keep_checkpoints=true (needed to extend a finished sft or grpo run with --resume RUN_ID grpo.steps=N;
    a finished stage of a recipe or `train user` run is not trained again).
    Examples:
      [bold]muactl train examples/quickstart.yaml[/bold]   (synth -> sft -> grpo -> eval)
      [bold]muactl train sft model=smollm2-135m data=data/bank-sft.jsonl sft.epochs=2[/bold]
      [bold]muactl train grpo model=runs/<sft>/checkpoint-final domain=bank grpo.group_size=8 grpo.steps=50[/bold]
      [bold]muactl train grpo ... user=litellm user.model=openai/gpt-4o-mini[/bold]
      [bold]muactl train grpo ... grpo.sft_coef=1.0 data=FILE.jsonl[/bold]   (each update also lowers the loss of the
      data SFT trained on: the SFT anchor; grpo.sft_loss=drift: only where the policy got worse than at its start)
      [bold]muactl train grpo ... grpo.reward=userrl grpo.turn_credit=r2g grpo.trajectory_score=r2g[/bold]
      [bold]muactl train grpo --domain bank:3 --domain retail:1 ...[/bold]   (one policy over two domains, 3:1)
      [bold]muactl train user model=smollm2-135m domain=bank user_sft.trials=2 sft.epochs=2[/bold]   (a user
      model from faithful episodes, scored by the fidelity checks; then --user hf:runs/<id>/checkpoint-final)
      [bold]muactl train --resume RUN_ID[/bold]   (a sft, grpo or recipe run, from its saved config)
    """
    from omegaconf import OmegaConf

    from ..train.checkpoints import check_finished_stages, drop_resumable, trained_already
    from ..train.mix import parts, run_domain
    from ..train.recipes import compose, to_yaml
    from ..runs.store import RunStore, runs_dir

    overrides = list(ctx.args)
    if what is not None and "=" in what and Path(what).suffix not in (".yaml", ".yml"):
        overrides, what = [what, *overrides], None  # `train --resume RUN x=1`: the first override took its place
    if domain:
        overrides.append(domains_override(domain))
    store = None
    if resume:
        store = RunStore.open(resume)
        stage = resumed_stage(what, store)
        # the saved, resolved config is the run's truth; new overrides may only extend it (e.g. more steps)
        cfg = compose(store.path / "config.yaml", overrides)
    else:
        if what is None:
            raise UsageError("muactl train needs what to train: a stage (sft, grpo, user) or an experiment config "
                             "(YAML), e.g. `muactl train examples/quickstart.yaml`; or --resume RUN_ID to continue a run")
        stage = what if what in STAGES else None
        config_file = None if stage else Path(what)
        if config_file is not None and config_file.suffix not in (".yaml", ".yml"):
            raise UsageError(f"'{what}' is neither a stage (sft, grpo, user) nor a YAML config file")
        cfg = compose(config_file, overrides)
    if show_config:
        typer.echo(to_yaml(cfg))
        return
    from ..runs.stages import stages_state
    from ..train.inputs import check_train_inputs

    # bad input fails here, before a run folder exists
    check_train_inputs(cfg, stage, finished=stages_state(store) if store is not None and stage is None else None)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    kind = stage or "train"
    if store is None and cfg.run_id and (runs_dir() / cfg.run_id).is_dir():
        store = RunStore.open(cfg.run_id)  # naming an existing run continues it, like --resume
    if store is not None and stage in (None, "user"):
        check_finished_stages(store, cfg, stages_state(store))
    if store is not None and stage in ("sft", "grpo"):
        final = trained_already(store, stage, cfg)
        if final is not None:  # without its checkpoints, training it again would start over
            drop_resumable(store.path / stage, cfg.keep_checkpoints, typer.echo, stage)  # a removal cut off
            typer.echo(f"run {store.id}: its {stage} finished already; nothing to train\ncheckpoint: {final}")
            return
    if store is None:
        store = RunStore.create(kind, run_domain(cfg), resolved, run_id=cfg.run_id)
        store.lock()
    else:
        store.lock()  # one process at a time writes a run (two --resume of it would double its work)
        (store.path / "config.yaml").write_text(to_yaml(cfg))
    typer.echo(f"run: {store.path}/")
    store.update(status="running")
    try:
        if stage == "sft":
            from ..train.sft import run_sft

            final, stats = run_sft(cfg, store, Path(cfg.data), log=typer.echo)
            store.update(status="finished", summary={"sft": stats, "checkpoint": str(final)})
            drop_resumable(store.path / "sft", cfg.keep_checkpoints, typer.echo, "sft")
            typer.echo(f"checkpoint: {final}")
            for part in parts(cfg):
                typer.echo(f"evaluate it: muactl eval {part.name} --agent hf:{final} --split test")
        elif stage == "grpo":
            from ..train.grpo import run_grpo

            final, stats = run_grpo(cfg, store, str(cfg.model.name), log=typer.echo, sft_data=cfg.data)
            store.update(status="finished", summary={"grpo": stats, "checkpoint": str(final)})
            drop_resumable(store.path / "grpo", cfg.keep_checkpoints, typer.echo, "grpo")
            typer.echo(f"checkpoint: {final}\nplots: muactl report {store.id}")
        elif stage == "user":
            from ..train.user_sft import run_train_user

            state = run_train_user(cfg, store, log=typer.echo)
            final = state["sft"]["checkpoint"]
            store.update(status="finished", summary={"user": state, "checkpoint": final})
            typer.echo(f"checkpoint: {final}\nplay it: muactl eval {cfg.domain} --agent oracle --user hf:{final}")
        else:
            from ..train.pipeline import run_pipeline

            state = run_pipeline(cfg, store, log=typer.echo)
            store.update(status="finished", summary=state)
            print_before_after(state)
            typer.echo(f"\nrun: {store.path}/   report: muactl report {store.id}")
    except KeyboardInterrupt:
        store.update(status="interrupted")
        fail(f"interrupted; continue with: muactl train --resume {store.id}", 130)
    except BaseException:
        store.update(status="failed")
        raise
    finally:
        store.unlock()



def domains_override(given: list[str]) -> str:
    """Repeated --domain NAME[:WEIGHT] as the recipe's `domains=[...]` override (checked where the recipe's are)."""
    entries = []
    for item in given:
        name, sep, weight = item.rpartition(":")
        if not sep or not name or not re.fullmatch(r"[-+0-9.eE]+", weight):
            name, weight = item, "1"
        entries.append(f"{{name: {json.dumps(name)}, weight: {weight}}}")
    return f"domains=[{', '.join(entries)}]"


STAGES = ("sft", "grpo", "user")  # what `muactl train` runs on its own; anything else names a recipe file
TRAIN_KINDS = {"sft": "sft", "grpo": "grpo", "user": "user", "train": None}  # a run's kind -> its stage (None: a recipe)


def resumed_stage(what: str | None, store) -> str | None:
    """The stage a resumed run continues (None: its recipe's stages), read from the run itself; `what`, when
    given, must agree with it, since the run's saved config decides what is trained."""
    kind = store.info().get("kind")
    if kind not in TRAIN_KINDS:
        from ..runs.store import resume_command

        how = resume_command(store.info(), store.path)
        raise UsageError(f"run {store.id} is a {kind} run, not a training run"
                         + (f"; continue it with: {how}" if how else ""))
    stage = TRAIN_KINDS[kind]
    given = None if what is None else (what if what in STAGES else "a recipe")
    if given is not None and given != (stage or "a recipe"):
        raise UsageError(f"run {store.id} is a {kind} run ({stage or 'a recipe'}), not {given}; continue it with "
                         f"`muactl train --resume {store.id}` (its saved config decides what is trained; overrides "
                         "such as grpo.steps=N may extend it)")
    return stage


@command()
def report(
    run_id: str = typer.Argument(..., help="Run id (see `muactl runs`) or a run folder."),
) -> None:
    """Write PNG plots (reward, success rate, turns, KL per step) and an HTML summary of a run.

    Example: [bold]muactl report 20261129-101500-train-bank-1a2b[/bold]  ->  runs/<id>/report/index.html
    """
    from ..runs.report import write_report

    page = write_report(run_id)
    typer.echo(f"report: {page}")
    for png in sorted(page.parent.glob("*.png")):
        typer.echo(f"plot: {png}")
