"""Torch, imported once with muactl's settings, and the training precision and batch size for this machine."""

from __future__ import annotations

import os
from typing import Any


def import_torch():
    import torch

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    import warnings

    # transformers 5 deprecation notices triggered inside TRL, not by muactl's own calls
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\..*")

    torch.set_num_threads(max(1, min(os.cpu_count() or 1, int(os.environ.get("MUACTL_THREADS", "0")) or os.cpu_count() or 1)))
    return torch


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX): there, bf16 autocast trains
    2.6x faster than float32 (smollm2-135m on 2 EPYC cores, benchmarks/precision.py). Not oneDNN's
    `_is_mkldnn_bf16_supported`: it also says yes on AVX512 cores without either, where bf16 is emulated and a
    matmul took 2.9x float32's time (a Xeon with avx512bw but no avx512_bf16: SFT at 36 tokens/s, 99 in float32)."""
    torch = import_torch()
    try:
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except (AttributeError, RuntimeError):
        return False


def training_precision(dtype: str | None) -> tuple[Any, bool]:
    """(weights dtype, train with bf16 autocast) for model.dtype. null: float32 weights with bf16 mixed
    precision on GPUs, and on CPUs that have native bf16 (MUACTL_CPU_BF16=0 turns it off there), else plain
    float32. Weights are kept in float32 because bfloat16 holds about 3 significant digits: an Adam step of
    2e-5 on a weight of 0.05 rounds back to 0.05, so pure bf16 training at RL learning rates loses most
    updates. An explicit dtype is taken as given (bfloat16: a model whose float32 weights and optimizer
    state do not fit)."""
    torch = import_torch()
    if dtype:
        weights = getattr(torch, dtype)
        return weights, weights == torch.bfloat16
    if torch.cuda.is_available():
        return torch.float32, True
    return torch.float32, os.environ.get("MUACTL_CPU_BF16", "1") != "0" and cpu_has_bf16()


def precision_note(dtype: str | None) -> str:
    """One line for the start of training: which precision, and why (a 2.6x difference on CPUs)."""
    torch = import_torch()
    weights, autocast = training_precision(dtype)
    name = str(weights).removeprefix("torch.")
    what = f"{name} weights" + (" with bf16 autocast" if autocast and weights != torch.bfloat16 else "")
    if dtype:
        why = f"model.dtype={dtype}"
    elif torch.cuda.is_available():
        why = "a GPU"
    elif os.environ.get("MUACTL_CPU_BF16", "1") == "0":
        why = "MUACTL_CPU_BF16=0"
    elif autocast:
        why = "this CPU multiplies bf16 natively: AVX512-BF16 or AMX; MUACTL_CPU_BF16=0 turns it off"
    else:
        why = "this CPU has no native bf16, neither AVX512-BF16 nor AMX, so training is slower than on one that has"
    return f"precision: {what} ({why})"


def gradient_checkpointing(setting: bool | None, stage: str) -> bool:
    """model.gradient_checkpointing; null: on GPUs, and in GRPO everywhere. Recomputing activations in the
    backward pass trades compute for memory. SFT on a CPU has the memory (micro-batches of 2 conversations:
    4 smollm2 steps took 131 s without it, 262 s with it, 7.6 vs 5.5 GB peak); a GRPO step's batch is all its
    conversations at once (8 of ~1,500 tokens), whose activations without it outgrew 24 GB."""
    if setting is not None:
        return bool(setting)
    return stage == "grpo" or import_torch().cuda.is_available()


# Per-device SFT batch on a CPU when sft.batch_size is null: the examples of one step are padded to the
# longest, and a 135M model's activations for 8 conversations of ~1,000 tokens fill several GB.
CPU_SFT_BATCH = {"tiny": 8, "smollm2-135m": 2, "smollm2": 2}


SFT_EXAMPLES_PER_STEP = 8


def sft_batch(model: str, batch_size: int | None, grad_accum: int | None, cuda: bool) -> tuple[int, int]:
    """(per-device batch, gradient accumulation) for SFT: what the config says; with no batch size, one that
    fits the model on this device, accumulated to 8 examples per optimizer step (an explicit batch size
    without grad_accum accumulates nothing, as before)."""
    if batch_size is None:
        batch_size = SFT_EXAMPLES_PER_STEP if cuda else CPU_SFT_BATCH.get(model, 1)
        return batch_size, grad_accum or max(1, SFT_EXAMPLES_PER_STEP // batch_size)
    return batch_size, grad_accum or 1
