"""Log-probs only at the policy's own tokens: TRL's GRPOTrainer, with its per-token log-prob pass narrowed.

A GRPO conversation is mostly text the policy did not write (system prompt, tool list, user and tool
turns); the loss reads log-probs only where env_mask is 1. TRL's fused LM head projects every position
of the sequence through the full vocabulary on a CPU (it compacts to the scored positions only on
Triton devices), and its backward recomputes all of them. Here the model body runs once, the hidden
states that predict a policy token are gathered, and only those go through the LM head (TRL's chunked
log-prob kernel: temperature, entropy and bf16 autocast as TRL does them). The log-probs elsewhere are
0, which nothing reads: TRL masks the loss, the KL and the entropy figures with completion_mask * env_mask.

The scored positions come from env_mask: `_generate` sees it for the old/reference log-probs of a fresh
batch, `_compute_loss` finds it in its inputs. Anything this path does not cover (a model wrapped for
several processes, a vision model, MoE aux loss, logit scaling or soft-capping) takes TRL's own path.
benchmarks/grpo_step.py measures the difference; tests/test_grpo.py checks the log-probs against a plain forward.
"""

from __future__ import annotations

from typing import Any

import torch
from trl import GRPOTrainer
from trl.kernels import ChunkedLogProbFunction
from trl.trainer.utils import _CHUNKED_LOGPROB_CHUNK_SIZE

from .shared_prefix import hidden_at

# config fields that change the logits after the LM head; TRL's own path knows them, this one does not
LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")


class PolicyTokenGRPOTrainer(GRPOTrainer):
    # (rows, completion positions) 0/1: which completion tokens need a log-prob; None: all of them
    _scored: Any = None
    # compute each prefix that rows share once (exact); False: a plain pass per row, for benchmarks/grpo_step.py
    share_prefixes = True
    # grpo.sft_coef > 0: the SFT anchor (anchor.py), whose loss every micro-batch adds to GRPO's
    anchor: Any = None

    def _generate(self, prompts: list):
        out = super()._generate(prompts)
        self._scored = out[2]  # env_mask per episode, for the old/reference log-probs of this batch
        return out

    def _generate_and_score_completions(self, inputs):
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self._scored = None

    def _compute_loss(self, model, inputs):
        self._scored = inputs.get("tool_mask")
        try:
            loss = super()._compute_loss(model, inputs)
        finally:
            self._scored = None
        if self.anchor is None or not model.training:
            return loss
        return loss + self._anchor_loss(model)

    def _anchor_loss(self, model) -> torch.Tensor:
        """grpo.sft_coef x the anchor's loss (grpo.sft_loss) on this micro-batch's SFT rows, scaled for gradient
        accumulation as TRL scales its own loss, so an optimizer step adds the weight times the mean over its
        micro-batches."""
        accumulation = self.current_gradient_accumulation_steps
        causal = self.plain_causal_lm(model)
        if causal is None:  # sft_anchor refuses these before the first step; a wrapper added later is a bug here
            raise RuntimeError("the SFT anchor needs the plain causal LM, and this model is wrapped")
        loss, figures = self.anchor.losses(causal, self.state.global_step, self._step % accumulation,
                                           self.args.cast_lm_head_to_fp32, self.accelerator.autocast)
        for name, value in figures.items():
            self._metrics["train"][name].append(value)
        return self.anchor.coef * loss / accumulation

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **extra):
        causal = self.plain_causal_lm(model)
        if causal is None or compute_aux_loss or any(v is not None for v in extra.values()):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size,
                compute_entropy=compute_entropy, compute_aux_loss=compute_aux_loss, **extra)
        scored = scored_positions(self._scored, attention_mask, logits_to_keep)
        batch_size = batch_size or input_ids.size(0)
        logps, entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            end = start + batch_size
            lp, ent = policy_token_logps(causal, input_ids[start:end], attention_mask[start:end], scored[start:end],
                                         self.temperature, compute_entropy, self.args.cast_lm_head_to_fp32,
                                         self.accelerator.autocast, self.share_prefixes)
            logps.append(lp)
            entropies.append(ent)
        return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None

    def plain_causal_lm(self, model):
        """The causal LM whose body and head this path can call directly, or None (then TRL's path)."""
        if self.accelerator.unwrap_model(model) is not model:  # DDP/FSDP: their forward does the gradient sync
            return None
        causal = model.get_base_model() if hasattr(model, "get_base_model") else model  # LoRA sits inside its layers
        head = causal.get_output_embeddings()
        config = causal.config.get_text_config()
        if type(head) is not torch.nn.Linear or causal.config is not config:  # adapter on the head, or a VLM
            return None
        if any(getattr(config, name, None) is not None for name in LOGIT_TRANSFORMS):
            return None
        return causal


def scored_positions(env_mask, attention_mask: torch.Tensor, width: int) -> torch.Tensor:
    """(rows, width) bool: completion positions that are real tokens (attention 1) and the policy's (env_mask 1).
    env_mask: a padded tensor, ragged lists (shorter rows are padding) or None (every completion token)."""
    real = attention_mask[:, -width:].bool()
    if env_mask is None:
        return real
    if not torch.is_tensor(env_mask):
        rows = torch.zeros(real.shape, dtype=torch.bool)
        for i, m in enumerate(env_mask):
            rows[i, :len(m)] = torch.tensor(m, dtype=torch.bool)
        env_mask = rows
    return real & env_mask.to(real.device).bool()


def policy_token_logps(causal, input_ids, attention_mask, scored, temperature: float, entropy: bool,
                       head_fp32: bool, autocast, share_prefixes: bool = True) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per completion position (the last scored.size(1) tokens): log p(token | prefix) / temperature, and the
    entropy if asked, computed where `scored` holds and 0 elsewhere. One pass of the body (each prefix that
    rows share computed once: shared_prefix.py; `share_prefixes=False`: a plain pass per row, what
    benchmarks/grpo_step.py compares with), the LM head on the gathered positions only."""
    width = scored.size(1)
    # the hidden state at position t predicts token t+1: the positions one before the scored tokens
    want = torch.zeros_like(input_ids, dtype=torch.bool)
    want[:, -width - 1:-1] = scored
    with autocast():
        if share_prefixes:
            hidden = hidden_at(causal.base_model, input_ids, attention_mask, want)
        else:
            hidden = causal.base_model(input_ids=input_ids, attention_mask=attention_mask,
                                       use_cache=False).last_hidden_state[want]
    targets = input_ids[:, -width:][scored]
    head = causal.get_output_embeddings()
    rows = hidden.to(head.weight.device)
    lp, ent = head_logps(rows.float() if head_fp32 else rows, head, targets.to(rows.device), temperature, entropy,
                         torch.autocast(rows.device.type, enabled=False) if head_fp32 else autocast())
    # masked_scatter keeps the result attached to the graph even when nothing is scored (an all-excluded batch)
    mask = scored.to(lp.device)
    logps = lp.new_zeros(mask.shape).masked_scatter(mask, lp)
    return logps, (ent.new_zeros(mask.shape).masked_scatter(mask, ent) if entropy else None)


# On a CPU, TRL's chunked log-prob pass folds each (rows x vocabulary chunk) tile of logits in torch ops, which
# make several float32 copies of the tile: with its sizes (4,096 rows x 32,768) that is 512 MB a copy, and the
# head's peak grew with the policy tokens of the batch (smollm2-135m: 1.6 GB over 1,260 tokens, 2.8 GB over
# 2,520). These tiles keep it near 0.6 GB whatever the batch; the rows are independent, so the result is the same.
CPU_HEAD_ROWS, CPU_HEAD_VOCAB = 512, 8192


def head_logps(rows, head, targets, temperature: float, entropy: bool, ctx) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target) / temperature (and the entropy) of each row through the LM head, without the logits."""
    outputs = ("log_probs", "entropy") if entropy else ("log_probs",)
    step, vocab = (CPU_HEAD_ROWS, CPU_HEAD_VOCAB) if rows.device.type == "cpu" else (max(1, len(rows)), _CHUNKED_LOGPROB_CHUNK_SIZE)
    lps, ents = [], []
    with ctx:
        for start in range(0, max(1, len(rows)), step):
            lp, ent, *_ = ChunkedLogProbFunction.apply(rows[start:start + step], head.weight, head.bias,
                                                       targets[start:start + step], temperature, vocab, None, 1.0, outputs)
            lps.append(lp)
            ents.append(ent)
    return torch.cat(lps), (torch.cat(ents) if entropy else None)
