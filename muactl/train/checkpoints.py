"""What SFT and GRPO share around TRL's trainers: resume from the last checkpoint, and write the final
model as a plain HF folder (LoRA merged) that hf: agents, vLLM and muactl chat load directly."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable


def last_checkpoint(out_dir: Path) -> Path | None:
    """The newest complete checkpoint-N. The trainer writes trainer_state.json last, so a folder without a
    readable one is a save cut off by a crash or kill -9: skipped, and the run resumes from the one before."""
    if not out_dir.is_dir():
        return None
    cks = sorted((p for p in out_dir.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()),
                 key=lambda p: int(p.name.split("-")[-1]))
    return next((p for p in reversed(cks) if _complete(p)), None)


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
