"""What every agent backend implements, and the per-episode context it reads."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..types import EpisodeContext


@dataclass
class AgentReply:
    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # [{"id", "name", "arguments": dict}]
    error: str | None = None  # malformed output: shown to the agent as an error turn
    usage: dict[str, float] = field(default_factory=dict)  # prompt_tokens, completion_tokens, cost
    reasoning: str | None = None  # a thinking model's <think> text: stored with the turn, never shown to the user


class Agent(ABC):
    """A policy. `act` gets the episode so far and returns one assistant turn."""

    name = "agent"
    #: local agents keep token-exact trajectories (ids, mask, logprobs) in ctx.trace
    keeps_tokens = False
    #: how a tool call is written, for the error turn after a reply that could not be parsed
    call_syntax = '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'

    @abstractmethod
    async def act(self, ctx: EpisodeContext) -> AgentReply: ...

    async def prepare(self, domain) -> None:
        """Load what the first turn needs (a local model); agents with nothing to load do nothing.
        `act` calls it; a UI may call it earlier to show loading as loading."""
        return None

    async def close(self) -> None:
        return None

    def describe(self) -> dict[str, Any]:
        return {"agent": self.name}
