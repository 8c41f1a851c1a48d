"""How long one random instance of a domain's database takes to build (draw rows + SQLite image),
and one template instance on it (sample, derive, gold replay). Prints figures; asserts nothing.

    .venv/bin/python benchmarks/random_db.py [--domain bank] [--n 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from muactl.env.sandbox import new_env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--domain", default="bank")
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    from muactl.compile import randomdb
    from muactl.domain.task_templates import instantiate
    from muactl.domain.open import open_domain

    opened = open_domain(args.domain)
    randomdb.instance_bytes(opened.compiled, -1)  # the empty schema image is made once per process
    build, task = [], []
    for s in range(args.n):
        randomdb._CACHE.clear()  # measure a cold build, not the cache
        t0 = time.perf_counter()
        inst = randomdb.instance(opened.compiled, 10_000 + s)
        t1 = time.perf_counter()
        ts = opened.templates[s % len(opened.templates)] if opened.templates else None
        if ts is not None:
            instantiate(ts, opened, s, 10_000 + s)
        t2 = time.perf_counter()
        build.append((t1 - t0) * 1000)
        task.append((t2 - t1) * 1000)
    env = new_env(inst)
    sizes = {t: env.conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in opened.compiled.tables}
    env.close()
    q = lambda xs, p: sorted(xs)[int(p * (len(xs) - 1))]
    print(f"{args.domain}: random database instance ({', '.join(f'{k} {v}' for k, v in sizes.items())} rows), n={args.n}")
    print(f"  build instance     median {statistics.median(build):6.2f} ms   p95 {q(build, .95):6.2f} ms   max {max(build):6.2f} ms")
    if opened.templates:
        print(f"  + draw one task    median {statistics.median(task):6.2f} ms   p95 {q(task, .95):6.2f} ms "
              "(sample, derive, gold replay, on the cached instance)")


if __name__ == "__main__":
    main()
