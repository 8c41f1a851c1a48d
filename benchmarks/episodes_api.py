"""API-bound episodes: throughput at concurrency 64 vs 1, and the engine's own overhead.

A local OpenAI-compatible server (tests/fakes/openai_server.py) answers every request, agent and user
alike, after 100 ms. The agent (litellm, native tool calling) replays each bank task's gold path and the
LLM user states its goal and stops, so every episode is a full, successful conversation through the real
engine, sandbox, reward and run store. Printed, never asserted (targets: >= 20x, overhead < 5%).

Engine overhead per episode = wall - time awaiting the agent's and the user's model calls, plus the
time to store the episode: that is sandbox forks, tool calls, reward and storage.

    python benchmarks/episodes_api.py [--episodes-64 128] [--episodes-1 8] [--delay 0.1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from muactl.episode.agents import make_agent
from muactl.episode.user import make_user
from muactl.episode.rollout import Job, RolloutConfig, run_many
from muactl.runs.store import RunStore
from muactl.domain.open import open_domain
from tests.fakes.openai_server import FakeOpenAI, gold_agent, two_sided


def delayed(responder, delay):
    def respond(body):
        reply = responder(body)
        reply.delay = delay
        return reply

    return respond


def run(opened, server, n, concurrency):
    tasks = opened.tasks
    jobs = [Job(tasks[i % len(tasks)], i // len(tasks)) for i in range(n)]
    agent = make_agent("openai/fake", api_base=server.base, backoff_s=0.05)
    users = lambda: make_user("openai/fake", api_base=server.base, backoff_s=0.05)
    store = RunStore.create("bench", "bank", {"concurrency": concurrency, "episodes": n})
    saves: list[float] = []

    def on_done(ep):
        t0 = time.perf_counter()
        store.save_episode(ep)
        saves.append(time.perf_counter() - t0)

    before = len(server.requests)
    t0 = time.perf_counter()
    eps = asyncio.run(run_many(jobs, opened.compiled, agent, users, RolloutConfig(), concurrency, on_done))
    wall = time.perf_counter() - t0
    walls = [e.timing["wall"] + s for e, s in zip(eps, saves)]
    engine = [e.timing["wall"] - e.timing["agent"] - e.timing["user"] + s for e, s in zip(eps, saves)]
    return {
        "concurrency": concurrency, "episodes": len(eps), "wall_s": wall, "eps_per_s": len(eps) / wall,
        "success": sum(e.reward for e in eps) / len(eps), "requests": len(server.requests) - before,
        "ep_wall_s": statistics.mean(walls),
        "overhead_ms": 1000 * statistics.mean(engine),
        "overhead_pct": 100 * sum(engine) / sum(walls),
        "tools_ms": 1000 * statistics.mean(e.timing["tools"] for e in eps),
        "reward_ms": 1000 * statistics.mean(e.timing["reward"] for e in eps),
        "store_ms": 1000 * statistics.mean(saves),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes-64", type=int, default=128, help="episodes at concurrency 64")
    ap.add_argument("--episodes-1", type=int, default=8, help="episodes at concurrency 1")
    ap.add_argument("--delay", type=float, default=0.1, help="server answer delay in seconds")
    args = ap.parse_args()
    os.environ["MUACTL_RUNS"] = tempfile.mkdtemp(prefix="muactl-bench-runs-")
    opened = open_domain("bank")
    with FakeOpenAI(delayed(two_sided(gold_agent([t.task for t in opened.tasks])), args.delay)) as server:
        run(opened, server, 2, 2)  # warm-up: litellm's first call pays for lazy imports
        rows = [run(opened, server, args.episodes_1, 1), run(opened, server, args.episodes_64, 64)]
        peak = server.max_inflight
    print(f"bank, API agent + LLM user via a local OpenAI-compatible server answering after {args.delay * 1000:.0f} ms "
          f"(cpus: {os.cpu_count()}, peak requests in flight: {peak})")
    head = f"{'conc':>4} {'episodes':>8} {'requests':>8} {'wall s':>7} {'ep/s':>7} {'success':>7} {'ep wall s':>9} " \
           f"{'overhead ms/ep':>14} {'overhead %':>10} {'tools ms':>8} {'reward ms':>9} {'store ms':>8}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['concurrency']:>4} {r['episodes']:>8} {r['requests']:>8} {r['wall_s']:>7.2f} {r['eps_per_s']:>7.2f} "
              f"{r['success']:>7.2f} {r['ep_wall_s']:>9.3f} {r['overhead_ms']:>14.2f} {r['overhead_pct']:>9.2f}% "
              f"{r['tools_ms']:>8.2f} {r['reward_ms']:>9.2f} {r['store_ms']:>8.2f}")
    ratio = rows[1]["eps_per_s"] / rows[0]["eps_per_s"]
    print(f"speed-up at concurrency 64 vs 1: {ratio:.1f}x (target >= 20x)")
    print(f"engine overhead: {rows[0]['overhead_pct']:.2f}% of episode wall time at concurrency 1, "
          f"{rows[1]['overhead_pct']:.2f}% at 64 (target < 5%)")


if __name__ == "__main__":
    main()
