"""bf16 mixed precision vs float32 on this CPU, in one run: one SFT-sized training step (forward,
backward, AdamW) and one prefill, for smollm2-135m (or --model tiny). Prints; asserts nothing.

muactl picks bf16 autocast on CPUs with native bf16 (models.training_precision); this prints what
that choice buys here, and whether the CPU has it at all.

    .venv/bin/python benchmarks/precision.py [--model smollm2-135m] [--tokens 1069] [--batch 2]
"""

from __future__ import annotations

import argparse
import contextlib
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--tokens", type=int, default=1069, help="sequence length (a compact-prompt bank conversation)")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    from muactl.models.precision import cpu_has_bf16, import_torch

    from muactl.models.registry import resolve
    from muactl.domain.open import open_domain

    torch = import_torch()
    from transformers import AutoModelForCausalLM

    domain = open_domain("bank", with_tasks=False).compiled if args.model == "tiny" else None
    model = AutoModelForCausalLM.from_pretrained(resolve(args.model, domain), dtype=torch.float32)
    vocab = model.config.vocab_size
    x = torch.randint(0, vocab, (args.batch, args.tokens))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    print(f"{args.model}, batch {args.batch} x {args.tokens} tokens, {torch.get_num_threads()} threads, "
          f"native bf16: {cpu_has_bf16()}")

    def timed(fn) -> float:
        fn()  # warm-up
        return min(_seconds(fn) for _ in range(args.repeats))

    results = {}
    for name, bf16 in (("float32", False), ("bf16 autocast", True)):
        ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 else contextlib.nullcontext

        def step(ctx=ctx):
            with ctx():
                loss = model(input_ids=x, labels=x).loss
            loss.backward()
            opt.step()
            opt.zero_grad()

        def prefill(ctx=ctx):
            with torch.no_grad(), ctx():
                model(input_ids=x, logits_to_keep=1)

        results[name] = (timed(step), timed(prefill))
        t_step, t_pre = results[name]
        n = args.batch * args.tokens
        print(f"  {name:14s} train step {t_step:6.2f} s ({n / t_step:6.0f} tokens/s)   prefill {t_pre:5.2f} s ({n / t_pre:6.0f} tokens/s)")
    (s32, p32), (s16, p16) = results["float32"], results["bf16 autocast"]
    print(f"  bf16 speed-up: training {s32 / s16:.2f}x, prefill {p32 / p16:.2f}x")


def _seconds(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
