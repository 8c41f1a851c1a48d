"""What SFT and GRPO share around TRL's trainers: resume from the last checkpoint, write the final model as a
plain HF folder (LoRA merged) that hf: agents, vLLM and muactl chat load directly, and remove the resumable
checkpoints once the stage has finished (unless keep_checkpoints)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable


def resumable(out_dir: Path) -> list[Path]:
    """Every checkpoint-N folder TRL wrote under out_dir (complete or cut off), oldest first."""
    if not out_dir.is_dir():
        return []
    return sorted((p for p in out_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit() and p.is_dir()),
                  key=lambda p: int(p.name.split("-")[-1]))


def last_checkpoint(out_dir: Path) -> Path | None:
    """The newest complete checkpoint-N. The trainer writes trainer_state.json last, so a folder without a
    readable one is a save cut off by a crash or kill -9: skipped, and the run resumes from the one before."""
    return next((p for p in reversed(resumable(out_dir)) if _complete(p)), None)


def _complete(folder: Path) -> bool:
    try:
        json.loads((folder / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return True


def train_and_save(trainer, tokenizer, out_dir: Path, final: Path, lora: bool, resume: bool,
                   log: Callable[[str], None], stage: str) -> tuple[Any, float]:
    """trainer.train(), resuming from out_dir's last checkpoint if asked; then save `final`.
    Returns TRL's TrainOutput and the training seconds."""
    from ..models.folder import save_tokenizer

    last = last_checkpoint(out_dir) if resume else None
    if last:
        log(f"{stage}: resuming from {last}")
    t0 = time.perf_counter()
    result = trainer.train(resume_from_checkpoint=str(last) if last else None)
    seconds = time.perf_counter() - t0
    model = trainer.model.merge_and_unload() if lora else trainer.model
    model.save_pretrained(final)
    save_tokenizer(tokenizer, final)
    return result, seconds


def drop_resumable(out_dir: Path, keep: bool, log: Callable[[str], None], stage: str) -> None:
    """Remove a finished stage's checkpoint-N folders. Call it only once the stage is recorded as finished (its
    checkpoint-final written in full before that): until then they are what a crashed run resumes from; after,
    a resumed run skips the stage, and every later command loads checkpoint-final. Each holds the optimizer's
    state beside the weights (about 1.6 GB for smollm2-135m), so keeping them is asked for (keep_checkpoints)."""
    folders = [] if keep else resumable(out_dir)
    if not folders:
        return
    size = sum(f.stat().st_size for folder in folders for f in folder.rglob("*") if f.is_file())
    for folder in folders:
        shutil.rmtree(folder)
    log(f"{stage}: finished; removed its {len(folders)} resumable checkpoint{'s' if len(folders) > 1 else ''} "
        f"({size / 1e6:.0f} MB) from {out_dir} (keep_checkpoints=true keeps them)")


# what decides how long a stage trains: a finished run resumed with other values asks for more training
TRAINING_LENGTH = {"sft": ("sft.epochs", "sft.max_steps"), "grpo": ("grpo.steps",)}


def trained_already(store, stage: str, cfg) -> Path | None:
    """The checkpoint-final of a `train sft|grpo` run that finished and has no resumable checkpoint left: continuing
    that run trains nothing (None: train, since the run is new, unfinished, keeps its checkpoints, or is asked to
    start over with sft.resume=false). Training it for longer would need those checkpoints: a UsageError says
    what to do instead."""
    from ..errors import UsageError

    final = store.path / "checkpoint-final"  # where run_sft and run_grpo put a run's own
    if (store.info()["status"] != "finished" or not (final / "config.json").is_file()
            or last_checkpoint(store.path / stage) or (stage == "sft" and not cfg.sft.resume)):
        return None
    changed = longer_than_saved(store, stage, cfg)
    if changed:
        raise UsageError(f"run {store.id} finished its {stage} and removed its resumable checkpoints "
                         f"(keep_checkpoints=false), so {', '.join(changed)} cannot train it on; start a new run from "
                         f"its model (muactl train {stage} model={final} ...), and give a run you mean to extend "
                         "keep_checkpoints=true")
    return final


def longer_than_saved(store, stage: str, cfg) -> list[str]:
    """`key=value` for each of the stage's TRAINING_LENGTH keys that `cfg` sets otherwise than the run's saved config."""
    from omegaconf import OmegaConf

    saved = OmegaConf.load(store.path / "config.yaml")
    return [f"{k}={OmegaConf.select(cfg, k)}" for k in TRAINING_LENGTH[stage]
            if OmegaConf.select(cfg, k) != OmegaConf.select(saved, k)]


def check_finished_stages(store, cfg, finished: dict) -> None:
    """A recipe or `train user` run resumed with a finished stage asked to train longer: a UsageError, since the
    run skips a stage recorded in stages.json (it would otherwise say nothing and train nothing)."""
    from ..errors import UsageError

    for stage in TRAINING_LENGTH:
        changed = longer_than_saved(store, stage, cfg) if stage in finished else []
        if changed:
            raise UsageError(f"run {store.id} finished its {stage} stage; a resumed run does not train a finished "
                             f"stage again, so {', '.join(changed)} would change nothing; start a new run from its "
                             f"model (muactl train {stage} model={finished[stage]['checkpoint']} ...)")


def card_on_save(tokenizer):
    """A TrainerCallback that adds the model card to every checkpoint-N TRL saves (TRL has saved the
    tokenizer there already), so that an intermediate checkpoint is prompted as the final one is."""
    from transformers import TrainerCallback

    from ..models.folder import write_card

    class CardOnSave(TrainerCallback):
        def on_save(self, args, state, control, **kw):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if folder.is_dir():
                write_card(folder, tokenizer)

    return CardOnSave()


def quiet_trl_logs(trainer, line) -> None:
    """Replace the raw dict TRL prints per logging step with `line(state, logs)` for each training step's logs
    (the end-of-training summary is left out: the stage prints its own)."""
    from transformers import PrinterCallback, ProgressCallback, TrainerCallback

    class StepLines(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "train_runtime" not in logs:
                line(state, logs)

    for cb in (ProgressCallback, PrinterCallback):
        trainer.remove_callback(cb)
    trainer.add_callback(StepLines())
