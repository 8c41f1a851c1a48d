"""Reward audit: can an agent be paid without doing the task? (issues 12, 26)

Runs the adversarial agents (muactl/episode/agents/adversarial.py: do-nothing, transfer-at-once,
number-sprayer, id-echo) and the oracle over every task of every built-in domain, from the task files
and freshly drawn template instances, with the scripted user. Prints, per domain and task source, the
share of tasks whose correct outcome is "no change" and each agent's pass^1. Target: every adversary at
most BOUND (0.05) everywhere, the oracle at 100%: a task whose right outcome changes nothing pays only
for evidence of the work (expect.required_calls: the look-ups; expect.outputs: the reason or the answer).
Asserts nothing; the last column says whether the targets hold (tests/test_reward_audit.py enforces them).

    .venv/bin/python benchmarks/reward_audit.py            # --n 100 template instances per domain and database
    .venv/bin/python benchmarks/reward_audit.py --n 200 --db random
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BOUND = 0.05  # the most pass^1 any adversary may reach on any domain and task source
AGENTS = ["adversary:do-nothing", "adversary:transfer-at-once", "adversary:number-sprayer", "adversary:id-echo",
          "oracle", "oracle:varied"]


def task_sets(opened, n: int, dbs: list[str], seed: int) -> dict[str, list]:
    from muactl.domain.task_templates import draw_stream

    sets = {"task files": list(opened.tasks)}
    for db in dbs:
        if n and opened.templates and (db == "fixed" or opened.spec.domain.database.generate):
            sets[f"templates ({db} db)"] = draw_stream(opened, "template:all", n, seed, db, "test").tasks
    return sets


def pass_at_1(opened, tasks: list, agent_spec: str) -> tuple[float, list[str]]:
    """Mean reward of one trial per task, and the ids of the tasks passed."""
    from muactl.episode.agents import make_agent
    from muactl.episode.user import ScriptedUser
    from muactl.episode.rollout import Job, RolloutConfig, run_many
    from muactl.domain.task_templates import domain_for

    jobs = [Job(t, 0, domain_for(opened, t)) for t in tasks]
    episodes = asyncio.run(run_many(jobs, opened.compiled, make_agent(agent_spec), ScriptedUser, RolloutConfig(),
                                    concurrency=16))
    return sum(e.reward for e in episodes) / len(episodes), [e.task_id for e in episodes if e.reward > 0]


def audit(opened, tasks: list) -> dict:
    from muactl.env.gold import changes_nothing
    from muactl.domain.task_templates import domain_for

    no_change = sum(changes_nothing(t, domain_for(opened, t)) for t in tasks) / len(tasks)
    scores = {a: pass_at_1(opened, tasks, a)[0] for a in AGENTS}
    ok = all(scores[a] <= BOUND for a in AGENTS if a.startswith("adversary:")) and scores["oracle"] == scores["oracle:varied"] == 1.0
    return {"tasks": len(tasks), "no_change": no_change, "scores": scores, "ok": ok}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="template instances per domain (0: task files only)")
    ap.add_argument("--db", default="fixed,random", help="databases of the template instances (random only where the "
                    "domain declares a generator)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from muactl.spec.library import list_domains
    from muactl.domain.open import open_domain

    t0 = time.perf_counter()
    short = [a.removeprefix("adversary:") for a in AGENTS]
    print(f"{'domain':8} {'tasks from':22} {'n':>4} {'no-change':>9} " + " ".join(f"{s:>16}" for s in short) + "  targets")
    all_ok = True
    for ref in list_domains():
        if ref.origin != "builtin":
            continue
        opened = open_domain(ref.name)
        for source, tasks in task_sets(opened, args.n, args.db.split(","), args.seed).items():
            r = audit(opened, tasks)
            all_ok &= r["ok"]
            print(f"{ref.name:8} {source:22} {r['tasks']:>4} {r['no_change']:>9.3f} "
                  + " ".join(f"{r['scores'][a]:>16.3f}" for a in AGENTS) + ("  ok" if r["ok"] else "  FAILED"))
    print(f"\n{'all targets hold' if all_ok else 'TARGETS FAILED'} ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
