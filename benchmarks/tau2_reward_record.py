"""Record τ²-bench's own reward: run τ²'s evaluator (evaluate_simulation, EvaluationType.ALL, each task's
reward_basis) on the trajectories of muactl/importers/tau2_trajectories.py, played on τ²'s own environment.

Writes tests/data/tau2/<domain>_rewards.json: per trajectory its kind, digest, reward, the counted
components (reward_breakdown) and every check (db, env assertions, actions, communicate, NL), booleans
only. `muactl`'s `scoring: tau2` is compared with it by benchmarks/tau2_verify.py and
tests/test_tau2_scoring.py.

τ²'s LLM judge is stubbed: its `generate` answers "every assertion met" (what the recorded NL checks say;
muactl is compared with a judge that answers the same). Nothing else of τ² is changed. Needs the small
dependencies of τ²'s evaluator, not litellm (a throwaway venv):

    python -m venv /tmp/tau2venv && /tmp/tau2venv/bin/pip install pydantic docstring_parser loguru \
        addict toml pyyaml deepdiff python-dotenv pandas numpy rich tabulate tenacity requests httpx psutil
    /tmp/tau2venv/bin/python benchmarks/tau2_reward_record.py PATH/TO/tau2-bench [--domain retail] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from muactl.importers.tau2_trajectories import trajectories  # noqa: E402

DOMAINS = ("retail", "airline", "telecom", "mock", "banking_knowledge")
BANKING = "banking_knowledge"
EVERY = 1  # the recorded files hold every task of each domain
STOP, TRANSFER = "###STOP###", "###TRANSFER###"


def load_tau2(checkout: Path, source: Path | None = None) -> None:
    """τ²'s package over its source folder, without tau2/__init__.py (the litellm runner), and with its LLM
    call replaced by a judge that finds every NL assertion met."""
    pkg = types.ModuleType("tau2")
    pkg.__path__ = [str((source or checkout) / "src" / "tau2")]
    sys.modules["tau2"] = pkg
    os.environ.setdefault("TAU2_DATA_DIR", str(checkout / "data"))
    stub = types.ModuleType("tau2.utils.llm_utils")

    def generate(model, messages, **kwargs):  # the stubbed judge: every expected outcome met
        from tau2.data_model.message import AssistantMessage

        asked = messages[-1].content.split("expectedOutcomes:", 1)[1].strip()
        import ast

        outcomes = ast.literal_eval(asked)
        return AssistantMessage(role="assistant", content=json.dumps({"results": [
            {"expectedOutcome": o, "reasoning": "stub", "metExpectation": True} for o in outcomes]}))

    stub.generate = generate
    sys.modules["tau2.utils.llm_utils"] = stub
    from loguru import logger

    logger.remove()  # τ² logs every tool response at DEBUG
    logger.add(sys.stderr, level="WARNING")


def env_kwargs(domain: str, task) -> dict:
    """What τ²'s runner gives banking_knowledge's environment for a task (runner/build.py): its retrieval
    configuration (golden: no index to build) and the read-log allowlist of its gold path."""
    if domain != BANKING:
        return {}
    crit = task.evaluation_criteria
    allow = {(a.arguments or {}).get("agent_tool_name") for a in (crit.actions or [] if crit else [])
             if a.name == "call_discoverable_agent_tool"} - {None}
    return {"retrieval_variant": "golden_retrieval", "task": task, "read_log_allowlist": allow}


def play(mod, task, trajectory: dict, kwargs: dict | None = None):
    """The trajectory as τ²'s messages, each call answered by τ²'s environment; with its termination."""
    from tau2.data_model.message import AssistantMessage, ToolCall, UserMessage
    from tau2.data_model.simulation import TerminationReason

    env = mod.get_environment(**(kwargs or {}))
    init = task.initial_state
    # a task's message_history opens τ²'s conversation (mock): its calls are replayed, its messages are the
    # trajectory's first, as in τ²'s simulation
    messages = list(init.message_history or []) if init else []
    env.set_state(init.initialization_data if init else None, init.initialization_actions if init else None,
                  list(messages))
    for n, step in enumerate(trajectory["steps"]):
        cls, role = (UserMessage, "user") if step["by"] == "user" else (AssistantMessage, "assistant")
        if "text" in step:
            messages.append(cls(role=role, content=step["text"]))
            continue
        call = ToolCall(id=f"call_{n}", name=step["call"], arguments=step["args"], requestor=role)
        messages.append(cls(role=role, content=None, tool_calls=[call]))
        messages.append(env.get_response(call))
    end = trajectory["end"]
    if end == "max_turns":
        return messages, TerminationReason.MAX_STEPS
    messages.append(UserMessage(role="user", content=STOP if end == "user_stop" else TRANSFER))
    return messages, TerminationReason.USER_STOP


def checks(info) -> dict:
    """τ²'s RewardInfo as booleans: the counted components and every check (None: not computed)."""
    def flags(items, attr):
        return None if items is None else [bool(getattr(x, attr)) for x in items]

    breakdown = info.reward_breakdown
    return {"reward": float(info.reward),
            "reward_breakdown": None if breakdown is None else {k.value: float(v) for k, v in breakdown.items()},
            "db_match": None if info.db_check is None else bool(info.db_check.db_match),
            "env_assertions": flags(info.env_assertions, "met"), "actions": flags(info.action_checks, "action_match"),
            "communicate": flags(info.communicate_checks, "met"), "nl_assertions": flags(info.nl_assertions, "met")}


def record(checkout: Path, domain: str, every: int = 1, limit: int | None = None, communicating: bool = False) -> dict:
    """Every `every`-th task of τ²'s base set (each trajectory runs τ²'s environment four times: a
    whole domain took 3 (telecom) to 12 (retail) CPU minutes here), with `communicating` every task with communicate_info too,
    at most `limit` of them."""
    import importlib

    from tau2.data_model.simulation import SimulationRun
    from tau2.evaluator.evaluator import EvaluationType, evaluate_simulation

    mod = importlib.import_module(f"tau2.domains.{domain}.environment")
    folder = checkout / "data" / "tau2" / "domains" / domain
    if domain == BANKING:  # its get_tasks reads tasks/task_*.json
        raw = {t["id"]: t for t in (json.loads(p.read_text()) for p in sorted((folder / "tasks").glob("task_*.json")))}
    else:
        raw = {t["id"]: t for t in json.loads((folder / "tasks.json").read_text())}
    base = mod.get_tasks(task_split_name="base")
    probe = mod.get_environment(**env_kwargs(domain, base[0]))
    out = {}
    chosen = [t for i, t in enumerate(base) if (every > 0 and i % every == 0)
              or communicating and t.evaluation_criteria and t.evaluation_criteria.communicate_info]
    for task in chosen[:limit]:
        rows = []
        kwargs = env_kwargs(domain, task)
        for traj in trajectories(raw[task.id], probe._is_mutating_tool):
            messages, reason = play(mod, task, traj, kwargs)
            sim = SimulationRun(id=traj["digest"], task_id=task.id, start_time="", end_time="", duration=0.0,
                                termination_reason=reason, messages=messages)
            try:
                info = evaluate_simulation(sim, task, EvaluationType.ALL, solo_mode=False, domain=domain,
                                           env_kwargs=kwargs)
            except Exception as e:  # τ²'s evaluator itself fails (mock: an env assertion on a task never made)
                rows.append({"kind": traj["kind"], "digest": traj["digest"], "error": type(e).__name__})
                continue
            rows.append({"kind": traj["kind"], "digest": traj["digest"], **checks(info)})
        out[task.id] = rows
    return out


def dumped(record: dict) -> str:
    """The record as JSON with one trajectory per line (small, and a diff shows which one changed)."""
    head = json.dumps({k: v for k, v in record.items() if k != "tasks"}, ensure_ascii=False)[:-1]
    tasks = ",\n".join(f" {json.dumps(tid, ensure_ascii=False)}: [\n" + ",\n".join(f"  {json.dumps(r)}" for r in rows)
                       + "\n ]" for tid, rows in record["tasks"].items())
    return f"{head}, \"tasks\": {{\n{tasks}\n}}}}\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--domain", action="append", choices=DOMAINS)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "tau2")
    ap.add_argument("--source", type=Path, default=None, help="τ²'s code from this checkout (default: the data's); "
                    "tests/data/tau2/fixture_rewards.json is the invented checkout's data under a2c0247's code")
    ap.add_argument("--every", type=int, default=EVERY, help="record every N-th task (default: %(default)s; 0: none)")
    ap.add_argument("--communicating", action="store_true", help="also every task with communicate_info "
                    "(airline: few have any)")
    ap.add_argument("--name", default=None, help="file name under --out (default: <domain>_rewards.json)")
    ap.add_argument("--limit", type=int, default=None, help="at most this many tasks")
    args = ap.parse_args()
    checkout = args.checkout.resolve()
    load_tau2(checkout, args.source and args.source.resolve())
    commit = os.environ.get("TAU2_COMMIT", "a2c0247")
    for domain in args.domain or DOMAINS:
        tasks = record(checkout, domain, args.every, args.limit, args.communicating)
        n = sum(map(len, tasks.values()))
        path = args.out / (args.name or f"{domain}_rewards.json")
        path.write_text(dumped({"domain": domain, "tau2_commit": commit, "judge": "stub: every NL assertion met",
                                "every": args.every, "communicating": args.communicating,
                                "trajectories": n, "tasks": tasks}))
        print(f"{domain}: {n} trajectories of {len(tasks)} tasks, mean reward "
              f"{sum(r.get('reward', 0) for rows in tasks.values() for r in rows) / n:.3f}"
              f" ({sum('error' in r for rows in tasks.values() for r in rows)} where τ²'s evaluator fails) -> {path}")


if __name__ == "__main__":
    main()
