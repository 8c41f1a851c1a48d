"""A chat apart from its screen: the person as the user simulator, the watch-mode seat, the agent guard
that turns a failing turn into a question for the person, the database diff, and where chats are saved.

The chat runs through the same engine, sandbox and reward as eval (rollout.run_episode); nothing here
changes how an episode is played or scored, only who answers for the user.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..episode.agents.base import Agent, AgentReply
from ..errors import AgentError
from ..episode.user import STOP, UserReply, UserSimulator, split_stop

if TYPE_CHECKING:
    from ..compile import CompiledDomain
    from ..episode.types import Episode, EpisodeContext
    from ..runs.store import RunStore
    from ..spec.tasks import TaskSpec

FREE_CHAT_ID = "free-chat"


@dataclass
class ChatConfig:
    domain: str
    agent: str = "oracle"
    task: str | None = None  # None: the picker opens first
    show_goal: bool = False
    watch: bool = False
    user: str = "scripted"  # the simulator in watch mode
    api_base: str | None = None
    user_api_base: str | None = None
    trust: bool = False
    temperature: float = 0.0
    max_new_tokens: int = 256
    thinking: bool = False  # a local agent's template switch (--thinking)
    max_turns: int = 60
    # A person types slowly: the engine's default 10-minute episode timeout would cut real chats.
    timeout_s: float = 24 * 3600.0
    max_tokens: int = 1024  # API agents and users: tokens per reply, request timeout, retries
    llm_timeout_s: float = 60.0
    retries: int = 4
    # Watch mode: a pause before each simulated user turn, so a person can read along and take over.
    pace_s: float = 1.0
    slow_s: float = 30.0  # an agent turn longer than this gets a notification offering a retry


def free_task() -> TaskSpec:
    """A task with no goal and no gold path, so the engine can run a free conversation (its reward is not
    meaningful and is stored as NULL)."""
    from ..spec import models as m
    from ..spec.tasks import TaskSpec

    task = m.Task(id=FREE_CHAT_ID, user=m.UserGoal(reason="Free chat: no task, no goal to check."))
    return TaskSpec(task=task, file=Path("<chat>"), index=0, doc=None)


def is_free(task: TaskSpec) -> bool:
    return task.task.id == FREE_CHAT_ID and task.file == Path("<chat>")


# ---------------------------------------------------------------- the person as the user


class HumanUser(UserSimulator):
    """respond() waits for what the person types; the stop tokens end the chat as they do for simulators."""

    name = "human"

    def __init__(self, on_turn: Callable[[], None] | None = None):
        self.inbox: asyncio.Queue[str] = asyncio.Queue()
        self.on_turn = on_turn
        self.waiting = False

    def send(self, text: str) -> None:
        self.inbox.put_nowait(text)

    def stop(self) -> None:
        self.inbox.put_nowait(STOP)

    async def respond(self, ctx: EpisodeContext) -> UserReply:
        self.waiting = True
        if self.on_turn:
            self.on_turn()
        try:
            return split_stop(await self.inbox.get())
        finally:
            self.waiting = False


async def _first(reply: Awaitable[UserReply], interrupt: Awaitable[Any]) -> UserReply | None:
    """The reply, or None when `interrupt` fires first (the unfinished reply is cancelled)."""
    a, b = asyncio.ensure_future(reply), asyncio.ensure_future(interrupt)
    try:
        await asyncio.wait({a, b}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (a, b):
            if not t.done():
                t.cancel()
        await asyncio.gather(a, b, return_exceptions=True)
    if a.done() and not a.cancelled():
        return a.result()
    return None


class Seat(UserSimulator):
    """The user's seat in watch mode: the simulator holds it until the person takes it, and gets it back
    when the person gives it back. A switch interrupts whoever is answering at that moment."""

    def __init__(self, sim: UserSimulator, human: HumanUser, pace_s: float = 1.0,
                 on_sim_turn: Callable[[], None] | None = None):
        self.sim, self.human, self.pace_s, self.on_sim_turn = sim, human, pace_s, on_sim_turn
        self.name = f"{sim.name}+human"
        self.human_has_it = False
        self.last = "sim"  # who wrote the latest user turn, for the conversation view
        self._switched = asyncio.Event()

    def take(self) -> None:
        self.human_has_it = True
        self._switched.set()

    def give_back(self) -> None:
        self.human_has_it = False
        self._switched.set()

    async def _simulated(self, ctx: EpisodeContext) -> UserReply:
        if self.on_sim_turn:
            self.on_sim_turn()
        await asyncio.sleep(self.pace_s)
        return await self.sim.respond(ctx)

    async def respond(self, ctx: EpisodeContext) -> UserReply:
        while True:
            self._switched.clear()
            who = "human" if self.human_has_it else "sim"
            source = self.human.respond(ctx) if who == "human" else self._simulated(ctx)
            reply = await _first(source, self._switched.wait())
            if reply is not None:
                self.last = who
                return reply

    def describe(self) -> dict[str, Any]:
        return {"user": self.name, "simulator": self.sim.describe()}


# ---------------------------------------------------------------- the agent, guarded


class GuardedAgent(Agent):
    """The checkpoint behind a guard: a failing turn waits for the person to retry or end instead of
    ending the episode at once, and a slow turn can be abandoned and retried."""

    def __init__(self, inner: Agent, on_busy: Callable[[bool], None] | None = None,
                 on_failure: Callable[[Exception], None] | None = None):
        self.inner = inner
        self.name = inner.name
        self.keeps_tokens = inner.keeps_tokens
        self.on_busy, self.on_failure = on_busy, on_failure
        self.busy = False
        self.failed: Exception | None = None
        self._retry = asyncio.Event()
        self._decision: asyncio.Future | None = None

    def retry(self) -> bool:
        """Retry the failed turn, or abandon a slow one and ask again. False when nothing is running."""
        if self._decision is not None and not self._decision.done():
            self._decision.set_result("retry")
            return True
        if self.busy:
            self._retry.set()
            return True
        return False

    def give_up(self) -> bool:
        if self._decision is not None and not self._decision.done():
            self._decision.set_result("end")
            return True
        return False

    async def act(self, ctx: EpisodeContext) -> AgentReply:
        while True:
            mark = _trace_mark(ctx)
            self._retry.clear()
            self._busy(True)
            try:
                turn = asyncio.ensure_future(self.inner.act(ctx))
                retry = asyncio.ensure_future(self._retry.wait())
                try:
                    await asyncio.wait({turn, retry}, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    retry.cancel()
                    abandoned = not turn.done()
                    if abandoned:
                        turn.cancel()
                        await asyncio.gather(turn, return_exceptions=True)
                if abandoned:  # the person gave up on a slow turn and asked again
                    _trace_reset(ctx, mark)
                    continue
                error = turn.exception()
                if error is None:
                    return turn.result()
            finally:
                self._busy(False)
            # a failed local turn may have half-extended the token trace; the retry must start clean
            _trace_reset(ctx, mark)
            self.failed = error
            if self.on_failure:
                self.on_failure(error)
            self._decision = asyncio.get_running_loop().create_future()
            try:
                choice = await self._decision
            finally:
                self.failed, self._decision = None, None
            if choice != "retry":
                raise AgentError(f"ended by the person after the agent failed: {type(error).__name__}: {error}")

    def _busy(self, on: bool) -> None:
        self.busy = on
        if self.on_busy:
            self.on_busy(on)

    async def close(self) -> None:
        await self.inner.close()

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


def _trace_mark(ctx) -> tuple | None:
    t = ctx.trace
    return None if t is None else (len(t.ids), t.prompt_len, t.rendered_upto)


def _trace_reset(ctx, mark: tuple | None) -> None:
    t = ctx.trace
    if t is None or mark is None:
        return
    n, t.prompt_len, t.rendered_upto = mark
    del t.ids[n:], t.mask[n:], t.logprobs[n:]


# ---------------------------------------------------------------- database diff


@dataclass
class TableDiff:
    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[dict[str, Any]] = field(default_factory=list)
    changed: list[tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=list)  # (before, after)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


def snapshot(env) -> dict[str, list[dict[str, Any]]]:
    return {t: env.rows(t) for t in env.domain.tables}


def db_diff(domain: CompiledDomain, before: dict[str, list[dict]], after: dict[str, list[dict]]) -> dict[str, TableDiff]:
    """Rows added, changed and removed per table (tables without changes are left out). Rows are matched
    by primary key; a table without one can only show rows added and removed."""
    out: dict[str, TableDiff] = {}
    for table, spec in domain.tables.items():
        old, new = before.get(table, []), after.get(table, [])
        pk = spec.pk_columns()
        d = TableDiff()
        if pk:
            o = {tuple(r[c] for c in pk): r for r in old}
            n = {tuple(r[c] for c in pk): r for r in new}
            d.added = [n[k] for k in n if k not in o]
            d.removed = [o[k] for k in o if k not in n]
            d.changed = [(o[k], n[k]) for k in n if k in o and o[k] != n[k]]
        else:
            o, n = Counter(repr(sorted(r.items())) for r in old), Counter(repr(sorted(r.items())) for r in new)
            rows = {repr(sorted(r.items())): r for r in [*old, *new]}
            d.added = [rows[k] for k, c in (n - o).items() for _ in range(c)]
            d.removed = [rows[k] for k, c in (o - n).items() for _ in range(c)]
        if d:
            out[table] = d
    return out


# ---------------------------------------------------------------- where chats go


class ChatStore:
    """One run (kind "chat") per `muactl chat` session, created when the first chat ends so that opening
    and quitting leaves nothing behind. Each chat is an episode marked human."""

    def __init__(self, cfg: ChatConfig, domain: CompiledDomain, run_id: str | None = None):
        self.cfg, self.domain, self.run_id = cfg, domain, run_id
        self.store: RunStore | None = None

    def _open(self) -> RunStore:
        if self.store is None:
            from ..runs.store import RunStore

            config = {**asdict(self.cfg), "kind": "chat",
                      # kept so `synth --from-chats` writes the same tools column as synth without the domain
                      "tools": [t.openai_schema() for t in self.domain.agent_tools()]}
            self.store = RunStore.create("chat", self.domain.name, config, run_id=self.run_id)
        return self.store

    def next_trial(self, task_id: str) -> int:
        if self.store is None:
            return 0
        row = self.store.db.execute("SELECT max(trial) FROM episodes WHERE task_id = ?", [task_id]).fetchone()
        return 0 if row[0] is None else row[0] + 1

    def save(self, ep: Episode) -> int:
        store = self._open()
        eid = store.save_episode(ep, human=True, keep_trace=False)
        self._summarize()
        return eid

    def annotate(self, episode_id: int, rating: int | None, note: str | None) -> None:
        self._open().annotate(episode_id, rating=rating, note=note)
        self._summarize()

    def _summarize(self) -> None:
        store = self.store
        eps = store.episodes()
        scored = [e for e in eps if e["reward"] is not None]
        rated = [e["rating"] for e in eps if e["rating"] is not None]
        terms: dict[str, int] = {}
        for e in eps:
            terms[e["termination"]] = terms.get(e["termination"], 0) + 1
        store.update(status="finished", summary={
            "episodes": len(eps), "scored": len(scored), "terminations": dict(sorted(terms.items())),
            "avg_reward": sum(e["reward"] for e in scored) / len(scored) if scored else None,
            "rated": len(rated), "avg_rating": sum(rated) / len(rated) if rated else None,
            "agent": self.cfg.agent, "user": f"human+{self.cfg.user}" if self.cfg.watch else "human"})
