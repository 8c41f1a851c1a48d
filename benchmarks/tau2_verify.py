"""muactl's τ²-bench import checked against τ²'s own tools, per domain: tasks whose final database
equals τ²'s (τ²'s hash recipe), gold calls with the same error/no-error outcome and text, outputs equal
as parsed JSON; plus the oracle's score and the lines of muactl's YAML against τ²'s tools.py (telecom:
with user_tools.py). A second table compares what the model is shown, as bytes: gold outputs' text,
tool schemas (agent's and user's, in τ²'s order, `title`s left out), the agent's system prompt, the
user simulator's system prompt per task and the greeting.

The ground truth is tests/data/tau2/<domain>.json and tests/data/tau2/seen/<domain>.json (written by
benchmarks/tau2_record.py). Needs a τ²-bench checkout for the data (README, "τ²-bench"):

    .venv/bin/python benchmarks/tau2_verify.py PATH/TO/tau2-bench [--domain retail]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


DOMAINS = ["retail", "airline", "telecom", "mock", "banking_knowledge"]


def code_lines(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip() and not line.strip().startswith("#"))


def run(checkout: Path, domain: str) -> dict:
    from muactl.importers.tau2 import HERE, import_tau2, verify
    from muactl.importers.tau2_seen import verify_seen
    from muactl.domain.validate import validate_domain

    truth = json.loads((ROOT / "tests" / "data" / "tau2" / f"{domain}.json").read_text())
    with tempfile.TemporaryDirectory() as tmp:
        old = os.getcwd()
        os.chdir(tmp)
        try:
            t0 = time.perf_counter()
            import_tau2(checkout, domain, Path(tmp))
            t_import = time.perf_counter() - t0
            t0 = time.perf_counter()
            opened = validate_domain(f"tau2-{domain}")
            t_validate = time.perf_counter() - t0
            row = verify(opened, truth)
            row.update(verify_seen(opened, json.loads((ROOT / "tests" / "data" / "tau2" / "seen" / f"{domain}.json")
                                                      .read_text())))
            row["oracle"] = oracle_score(opened)
            row["rewards"] = reward_agreement(opened, checkout, domain)
            row["golden"] = golden_prompts(checkout, domain, Path(tmp))
        finally:
            os.chdir(old)
    tools_py = checkout / "src" / "tau2" / "domains" / domain / "tools.py"
    user_py = tools_py.with_name("user_tools.py")
    row.update(domain=domain, import_s=t_import, validate_s=t_validate,
               yaml_lines=len((HERE / f"{domain}.yaml").read_text().splitlines()),
               yaml_code=code_lines(HERE / f"{domain}.yaml"),
               py_lines=sum(len(p.read_text().splitlines()) for p in (tools_py, user_py) if p.is_file()))
    return row


def golden_prompts(checkout: Path, domain: str, project: Path) -> tuple[int, int] | None:
    """banking_knowledge imported again with --retrieval golden: its per-task agent prompts against τ²'s."""
    from muactl.domain.validate import validate_domain
    from muactl.importers.tau2 import BANKING, import_tau2
    from muactl.importers.tau2_seen import same_golden_prompts

    if domain != BANKING:
        return None
    import_tau2(checkout, domain, project, retrieval="golden")
    seen = json.loads((ROOT / "tests" / "data" / "tau2" / "seen" / f"{domain}.json").read_text())
    return same_golden_prompts(validate_domain(f"tau2-{domain}-golden"), seen["golden_agent_prompts"], [])


def reward_agreement(opened, checkout: Path, domain: str) -> dict | None:
    """`scoring: tau2` against τ²'s evaluator on the trajectories recorded in tests/data/tau2/<domain>_rewards.json
    (benchmarks/tau2_reward_record.py); None when none are recorded."""
    from muactl.episode.tau2_scoring import agreement
    from muactl.importers.tau2 import BANKING
    from muactl.importers.tau2_input import read_task_folder, read_tasks

    path = ROOT / "tests" / "data" / "tau2" / f"{domain}_rewards.json"
    if not path.is_file():
        return None
    folder = checkout / "data" / "tau2" / "domains" / domain
    raw = read_task_folder(checkout, folder / "tasks") if domain == BANKING else read_tasks(checkout, folder / "tasks.json")
    return agreement(opened, raw, json.loads(path.read_text()))


def print_rewards(r: dict | None) -> None:
    from muactl.episode.tau2_scoring import OWN_REWARD_REASONS

    if r is None:
        print(f"{'':8} no recorded τ² rewards")
        return
    n = r["trajectories"]
    print(f"{'':8} reward equal to τ²'s evaluator on {r['same_reward']}/{n} recorded trajectories, with the same "
          f"per-check breakdown on {r['same']}/{n}; muactl's own reward equals it on {r['muactl_same_reward']}/{n}"
          + (f" (differs: {', '.join(f'{k} {v}' for k, v in sorted(r['muactl_differs_by_kind'].items()))})"
             if r["muactl_differs_by_kind"] else ""))
    for reason, count in sorted(r["muactl_differs_by_reason"].items(), key=lambda kv: -kv[1]):
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["muactl_differs_by_reason_kind"][reason].items()))
        print(f"{'':10} muactl's own reward differs on {count} ({kinds}): {OWN_REWARD_REASONS[reason]}")
    for line in r["mismatches"][:10]:
        print("   ", line)


def oracle_score(opened) -> float:
    """Mean reward of `muactl eval --agent oracle --user scripted --split all --max-turns 60` (a run folder in the
    temp dir): banking_knowledge's longest gold path has 37 calls, over eval's default of 24 agent turns."""
    from muactl.eval.config import EvalConfig
    from muactl.eval.evaluate import run_eval

    _, summary = run_eval(EvalConfig(domain=opened.spec.domain.name, split="all", max_turns=60), opened=opened)
    return summary["avg_reward"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", type=Path, nargs="?", default=os.environ.get("TAU2_BENCH"))
    ap.add_argument("--domain", action="append", choices=DOMAINS)
    args = ap.parse_args()
    if not args.checkout:
        ap.error("give a τ²-bench checkout (or set TAU2_BENCH)")
    print(f"{'domain':8} {'tasks':>5} {'same DB':>9} {'calls':>5} {'same error':>10} {'outputs':>7} "
          f"{'same output':>11} {'oracle':>6} {'YAML lines':>10} {'τ² tools':>11}")
    from muactl.importers.tau2 import HERE

    rows = []
    for domain in args.domain or DOMAINS:
        if not (HERE / f"{domain}.yaml").is_file():
            print(f"{domain:8} not importable yet (no muactl tools for it)")
            continue
        r = run(args.checkout.resolve(), domain)
        pct = lambda a, b: f"{100 * a / b:.0f}%" if b else "-"  # noqa: E731
        print(f"{domain:8} {r['tasks']:5} {pct(r['db_same'], r['tasks']):>9} {r['calls']:5} "
              f"{pct(r['error_same'], r['calls']):>10} {r['outputs']:7} {pct(r['output_same'], r['outputs']):>11} "
              f"{r['oracle']:6.2f} {r['yaml_lines']:10} {r['py_lines']:11}")
        if r["user_db_aliased"]:
            print(f"{'':8} {r['user_db_aliased']} task(s) where τ²'s set_state points the user's toolkit at the agent's "
                  "database after initialization_data: the agent's database compared, τ² keeps no user's one")
        if r["probes"]:
            print(f"{'':8} + {r['probes']} calls off the gold paths (τ²'s tools probed after the setup): "
                  f"{pct(r['probe_same'], r['probes'])} same error/output"
                  + (f" ({r['probe_flag_differs']} of them a text in τ², an error of that text in muactl)"
                     if r["probe_flag_differs"] else ""))
        for line in r["mismatches"][:10]:
            print("   ", line)
        print_rewards(r["rewards"])
        rows.append(r)
    print_seen(rows)


def print_seen(rows: list[dict]) -> None:
    """What the model is shown, byte for byte against τ²'s record."""
    frac = lambda a, b: f"{a}/{b}"  # noqa: E731
    print(f"\n{'domain':8} {'outputs (bytes)':>15} {'agent schemas':>13} {'user schemas':>12} {'agent prompt':>12} "
          f"{'user prompts':>12} {'greeting':>8}")
    for r in rows:
        print(f"{r['domain']:8} {frac(r['outputs_bytes_same'], r['outputs_bytes']):>15} "
              f"{frac(r['agent_schemas_same'], r['agent_schemas']):>13} {frac(r['user_schemas_same'], r['user_schemas']):>12} "
              f"{'same' if r['agent_prompt_same'] else 'differs':>12} {frac(r['user_prompts_same'], r['user_prompts']):>12} "
              f"{'same' if r['greeting_same'] else 'differs':>8}")
        if r.get("golden"):
            print(f"{'':8} --retrieval golden: agent prompts (the task's documents) same bytes {frac(*reversed(r['golden']))}")
        for line in r["seen_mismatches"][:12]:
            print("   ", line)


if __name__ == "__main__":
    main()
