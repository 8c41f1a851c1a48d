"""The SFT anchor: the cold start's own loss, added to every GRPO update (grpo.sft_coef).

Issue 26 measured why GRPO from a cold start loses what SFT taught: a refusal and a write share their look-ups and
differ in one comparison of numbers, that decision is held by 1-2 nats, and an update drawn on some templates moves
it on every template, also on those the step never played (the KL term only sees the sampled conversations). The
anchor holds the cold start's behaviour where the rollouts do not look: each optimizer step also adds a loss on
`grpo.sft_rows` conversations of the SFT data, drawn afresh for each micro-batch (InstructGPT's pretraining mix,
PPO-ptx, with the SFT data in place of the pretraining corpus):

    loss = GRPO loss + grpo.sft_coef * anchor loss

grpo.sft_loss says which loss, over the assistant tokens of the drawn conversations:
- `nll`: their mean negative log-likelihood (SFT's own loss), in nats per token.
- `drift`: per conversation, the sum over its tokens of how much worse the policy predicts each than the policy
  GRPO started from did (relu(NLL now - NLL at the start)), averaged over the conversations: nats per
  conversation. A refusal that turned into a write shows here in full (the 0.7 nats its one deciding token lost,
  measured in issue 26), where the mean NLL divides it by the ~2,400 tokens of 8 conversations; tokens no worse
  than at the start add nothing, not even a gradient, so the anchor does not go on sharpening what SFT fit. The
  unit differs from nll's (a conversation, not a token), and so does what a weight means. The starting NLLs are
  computed before the first step for every batch the run will draw, each as the same batch (bf16 rounding
  depends on what a batch holds, and scored differently a token would look worse by rounding alone).

0 (the default) turns it off and changes nothing. With grpo.grad_accum > 1 each micro-batch draws its own rows and
adds its loss divided by the accumulation, so an update adds the weight times their mean. The rows are drawn from
(seed, step, micro-batch), so a run resumed from a checkpoint draws what the uninterrupted run drew; the mean NLL is
logged per step as `anchor/nll` (and the drift as `anchor/drift`), and TRL's logged `loss` includes the anchor's term.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

ANCHOR_LOSSES = ("nll", "drift")


class SFTAnchor:
    """Tokenized SFT conversations (assistant-only masks, as SFT trains on them) and the anchor's loss on them."""

    def __init__(self, rows: list[dict[str, list]], coef: float, per_update: int, seed: int, pad_id: int,
                 loss: str = "nll"):
        self.rows, self.coef, self.per_update, self.seed, self.pad_id = rows, coef, per_update, seed, pad_id
        self.loss = loss
        self.start: dict[tuple[int, int], Any] = {}  # (step, micro) -> the drawn batch's starting NLLs (drift)

    @classmethod
    def from_data(cls, data: Path, tokenizer, max_length: int, coef: float, per_update: int, seed: int, log=print,
                  loss: str = "nll"):
        from ..errors import UsageError
        from .sft import tokenize_example
        from .synth import read_jsonl

        records = read_jsonl(data)
        rows = [ex for ex in (tokenize_example(tokenizer, r, max_length) for r in records) if ex is not None]
        rows = [r for r in rows if any(r["assistant_masks"])]
        if not rows:
            raise UsageError(f"{data}: no conversation with an assistant turn fits sft.max_length={max_length}, "
                             "so grpo.sft_coef has nothing to anchor to")
        log(f"grpo: SFT anchor ({loss}), weight {coef:g}: {per_update} of {len(rows)} conversations of {data} per "
            f"micro-batch ({len(records) - len(rows)} left out: too long or no assistant turn)")
        pad = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)  # never scored
        return cls(rows, coef, per_update, seed, pad, loss)

    def draw(self, step: int, micro: int) -> list[dict[str, list]]:
        """The rows of one micro-batch: a function of (seed, step, micro) only."""
        rng = random.Random(f"{self.seed}:{step}:{micro}")
        return rng.sample(self.rows, min(self.per_update, len(self.rows)))

    def remember_start(self, causal, head_fp32: bool, autocast, steps: int, accumulation: int) -> None:
        """The per-token NLL of the policy as it is now (before the first step) on every batch the run's `steps`
        x `accumulation` micro-batches draw, each scored as that same batch, which `drift` compares with."""
        import torch

        with torch.no_grad():
            for step in range(steps):
                for micro in range(accumulation):
                    nll, scored = self.token_nll(causal, self.draw(step, micro), head_fp32, autocast)
                    self.start[(step, micro)] = nll[scored].float().cpu()

    def token_nll(self, causal, rows: list[dict[str, list]], head_fp32: bool, autocast):
        """(NLL per position, scored positions), both (rows, longest - 1): the rows right-padded into one batch,
        the NLL 0 where not scored, in the autograd graph."""
        import torch

        from .policy_tokens import policy_token_logps

        device = causal.get_output_embeddings().weight.device
        width = max(len(r["input_ids"]) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        trained = torch.zeros((len(rows), width), dtype=torch.bool)
        for i, r in enumerate(rows):
            n = len(r["input_ids"])
            ids[i, :n] = torch.tensor(r["input_ids"])
            attention[i, :n] = 1
            trained[i, :n] = torch.tensor(r["assistant_masks"], dtype=torch.bool)
        # token 0 has no prefix to predict it from: score positions 1.. (what a causal LM's labels do)
        scored = trained[:, 1:].to(device)
        logps, _ = policy_token_logps(causal, ids.to(device), attention.to(device), scored, 1.0, False,
                                      head_fp32, autocast)
        return -logps, scored

    def losses(self, causal, step: int, micro: int, head_fp32: bool, autocast):
        """The loss grpo.sft_loss names on the rows drawn for (step, micro), in the autograd graph, and the figures
        to log (floats)."""
        import torch

        nll, scored = self.token_nll(causal, self.draw(step, micro), head_fp32, autocast)
        mean = nll.sum() / scored.sum().clamp(min=1)
        if self.loss == "nll":
            return mean, {"anchor/nll": mean.item()}
        start = self.start.get((step, micro))
        if start is None or len(start) != int(scored.sum()):
            raise RuntimeError(f"the SFT anchor has no starting NLL for step {step}, micro-batch {micro}: "
                               "remember_start covers the steps the run was configured with")
        start = nll.detach().new_zeros(nll.shape).masked_scatter(scored, start.to(nll.device))
        # relu, not clamp: at exactly 0 (a token as likely as at the start) its gradient is 0
        drift = (torch.relu(nll - start) * scored).sum(dim=1).mean()
        return drift, {"anchor/nll": mean.item(), "anchor/drift": drift.item()}


def check_anchor_data(data, coef: float) -> None:
    """GRPO's SFT anchor (grpo.sft_coef > 0) needs the SFT data it holds the policy to, each line a conversation with
    an assistant turn: before a run folder exists (train/inputs.py) and when GRPO starts."""
    from ..errors import UsageError
    from .synth import read_jsonl

    if not data:
        raise UsageError(f"grpo.sft_coef={coef:g} anchors GRPO to SFT data: name it with data=FILE.jsonl (the JSONL "
                         "`muactl synth` wrote), or put a synth stage before grpo in the recipe")
    try:
        rows = read_jsonl(Path(data))
    except UsageError as e:
        raise UsageError(f"grpo.sft_coef's data: {e}") from None
    if not rows:
        raise UsageError(f"data file {data} holds no examples for grpo.sft_coef's anchor")
    for n, row in enumerate(rows, 1):
        if not any(isinstance(m, dict) and m.get("role") == "assistant" for m in row["messages"]):
            raise UsageError(f"{data}: example {n} has no assistant turn, which grpo.sft_coef's anchor trains on")


# dropout of heads other than the LM's (sequence classification, GPT-2's summary): never in a causal LM's forward
OTHER_HEADS_DROPOUT = ("classifier_dropout", "summary_first_dropout")


def check_anchor_model(ref: str, loss: str = "nll") -> None:
    """The anchor's loss runs through the policy-token path (policy_tokens.py), which takes a plain causal LM: a model
    whose config scales its logits or wraps a text model (a VLM) is refused before a run folder exists. `drift`
    compares each token's NLL with the starting policy's, so it also refuses a model whose config turns dropout on:
    in training mode the two would differ by dropout's noise alone, and relu keeps the noise's positive half."""
    if ref == "tiny":
        return
    from transformers import AutoConfig

    from ..errors import UsageError
    from ..models.registry import resolve
    from .policy_tokens import LOGIT_TRANSFORMS

    config = AutoConfig.from_pretrained(resolve(ref))
    scaled = [name for name in LOGIT_TRANSFORMS if getattr(config.get_text_config(), name, None) is not None]
    if config.get_text_config() is not config or scaled:
        what = f"its logits are scaled: {', '.join(scaled)}" if scaled else "a text model inside another"
        raise UsageError(f"grpo.sft_coef: {ref} is not a plain causal LM ({what}); set grpo.sft_coef=0")
    if loss != "drift":
        return
    dropout = {name: value for name, value in config.get_text_config().to_dict().items()
               if name.endswith(("dropout", "pdrop", "dropout_prob", "dropout_rate")) and name not in OTHER_HEADS_DROPOUT
               and isinstance(value, (int, float)) and value > 0}
    if dropout:
        found = ", ".join(f"{name}={value:g}" for name, value in sorted(dropout.items()))
        raise UsageError(f"grpo.sft_loss=drift: {ref} trains with dropout ({found}), so its NLL now and at the start "
                         "would differ by dropout's noise alone; use grpo.sft_loss=nll or a model without dropout")
