"""Compile, fork, state-hash and tool-call figures for the built-in retail domain at three data scales.

The data comes from the seeded generator (`python -m muactl.seeds retail --scale N`, N = 1, 10, 100).
Every episode forks the template and hashes its final state, so those two must not grow with the
database. Each scale prints the incremental hash and, in the same run, the full recompute it replaced
(every row read and digested), plus the two ways to fork (deserialize the template's bytes, or
SQLite's backup API). Prints a table; asserts nothing.

Targets (issue 15): fork + hash at most 2 ms median at scale 10 and 3 ms at scale 100, and
scale-100 / scale-1 at most 1.5x. Issue 2: warm compile of retail under 1 s at scale 1.

    .venv/bin/python benchmarks/domains.py            # scales 1, 10, 100 (~2 min on 2 cores)
    .venv/bin/python benchmarks/domains.py --scales 1 10
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from muactl.env.sandbox import new_env

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(fn, n: int) -> float:
    """Median seconds per call over n calls."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def scaled_copy(scale: int, dest: Path) -> Path:
    from muactl.seeds import __main__ as seeds
    from muactl.seeds import retail

    dom = dest / f"retail{scale}"
    shutil.copytree(ROOT / "domains" / "retail", dom)
    shutil.rmtree(dom / "data")
    seeds.write_tables(retail.generate(scale, 0), dom / "data")
    return dom


def full_recompute(env) -> str:
    """The checked fallback: every row of every table read and digested."""
    from muactl.env.statehash import full_hash

    return full_hash(env.conn, env.domain.tables)


def measure(domain_path: str, scale: int) -> dict[str, float]:
    from muactl.compile import compile_domain
    from muactl.spec.load import load_domain
    from muactl.domain.checks import check_domain
    from muactl.domain.open import open_domain

    t0 = time.perf_counter()
    opened = open_domain(domain_path, with_tasks=False)  # cold: empty cache, builds the template
    cold = time.perf_counter() - t0

    def warm_compile():
        spec = load_domain(Path(domain_path))
        check_domain(spec)
        compile_domain(spec).template_bytes()

    warm = timed(warm_compile, 3 if scale < 100 else 1)
    compiled = opened.compiled
    data = compiled.template_bytes()
    n = 200 if scale < 100 else 60

    def by_deserialize():
        conn = sqlite3.connect(":memory:")
        conn.deserialize(data)
        conn.close()

    source = sqlite3.connect(":memory:")
    source.deserialize(data)

    def by_backup():
        conn = sqlite3.connect(":memory:")
        source.backup(conn)
        conn.close()

    raw_deserialize, raw_backup = timed(by_deserialize, n), timed(by_backup, n)
    source.close()

    t0 = time.perf_counter()
    new_env(compiled).state_hash()  # the template's own digest, once per process
    template_digest = time.perf_counter() - t0

    env = new_env(compiled)
    users = env.rows("users")
    user = users[len(users) // 2]
    pending = [o["order_id"] for o in env.rows("orders") if o["status"] == "pending"]
    read = timed(lambda: env.call("find_user_id_by_email", {"email": user["email"]}), n)
    details = timed(lambda: env.call("get_order_details", {"order_id": pending[0]}), n)

    # one episode's life, timed part by part: fork, one write tool, hash of the end state, close
    # (closing may cost too: a reused sandbox is put back to the template then)
    fork, write, hashed, close, fork_hash = [], [], [], [], []
    for i in range(n):
        t0 = time.perf_counter()
        e = new_env(compiled)
        t1 = time.perf_counter()
        r = e.call("cancel_pending_order", {"order_id": pending[i % len(pending)], "reason": "no longer needed"})
        t2 = time.perf_counter()
        e.state_hash()
        t3 = time.perf_counter()
        e.close()
        t4 = time.perf_counter()
        assert not r.error, r.content
        fork.append(t1 - t0)
        write.append(t2 - t1)
        hashed.append(t3 - t2)
        close.append(t4 - t3)
        fork_hash.append(t1 - t0 + t3 - t2 + t4 - t3)
    full = []
    for i in range(10 if scale < 100 else 3):
        e = new_env(compiled)
        e.call("cancel_pending_order", {"order_id": pending[i % len(pending)], "reason": "no longer needed"})
        t0 = time.perf_counter()
        full_recompute(e)
        full.append(time.perf_counter() - t0)
        e.close()
    med = statistics.median
    rows = sum(len(env.rows(t)) for t in compiled.tables)
    ms = 1e3
    return {"rows": rows, "db_mb": len(data) / 1e6, "compile_cold_s": cold, "compile_warm_s": warm,
            "template_digest_ms": template_digest * ms,
            "fork_deserialize_ms": raw_deserialize * ms, "fork_backup_ms": raw_backup * ms,
            "fork_ms": med(fork) * ms, "hash_ms": med(hashed) * ms, "close_ms": med(close) * ms,
            "fork_plus_hash_ms": med(fork_hash) * ms,
            "write_tool_ms": med(write) * ms, "read_tool_ms": read * ms, "order_details_ms": details * ms,
            "full_hash_ms": med(full) * ms, "copy_plus_full_ms": (raw_deserialize + med(full)) * ms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 10, 100])
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MUACTL_CACHE"] = str(Path(tmp) / "cache")
        for scale in args.scales:
            results[f"retail {scale}x"] = measure(str(scaled_copy(scale, Path(tmp))), scale)
    keys = list(next(iter(results.values())))
    print(f"{'figure':<22}" + "".join(f"{name:>14}" for name in results))
    for k in keys:
        print(f"{k:<22}" + "".join(f"{r[k]:>14.3f}" if isinstance(r[k], float) else f"{r[k]:>14}"
                                   for r in results.values()))
    lo, hi = results[f"retail {min(args.scales)}x"], results[f"retail {max(args.scales)}x"]
    span = f"{max(args.scales)}x / {min(args.scales)}x"
    print("\nfork_plus_hash = fork + hash + close of one episode; copy_plus_full = the baseline: a copy of the "
          "template (deserialize) + a full recompute")
    print(f"ratio {span}: fork + hash {hi['fork_plus_hash_ms'] / lo['fork_plus_hash_ms']:.2f}x; "
          f"copy + full recompute {hi['copy_plus_full_ms'] / lo['copy_plus_full_ms']:.2f}x; "
          f"fork alone {hi['fork_ms'] / lo['fork_ms']:.2f}x")
    print("targets: fork + hash <= 2 ms at 10x, <= 3 ms at 100x, ratio 100x/1x <= 1.5x; warm compile < 1 s at 1x")


if __name__ == "__main__":
    main()
