"""One episode driven turn by turn from outside: the reset()/step() shape RL frameworks expect.

The episode engine (rollout.run_episode) owns the conversation: it asks the agent for a turn, runs
tool calls on the sandbox, hands text to the simulated user and scores the end. Here one party is
played from outside: `ExternalAgent` (OpenEnv's server, the Gymnasium AgentEnv) or `ExternalUser`
(the Gymnasium UserEnv), whose turn publishes the episode so far and waits until the caller supplies
it. So there is no second state machine: `start()` runs the engine up to the outside party's first
turn, `step(turn)` up to its next one (or the end), and each returns what that party has not seen yet.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from .agents.base import Agent, AgentReply
from .rollout import RolloutConfig, run_episode, visible_tools
from .types import Episode
from .transcript import shown_to_user
from .user import UserReply, UserSimulator, split_stop
from ..env.sandbox import new_env
from ..errors import UsageError


async def _ask(asks: asyncio.Queue, ctx) -> Any:
    reply: asyncio.Future = asyncio.get_running_loop().create_future()
    await asks.put((ctx, reply))
    return await reply


class ExternalAgent(Agent):
    """An agent whose turns come from outside: `act` hands the episode out and waits for the reply."""

    name = "external"

    def __init__(self):
        self.asks: asyncio.Queue = asyncio.Queue()

    async def act(self, ctx) -> AgentReply:
        return await _ask(self.asks, ctx)

    @staticmethod
    def sees(m: dict[str, Any]) -> bool:
        """Everything but its own turns (a greeting the domain wrote is not its own)."""
        return m["role"] != "assistant" or bool(m.get("fixed"))


class ExternalUser(UserSimulator):
    """A user whose turns come from outside: `respond` hands the episode out and waits for the text.
    The stop tokens end the conversation as they do for simulators."""

    name = "external"

    def __init__(self):
        self.asks: asyncio.Queue = asyncio.Queue()

    async def respond(self, ctx) -> UserReply:
        return split_stop(await _ask(self.asks, ctx))

    @staticmethod
    def sees(m: dict[str, Any]) -> bool:
        """What any simulated user sees: the agent's text turns, never tools."""
        return shown_to_user(m)


def public_message(m: dict[str, Any]) -> dict[str, Any]:
    """A message as OpenAI's chat format has it (muactl's internal keys left out)."""
    out = {"role": m["role"], "content": m.get("content") or ""}
    if m["role"] == "tool" and m.get("tool_call_id"):
        out.update(tool_call_id=m["tool_call_id"], name=m.get("name"))
    return out


@dataclass
class Turn:
    """What the outside party sees before its next turn: the messages it has not seen (never its own;
    for a user, only the agent's text), and, once the episode is over, the scored Episode."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    episode: Episode | None = None

    @property
    def done(self) -> bool:
        return self.episode is not None


class StepwiseEpisode:
    """run_episode with one party's turns supplied one `step` at a time (on one event loop): the
    agent's (no `agent` given: an ExternalAgent plays it) or the user's (`user` an ExternalUser,
    against `agent`)."""

    def __init__(self, task, domain, user, cfg: RolloutConfig, trial: int = 0, trust: bool = False,
                 agent: Agent | None = None):
        if agent is not None and not isinstance(user, ExternalUser):
            raise UsageError("a stepwise episode needs one party played from outside: no agent, or an ExternalUser")
        self.task, self.domain, self.user, self.cfg, self.trial = task, domain, user, cfg, trial
        self.sandbox = new_env(domain, trust=trust)
        self.agent = agent or ExternalAgent()
        self.outside = self.agent if agent is None else user
        self.ctx = None
        self._reply: asyncio.Future | None = None
        self._run: asyncio.Task | None = None
        self._seen = 0

    @property
    def done(self) -> bool:
        return self._run is not None and self._run.done()

    @property
    def tools(self) -> list[dict[str, Any]]:
        """OpenAI schemas of the agent's tools now: the task's own (Task.tools), less those of a later fixed turn."""
        return list(self.ctx.tools) if self.ctx is not None else visible_tools(self.domain, self.task, 0)

    async def start(self) -> Turn:
        self._run = asyncio.ensure_future(run_episode(self.task, self.domain, self.agent, self.user, self.cfg,
                                                      trial=self.trial, env=self.sandbox))
        return await self._next()

    async def step(self, reply: AgentReply | str) -> Turn:
        """The outside party's turn (an AgentReply, or the user's text), and what follows it up to that
        party's next turn or the end. An episode that ended while the caller was thinking (its timeout
        counts that time) answers with its end."""
        if self._reply is None:
            raise UsageError("the episode is over; reset to start another" if self.done else
                             "the episode has not started: reset first")
        waiting, self._reply = self._reply, None
        if not waiting.done():  # done: the engine stopped waiting (the timeout cancelled the agent's turn)
            waiting.set_result(reply)
        return await self._next()

    async def _next(self) -> Turn:
        ask = asyncio.ensure_future(self.outside.asks.get())
        await asyncio.wait({ask, self._run}, return_when=asyncio.FIRST_COMPLETED)
        if ask.done():  # the engine waits for the outside party's turn
            self.ctx, self._reply = ask.result()
            messages = self.ctx.messages
        else:
            ask.cancel()
            messages = self._run.result().messages
        new = [m for m in messages[self._seen:] if self.outside.sees(m)]
        self._seen = len(messages)
        return Turn(new, self._run.result() if self._run.done() else None)

    def cancel(self) -> None:
        """Stop an unfinished episode (its client left); the sandbox goes with it. The engine's own
        cancel path stops the tool work in flight and closes the sandbox; the sandbox is closed here
        only once the run is over (closing it under a running call would fail that call instead)."""
        if self._run is None:
            self.sandbox.close()
        elif not self._run.done():
            self._run.cancel()
            self._run.add_done_callback(lambda _run: self.sandbox.close())
        else:
            self.sandbox.close()

    async def settled(self) -> None:
        """Wait until a cancelled or finished run is over (its sandbox closed); never raises."""
        if self._run is not None:
            await asyncio.gather(self._run, return_exceptions=True)
