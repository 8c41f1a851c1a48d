"""The episode engine: agent, simulated user and tools on a live sandbox (MUA-RL's three-party rollout).

One state machine serves eval, SFT synthesis, GRPO and chat:

    [greeting or user opens] -> user turn -> agent turn -> (tool calls -> agent turn)* -> user turn -> ...

A solo task (`solo: true`) has no user after its goal: the goal opens, the agent works, and its first
reply without a tool call ends the episode (agent_done). A task with fixed `turns` (BFCL's multi-turn) has
no simulator either: each reply without a tool call ends a turn and the next turn's message is sent; the
end of the last turn ends the episode (agent_done), and a state snapshot is kept at every turn's end.

Agent text goes to the user; agent tool calls go to the sandbox and the results back to the agent;
user text goes to the agent. The user simulator never sees tool calls. An episode ends on a user stop
token, the agent's transfer, out-of-scope, max turns, too many tool errors, a timeout, or an
agent/user/infra error, and falls in exactly one outcome class (`outcome_of`).
Many episodes run at once (`run_many`): API calls overlap up to a concurrency limit, and local-model
agents batch the turns of all waiting episodes into one generate call (see agents/local.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..env.results import ToolResult
from ..env.sandbox import Environment, new_env
from ..errors import AgentError, GoldReplayFailed, InfraError, MuactlError, UserError
from ..spec.models import call_parts
from .agents.base import Agent
from .types import TIMED_OUT, Episode, EpisodeContext, TokenTrace

if TYPE_CHECKING:
    from ..compile import CompiledDomain
    from ..spec.tasks import TaskSpec
    from .judge import Judge
    from .user import UserSimulator


@dataclass
class RolloutConfig:
    max_turns: int = 24  # agent turns (each model call counts)
    max_tool_errors: int = 4
    timeout_s: float = 600.0
    opening: str | None = None  # "agent" (the domain's greeting) or "user"; None: greeting if the domain has one
    seed: int = 0
    track_progress: bool = False  # record each write's distance to the gold end state (turn-level shaping)
    # the wall clock measures the machine as much as the agent: in training (GRPO) a timeout is infra_error,
    # excluded from the group baseline, and episodes are bounded by turns and tokens; eval scores it (timeout)
    timeout_excluded: bool = False
    scoring: str = "muactl"  # muactl's reward (training's) or "tau2": τ²-bench's evaluator (episode/tau2_scoring.py)


def episode_seed(run_seed: int, task_id: str, trial: int) -> int:
    digest = hashlib.sha256(f"{run_seed}:{task_id}:{trial}".encode()).digest()
    return int.from_bytes(digest[:4], "little")


def _add_usage(total: dict[str, float], usage: dict[str, float], prefix: str) -> None:
    for k, v in usage.items():
        key = "cost" if k == "cost" else f"{prefix}_{k}"
        total[key] = total.get(key, 0.0) + float(v or 0)


async def run_episode(task: TaskSpec, domain: CompiledDomain, agent: Agent, user: UserSimulator,
                      cfg: RolloutConfig, trial: int = 0, env: Environment | None = None,
                      on_message: Callable[[dict], Awaitable[None] | None] | None = None,
                      judge: Judge | None = None) -> Episode:
    """Run one conversation to its end and score it (the judge, when given, checks the task's
    natural-language assertions). Never raises for agent, user, tool, judge or scoring failures."""
    seed = episode_seed(cfg.seed, task.task.id, trial)
    env = env or new_env(domain)
    messages: list[dict[str, Any]] = [{"role": "system", "content": domain.system_prompt_for(task.task)}]
    ctx = EpisodeContext(task, domain, env, messages,
                         [t.openai_schema() for t in domain.agent_tools()],
                         [t.openai_schema() for t in domain.user_tools(task.task)], seed, trial)
    if agent.keeps_tokens:
        ctx.trace = TokenTrace()
    ep = Episode(task.task.id, trial, seed, messages, "agent_error")
    progress = None
    timing = {"agent": 0.0, "user": 0.0, "tools": 0.0}
    start = time.perf_counter()

    async def emit(msg: dict) -> None:
        messages.append(msg)
        if on_message is not None:
            res = on_message(msg)
            if asyncio.iscoroutine(res):
                await res

    async def loop() -> str:
        # tool work runs on the environment's thread (Environment.acall): a slow call never stalls the
        # loop, so other episodes go on and this one's timeout fires on time
        setup = await env.off_loop(env.replay, task.task.setup)
        if any(r.error for r in setup):
            ep.error = "task setup failed: " + "; ".join(r.content for r in setup if r.error)
            return "infra_error"
        if cfg.track_progress:
            from ..env.gold import GoldDistance

            nonlocal progress
            try:
                progress = GoldDistance(task, domain)
            except GoldReplayFailed as e:  # the task is broken, not the agent: it cannot be scored
                ep.error = str(e)
                return "infra_error"
        solo = task.task.solo
        turns = task.task.turns
        greeting = domain.spec.domain.greeting
        opening = cfg.opening or ("agent" if greeting else "user")
        steps = 0  # agent steps with calls in the current fixed turn
        ctx.tools[:] = visible_tools(domain, task, 0)
        if turns:  # fixed user turns: no simulator; the tools of later turns stay hidden until theirs
            await emit({"role": "user", "content": turns[0].message, "turn": 0})
        elif solo:  # the goal is the only user message; no simulator is asked for anything
            await emit({"role": "user", "content": task.task.user.reason})
        elif opening == "agent":
            await emit({"role": "assistant", "content": greeting or "Hi! How can I help you today?", "fixed": True})
        next_is_user = not (solo or turns)
        # the first turn's own tools are there from the start, as visible_tools lists them
        hidden = {n for t in turns[1:] for n in t.tools} | {t.name for t in domain.agent_tools()
                                                         if task.task.tools is not None and t.name not in task.task.tools}
        while True:
            if next_is_user:
                t0 = time.perf_counter()
                reply = await _user_turn(user, ctx)
                timing["user"] += time.perf_counter() - t0
                _add_usage(ep.usage, reply.usage, "user")
                if reply.content or not reply.stop:
                    await emit({"role": "user", "content": reply.content})
                if reply.stop:
                    return reply.stop
                next_is_user = False
                continue
            if ep.turns >= cfg.max_turns and not turns:  # fixed turns are bounded per turn (turn_steps)
                return "max_turns"
            t0 = time.perf_counter()
            out = await agent.act(ctx)
            timing["agent"] += time.perf_counter() - t0
            ep.turns += 1
            _add_usage(ep.usage, out.usage, "agent")
            calls = [dict(c, id=c.get("id") or f"call_{ep.turns}_{i}") for i, c in enumerate(out.tool_calls)]
            msg: dict[str, Any] = {"role": "assistant", "content": out.content}
            if out.reasoning:  # beside the content, which is all the user, the reward and the judge read
                msg["reasoning"] = out.reasoning
            if calls:
                msg["tool_calls"] = calls
            if out.error:
                msg["malformed"] = out.error
            await emit(msg)
            for call in calls:  # well-formed calls run even when another part of the reply was malformed
                t0 = time.perf_counter()
                before = progress.distance(env) if progress else None
                tool = domain.tools.get(call["name"])
                if tool is not None and (tool.side != "agent" or call["name"] in hidden):
                    # the user's own controls (or setup's) are not the agent's, nor a tool of a later turn
                    result = ToolResult(f"Error: unknown tool '{call['name']}'.", error=True)
                else:
                    result = await env.acall(call["name"], call["arguments"])
                timing["tools"] += time.perf_counter() - t0
                ep.tool_calls += 1
                ep.tool_errors += result.error
                record = {"turn": ep.turns, "tool": call["name"], "error": result.error, "changed": result.changed}
                if progress and result.changed:
                    record.update(distance_before=before, distance_after=progress.distance(env))
                ep.records.append(record)
                await emit({"role": "tool", "tool_call_id": call["id"], "name": call["name"],
                            "content": result.content, "error": result.error})
                if result.transfer:
                    return "transfer"
            if out.error:
                ep.tool_errors += 1
                ep.records.append({"turn": ep.turns, "tool": None, "error": True, "changed": False, "malformed": True})
                await emit({"role": "tool", "content": f"Error: your reply could not be parsed: {out.error}. "
                            f"Call a tool with {agent.call_syntax}, or write a message."})
            if ep.tool_errors > cfg.max_tool_errors and not turns:  # BFCL's turns stop on steps only (turn_steps)
                return "too_many_errors"
            if turns:
                if calls:
                    steps += 1
                    if steps > task.task.turn_steps:  # BFCL's forced quit: the entry fails
                        return "max_turns"
                    continue
                # a reply without a well-formed call ends the turn (BFCL's loop: an empty or undecodable reply)
                ep.turn_ends.append({"hash": await env.off_loop(env.state_hash), "messages": len(messages)})
                k = len(ep.turn_ends)
                if k == len(turns):
                    return "agent_done"
                steps = 0
                ctx.tools[:] = visible_tools(domain, task, k)
                hidden.difference_update(turns[k].tools)
                await emit({"role": "user", "content": turns[k].message, "turn": k})
                continue
            if not calls and not out.error:
                if solo:  # the agent's own word that it is done
                    return "agent_done"
                next_is_user = True

    try:
        ep.termination = await asyncio.wait_for(loop(), timeout=cfg.timeout_s)
    except asyncio.TimeoutError:
        if cfg.timeout_excluded:
            ep.termination, ep.error = "infra_error", f"{TIMED_OUT} ({cfg.timeout_s:g} s)"
        else:
            ep.termination = "timeout"
    except InfraError as e:
        ep.termination, ep.error = "infra_error", str(e)
    except UserError as e:
        ep.termination, ep.error = "user_error", str(e)
    except AgentError as e:
        ep.termination, ep.error = "agent_error", str(e)
    except asyncio.CancelledError:  # the caller gave up on the episode: nothing to score, the sandbox is done
        await _abandon(env)
        raise
    except Exception as e:  # a bug in a backend must not take the whole run down
        ep.termination, ep.error = "agent_error", f"{type(e).__name__}: {e}"
    await env.settle()  # a call cut off by the timeout is interrupted, and done with, before scoring
    ep.trace = ctx.trace
    ep.user_calls = list(ctx.state.get("user_calls", []))
    t0 = time.perf_counter()
    try:
        await _score(ep, task, domain, env, judge, cfg.scoring)
    finally:  # the sandbox goes back to the pool however scoring ended
        env.close()
    timing["reward"] = time.perf_counter() - t0
    from .fidelity import interaction_metrics, user_fidelity

    ep.fidelity = user_fidelity(task, ep, domain)
    ep.interaction = interaction_metrics(task, ep)
    timing["wall"] = time.perf_counter() - start
    ep.timing = timing
    return ep


def visible_tools(domain: CompiledDomain, task: TaskSpec, turn: int) -> list[dict[str, Any]]:
    """The agent's tool schemas in fixed turn `turn` (0 for a task without turns): the task's own tools (all the
    domain's agent tools when it names none), less those that appear in a later turn."""
    later = {n for t in task.task.turns[turn + 1:] for n in t.tools}
    mine = task.task.tools
    return [t.openai_schema() for t in domain.agent_tools() if t.name not in later and (mine is None or t.name in mine)]


async def _abandon(env: Environment) -> None:
    """A cancelled episode's sandbox: the tool work in flight is interrupted and waited for (a thread
    still using the connection would fail on a closed one), then the sandbox is closed."""
    try:
        await env.settle()
    finally:
        env.close()


async def _score(ep: Episode, task: TaskSpec, domain: CompiledDomain, env: Environment, judge: Judge | None,
                 scoring: str = "muactl") -> None:
    """The episode's final hash, the judge's verdicts and its reward. Whatever breaks here (the judge, its
    server, a task whose gold path no longer replays) is not the agent's doing: the episode cannot be
    scored, so it ends as infra_error, excluded and played again on resume, and the run goes on."""
    from .reward import score
    from .tau2_scoring import score_tau2

    try:
        ep.final_hash = await env.off_loop(env.state_hash)
        verdicts = None
        if judge is not None and task.task.expect.nl_assertions and ep.counted:
            try:
                verdicts = await (judge.tau2_verdicts if scoring == "tau2" else judge.verdicts)(
                    task.task.expect.nl_assertions, ep.messages, domain)
            except Exception as e:
                ep.termination, ep.error = "infra_error", f"judge: {_failure(e)}"
        ep.reward, ep.breakdown = await env.off_loop(score_tau2 if scoring == "tau2" else score, task, domain, env, ep,
                                                     verdicts)
    except Exception as e:
        if ep.counted:  # an episode excluded already keeps the error that excluded it
            ep.termination, ep.error = "infra_error", f"scoring failed: {_failure(e)}"
        ep.reward, ep.breakdown = 0.0, {"termination": ep.termination, "success": False, "error": ep.error}


def _failure(e: Exception) -> str:
    """InfraError's and muactl's own errors' messages say what failed; anything else is a bug, named by its type."""
    return str(e) if isinstance(e, (InfraError, MuactlError)) else f"{type(e).__name__}: {e}"


async def _user_turn(user: UserSimulator, ctx: EpisodeContext):
    """The simulator's next message; whatever breaks in it is a user_error, not the agent's failure."""
    try:
        reply = await user.respond(ctx)
    except (InfraError, UserError, asyncio.CancelledError):
        raise
    except Exception as e:  # a crash, or its model refusing the request (RequestRejected)
        raise UserError(f"{type(e).__name__}: {e}") from e
    if not reply.stop and not reply.content.strip():
        raise UserError("the user simulator sent an empty message")
    return reply


@dataclass
class Job:
    task: TaskSpec
    trial: int
    domain: Any = None  # a random database instance for this episode; None: run_many's domain
    make_user: Callable[[], UserSimulator] | None = None  # this episode's user (a domain of a mix); None: run_many's


async def run_many(jobs: list[Job], domain: CompiledDomain, agent: Agent, make_user: Callable[[], UserSimulator],
                   cfg: RolloutConfig, concurrency: int = 8,
                   on_done: Callable[[Episode], None] | None = None, judge: Judge | None = None) -> list[Episode]:
    """Run jobs with at most `concurrency` episodes in flight; the episodes come back in the order of
    `jobs` (GRPO's groups are consecutive jobs). `on_done` sees each episode as it ends (the run store
    saves it there, so an interrupted run keeps everything finished)."""
    sem = asyncio.Semaphore(max(1, concurrency))
    results: list[Episode | None] = [None] * len(jobs)

    async def one(i: int, job: Job) -> None:
        async with sem:
            user = (job.make_user or make_user)()
            ep = await run_episode(job.task, job.domain or domain, agent, user, cfg, trial=job.trial, judge=judge)
            results[i] = ep
            if on_done is not None:
                on_done(ep)

    tasks = [asyncio.ensure_future(one(i, j)) for i, j in enumerate(jobs)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
    return results


def gold_calls(task: TaskSpec) -> list[tuple[str, dict]]:
    return [call_parts(c) for c in task.task.expect.actions]


def run_interruptible(main: Awaitable[Any]) -> Any:
    """asyncio.run(main), except on Ctrl-C: the tasks are cancelled (a local model's generate call then ends at
    its next token: models/batcher.py) and the threads still in flight (a model loading, a generate call) are
    not waited for, so the KeyboardInterrupt reaches the caller within a moment, not after the batch."""
    from concurrent.futures import ThreadPoolExecutor

    loop = asyncio.new_event_loop()
    pool = ThreadPoolExecutor(thread_name_prefix="muactl-episodes")
    loop.set_default_executor(pool)
    interrupted = False
    try:
        return loop.run_until_complete(main)
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            pool.shutdown(wait=not interrupted, cancel_futures=True)
            loop.close()
