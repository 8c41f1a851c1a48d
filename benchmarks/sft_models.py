"""Cold-start figures: pass^1 on bank's test split before and after SFT on oracle
trajectories from the train split, CPU minutes, SFT tokens per second; for tiny and (--smollm2)
smollm2-135m, with its one-time GGUF conversion time. Prints; asserts nothing.

    .venv/bin/python benchmarks/sft_models.py [--epochs 6] [--smollm2] [--smollm2-steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def cpu_min() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (r.ru_utime + r.ru_stime) / 60


def muactl(env, *args) -> str:
    out = subprocess.run([sys.executable, "-m", "muactl", *args], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"muactl {' '.join(args)}:\n{out.stderr[-3000:]}")
    return out.stdout


def pass1(env, work: Path, agent: str, run_id: str, max_new: int) -> float:
    muactl(env, "eval", "bank", "--agent", agent, "--split", "test", "--max-turns", "10", "--max-new-tokens",
           str(max_new), "--concurrency", "20")
    runs = sorted((work / "runs").glob("*-eval-bank-*"), key=lambda p: p.stat().st_mtime)
    return json.loads((runs[-1] / "summary.json").read_text())["pass^1"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=float, default=6)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--smollm2", action="store_true")
    ap.add_argument("--smollm2-steps", type=int, default=20, help="SFT steps for smollm2 (an epoch is 11 at batch 4)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = dict(os.environ, MUACTL_RUNS=str(work / "runs"), MUACTL_NO_PROGRESS="1")
        data = work / "bank-sft.jsonl"
        muactl(env, "synth", "bank", "--agent", "oracle", "--user", "scripted", "--trials", "1", "-o", str(data))
        rows = []
        c0 = cpu_min()
        before = pass1(env, work, "hf:tiny", "tiny-base", 64)
        c1 = cpu_min()
        muactl(env, "train", "sft", "model=tiny", f"data={data}", f"sft.epochs={args.epochs}", "sft.batch_size=4",
               f"sft.lr={args.lr}", "sft.save_steps=100000", "run_id=tiny-sft")
        stats = json.loads((work / "runs" / "tiny-sft" / "summary.json").read_text())["sft"]
        c2 = cpu_min()
        after = pass1(env, work, f"hf:{work / 'runs' / 'tiny-sft' / 'checkpoint-final'}", "tiny-after", 64)
        c3 = cpu_min()
        rows.append(("tiny", before, after, c2 - c1, c3 - c2 + c1 - c0, stats["tokens_per_second"], stats["seconds"], "-"))
        if args.smollm2:
            cache = Path(os.environ.get("MUACTL_CACHE", Path.home() / ".cache" / "muactl")) / "models" / "smollm2-135m"
            t = time.time()
            if cache.exists():
                shutil.rmtree(cache)
            muactl(env, "eval", "bank", "--agent", "hf:smollm2-135m", "--task", "move-noor", "--max-turns", "1",
                   "--max-new-tokens", "1")
            conversion = time.time() - t
            c0 = cpu_min()
            before = pass1(env, work, "hf:smollm2-135m", "smol-base", 96)
            c1 = cpu_min()
            muactl(env, "train", "sft", "model=smollm2-135m", f"data={data}", f"sft.max_steps={args.smollm2_steps}",
                   "sft.batch_size=4", "sft.lr=5e-5", "sft.save_steps=100000", "run_id=smol-sft")
            stats = json.loads((work / "runs" / "smol-sft" / "summary.json").read_text())["sft"]
            c2 = cpu_min()
            after = pass1(env, work, f"hf:{work / 'runs' / 'smol-sft' / 'checkpoint-final'}", "smol-after", 96)
            c3 = cpu_min()
            rows.append(("smollm2-135m", before, after, c2 - c1, c3 - c2 + c1 - c0, stats["tokens_per_second"],
                         stats["seconds"], f"{conversion:.0f} s"))
    print(f"\n{'model':<14}{'pass^1 before':>14}{'after SFT':>11}{'SFT CPU min':>13}{'eval CPU min':>14}"
          f"{'SFT tok/s':>11}{'SFT wall s':>11}{'conversion':>12}")
    for r in rows:
        print(f"{r[0]:<14}{r[1]:>14.3f}{r[2]:>11.3f}{r[3]:>13.1f}{r[4]:>14.1f}{r[5]:>11.0f}{r[6]:>11.0f}{r[7]:>12}")


if __name__ == "__main__":
    main()
