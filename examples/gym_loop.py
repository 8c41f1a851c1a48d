"""Two loops over muactl's Gymnasium AgentEnv; nothing is trained. The random loop samples actions from the
action space (random text and random tool-call JSON); the oracle loop plays the actions muactl's oracle
agent would take (env.unwrapped.action_of). Offline: the scripted user, the built-in bank domain.

    python examples/gym_loop.py --episodes 5

The oracle passes every task (reward 1.0); random actions mostly fail (their tool calls do not parse, and
too many errors end the episode; a text turn with no request in it ends it too).
"""

from __future__ import annotations

import argparse

import gymnasium

import muactl.gym  # noqa: F401  (registers muactl/Agent-v0 and muactl/User-v0)
from muactl.episode.agents.oracle import OracleAgent


def play(env, policy, seed: int) -> tuple[str, float, str, int]:
    """One episode: (task id, reward, termination, steps)."""
    obs, info = env.reset(seed=seed)
    task_id, steps, reward, done = info["task_id"], 0, 0.0, False
    while not done:
        obs, reward, terminated, truncated, info = env.step(policy())
        steps += 1
        done = terminated or truncated
    return task_id, reward, info["termination"], steps


def main(argv: list[str] | None = None) -> dict[str, list[float]]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domain", default="bank")
    ap.add_argument("--episodes", type=int, default=5, help="per loop")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    env = gymnasium.make("muactl/Agent-v0", domain=args.domain)
    env.action_space.seed(args.seed)
    oracle = OracleAgent()
    policies = {"random": env.action_space.sample, "oracle": lambda: env.unwrapped.action_of(oracle)}
    rewards: dict[str, list[float]] = {}
    try:
        for name, policy in policies.items():
            rewards[name] = []
            for k in range(args.episodes):
                task_id, reward, termination, steps = play(env, policy, args.seed + k)
                rewards[name].append(reward)
                print(f"{name:6} episode {k}: {task_id:28} reward {reward:.1f}  {termination} after {steps} steps")
            print(f"{name:6} mean reward {sum(rewards[name]) / len(rewards[name]):.2f}")
    finally:
        env.close()
    return rewards


if __name__ == "__main__":
    main()
