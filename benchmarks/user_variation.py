"""How varied the scripted user is, plain against `scripted:varied` (and any other --user): the oracle agent plays
100 episodes per user on a domain, and the figures of muactl/episode/fidelity.py's `variation` are printed beside
the share of faithful episodes, pass^1, the replies a trained user drew again (its card's draws) and each check's
share. Prints a table; asserts nothing. The agent is `oracle` (one phrasing per situation) unless --agent says
otherwise, so only the user's variation is measured.

    .venv/bin/python benchmarks/user_variation.py                       # bank and retail, ~1 min
    .venv/bin/python benchmarks/user_variation.py --domains bank --user hf:runs/<id>/checkpoint-final --user-temperature 0.7
"""

from __future__ import annotations

import argparse
import os
import tempfile


def measure(domain: str, user: str, episodes: int, agent: str, temperature: float) -> dict:
    from muactl.eval.config import EvalConfig
    from muactl.eval.evaluate import run_eval
    from muactl.episode.fidelity import variation

    # template instances from the test stream: `episodes` different tasks, not a few tasks repeated
    cfg = EvalConfig(domain=domain, agent=agent, user=user, tasks=["template:all"], n=episodes, split="test",
                     user_temperature=temperature, max_turns=16)
    store, summary = run_eval(cfg)
    episodes = store.episodes()
    conversations = [[m for m in store.messages(e["id"])] for e in episodes]
    redrawn = sum(e["usage"].get("user_redrawn", 0) for e in episodes)  # a trained user's card's draws
    return {**variation(conversations), "faithful": summary["user_fidelity"]["faithful"], "pass^1": summary["pass^1"],
            "redrawn": redrawn, "fidelity": summary["user_fidelity"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", default="bank,retail")
    ap.add_argument("--user", action="append", help="users to measure (default: scripted, scripted:varied)")
    ap.add_argument("--agent", default="oracle")
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--user-temperature", type=float, default=0.0)
    args = ap.parse_args()
    from muactl.episode.fidelity import CHECKS

    users = args.user or ["scripted", "scripted:varied"]
    os.environ.setdefault("MUACTL_RUNS", tempfile.mkdtemp(prefix="user-variation-"))
    os.environ["MUACTL_NO_PROGRESS"] = "1"
    print(f"{'domain':8} {'user':40} {'episodes':>8} {'messages':>8} {'distinct-1':>10} {'distinct-2':>10} "
          f"{'openings/100':>12} {'faithful':>8} {'pass^1':>6} {'redrawn':>7}")
    for domain in args.domains.split(","):
        for user in users:
            r = measure(domain, user, args.episodes, args.agent, args.user_temperature)
            print(f"{domain:8} {user[:40]:40} {r['episodes']:8.0f} {r['user_messages']:8.0f} {r['distinct_1']:10.3f} "
                  f"{r['distinct_2']:10.3f} {r['openings_per_100']:12.0f} {r['faithful']:8.2f} {r['pass^1']:6.2f} "
                  f"{r['redrawn']:7.0f}")
            checks = {k: v for k, v in r["fidelity"].items() if k in CHECKS and v is not None}
            print("         " + ", ".join(f"{k} {v:.2f} ({r['fidelity'][k + '_n']})" for k, v in checks.items()))


if __name__ == "__main__":
    main()
