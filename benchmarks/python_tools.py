"""Per-call cost of a trusted Python tool (issue 25): each call runs its handler in a child process
(env/pyhandler.py), forked from a single-threaded starter process rather than from muactl's
multi-threaded one. Times a trivial handler (one INSERT) through Environment.call, one call at a
time and from several tool threads at once, on a database of --rows rows (the child gets a copy).

    .venv/bin/python benchmarks/python_tools.py [--calls 40] [--threads 8] [--rows 1000]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import statistics
import tempfile
import time
from pathlib import Path

DOMAIN = """\
name: pybench
description: A domain with one Python tool.
policy: None.
database:
  tables:
    items: {{columns: {{id: text, name: text}}, primary_key: id}}
  seed:
    items: [{rows}]
tools:
  py_add:
    description: Add an item from Python.
    params:
      id: {{type: string}}
    python: "pybench_handlers:add"
"""
HANDLERS = """\
def add(db, id):
    db.execute("INSERT INTO items (id, name) VALUES (?, 'x')", (id,))
    return {"added": id}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=40)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--rows", type=int, default=1000)
    args = ap.parse_args()

    from muactl.domain.open import open_domain
    from muactl.env.sandbox import new_env

    with tempfile.TemporaryDirectory(prefix="muactl-pybench-") as tmp:
        folder = Path(tmp) / "pybench"
        folder.mkdir()
        rows = ", ".join(f"{{id: r{i}, name: n{i}}}" for i in range(args.rows))
        (folder / "domain.yaml").write_text(DOMAIN.format(rows=rows))
        (folder / "pybench_handlers.py").write_text(HANDLERS)
        domain = open_domain(str(folder), trust=True).compiled

        def one(k: int) -> float:
            env = new_env(domain, trust=True)
            t0 = time.perf_counter()
            result = env.call("py_add", {"id": f"new{k}"})
            took = time.perf_counter() - t0
            assert result.changed and not result.error, result.content
            env.close()
            return took

        first = one(-1)  # starts the starter process
        serial = [one(k) for k in range(args.calls)]
        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
            parallel = list(pool.map(one, range(args.calls, 2 * args.calls)))
        wall = time.perf_counter() - t0
        print(f"first call {first * 1e3:.0f} ms; one at a time: median {statistics.median(serial) * 1e3:.1f} ms, "
              f"max {max(serial) * 1e3:.1f} ms; {args.threads} threads: median {statistics.median(parallel) * 1e3:.1f} ms, "
              f"{args.calls / wall:.1f} calls/s ({args.calls} calls, {args.rows} rows)")


if __name__ == "__main__":
    main()
