"""`muactl eval`: run every (task, trial) episode, store each as it ends, and report pass^k.

pass^k is tau-bench's unbiased estimator: for a task with n scored trials of which c succeeded,
C(c, k) / C(n, k) is the chance that k trials drawn without replacement all succeed; pass^k is its
mean over tasks. Excluded episodes (infra_error, user_error: they measure the API or the simulator,
not the agent) leave pass^k; the summary counts them with their top reasons, lists the tasks left with
no scored trial, and `--resume` plays them again.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict, dataclass, field
from collections import Counter
from math import comb
from typing import Any, Callable

from ..errors import UsageError
from ..episode.rollout import EXCLUDED, OUTCOMES, Job, RolloutConfig, outcome_of, run_many
from ..runs.store import RunStore


@dataclass
class EvalConfig:
    domain: str
    agent: str = "oracle"
    user: str = "scripted"
    split: str | None = "test"  # train | test | all
    tasks: list[str] = field(default_factory=list)  # explicit task ids (override split), or ["template:<id>|all"]
    n: int = 100  # with template tasks: how many instances to draw
    db: str = "fixed"  # with template tasks: fixed (the seed database) | random (a fresh database per instance)
    trials: int = 1
    concurrency: int = 8
    seed: int = 0
    max_turns: int = 24
    max_tool_errors: int = 4  # an episode ends (too_many_errors) past this many failed tool calls
    timeout_s: float = 600.0  # wall-clock limit of one episode (timeout)
    opening: str | None = None
    api_base: str | None = None  # for the agent
    user_api_base: str | None = None
    temperature: float = 0.0
    user_temperature: float = 0.0
    max_new_tokens: int = 256
    tool_model: str | None = None  # litellm model that plays simulated tools
    trust: bool = False
    # every API call (API agents and users, judges, simulated tools): a slow server needs a longer timeout
    max_tokens: int = 1024  # tokens per API reply
    retries: int = 4
    llm_timeout_s: float = 60.0  # per request
    backoff_s: float = 1.0  # first retry delay of API calls; doubles per retry
    judge: str | None = None  # litellm model id or hf:<model> that checks expect.nl_assertions
    judge_api_base: str | None = None

    def llm_options(self) -> dict[str, Any]:
        """The API-call settings as make_agent, make_user and the tool players take them."""
        return {"timeout_s": self.llm_timeout_s, "retries": self.retries, "backoff_s": self.backoff_s,
                "max_tokens": self.max_tokens}


def stored_config(cls, store: RunStore, **changes: Any):
    """The config a run was started with (its runs.sqlite), as `cls`, with `changes` applied: what a
    resume continues. A key this muactl does not know is an error naming it, not a TypeError."""
    import dataclasses

    saved = store.info()["config"]
    known = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(saved, dict):
        raise UsageError(f"{store.path / 'runs.sqlite'}: the stored config is not a mapping; this run cannot be resumed")
    unknown = sorted(set(saved) - known)
    if unknown:
        raise UsageError(f"{store.path / 'runs.sqlite'}: the stored config has unknown key(s) {', '.join(unknown)} "
                         f"(written by another muactl version?); this muactl cannot resume the run")
    try:
        return cls(**{**saved, **changes})
    except TypeError as e:  # a required key is missing
        raise UsageError(f"{store.path / 'runs.sqlite'}: the stored config is incomplete ({e})") from None


def select_tasks(opened, split: str | None, ids: list[str]):
    if ids:
        return [opened.task(i) for i in ids]
    if split in (None, "all"):
        chosen = list(opened.tasks)
    else:
        chosen = [t for t in opened.tasks if t.split == split]
    if not chosen:
        splits = sorted({t.split for t in opened.tasks}) or ["none"]
        raise UsageError(f"domain {opened.ref.name} has no tasks in split '{split}' (splits: {', '.join(splits)})")
    return chosen


def pass_hat_k(counts: dict[str, tuple[int, int]], k: int) -> float | None:
    """Mean over tasks with at least k counted trials of C(c, k) / C(n, k)."""
    vals = [comb(c, k) / comb(n, k) for n, c in counts.values() if n >= k]
    return sum(vals) / len(vals) if vals else None


def _outcome(e: dict[str, Any]) -> str:
    return e.get("outcome") or outcome_of(e["termination"], bool(e["success"]))


def _reason(e: dict[str, Any]) -> str:
    """An excluded episode's error, short enough to group identical causes (model name first, cut)."""
    text = (e.get("error") or "no error recorded").strip().splitlines()[0]
    return text if len(text) <= 120 else text[:117] + "..."


def excluded_report(episodes: list[dict[str, Any]], top: int = 3) -> dict[str, Any]:
    """Per excluded class: its count and its `top` most frequent reasons as [reason, count] pairs."""
    out: dict[str, Any] = {}
    for cls in EXCLUDED:
        reasons = Counter(_reason(e) for e in episodes if _outcome(e) == cls)
        if reasons:
            out[cls] = {"count": sum(reasons.values()), "reasons": [list(r) for r in reasons.most_common(top)]}
    return out


def tasks_not_scored(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tasks that ran but have no scored trial, with the classes their trials ended in: they are not
    in pass^k, and a summary must say so rather than shrink the denominator quietly."""
    by_task: dict[str, Counter] = {}
    for e in episodes:
        by_task.setdefault(e["task_id"], Counter())[_outcome(e)] += 1
    return [{"task_id": t, "outcomes": dict(sorted(c.items()))} for t, c in sorted(by_task.items())
            if not c["success"] and not c["failure"]]


def summarize(episodes: list[dict[str, Any]], k_max: int) -> dict[str, Any]:
    counted = [e for e in episodes if _outcome(e) not in EXCLUDED]
    counts: dict[str, tuple[int, int]] = {}
    for e in counted:
        n, c = counts.get(e["task_id"], (0, 0))
        counts[e["task_id"]] = (n + 1, c + int(e["success"]))
    terms = Counter(e["termination"] for e in episodes)
    outcomes = Counter(_outcome(e) for e in episodes)
    calls = sum(e["tool_calls"] for e in counted)
    out: dict[str, Any] = {
        "episodes": len(episodes), "counted": len(counted),
        "infra_errors": outcomes["infra_error"], "user_errors": outcomes["user_error"],
        "tasks": len(counts),
        "avg_reward": sum(e["reward"] for e in counted) / len(counted) if counted else None,
        "outcomes": {o: outcomes[o] for o in OUTCOMES if outcomes[o]},
        "terminations": dict(sorted(terms.items())),
        "excluded": excluded_report(episodes),
        "tasks_not_scored": tasks_not_scored(episodes),
        "tool_error_rate": sum(e["tool_errors"] for e in counted) / calls if calls else 0.0,
        # errors also count malformed replies, which make no call: per episode says more for weak models
        "avg_tool_errors": sum(e["tool_errors"] for e in counted) / len(counted) if counted else None,
        "avg_turns": sum(e["turns"] for e in counted) / len(counted) if counted else None,
        "prompt_tokens": sum(e["prompt_tokens"] or 0 for e in episodes),
        "completion_tokens": sum(e["completion_tokens"] or 0 for e in episodes),
        "cost": round(sum(e["cost"] or 0 for e in episodes), 6),
    }
    for k in range(1, k_max + 1):
        out[f"pass^{k}"] = pass_hat_k(counts, k)
    for key in ("first_call_right", "gold_calls_made"):
        vals = [v for e in counted if (v := ((e.get("breakdown") or {}).get("partial") or {}).get(key)) is not None]
        out[key] = sum(vals) / len(vals) if vals else None
    out.update({k: v for k, v in interaction_summary(episodes).items() if k != "tool_errors"})  # avg_tool_errors
    out["user_fidelity"] = fidelity_summary(episodes)
    return out


def _played(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Episodes that ran (an API that kept failing says nothing about the agent or the user)."""
    return [e for e in episodes if e["termination"] != "infra_error"]


def interaction_summary(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """UserRL's interaction figures per episode."""
    from ..episode.fidelity import summarize_interaction

    return summarize_interaction([e["interaction"] for e in _played(episodes) if e.get("interaction")])


def fidelity_summary(episodes: list[dict[str, Any]]) -> dict[str, Any]:
    """How the simulated user behaved, check by check (muactl/episode/fidelity.py)."""
    from ..episode.fidelity import summarize_fidelity

    return summarize_fidelity([e["fidelity"] for e in _played(episodes) if e.get("fidelity")])


def fidelity_per_task(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_task: dict[str, list[dict[str, Any]]] = {}
    for e in episodes:
        by_task.setdefault(e["task_id"], []).append(e)
    return [{"task_id": tid, **fidelity_summary(eps)} for tid, eps in by_task.items()]


def per_task(episodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for e in episodes:
        r = rows.setdefault(e["task_id"], {"task_id": e["task_id"], "trials": 0, "successes": 0, "excluded": 0,
                                           "terminations": {}})
        r["trials"] += 1
        r["successes"] += int(e["success"])
        r["excluded"] += int(_outcome(e) in EXCLUDED)
        r["terminations"][e["termination"]] = r["terminations"].get(e["termination"], 0) + 1
    return list(rows.values())


def build_parts(cfg: EvalConfig, opened):
    """The agent, a user factory and the tool players an eval (or synth) needs."""
    from ..episode.agents import make_agent
    from ..episode.user import make_user

    agent = make_agent(cfg.agent, api_base=cfg.api_base, temperature=cfg.temperature,
                       max_new_tokens=cfg.max_new_tokens, **cfg.llm_options())
    if cfg.tool_model:
        from ..episode.simulated import simulated_player

        player = simulated_player(cfg.tool_model, cfg.api_base, **cfg.llm_options())
        opened.compiled.players["simulated"] = player
        if getattr(cfg, "tools", "real") == "simulated":  # the LLM plays every SQL tool; the real DB keeps score
            opened.compiled.players["sql"] = player

    def user_factory():
        return make_user(cfg.user, api_base=cfg.user_api_base, temperature=cfg.user_temperature, **cfg.llm_options())

    return agent, user_factory


def build_judge(cfg: EvalConfig):
    """The judge of natural-language assertions, or None (they are then reported as not judged)."""
    if not getattr(cfg, "judge", None):
        return None
    from ..episode.judge import Judge

    return Judge(cfg.judge, api_base=cfg.judge_api_base, **cfg.llm_options())


def run_eval(cfg: EvalConfig, resume: str | None = None,
             on_progress: Callable[[dict[str, Any]], None] | None = None,
             opened=None, kind: str = "eval",
             on_episode: Callable[[Any, RunStore], None] | None = None) -> tuple[RunStore, dict[str, Any]]:
    """Run (or resume) every (task, trial) episode; returns the run store and its summary. Episodes are
    saved as they end. `kind` names the run (eval, synth); `on_episode` sees each finished episode.
    The run is locked while episodes are written into it (RunStore.lock)."""
    if resume:
        store = RunStore.open(resume)
        with store.held():  # before anything is read for the resume: a second resume of this run stops here
            return _run_eval(cfg, store, on_progress, opened, kind, on_episode)
    return _run_eval(cfg, None, on_progress, opened, kind, on_episode)


def _run_eval(cfg, store, on_progress, opened, kind, on_episode):
    from ..domain.validate import open_domain

    if store is not None:
        cfg = stored_config(type(cfg), store, concurrency=cfg.concurrency)
        store.forget_excluded()  # infra and user errors said nothing about the agent: play them again
    opened = opened or open_domain(cfg.domain, trust=cfg.trust)
    from .preflight import check_episode_parts
    from ..domain.task_templates import domain_for, draw_stream, is_template_spec

    check_episode_parts(cfg.agent, cfg.user, cfg.api_base, cfg.user_api_base, cfg.tool_model)

    if is_template_spec(cfg.tasks):  # fresh instances; the same config draws the same ones, so resume works
        tasks = draw_stream(opened, cfg.tasks[0], cfg.n, cfg.seed, cfg.db,
                            "test" if cfg.split == "test" else "train").tasks
    else:
        tasks = select_tasks(opened, cfg.split, cfg.tasks)
    domains = {t.task.id: domain_for(opened, t) for t in tasks}
    agent, user_factory = build_parts(cfg, opened)  # a model that cannot be used fails before the run exists
    if store is None:  # made only now: a run that cannot start leaves no folder behind
        store = RunStore.create(kind, opened.spec.domain.name, asdict(cfg))
        with store.held():
            return _episodes(cfg, store, tasks, domains, opened, agent, user_factory, on_progress, on_episode)
    return _episodes(cfg, store, tasks, domains, opened, agent, user_factory, on_progress, on_episode)


def _episodes(cfg, store, tasks, domains, opened, agent, user_factory, on_progress, on_episode):
    done = store.finished()
    jobs = [Job(t, trial, domains[t.task.id]) for t in tasks for trial in range(cfg.trials)
            if (t.task.id, trial) not in done]
    rcfg = RolloutConfig(max_turns=cfg.max_turns, max_tool_errors=cfg.max_tool_errors, timeout_s=cfg.timeout_s,
                         opening=cfg.opening, seed=cfg.seed)
    total = len(tasks) * cfg.trials
    state = {"done": total - len(jobs), "total": total, "successes": 0, "run_id": store.id}

    def on_done(ep) -> None:
        store.save_episode(ep)
        if on_episode:
            on_episode(ep, store)
        state["done"] += 1
        state["successes"] += int(ep.reward > 0)
        if on_progress:
            on_progress(dict(state, last=ep))

    if on_progress:
        on_progress(dict(state, last=None))
    store.update(status="running")
    try:
        asyncio.run(_run(jobs, opened.compiled, agent, user_factory, rcfg, cfg.concurrency, on_done, build_judge(cfg)))
    except KeyboardInterrupt:
        store.update(status="interrupted", summary=summarize(store.episodes(), cfg.trials))
        raise
    summary = summarize(store.episodes(), cfg.trials)
    summary["agent"], summary["user"], summary["split"] = cfg.agent, cfg.user, cfg.split
    store.update(status="finished", summary=summary)
    return store, summary


async def _run(jobs, compiled, agent, user_factory, rcfg, concurrency, on_done, judge=None):
    try:
        await run_many(jobs, compiled, agent, user_factory, rcfg, concurrency=concurrency, on_done=on_done, judge=judge)
    finally:
        await agent.close()
        mcp = compiled.players.get("mcp")
        if mcp is not None and hasattr(mcp, "aclose"):  # stop the episodes' MCP servers before the loop ends
            await mcp.aclose()
