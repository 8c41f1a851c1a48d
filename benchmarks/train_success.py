"""Does the sampled train success of GRPO runs rise? From rl_gain results files (theirs or an --out's
results.json): each run's rollout success over its first and its last --width steps, each acting template's
pass rate over the same windows, and last - first pooled over the runs with a 95% interval (each run a group of
the bootstrap, the k-th first step paired with the k-th last), as rl_gain --probe reports over its seeds. Runs
of different lengths pool fine: each contributes its own first and last steps.

    .venv/bin/python benchmarks/train_success.py "seed 1=benchmarks/results/anchor26drift16.json:sft-grpo-1" \\
        "seed 2=benchmarks/results/anchor26drift16s2.json:sft-grpo-1"

RUN is a key of the file's grpo_runs (rl_gain names them sft-grpo-SEED, grpo-SEED, probe-SEED). Prints a
table; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
from rl_gain import train_windows  # noqa: E402  (the windows rl_gain --probe reads)

from muactl.runs.stats import paired, verdict  # noqa: E402

PASS_RATE = "rollout/pass_rate/"


def load(spec: str) -> tuple[str, dict[str, dict[int, float]]]:
    """'LABEL=FILE:RUN' -> (label, metric name -> step -> value)."""
    label, sep, rest = spec.partition("=")
    path, colon, run = rest.rpartition(":")
    if not (sep and colon and label and path):
        raise SystemExit(f"{spec!r}: a run is LABEL=FILE:RUN, e.g. 'seed 1=out/x/results.json:sft-grpo-1'")
    try:
        runs = json.loads(Path(path).read_text()).get("grpo_runs", {})
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: not an rl_gain results file ({e})") from None
    if run not in runs:
        raise SystemExit(f"{path}: no GRPO run {run!r} (it has: {', '.join(sorted(runs)) or 'none'})")
    return label, {name: {int(step): v for step, v in by.items()} for name, by in runs[run].items()}


def window_means(series: dict[int, float], width: int) -> tuple[float, float] | None:
    """Mean of the first and of the last `width` logged steps of one metric (a template's pass rate is logged
    only on the steps that drew it); None when fewer than two steps were logged. rl_gain's window rule, fed
    the metric in the place of its train success."""
    first, last = train_windows({"rollout/success": series}, width)
    if not first:
        return None
    return sum(first.values()) / len(first), sum(last.values()) / len(last)


def table(runs: list[tuple[str, dict]], width: int) -> list[str]:
    templates = sorted({name[len(PASS_RATE):] for _, by in runs for name in by if name.startswith(PASS_RATE)})
    lines = [f"first and last {width} steps of each GRPO run (sampled rollouts; a template's pass rate over the steps that drew it)", "",
             "| run | steps | success | " + " | ".join(templates) + " |", "|---|---|---|" + "---|" * len(templates)]
    for label, by in runs:
        cells = []
        for name in ["rollout/success"] + [PASS_RATE + t for t in templates]:
            means = window_means(by.get(name, {}), width)
            cells.append(f"{means[0]:.2f} -> {means[1]:.2f}" if means else "-")
        lines.append(f"| {label} | {len(by.get('rollout/success', {}))} | " + " | ".join(cells) + " |")
    return lines


def pooled(runs: list[tuple[str, dict]], width: int) -> str:
    first, last = {}, {}
    for label, by in runs:
        f, la = train_windows(by, width)
        if f:
            first[label], last[label] = f, la
    if not first:
        return "no run logged two steps of train success"
    d, lo, hi = paired(last, first)
    return f"success, last - first, pooled over {len(first)} runs: {d:+.3f} [{lo:+.3f}, {hi:+.3f}]: {verdict(lo, hi)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", metavar="LABEL=FILE:RUN", help="GRPO runs from rl_gain results files")
    ap.add_argument("--width", type=int, default=5, help="steps in each window (default 5, as rl_gain --probe)")
    a = ap.parse_args()
    if a.width < 1:
        ap.error("--width must be at least 1")
    runs = [load(s) for s in a.runs]
    if len({label for label, _ in runs}) != len(runs):
        ap.error("every run needs its own label (the pooled interval groups by label)")
    print("\n".join(table(runs, a.width)))
    print("\n" + pooled(runs, a.width))


if __name__ == "__main__":
    main()
