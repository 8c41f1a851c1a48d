"""Where checkpoints moved away from their SFT data: the NLL of each assistant token of an SFT JSONL under several
checkpoints (teacher-forced, float32, no autocast), against the first. Prints, per template, the mean NLL per
token, and the assistant turns whose summed NLL rose most against the first checkpoint, each with its opening
tokens and the one token that rose most. Issue 26 read a refusal that turned into a write here (and what a mean
over all tokens makes of it: grpo.sft_loss=drift).

    .venv/bin/python benchmarks/token_drift.py --data out/anchor26/runs/sft-1/sft.jsonl \\
        "SFT=out/anchor26/runs/sft-1/sft/checkpoint-final" \\
        "anchor=out/anchor26/runs/sft-grpo-1/checkpoint-final" --top 10

Prints tables; asserts nothing. Cost: one forward pass per conversation and checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from decision_margin import turns  # noqa: E402  (the runs of assistant tokens, as decision_margin reads them)


def token_nlls(path: str, rows: list[dict]) -> list[list[float]]:
    """Per row, the NLL of each position 1.. (0 where the position is not an assistant token)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for r in rows:
            ids = torch.tensor([r["input_ids"]])
            logps = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            nll = -logps.gather(1, ids[0, 1:, None])[:, 0]
            out.append((nll * torch.tensor(r["assistant_masks"][1:], dtype=torch.float32)).tolist())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="LABEL=CHECKPOINT; the first is what the others are compared with")
    p.add_argument("--data", required=True, help="the SFT JSONL (muactl synth's output)")
    p.add_argument("--top", type=int, default=10, help="turns listed")
    a = p.parse_args()

    from muactl.models.folder import load_tokenizer
    from muactl.train.sft import tokenize_example

    models = [m.split("=", 1) for m in a.models]
    tokenizer = load_tokenizer(models[0][1])
    records = [json.loads(line) for line in Path(a.data).read_text().splitlines() if line.strip()]
    kept = [(r, t) for r in records if (t := tokenize_example(tokenizer, r, 1 << 20)) is not None]
    rows = [t for _, t in kept]
    templates = [r.get("task_id", "?").rsplit("-", 1)[0] for r, _ in kept]
    nlls = {label: token_nlls(path, rows) for label, path in models}
    first = models[0][0]

    per = defaultdict(lambda: defaultdict(list))
    for i, template in enumerate(templates):
        count = max(1, sum(rows[i]["assistant_masks"][1:]))
        for label in nlls:
            per[template][label].append(sum(nlls[label][i]) / count)
    print(f"{len(rows)} conversations of {a.data}; mean NLL per assistant token (nats)\n")
    print("| template | conversations | " + " | ".join(nlls) + " |")
    print("|---|---|" + "---|" * len(nlls))
    for template in sorted(per):
        values = per[template]
        print(f"| {template} | {len(values[first])} | " +
              " | ".join(f"{sum(v) / len(v):.4f}" for v in values.values()) + " |")

    rises = []
    for i, template in enumerate(templates):
        ids = rows[i]["input_ids"][1:]
        for k, (start, end) in enumerate(turns(rows[i]["assistant_masks"][1:])):
            sums = {label: sum(nlls[label][i][start:end]) for label in nlls}
            for label in nlls:
                if label == first:
                    continue
                worst = max(range(start, end), key=lambda t: nlls[label][i][t] - nlls[first][i][t])
                rises.append((sums[label] - sums[first], label, template, k, end - start, sums, i, start, worst))
    rises.sort(key=lambda x: -x[0])
    print(f"\nassistant turns whose summed NLL rose most against {first} (nats; the token that rose most, its NLL "
          f"under {first} -> the model)\n")
    print("| model | template | turn | tokens | " + " | ".join(f"sum {label}" for label in nlls) +
          " | opens with | token that rose most |")
    print("|---|---|---|---|" + "---|" * len(nlls) + "---|---|")
    for rise, label, template, k, length, sums, i, start, worst in rises[:a.top]:
        ids = rows[i]["input_ids"][1:]
        opening = tokenizer.decode(ids[start:start + 10]).replace("|", "/").replace("\n", " ")
        token = tokenizer.decode(ids[worst:worst + 1]).replace("|", "/")
        print(f"| {label} | {template} | {k} | {length} | " + " | ".join(f"{s:.2f}" for s in sums.values()) +
              f" | {opening!r} | {token!r} {nlls[first][i][worst]:.2f} -> {nlls[label][i][worst]:.2f} |")


if __name__ == "__main__":
    main()
