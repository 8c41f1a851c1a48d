"""The update half of a GRPO step on this CPU, in one run: log-probs + loss + backward of a batch of real bank
conversations, with TRL's stock log-prob pass (every position through the LM head) vs muactl's
(policy tokens only: muactl/train/policy_tokens.py), each for a full update and for LoRA (grpo.lora).
Prints seconds and ratios; asserts nothing.

The conversations are the oracle agent's with the scripted user on the longest bank training tasks,
rendered with the model's chat template; the policy's tokens (env_mask 1) are its assistant turns, the
rest (system prompt, tools, user and tool turns) is context. Generation is not timed here.

    .venv/bin/python benchmarks/grpo_step.py [--model tiny|smollm2-135m] [--batch 8] [--repeats 2] [--fp32]

smollm2-135m takes about a minute per arm and repeat for 8 conversations on 2 cores; --batch 2 is quicker.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time


def conversations(model: str, n: int):
    """The model's path, its tokenizer and n real bank conversations as (prompt_ids, completion_ids, env_mask),
    the longest ones."""
    from muactl.domain.open import open_domain
    from muactl.domain.task_templates import domain_for
    from muactl.episode.agents.oracle import OracleAgent
    from muactl.episode.rollout import Job, RolloutConfig, run_many
    from muactl.episode.user import ScriptedUser
    from muactl.models.folder import load_tokenizer
    from muactl.models.registry import resolve
    from muactl.train.sft import tokenize_example
    from muactl.train.synth import to_record

    opened = open_domain("bank")
    path = resolve(model, opened.compiled)
    tokenizer = load_tokenizer(path)
    tasks = [t for t in opened.tasks if t.split == "train"]
    jobs = [Job(t, trial=0, domain=domain_for(opened, t)) for t in tasks]
    episodes = asyncio.run(run_many(jobs, opened.compiled, OracleAgent(), ScriptedUser, RolloutConfig(), concurrency=8))
    tools = [t.openai_schema() for t in opened.compiled.agent_tools()]
    rows = []
    for ep in episodes:
        ex = tokenize_example(tokenizer, to_record(ep, tools), max_length=10**6)
        ids, mask = ex["input_ids"], ex["assistant_masks"]
        start = mask.index(1)  # the prompt: everything before the policy's first token
        rows.append((ids[:start], ids[start:], mask[start:]))
    rows.sort(key=lambda r: -(len(r[0]) + len(r[1])))
    return path, tokenizer, rows[:n]


def batch_inputs(rows, pad_id: int):
    """The tensors TRL's _compute_loss reads, padded as TRL pads them (prompts left, completions right)."""
    import torch

    P = max(len(p) for p, _, _ in rows)
    K = max(len(c) for _, c, _ in rows)
    out = {k: torch.full((len(rows), n), v, dtype=torch.long) for k, n, v in
           (("prompt_ids", P, pad_id), ("prompt_mask", P, 0), ("completion_ids", K, pad_id), ("completion_mask", K, 0),
            ("tool_mask", K, 1))}
    for i, (p, c, m) in enumerate(rows):
        out["prompt_ids"][i, P - len(p):] = torch.tensor(p)
        out["prompt_mask"][i, P - len(p):] = 1
        out["completion_ids"][i, :len(c)] = torch.tensor(c)
        out["completion_mask"][i, :len(c)] = 1
        out["tool_mask"][i, :len(m)] = torch.tensor(m)
    out["advantages"] = torch.linspace(-1, 1, len(rows))  # a mix of signs, as a group-normalized batch has
    out["num_items_in_batch"] = (out["completion_mask"] * out["tool_mask"]).sum()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="tiny", help="tiny (default: the run stays under 2 minutes) or smollm2-135m")
    ap.add_argument("--batch", type=int, default=8, help="conversations per step (grpo.group_size x tasks_per_step)")
    ap.add_argument("--repeats", type=int, default=2, help="timed runs per arm after one warm-up (the minimum is kept)")
    ap.add_argument("--fp32", action="store_true", help="float32 instead of bf16 autocast (bf16 is muactl's default on CPUs with native bf16)")
    args = ap.parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

    from muactl.models.precision import cpu_has_bf16, gradient_checkpointing, import_torch

    torch = import_torch()
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig, GRPOTrainer

    from muactl.train.policy_tokens import PolicyTokenGRPOTrainer

    path, tokenizer, rows = conversations(args.model, args.batch)
    inputs = batch_inputs(rows, tokenizer.pad_token_id)
    tokens = int(inputs["prompt_mask"].sum() + inputs["completion_mask"].sum())
    policy = int(inputs["num_items_in_batch"])
    bf16 = not args.fp32 and cpu_has_bf16()
    print(f"{args.model}: {len(rows)} bank conversations (oracle + scripted user), {tokens / len(rows):.0f} tokens each "
          f"on average (longest {max(len(p) + len(c) for p, c, _ in rows)}), policy tokens {policy / tokens:.1%}; "
          f"{'bf16 autocast' if bf16 else 'float32'}, {torch.get_num_threads()} threads")

    dataset = Dataset.from_list([{"prompt": "x"}] * 2)
    arms = [(update, name) for update in ("full", "lora") for name in ("TRL stock", "policy tokens")]
    steps, seconds = {}, {arm: [] for arm in arms}
    with tempfile.TemporaryDirectory() as out:
        for update, name in arms:
            torch.manual_seed(0)
            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
            # the trainer as muactl's GRPO stage configures it (gradient checkpointing included)
            config = GRPOConfig(output_dir=out, use_cpu=True, bf16=bf16, per_device_train_batch_size=len(rows),
                                num_generations=len(rows), loss_type="dapo", report_to=[], max_steps=1,
                                gradient_checkpointing=gradient_checkpointing(None, "grpo"))
            peft = LoraConfig(r=16, lora_alpha=32, target_modules="all-linear", task_type="CAUSAL_LM") if update == "lora" else None
            cls = GRPOTrainer if name == "TRL stock" else PolicyTokenGRPOTrainer
            trainer = cls(model=model, args=config, reward_funcs=[_zero], train_dataset=dataset,
                          processing_class=tokenizer, peft_config=peft)
            trainer.model.train()
            trainer.current_gradient_accumulation_steps = 1  # set by Trainer.train(), which this skips

            def step(trainer=trainer):
                loss = trainer._compute_loss(trainer.model, inputs)
                loss.backward()
                trainer.model.zero_grad(set_to_none=True)

            step()  # warm-up
            steps[(update, name)] = step
        # the arms take turns, so that a load change on the machine hits all of them alike
        for _ in range(args.repeats):
            for arm in arms:
                seconds[arm].append(_seconds(steps[arm]))
    results = {arm: min(s) for arm, s in seconds.items()}
    for (update, name), t in results.items():
        print(f"  {update:4s}  {name:13s}  {t:6.2f} s  ({t / tokens * 1e3:.2f} ms per token)")
    for update in ("full", "lora"):
        print(f"{update}: policy tokens only is {results[(update, 'TRL stock')] / results[(update, 'policy tokens')]:.2f}x "
              f"faster than TRL stock")
    print(f"LoRA vs full update (policy tokens): {results[('full', 'policy tokens')] / results[('lora', 'policy tokens')]:.2f}x")


def _zero(completions, **kwargs):
    return [0.0] * len(completions)


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
