"""muactl's ACEBench Agent import checked against ACEBench's own classes, per domain and category: tasks,
ACEBench's milestones passing its own check as given, the oracle's passes by ACEBench's rule (after the
repairs; `muactl eval --agent oracle`), tasks repaired and flagged, gold calls with the same output bytes,
tasks whose final state has the same bytes, the calls off the gold paths (probes) with the same output,
and the lines of muactl's YAML against ACEBench's Python classes. With a τ²-bench checkout, τ²'s rows
(benchmarks/tau2_verify.py) are printed beside them.

The ground truth is tests/data/acebench/<language>.json (written by benchmarks/acebench_record.py):

    .venv/bin/python benchmarks/acebench_verify.py PATH/TO/ACEBench [--language en] [--tau2 PATH/TO/tau2-bench]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def run(checkout: Path, language: str) -> list[dict]:
    from benchmarks.tau2_verify import code_lines
    from muactl.domain.validate import validate_domain
    from muactl.importers.acebench import (CLASS_FILES, CATEGORIES, WORLDS, import_acebench, scenario_folder,
                                           shipped_yaml, table_rows, verify)

    truth = json.loads((ROOT / "tests" / "data" / "acebench" / f"{language}.json").read_text())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        old = os.getcwd()
        os.chdir(tmp)
        try:
            imported = import_acebench(checkout, Path(tmp), (language,))
            table = {(r["domain"], r["category"]): r for r in table_rows(imported)}
            for imp in imported:
                opened = validate_domain(imp.domain.name)
                world = imp.domain.name.split("-")[1]
                folder = scenario_folder(checkout, "multi_step" if world == "phone" else "multi_turn", language)
                py = sum(len((folder / CLASS_FILES[cls]).read_text().splitlines()) for cls in WORLDS[world])
                for category in CATEGORIES:
                    if (imp.domain.name, category) not in table:
                        continue
                    mine = {**truth, "tasks": {k: v for k, v in truth["tasks"].items() if v["category"] == category}}
                    row = {**table[(imp.domain.name, category)], **verify(opened, mine),
                           "oracle": oracle_score(opened, category), "yaml_lines": len(shipped_yaml(world, language).read_text().splitlines()),
                           "yaml_code": code_lines(shipped_yaml(world, language)), "py_lines": py}
                    rows.append(row)
        finally:
            os.chdir(old)
    return rows


def oracle_score(opened, category: str) -> float:
    """Mean reward of `muactl eval --agent oracle --user scripted` over the category's tasks."""
    from muactl.eval.config import EvalConfig
    from muactl.eval.evaluate import run_eval

    ids = [t.task.id for t in opened.tasks if category in t.task.tags]
    _, summary = run_eval(EvalConfig(domain=opened.spec.domain.name, split="all", tasks=ids), opened=opened)
    return summary["avg_reward"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", type=Path, nargs="?", default=os.environ.get("ACEBENCH"))
    ap.add_argument("--language", action="append", choices=["en", "zh"])
    ap.add_argument("--tau2", type=Path, default=os.environ.get("TAU2_BENCH"), help="a τ²-bench checkout: print τ²'s rows too")
    args = ap.parse_args()
    if not args.checkout:
        ap.error("give an ACEBench checkout (or set ACEBENCH)")
    pct = lambda a, b: f"{100 * a / b:.0f}%" if b else "-"  # noqa: E731
    print(f"{'domain':28} {'tasks':>5} {'as given':>8} {'oracle':>6} {'repaired':>8} {'flagged':>7} {'calls':>5} "
          f"{'same output':>11} {'same state':>10} {'probes':>6} {'same':>5} {'YAML lines':>10} {'Python':>6}")
    for language in args.language or ["en", "zh"]:
        for r in run(args.checkout.resolve(), language):
            name = f"{r['domain']} {r['category'].replace('multi_', '')}"
            print(f"{name:28} {r['tasks']:5} {r['gold_passes']:8} {r['oracle']:6.2f} {r['repaired']:8} {r['flagged']:7} "
                  f"{r['calls']:5} {pct(r['same_output'], r['calls']):>11} {pct(r['same_state'], r['tasks']):>10} "
                  f"{r['probes']:6} {pct(r['probe_same'], r['probes']):>5} {r['yaml_lines']:10} {r['py_lines']:6}")
            for line in r["mismatches"][:10]:
                print("   ", line)
    if args.tau2:
        from benchmarks.tau2_verify import run as tau2_run

        print(f"\n{'τ² domain':10} {'tasks':>5} {'same DB':>9} {'calls':>5} {'same error':>10} {'outputs':>7} "
              f"{'same output':>11} {'oracle':>6} {'YAML lines':>10} {'τ² tools':>8}")
        for domain in ("retail", "airline", "telecom"):
            r = tau2_run(args.tau2.resolve(), domain)
            print(f"{domain:10} {r['tasks']:5} {pct(r['db_same'], r['tasks']):>9} {r['calls']:5} "
                  f"{pct(r['error_same'], r['calls']):>10} {r['outputs']:7} {pct(r['output_same'], r['outputs']):>11} "
                  f"{r['oracle']:6.2f} {r['yaml_lines']:10} {r['py_lines']:8}")


if __name__ == "__main__":
    main()
