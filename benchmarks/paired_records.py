"""Held-out records of several models side by side, from rl_gain results files (theirs or an --out's results.json):
per template, the successes and the episodes that called a write; then each model paired against the first on
the instances both played, with a 95% bootstrap interval over instances. Models from different --out folders are
comparable when they were evaluated on the same instances (same --heldout and eval seed: the ids say so).
With --pool AFTER=BEFORE (labels, two or more pairs), each pair's difference is one group of a pooled interval,
resampling the pairs and then the instances as rl_gain does over its seeds: several cold starts, each paired
with its own SFT only, or several GRPO seeds from one SFT checkpoint.

    .venv/bin/python benchmarks/paired_records.py "SFT only=benchmarks/results/sweep26act.json:sft:1" \\
        "GRPO=benchmarks/results/sweep26act.json:sft+grpo:1" "GRPO + anchor=out/anchor26/results.json:sft+grpo:1"
    .venv/bin/python benchmarks/paired_records.py "SFT 1=a.json:sft:1" "GRPO 1=a.json:sft+grpo:1" \\
        "SFT 2=b.json:sft:2" "GRPO 2=b.json:sft+grpo:2" --pool "GRPO 1=SFT 1" "GRPO 2=SFT 2"

Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from muactl.runs.stats import paired  # noqa: E402  (the intervals rl_gain and the before/after table give)

WRITES = ("transfer_funds", "close_account")


def template_of(instance: str) -> str:
    return instance.rsplit("-", 1)[0]


def load(spec: str) -> tuple[str, dict]:
    """'LABEL=FILE:KEY' -> (label, the record: heldout successes and calls per instance)."""
    label, rest = spec.split("=", 1)
    path, key = rest.split(":", 1)
    record = json.loads(Path(path).read_text())[key]
    return label, record


def table(models: list[tuple[str, dict]]) -> list[str]:
    common = set.intersection(*(set(r["heldout"]) for _, r in models))
    templates = sorted({template_of(i) for i in common})
    lines = [f"{len(common)} held-out instances every model played", "",
             "| template | " + " | ".join(f"{label}: passed, wrote" for label, _ in models) + " |",
             "|---|" + "---|" * len(models)]
    for t in templates:
        ids = sorted(i for i in common if template_of(i) == t)
        cells = []
        for _, r in models:
            passed = sum(r["heldout"][i] for i in ids)
            wrote = sum(any(c in WRITES for c in r.get("calls", {}).get(i, [])) for i in ids)
            cells.append(f"{passed}/{len(ids)}, {wrote}")
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    total = [sum(r["heldout"][i] for i in common) / len(common) for _, r in models]
    lines.append("| all, pass^1 | " + " | ".join(f"{p:.3f}" for p in total) + " |")
    first_label, first = models[0]
    lines.append("")
    for label, r in models[1:]:
        p, lo, hi = paired({"0": {i: r["heldout"][i] for i in common}}, {"0": {i: first["heldout"][i] for i in common}})
        changed = sum(r["heldout"][i] != first["heldout"][i] for i in common)
        lines.append(f"{label} - {first_label}, paired over instances: {p:+.3f} [{lo:+.3f}, {hi:+.3f}]; {changed} outcomes changed")
    return lines


def pooled(models: list[tuple[str, dict]], pairs: list[str]) -> str:
    """'AFTER=BEFORE' label pairs -> one line: the mean difference over the pairs, each pair a group of the
    bootstrap, on the instances every model played."""
    records = dict(models)
    if len(records) != len(models):
        raise SystemExit("--pool needs every model's label to differ (it names models by label)")
    split = [p.split("=", 1) for p in pairs]
    unknown = sorted({label for pair in split for label in pair} - set(records))
    if any(len(pair) != 2 for pair in split) or unknown or len(split) < 2:
        raise SystemExit(f"--pool takes two or more AFTER=BEFORE pairs of the models' labels"
                         f"{'; not a label: ' + ', '.join(unknown) if unknown else ''}")
    common = set.intersection(*(set(r["heldout"]) for _, r in models))
    after = {str(k): {i: records[a]["heldout"][i] for i in common} for k, (a, _) in enumerate(split)}
    before = {str(k): {i: records[b]["heldout"][i] for i in common} for k, (_, b) in enumerate(split)}
    p, lo, hi = paired(after, before)
    return f"pooled over {len(split)} pairs ({'; '.join(pairs)}): {p:+.3f} [{lo:+.3f}, {hi:+.3f}] on {len(common)} instances"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+", help="LABEL=FILE:KEY, the first is the one the others are paired with")
    ap.add_argument("--pool", nargs="+", default=[], metavar="AFTER=BEFORE",
                    help="two or more pairs of labels: their differences pooled into one interval, a pair a group")
    a = ap.parse_args()
    models = [load(s) for s in a.models]
    pool = pooled(models, a.pool) if a.pool else None  # a wrong --pool stops before any table
    print("\n".join(table(models)))
    if pool:
        print("\n" + pool)


if __name__ == "__main__":
    main()
