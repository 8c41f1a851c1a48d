"""`muactl eval`: run every (task, trial) episode, store each as it ends, and report pass^k.

pass^k is tau-bench's unbiased estimator: for a task with n scored trials of which c succeeded,
C(c, k) / C(n, k) is the chance that k trials drawn without replacement all succeed; pass^k is its
mean over tasks, every k over the same tasks: those with --trials scored trials (runs/summary.py).
Excluded episodes (infra_error, user_error: they measure the API or the simulator, not the agent) leave
pass^k; the summary counts them with their top reasons, names the tasks left short of scored trials or
with none, and `--resume` plays them again.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any, Callable

from ..errors import UsageError
from ..episode.rollout import Job, RolloutConfig, run_interruptible, run_many
from ..runs.store import RunStore
from ..runs.summary import summarize
from .config import EvalConfig


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


def tasks_of(cfg, opened):
    """The tasks a run plays (cfg: its tasks, split, n, seed and db): fresh template instances, which the same
    config draws again (so a run resumes, and its episodes can be read back against their tasks), or task files."""
    from ..domain.task_templates import draw_stream, is_template_spec

    if is_template_spec(cfg.tasks):
        return draw_stream(opened, cfg.tasks[0], cfg.n, cfg.seed, cfg.db, "test" if cfg.split == "test" else "train",
                           contrast=bool(getattr(cfg, "contrast", False))).tasks  # eval has no --contrast
    return select_tasks(opened, cfg.split, cfg.tasks)


def build_parts(cfg: EvalConfig, opened):
    """The agent, a user factory and the tool players an eval (or synth) needs."""
    from ..episode.agents import make_agent
    from ..episode.user import make_user

    agent = make_agent(cfg.agent, api_base=cfg.api_base, temperature=cfg.temperature,
                       max_new_tokens=cfg.max_new_tokens, thinking=cfg.thinking, **cfg.llm_options())
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
             on_episode: Callable[[Any, RunStore], None] | None = None,
             grow_to: int | None = None) -> tuple[RunStore, dict[str, Any]]:
    """Run (or resume) every (task, trial) episode; returns the run store and its summary. Episodes are
    saved as they end. `kind` names the run (eval, synth); `on_episode` sees each finished episode.
    The run is locked while episodes are written into it (RunStore.lock). `grow_to` (with `resume`, a
    run of drawn template instances) raises the run's instance count: the draw is prefix-stable, so the
    run's own instances come first and only the new ones are played."""
    if resume:
        store = RunStore.open(resume)
        with store.held():  # before anything is read for the resume: a second resume of this run stops here
            return _run_eval(cfg, store, on_progress, opened, kind, on_episode, grow_to)
    return _run_eval(cfg, None, on_progress, opened, kind, on_episode)


def grown(cfg, store: RunStore, n: int):
    """The resumed run's config with `n` instances, saved in the run: an interval too wide to separate two
    arms narrows by adding instances to the same run instead of playing the first ones again."""
    from ..domain.task_templates import is_template_spec

    if not is_template_spec(cfg.tasks):
        raise UsageError(f"--n grows a run of drawn instances (--tasks template:...); run {store.id} plays task files")
    if n < cfg.n:
        raise UsageError(f"run {store.id} has {cfg.n} instances; --n can only raise that (got {n})")
    return replace(cfg, n=n)  # saved in the run once its parts load (a run that cannot continue keeps its config)


def check_prefix(store: RunStore, tasks) -> None:
    """A run grows only if its instances are the first ones of the larger draw: after a change to the
    templates (or to how they are drawn) its old episodes would be counted beside instances no longer drawn."""
    drawn = {t.task.id for t in tasks}
    stray = sorted({e["task_id"] for e in store.episodes()} - drawn)
    if stray:
        raise UsageError(f"run {store.id} has episodes of instances the draw no longer makes ({', '.join(stray[:3])}"
                         f"{' ...' if len(stray) > 3 else ''}): its templates changed since; start a new run")


SCORINGS = ("muactl", "tau2")


def scoring_of(cfg, opened, kind: str) -> str:
    """The reward a run scores with: --scoring, else the domain's `scoring:` in eval and muactl's in synth
    (SFT data is kept by muactl's reward, as GRPO trains on it). Stored in the run's config, so a resume
    scores as the run began."""
    chosen = cfg.scoring or (opened.spec.domain.scoring if kind == "eval" else "muactl")
    if chosen not in SCORINGS:
        raise UsageError(f"--scoring must be one of {', '.join(SCORINGS)}, not {chosen!r}")
    return chosen


def _run_eval(cfg, store, on_progress, opened, kind, on_episode, grow_to=None):
    from ..domain.open import open_domain

    if store is not None:
        cfg = stored_config(type(cfg), store, concurrency=cfg.concurrency)
        if "scoring" not in store.info()["config"]:  # a run from before --scoring was scored by muactl's reward
            cfg = replace(cfg, scoring="muactl")
        if grow_to is not None:
            cfg = grown(cfg, store, grow_to)
        store.forget_excluded()  # infra and user errors said nothing about the agent: play them again
    opened = opened or open_domain(cfg.domain, trust=cfg.trust)
    from .preflight import check_episode_parts
    from ..domain.task_templates import domain_for

    check_episode_parts(cfg.agent, cfg.user, cfg.api_base, cfg.user_api_base, cfg.tool_model)

    tasks = tasks_of(cfg, opened)
    domains = {t.task.id: domain_for(opened, t) for t in tasks}
    cfg = replace(cfg, scoring=scoring_of(cfg, opened, kind))
    if grow_to is not None:
        check_prefix(store, tasks)
    agent, user_factory = build_parts(cfg, opened)  # a model that cannot be used fails before the run exists
    if grow_to is not None:
        store.set_config(asdict(cfg))
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
                         opening=cfg.opening, seed=cfg.seed, scoring=cfg.scoring)
    total = len(tasks) * cfg.trials
    state = {"done": total - len(jobs), "total": total, "successes": _successes_so_far(store, tasks, cfg.trials, done),
             "run_id": store.id}

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
        # on Ctrl-C the finished episodes are stored; a model still loading or generating is not waited for
        run_interruptible(_run(jobs, opened.compiled, agent, user_factory, rcfg, cfg.concurrency, on_done, build_judge(cfg)))
    except KeyboardInterrupt:
        store.update(status="interrupted", summary={**summarize(store.episodes(), cfg.trials), "scoring": cfg.scoring})
        raise
    summary = summarize(store.episodes(), cfg.trials)
    summary["agent"], summary["user"], summary["split"] = cfg.agent, cfg.user, cfg.split
    summary["scoring"] = cfg.scoring
    if not cfg.user.startswith("scripted"):  # a user model under test: faithful or not, with intervals
        from ..runs.summary import user_model_verdict

        summary["user_verdict"] = user_model_verdict(store.episodes())
    if cfg.scoring == "tau2":  # τ²'s reward needs its judge where the basis names NL_ASSERTION
        summary["nl_not_judged"] = sum(1 for e in store.episodes() if (e.get("breakdown") or {}).get("nl_judged") is False)
    store.update(status="finished", summary=summary)
    return store, summary


def _successes_so_far(store, tasks, trials: int, done: set) -> int:
    """The successes among the episodes a resumed run had finished, so that its progress counts them too."""
    wanted = {(t.task.id, trial) for t in tasks for trial in range(trials)} & done
    if not wanted:
        return 0
    return sum(int(e["success"]) for e in store.episodes(step=0) if (e["task_id"], e["trial"]) in wanted)


async def _run(jobs, compiled, agent, user_factory, rcfg, concurrency, on_done, judge=None):
    try:
        await run_many(jobs, compiled, agent, user_factory, rcfg, concurrency=concurrency, on_done=on_done, judge=judge)
    finally:
        await agent.close()
        mcp = compiled.players.get("mcp")
        if mcp is not None and hasattr(mcp, "aclose"):  # stop the episodes' MCP servers before the loop ends
            await mcp.aclose()
