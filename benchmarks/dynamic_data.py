"""Fixed data vs dynamic data, same model, same number of steps. Over one fixed database a small model
can memorise names, ids and balances instead of copying them from tool results; a fresh random database
per conversation leaves copying as the only way to succeed. This measures the difference:

  (a) fixed:   oracle conversations of the hand-written bank train tasks, over the one seed database
  (b) dynamic: oracle conversations of template instances, each over a fresh random database

Both SFT-train `tiny` for --steps steps, then play held-out template instances over unseen random
databases (the test seed stream, disjoint from training). Prints success and partial metrics:
  first call right  the first tool call equals the gold first call (name and arguments)
  ids copied        of the ids (c17, a305) the agent put into tool calls, the share that appeared in
                    an earlier tool result of the same episode (copied, not invented or memorised)
  id calls right    the share of gold calls after the first that the agent made exactly
Asserts nothing.

    .venv/bin/python benchmarks/dynamic_data.py                       # small: 150 steps, 30 test episodes
    .venv/bin/python benchmarks/dynamic_data.py --steps 2500 --train-n 600 --eval-n 100
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ID = re.compile(r"^[ac]\d+$")


def muactl(*args: str, env: dict) -> str:
    out = subprocess.run([sys.executable, "-m", "muactl", *args], env=env, capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"muactl {' '.join(args)} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")
    return out.stdout


def run_id_of(text: str) -> str:
    return re.search(r"muactl runs show (\S+)\)", text).group(1)


def partial_metrics(run_id: str, eval_n: int, seed: int) -> dict[str, float]:
    from muactl.runs.store import RunStore
    from muactl.spec.models import call_parts
    from muactl.domain.task_templates import draw_stream
    from muactl.domain.open import open_domain

    opened = open_domain("bank")
    gold = {t.task.id: [call_parts(c) for c in t.task.expect.actions]
            for t in draw_stream(opened, "template:all", eval_n, seed, "random", "test").tasks}
    store = RunStore.open(run_id)
    first_ok = copied = ids = later_ok = later = 0
    eps = store.episodes()
    for e in eps:
        calls, seen_text = [], ""
        for m in store.messages(e["id"]):
            if m["role"] == "tool":
                seen_text += " " + (m["content"] or "")
            for c in (json.loads(m["tool_calls"]) if isinstance(m["tool_calls"], str) else m["tool_calls"]) or []:
                args = c.get("arguments") or {}
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except ValueError:
                        args = {}
                calls.append((c.get("name"), args))
                for v in args.values():
                    if isinstance(v, str) and ID.match(v):
                        ids += 1
                        copied += bool(re.search(rf"\b{re.escape(v)}\b", seen_text))
        g = gold.get(e["task_id"], [])
        first_ok += bool(calls and g and calls[0] == g[0])
        for want in g[1:]:
            later += 1
            later_ok += want in calls
    n = max(1, len(eps))
    return {"first call right": first_ok / n, "ids copied": copied / ids if ids else 0.0,
            "id calls right": later_ok / later if later else 0.0, "ids used": ids / n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=150, help="SFT steps for both arms")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--train-n", type=int, default=300, help="template instances (random DBs) for arm b")
    ap.add_argument("--eval-n", type=int, default=30, help="held-out instances over unseen DB seeds")
    ap.add_argument("--eval-seed", type=int, default=99)
    ap.add_argument("--max-turns", type=int, default=10)
    ap.add_argument("--lr", type=float, default=2e-3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="muactl-dyn-"))
    env = dict(os.environ, MUACTL_RUNS=str(work / "runs"), MUACTL_NO_PROGRESS="1", COLUMNS="200")
    os.environ.update(MUACTL_RUNS=env["MUACTL_RUNS"])
    data = {"fixed": work / "fixed.jsonl", "dynamic": work / "dynamic.jsonl"}
    t0 = time.perf_counter()
    muactl("synth", "bank", "--tasks", "train", "--trials", "1", "-o", str(data["fixed"]), env=env)
    muactl("synth", "bank", "--tasks", "template:all", "--n", str(args.train_n), "--db", "random", "--trials", "1",
           "-o", str(data["dynamic"]), env=env)
    rows = {}
    for arm, path in data.items():
        n_conv = sum(1 for _ in path.open())
        t1 = time.perf_counter()
        muactl("train", "sft", "model=tiny", "domain=bank", f"data={path}", f"sft.max_steps={args.steps}",
               f"sft.batch_size={args.batch_size}", f"sft.lr={args.lr}", "sft.save_steps=100000",
               f"run_id=dyn-{arm}", env=env)
        ckpt = work / "runs" / f"dyn-{arm}" / "checkpoint-final"
        t2 = time.perf_counter()
        out = muactl("eval", "bank", "--agent", f"hf:{ckpt}", "--user", "scripted", "--tasks", "template:all",
                     "--n", str(args.eval_n), "--db", "random", "--seed", str(args.eval_seed),
                     "--max-turns", str(args.max_turns), "--max-new-tokens", "96", "--concurrency", "16", env=env)
        rid = run_id_of(out)
        from muactl.runs.store import RunStore

        summary = RunStore.open(rid).info()["summary"]
        rows[arm] = {"conversations": n_conv, "success": summary.get("pass^1") or 0.0,
                     **partial_metrics(rid, args.eval_n, args.eval_seed),
                     "train s": t2 - t1, "eval s": time.perf_counter() - t2}
    print(f"\ntiny on bank, SFT {args.steps} steps x batch {args.batch_size} (lr {args.lr}); eval: {args.eval_n} "
          f"template instances over unseen random databases (test seed stream {args.eval_seed}), scripted user")
    cols = ["conversations", "success", "first call right", "id calls right", "ids copied", "ids used", "train s", "eval s"]
    print(f"{'arm':10}" + "".join(f"{c:>18}" for c in cols))
    for arm, r in rows.items():
        print(f"{arm:10}" + "".join(f"{r[c]:>18.3f}" if isinstance(r[c], float) else f"{r[c]:>18}" for c in cols))
    print(f"total {time.perf_counter() - t0:.0f} s; work dir {work}")


if __name__ == "__main__":
    main()
