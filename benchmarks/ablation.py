"""MUA-RL's ablation in miniature: tiny on bank, scripted user, pass^1 on the test split, for
base / SFT only / GRPO only (no cold start) / SFT then GRPO, over several seeds, with CPU minutes per
row. Also seconds per GRPO step split into generation and training, for tiny and (with --smollm2)
smollm2-135m. Prints tables; asserts nothing.

Each row is examples/quickstart.yaml with some stages; for tiny with the budget below (its SFT is
cheap, so more epochs and a larger step), for --model smollm2-135m with the quickstart's own.

    .venv/bin/python benchmarks/ablation.py                 # tiny, 3 seeds (~25 min)
    .venv/bin/python benchmarks/ablation.py --model smollm2-135m --seeds 1     # ~35 min
    .venv/bin/python benchmarks/ablation.py --seeds 1 --quick
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rl_gain import cpu_minutes  # noqa: E402  (the children's CPU time, measured the same way in both harnesses)

ROOT = Path(__file__).resolve().parent.parent
# a randomly initialised model needs more epochs and a larger step than the pretrained quickstart model
TINY_BUDGET = ["model=tiny", "model.max_new_tokens=64", "sft.epochs=6", "sft.batch_size=4", "sft.lr=1e-3",
               "sft.warmup_ratio=0.1", "sft.logging_steps=5", "sft.save_steps=50", "grpo.steps=8", "grpo.lr=1e-4",
               "grpo.max_turns=10", "grpo.save_steps=4"]


def muactl(*args: str, env: dict) -> str:
    out = subprocess.run([sys.executable, "-m", "muactl", *args], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"muactl {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return out.stdout


def run_row(kind: str, seed: int, work: Path, sft_cfg: list[str], grpo_cfg: list[str], env: dict) -> tuple[float, float]:
    import json

    stages = {"base": "[eval]", "sft": "[synth,sft,eval]", "grpo": "[grpo,eval]", "sft+grpo": "[synth,sft,grpo,eval]"}[kind]
    run_id = f"abl-{kind.replace('+', '-')}-{seed}"
    before = cpu_minutes()
    muactl("train", str(ROOT / "examples" / "quickstart.yaml"), f"run_id={run_id}", f"seed={seed}",
           f"stages={stages}", *sft_cfg, *grpo_cfg, env=env)
    spent = cpu_minutes() - before
    state = json.loads((work / "runs" / run_id / "stages.json").read_text())
    last = {"base": "base", "sft": "sft", "grpo": "grpo", "sft+grpo": "grpo"}[kind]
    return state["eval"][last]["pass^1"] or 0.0, spent


def grpo_step_split(model: str, env: dict, work: Path) -> tuple[float, float]:
    import sqlite3

    run_id = f"abl-steps-{model}"
    muactl("train", "grpo", f"model={model}", "domain=bank", "grpo.steps=3", "grpo.group_size=4",
           "grpo.tasks_per_step=2", "grpo.max_turns=6", "grpo.max_new_tokens=48", f"run_id={run_id}", env=env)
    db = sqlite3.connect(work / "runs" / run_id / "runs.sqlite")
    gen = [v for (v,) in db.execute("SELECT value FROM metrics WHERE name = 'time/generation_s'")]
    step = [v for (v,) in db.execute("SELECT value FROM metrics WHERE name = 'step_time'")]
    g, s = statistics.mean(gen), statistics.mean(step)
    return g, max(s - g, 0.0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--model", default="tiny", choices=["tiny", "smollm2-135m"])
    ap.add_argument("--quick", action="store_true", help="a smaller budget, to check the script")
    ap.add_argument("--smollm2", action="store_true", help="also time GRPO steps for smollm2-135m")
    args = ap.parse_args()
    sft_cfg = list(TINY_BUDGET) if args.model == "tiny" else []
    grpo_cfg = []
    if args.quick:
        sft_cfg.append("sft.epochs=2" if args.model == "tiny" else "sft.epochs=0.5")
        grpo_cfg.append("grpo.steps=2")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = dict(os.environ, MUACTL_RUNS=str(work / "runs"), MUACTL_NO_PROGRESS="1")
        rows = {}
        for kind in ("base", "sft", "grpo", "sft+grpo"):
            results = [run_row(kind, seed, work, sft_cfg, grpo_cfg, env) for seed in range(args.seeds)]
            rows[kind] = results
            print(f"{args.model} {kind:<10} pass^1 per seed {[round(r[0], 3) for r in results]}", flush=True)
        print(f"\n{'row':<10}{'pass^1 mean':>12}{'min':>8}{'max':>8}{'CPU min':>10}")
        for kind, results in rows.items():
            p = [r[0] for r in results]
            print(f"{kind:<10}{statistics.mean(p):>12.3f}{min(p):>8.3f}{max(p):>8.3f}{statistics.mean(r[1] for r in results):>10.1f}")
        gap = statistics.mean(r[0] for r in rows["sft+grpo"]) - statistics.mean(r[0] for r in rows["sft"])
        print(f"\nSFT->GRPO minus SFT only: {gap * 100:+.1f} points (target >= +10); "
              f"GRPO only below SFT only: {statistics.mean(r[0] for r in rows['grpo']) < statistics.mean(r[0] for r in rows['sft'])}")
        print("\nseconds per GRPO step (group 4 x 2 tasks, up to 6 turns)")
        for model in ["tiny"] + (["smollm2-135m"] if args.smollm2 else []):
            g, t = grpo_step_split(model, env, work)
            print(f"  {model:<14} generation {g:6.1f} s   training {t:6.1f} s")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"\nwall time {(time.time() - t0) / 60:.1f} min")
