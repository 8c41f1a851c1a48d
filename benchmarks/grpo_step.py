"""The update half of a GRPO step on this CPU: the reference model's log-probs (grpo.beta > 0), then the
policy's log-probs, the loss and its backward, for one group of rollouts that share their prompt, with each
shared prefix computed once (muactl/train/shared_prefix.py, muactl's path) against a plain pass per row (the
path before it; both compute log-probs at the policy's tokens only: muactl/train/policy_tokens.py).
Prints seconds (wall and CPU), peak RSS and the ratios; asserts nothing.

The group is synthetic at the sizes of a bank GRPO group: a shared prompt of --prompt tokens (system prompt,
tools, greeting, first user turn: ~1,000 of ~1,600 in issue 26), then each rollout's own continuation,
--length tokens in all on average (+-15%), policy turns (env_mask 1) and user/tool turns alternating. Token ids
are random: the cost of the pass does not depend on them. Generation, the optimizer step and the Adam state
are not measured here.

Each arm runs in a fresh process (so that its peak RSS is its own), the arms take turns over --repeats rounds
and the fastest round is kept. Arms: today (the code before issue 26: a plain pass per row, TRL's LM-head
tiles), plain (a plain pass, muactl's head tiles: what the tiles alone change), shared (muactl's path).

    .venv/bin/python benchmarks/grpo_step.py [--model smollm2-135m|tiny] [--group 8] [--prompt 1000]
                                             [--length 1600] [--repeats 1] [--threads N] [--arms today,shared]
                                            [--anchor-rows 2]

`--arms shared,anchored` measures what GRPO's SFT anchor (grpo.sft_coef, muactl/train/anchor.py) adds to the
update: --anchor-rows conversations of the group's sizes, their NLL's forward and backward.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ARMS = {"today": "plain pass per row, TRL's head tiles",  # the code before issue 26's speed item
        "plain": "plain pass per row, muactl's head tiles",  # the head's tiles alone
        "shared": "shared prefix once, muactl's head tiles",  # muactl's path
        "anchored": "shared, plus the SFT anchor's rows"}  # grpo.sft_coef > 0: --anchor-rows SFT conversations more


def group_inputs(group: int, prompt: int, length: int, vocab: int, pad_id: int, seed: int = 0):
    """The tensors TRL's _compute_loss reads for one group, padded as TRL pads them (prompts left, completions
    right; here every prompt is the same)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    shared = torch.randint(10, vocab, (prompt,), generator=g)
    widths = [max(8, int((length - prompt) * (0.85 + 0.3 * i / max(1, group - 1)))) for i in range(group)]
    K = max(widths)
    out = {"prompt_ids": shared.repeat(group, 1), "prompt_mask": torch.ones(group, prompt, dtype=torch.long),
           "completion_ids": torch.full((group, K), pad_id, dtype=torch.long),
           "completion_mask": torch.zeros(group, K, dtype=torch.long), "tool_mask": torch.zeros(group, K, dtype=torch.long)}
    turn = torch.arange(K)
    for i, w in enumerate(widths):
        out["completion_ids"][i, :w] = torch.randint(10, vocab, (w,), generator=g)
        out["completion_mask"][i, :w] = 1
        out["tool_mask"][i, :w] = ((turn[:w] // 60) % 2 == 0).long()  # 60 policy tokens, then 60 user/tool tokens
    out["advantages"] = torch.linspace(-1, 1, group)  # a mix of signs, as a group-normalized batch has
    out["num_items_in_batch"] = (out["completion_mask"] * out["tool_mask"]).sum()
    return out


def sft_rows(rows: int, prompt: int, length: int, vocab: int, seed: int = 1) -> list[dict[str, list[int]]]:
    """Tokenized SFT conversations as the anchor reads them (train/anchor.py), at the group's sizes: the same
    system prompt and tools, then a conversation whose assistant turns alternate with user/tool turns."""
    import torch

    g = torch.Generator().manual_seed(seed)
    shared = torch.randint(10, vocab, (prompt,), generator=g).tolist()
    out = []
    for i in range(rows):
        rest = max(8, int((length - prompt) * (0.85 + 0.3 * i / max(1, rows - 1))))
        ids = shared + torch.randint(10, vocab, (rest,), generator=g).tolist()
        out.append({"input_ids": ids, "assistant_masks": [0] * prompt + [int((t // 60) % 2 == 0) for t in range(rest)]})
    return out


def run_arm(args) -> dict:
    """One arm in this process: a warm-up step, then one timed step; its seconds and memory."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from muactl.domain.open import open_domain
    from muactl.models.folder import load_tokenizer
    from muactl.models.precision import cpu_has_bf16, gradient_checkpointing, import_torch
    from muactl.models.registry import resolve

    torch = import_torch()
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig

    from muactl.train import policy_tokens
    from muactl.train.policy_tokens import PolicyTokenGRPOTrainer

    path = resolve(args.model, open_domain("bank", with_tasks=False).compiled)
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    inputs = group_inputs(args.group, args.prompt, args.length, model.config.vocab_size, tokenizer.pad_token_id)
    with tempfile.TemporaryDirectory() as out:
        # the trainer as muactl's GRPO stage configures it: gradient checkpointing, a reference model (beta > 0)
        config = GRPOConfig(output_dir=out, use_cpu=True, bf16=not args.fp32 and cpu_has_bf16(), report_to=[],
                            per_device_train_batch_size=args.group, num_generations=args.group, beta=0.04,
                            loss_type="grpo", max_steps=1, gradient_checkpointing=gradient_checkpointing(None, "grpo"))
        trainer = PolicyTokenGRPOTrainer(model=model, args=config, reward_funcs=[_zero], processing_class=tokenizer,
                                         train_dataset=Dataset.from_list([{"prompt": "x"}] * 2))
    trainer.share_prefixes = args.arm in ("shared", "anchored")
    if args.arm == "anchored":
        from muactl.train.anchor import SFTAnchor

        rows = sft_rows(args.anchor_rows, args.prompt, args.length, model.config.vocab_size)
        trainer.anchor = SFTAnchor(rows, coef=0.1, per_update=args.anchor_rows, seed=0, pad_id=tokenizer.pad_token_id)
    if args.arm == "today":  # TRL's tile sizes: TOKEN_CHUNK_SIZE rows x _CHUNKED_LOGPROB_CHUNK_SIZE
        policy_tokens.CPU_HEAD_ROWS, policy_tokens.CPU_HEAD_VOCAB = 4096, 32768
    if config.gradient_checkpointing:  # Trainer.train() turns it on, and this skips train()
        trainer.model.activation_checkpointing_enable(activation_checkpointing_kwargs=config.gradient_checkpointing_kwargs)
    trainer.model.train()
    if args.threads:  # after the trainer, which sets its own
        torch.set_num_threads(args.threads)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(), which this skips

    def step(batch):
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        trainer._scored = batch["tool_mask"]
        with torch.no_grad():
            ref, _, _ = trainer._get_per_token_logps_and_entropies(trainer.ref_model, ids, mask, ids.size(1) - batch["prompt_ids"].size(1))
        trainer._scored = None
        loss = trainer._compute_loss(trainer.model, {**batch, "ref_per_token_logps": ref})
        loss.backward()
        trainer.model.zero_grad(set_to_none=True)

    warm = {k: (v[:2, :64] if k.startswith(("completion", "tool")) else v[:2]) for k, v in inputs.items() if v.dim()}
    step({**warm, "num_items_in_batch": (warm["completion_mask"] * warm["tool_mask"]).sum()})  # warm-up, short
    rss_before = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    step(inputs)
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "rss_before_mb": rss_before,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "tokens": int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum()),
            "policy_tokens": int(inputs["num_items_in_batch"]), "bf16": config.bf16, "threads": torch.get_num_threads()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m", help="smollm2-135m (default) or tiny")
    ap.add_argument("--group", type=int, default=8, help="rollouts in the group (grpo.group_size)")
    ap.add_argument("--prompt", type=int, default=1000, help="tokens of the prompt the rollouts share")
    ap.add_argument("--length", type=int, default=1600, help="tokens of a rollout on average, prompt included")
    ap.add_argument("--repeats", type=int, default=1, help="rounds; each arm's fastest is kept")
    ap.add_argument("--threads", type=int, default=0, help="torch threads per arm (0: torch's default; 1 measures the "
                    "work more steadily on a loaded machine)")
    ap.add_argument("--arms", default="today,shared", help=f"which of {', '.join(ARMS)}, in this order")
    ap.add_argument("--anchor-rows", type=int, default=2, help="the anchored arm's SFT conversations (grpo.sft_rows)")
    ap.add_argument("--fp32", action="store_true", help="float32 instead of bf16 autocast (muactl's default on CPUs with native bf16)")
    ap.add_argument("--arm", choices=list(ARMS), help=argparse.SUPPRESS)  # one arm in this process (internal)
    args = ap.parse_args()
    if args.arm:
        print(json.dumps(run_arm(args)))
        return
    arms = args.arms.split(",")
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    for _ in range(args.repeats):
        for arm in arms:
            cmd = [sys.executable, __file__, "--arm", arm, *sys.argv[1:]]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            runs[arm].append(json.loads(done.stdout.strip().splitlines()[-1]))
    best = {arm: min(r, key=lambda x: x["wall_s"]) for arm, r in runs.items()}
    first = best[arms[0]]
    print(f"{args.model}: one group of {args.group} rollouts, {first['tokens'] / args.group:.0f} tokens each on average, "
          f"the first {args.prompt} shared; {first['policy_tokens']} policy tokens; "
          f"{'bf16 autocast' if first['bf16'] else 'float32'}, {first['threads']} thread(s), gradient checkpointing; "
          f"reference log-probs + loss + backward; fastest of {args.repeats} round(s), each arm in its own process")
    for arm, r in best.items():
        print(f"  {arm:6s} {ARMS[arm]:40s} {r['wall_s']:7.2f} s wall {r['cpu_s']:7.2f} s CPU   peak RSS "
              f"{r['peak_rss_mb'] / 1024:.2f} GB, the step's own {(r['peak_rss_mb'] - r['rss_before_mb']) / 1024:.2f} GB")
    for arm in arms[1:]:
        r = best[arm]
        print(f"{arm} vs {arms[0]}: {first['wall_s'] / r['wall_s']:.2f}x faster in wall time, "
              f"{first['cpu_s'] / r['cpu_s']:.2f}x in CPU time; peak RSS {r['peak_rss_mb'] - first['peak_rss_mb']:+.0f} MB")


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _zero(completions, **kwargs):
    return [0.0] * len(completions)


if __name__ == "__main__":
    main()
