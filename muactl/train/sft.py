"""Supervised fine-tuning on synthesized trajectories: TRL's SFTTrainer with assistant-only loss.

Examples are tokenized here with the one chat template (agents/chatml.py), whose {% generation %}
markers give the assistant mask: the loss covers exactly the assistant turns (text, tool calls and
<|im_end|>), never system, user or tool turns. Pre-tokenizing also keeps each tool call's
`arguments` object as written (an Arrow table would merge the keys of every tool into one struct).
Checkpoints are plain HF folders (LoRA adapters merged at the end) that `hf:` agents, vLLM and
`muactl chat` load directly.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..runs.store import RunStore


def training_template(tokenizer) -> str:
    """The template SFT renders with: the model's own when it marks assistant turns with {% generation %}
    (muactl's ChatML does), else TRL's training version of it (the families TRL knows)."""
    template = tokenizer.chat_template
    if isinstance(template, str) and re.search(r"\{%-?\s*generation\s*-?%\}", template):
        return template
    try:
        from trl.chat_template_utils import get_training_chat_template

        patched = get_training_chat_template(tokenizer)
    except Exception:  # noqa: BLE001 - TRL raises for templates it does not know
        patched = None
    if not patched or "generation" not in patched:
        from ..errors import UsageError

        raise UsageError(f"the chat template of {getattr(tokenizer, 'name_or_path', 'the model')} does not mark assistant "
                         "turns ({% generation %}), which assistant-only SFT needs, and TRL has no training version of it; "
                         "add the markers to the template, or train with muactl's ChatML ({\"format\": \"chatml\"} in muactl.json)")
    return patched


def tokenize_example(tokenizer, record: dict[str, Any], max_length: int) -> dict[str, list[int]] | None:
    from ..models.chatml import prompt_tools
    from ..models.folder import tool_format_of

    tools = prompt_tools(record.get("tools"), tool_format_of(tokenizer))
    context = set(record.get("not_trained") or [])  # the greeting: rendered as template text, no loss
    messages = [dict(m, fixed=True) if i in context else m for i, m in enumerate(record["messages"])]
    out = tokenizer.apply_chat_template(messages, tools=tools, tokenize=True, chat_template=training_template(tokenizer),
                                        return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    if len(ids) > max_length:
        return None  # a cut conversation would teach the model to stop mid-turn; skip it (counted)
    return {"input_ids": ids, "assistant_masks": mask}


def build_dataset(tokenizer, records: list[dict[str, Any]], max_length: int):
    import datasets
    from datasets import Dataset

    datasets.disable_progress_bars()  # one-off map/filter bars of a few ms each only clutter the log

    rows, skipped = [], 0
    for r in records:
        ex = tokenize_example(tokenizer, r, max_length)
        if ex is None:
            skipped += 1
        else:
            rows.append(ex)
    if not rows:
        from ..errors import UsageError

        raise UsageError(f"no training example fits sft.max_length={max_length}; raise it")
    return Dataset.from_list(rows), skipped


def domains_fitting(tokenizer, records: list[dict[str, Any]], max_length: int) -> str:
    """Per domain of a mix, the rows that fit max_length of those in the data ("bank 30 of 30, retail 0 of 10")."""
    from collections import Counter

    given = Counter(r.get("domain") or "?" for r in records)
    fit = Counter(r.get("domain") or "?" for r in records if tokenize_example(tokenizer, r, max_length) is not None)
    return ", ".join(f"{d} {fit[d]} of {n}" for d, n in given.items())


def sft_line(step: int, steps: int, logs: dict) -> str:
    """One SFT logging step as a line (TRL's dict of it stays in the run's store and TensorBoard)."""
    parts = [f"sft step {step}/{steps}:"]
    for key, name, fmt in (("loss", "loss", ".3f"), ("mean_token_accuracy", "token accuracy", ".2f"),
                           ("learning_rate", "lr", ".1e"), ("epoch", "epoch", ".2f")):
        if logs.get(key) is not None:
            parts.append(f"{name} {float(logs[key]):{fmt}},")
    return " ".join(parts).rstrip(",")


def run_sft(cfg, store: RunStore, data_path: Path, log=print, final: Path | None = None) -> tuple[Path, dict[str, Any]]:
    """Train cfg.model on data_path; checkpoints under the run folder; returns the final checkpoint
    (default runs/<id>/checkpoint-final) and the stage's figures."""
    from ..models.folder import load_tokenizer
    from ..models.memory import bound_heap, unbound_heap
    from ..models.precision import gradient_checkpointing, import_torch, precision_note, sft_batch, training_precision
    from ..models.registry import resolve
    from .checkpoints import card_on_save, quiet_trl_logs, train_and_save
    from .mix import model_domains
    from .synth import read_jsonl

    torch = import_torch()
    bound_heap()  # before the model and its optimizer allocate; until training ends (memory.py)
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    records = read_jsonl(data_path)
    domain = model_domains(cfg) if cfg.model.name == "tiny" else None
    path = resolve(cfg.model.name, domain)
    tokenizer = load_tokenizer(path)
    dataset, skipped = build_dataset(tokenizer, records, cfg.sft.max_length)
    n_tokens = sum(len(x) for x in dataset["input_ids"])
    log(f"sft: {len(dataset)} examples ({skipped} longer than max_length skipped), {n_tokens} tokens, model {path}")
    if len({r.get("domain") for r in records}) > 1:  # a skipped row shifts the mix away from its weights: say so
        log(f"sft: examples per domain: {domains_fitting(tokenizer, records, cfg.sft.max_length)}")
    cuda = torch.cuda.is_available()
    dtype, bf16 = training_precision(cfg.model.dtype)
    batch, accum = sft_batch(str(cfg.model.name), cfg.sft.batch_size, cfg.sft.grad_accum, cuda)
    checkpointing = gradient_checkpointing(cfg.model.gradient_checkpointing, "sft")
    log(f"sft: {precision_note(cfg.model.dtype)}; batch {batch} x grad_accum {accum}; "
        f"gradient checkpointing {'on' if checkpointing else 'off'}")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    peft_config = None
    if cfg.sft.lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=cfg.sft.lora_r, lora_alpha=cfg.sft.lora_alpha, lora_dropout=cfg.sft.lora_dropout,
                                 target_modules="all-linear", task_type="CAUSAL_LM")
    out_dir = store.path / "sft"
    os.environ["TENSORBOARD_LOGGING_DIR"] = str(store.path / "tensorboard" / "sft")
    args = SFTConfig(
        output_dir=str(out_dir), num_train_epochs=cfg.sft.epochs, max_steps=cfg.sft.max_steps,
        per_device_train_batch_size=batch, gradient_accumulation_steps=accum,
        learning_rate=cfg.sft.lr, lr_scheduler_type=cfg.sft.scheduler, warmup_steps=cfg.sft.warmup_ratio,
        weight_decay=cfg.sft.weight_decay, max_length=cfg.sft.max_length, logging_steps=cfg.sft.logging_steps,
        save_steps=cfg.sft.save_steps, save_total_limit=2, seed=cfg.seed, data_seed=cfg.seed,
        report_to=["tensorboard"],
        bf16=bf16, use_cpu=not cuda, dataloader_num_workers=0,
        gradient_checkpointing=checkpointing,
        disable_tqdm=os.environ.get("MUACTL_NO_PROGRESS") == "1", save_only_model=False,
    )

    class ToRunStore(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kw):
            if logs:
                store.log_metrics(state.global_step, {f"sft/{k}": v for k, v in logs.items() if isinstance(v, (int, float))})

    trainer = SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                         peft_config=peft_config, callbacks=[ToRunStore(), card_on_save(tokenizer)])
    quiet_trl_logs(trainer, lambda state, logs: log(sft_line(state.global_step, state.max_steps, logs)))
    final = final or store.path / "checkpoint-final"
    result, seconds = train_and_save(trainer, tokenizer, out_dir, final, cfg.sft.lora, cfg.sft.resume, log, "sft")
    unbound_heap()  # an eval or a trained user's evaluation may generate next in this process
    epochs_done = trainer.state.epoch or 0.0
    stats = {"examples": len(dataset), "skipped_too_long": skipped, "tokens": n_tokens, "steps": result.global_step,
             "epochs": round(epochs_done, 2), "seconds": round(seconds, 1), "train_loss": result.training_loss,
             "tokens_per_second": round(n_tokens * epochs_done / max(seconds, 1e-9), 1)}
    store.log_metrics(result.global_step, {"sft/final_train_loss": result.training_loss, "sft/seconds": seconds})
    log(f"sft: {stats}")
    return final, stats

