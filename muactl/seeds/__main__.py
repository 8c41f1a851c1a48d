from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path


def write_tables(tables: dict[str, list[dict]], out: Path) -> None:
    """One JSONL file per table, keys in declaration order, stable across runs."""
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in tables.items():
        with open(out / f"{name}.jsonl", "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m muactl.seeds", description=__doc__)
    ap.add_argument("domain", help="built-in domain whose data to generate (retail, bank)")
    ap.add_argument("--scale", type=int, default=1, help="multiply row counts (benchmarks use 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-o", "--out", type=Path, required=True, help="folder for <table>.jsonl files")
    args = ap.parse_args()
    module = importlib.import_module(f"muactl.seeds.{args.domain}")
    write_tables(module.generate(args.scale, args.seed), args.out)


if __name__ == "__main__":
    main()
