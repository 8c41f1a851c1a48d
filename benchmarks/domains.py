"""Compile, fork, hash and tool-call figures for the built-in retail domain at 1x and 10x seed data.

Prints a table; asserts nothing. Targets (issue 2): warm compile of retail under 1 s; fork + hash
under 5 ms at 1x.

    .venv/bin/python benchmarks/domains.py
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

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

    dom = dest / "domains" / "retail"
    shutil.copytree(ROOT / "domains" / "retail", dom)
    shutil.rmtree(dom / "data")
    seeds.write_tables(retail.generate(scale, 0), dom / "data")
    return dom


def measure(domain_path: str) -> dict[str, float]:
    from muactl.compile import compile_domain
    from muactl.spec.load import load_domain
    from muactl.validate import check_domain, open_domain

    t0 = time.perf_counter()
    opened = open_domain(domain_path, with_tasks=False)  # cold: empty cache, builds the template
    cold = time.perf_counter() - t0

    def warm_compile():
        spec = load_domain(Path(domain_path))
        check_domain(spec)
        compile_domain(spec).template_bytes()

    warm = timed(warm_compile, 5)
    compiled = opened.compiled
    base = compiled.environment()
    fork = timed(lambda: compiled.environment().close(), 200)
    env = compiled.environment()
    state_hash = timed(env.state_hash, 50)
    user = env.rows("users")[len(env.rows("users")) // 2]
    order = next(o for o in env.rows("orders") if o["status"] == "pending")
    read = timed(lambda: env.call("find_user_id_by_email", {"email": user["email"]}), 200)
    details = timed(lambda: env.call("get_order_details", {"order_id": order["order_id"]}), 200)

    def cancel():
        e = compiled.environment()
        r = e.call("cancel_pending_order", {"order_id": order["order_id"], "reason": "no longer needed"})
        assert not r.error, r.content
        e.close()

    write = timed(cancel, 100) - fork
    rows = sum(len(base.rows(t)) for t in compiled.tables)
    return {"rows": rows, "compile_cold_s": cold, "compile_warm_s": warm, "fork_ms": fork * 1e3,
            "hash_ms": state_hash * 1e3, "fork_plus_hash_ms": (fork + state_hash) * 1e3,
            "read_tool_ms": read * 1e3, "order_details_ms": details * 1e3, "write_tool_ms": write * 1e3}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MUACTL_CACHE"] = str(Path(tmp) / "cache")
        results = {"retail 1x": measure(str(ROOT / "domains" / "retail")),
                   "retail 10x": measure(str(scaled_copy(10, Path(tmp))))}
    keys = list(next(iter(results.values())))
    print(f"{'figure':<20}" + "".join(f"{name:>14}" for name in results))
    for k in keys:
        print(f"{k:<20}" + "".join(f"{r[k]:>14.3f}" if isinstance(r[k], float) else f"{r[k]:>14}" for r in results.values()))
    r1 = results["retail 1x"]
    print(f"\ntargets: warm compile < 1 s: {r1['compile_warm_s']:.3f} s; fork + hash < 5 ms at 1x: {r1['fork_plus_hash_ms']:.3f} ms")


if __name__ == "__main__":
    main()
