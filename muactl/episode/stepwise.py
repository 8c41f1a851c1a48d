"""One episode driven turn by turn from outside: the reset()/step() shape RL frameworks expect.

The episode engine (rollout.run_episode) owns the conversation: it asks the agent for a turn, runs
tool calls on the sandbox, hands text to the simulated user and scores the end. Here the agent is
`ExternalAgent`, whose `act` publishes the episode so far and waits until the caller supplies the
turn. So there is no second state machine: `start()` runs the engine up to the agent's first turn,
`step(reply)` up to its next one (or the end), and each returns what the agent has not seen yet.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from .agents.base import Agent, AgentReply
from .rollout import RolloutConfig, run_episode
from .types import Episode
from ..env.sandbox import new_env
from ..errors import UsageError


class ExternalAgent(Agent):
    """An agent whose turns come from outside: `act` hands the episode out and waits for the reply."""

    name = "external"

    def __init__(self):
        self.asks: asyncio.Queue = asyncio.Queue()

    async def act(self, ctx) -> AgentReply:
        reply: asyncio.Future = asyncio.get_running_loop().create_future()
        await self.asks.put((ctx, reply))
        return await reply


@dataclass
class Turn:
    """What the agent sees before its next turn: the messages it has not seen (never its own), and,
    once the episode is over, the scored Episode."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    episode: Episode | None = None

    @property
    def done(self) -> bool:
        return self.episode is not None


class StepwiseEpisode:
    """run_episode with the agent's turns supplied one `step` at a time (on one event loop)."""

    def __init__(self, task, domain, user, cfg: RolloutConfig, trial: int = 0, trust: bool = False):
        self.task, self.domain, self.user, self.cfg, self.trial = task, domain, user, cfg, trial
        self.sandbox = new_env(domain, trust=trust)
        self.agent = ExternalAgent()
        self.ctx = None
        self._reply: asyncio.Future | None = None
        self._run: asyncio.Task | None = None
        self._seen = 0

    @property
    def done(self) -> bool:
        return self._run is not None and self._run.done()

    @property
    def tools(self) -> list[dict[str, Any]]:
        """OpenAI schemas of the agent's tools."""
        return [t.openai_schema() for t in self.domain.agent_tools()]

    async def start(self) -> Turn:
        self._run = asyncio.ensure_future(run_episode(self.task, self.domain, self.agent, self.user, self.cfg,
                                                      trial=self.trial, env=self.sandbox))
        return await self._next()

    async def step(self, reply: AgentReply) -> Turn:
        """The agent's turn, and what follows it up to the agent's next turn or the end. An episode that
        ended while the caller was thinking (its timeout counts that time) answers with its end."""
        if self._reply is None:
            raise UsageError("the episode is over; reset to start another" if self.done else
                             "the episode has not started: reset first")
        waiting, self._reply = self._reply, None
        if not waiting.done():  # done: the engine stopped waiting (the timeout cancelled the agent's turn)
            waiting.set_result(reply)
        return await self._next()

    async def _next(self) -> Turn:
        ask = asyncio.ensure_future(self.agent.asks.get())
        await asyncio.wait({ask, self._run}, return_when=asyncio.FIRST_COMPLETED)
        if ask.done():  # the engine waits for the agent's turn
            self.ctx, self._reply = ask.result()
            messages = self.ctx.messages
        else:
            ask.cancel()
            messages = self._run.result().messages
        new = [m for m in messages[self._seen:] if m["role"] != "assistant" or m.get("fixed")]
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
