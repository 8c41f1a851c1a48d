"""Adversarial agents: policies that try to be paid without doing the task (`--agent adversary:<name>`).

GRPO optimizes whatever the reward pays for, so these probe the reward for loopholes. None of them
ever changes the database, so the only tasks they may pass are those whose correct outcome is "no
change" (refusals, questions, transfers); `benchmarks/reward_audit.py` checks that bound on every task
of every built-in domain, and tests/test_reward_audit.py keeps it from coming back.

- do-nothing: apologizes and does nothing.
- transfer-at-once: calls the domain's transfer tool (`builtin: transfer`, else a `hands_over` tool) on its first turn.
- number-sprayer: looks the data up (the task's own read-only gold calls, the most an agent could
  learn), then tells the user every number and id it has seen.
- id-echo: the same look-ups, then repeats every id it has seen.
"""

from __future__ import annotations

import re

from ...spec.models import call_parts
from .base import Agent, AgentReply

NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
ID = re.compile(r"#?[A-Za-z][\w-]*\d[\w-]*")  # a305, c17, #W0000003, credit_card_8168740


def _reads(domain, name: str) -> bool:
    tool = domain.tools.get(name)
    return tool is not None and tool.kind == "sql" and not tool.spec.writes


def _seen(ctx) -> str:
    return "\n".join(m.get("content") or "" for m in ctx.messages if m["role"] in ("user", "tool"))


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


class DoNothing(Agent):
    name = "adversary:do-nothing"

    async def act(self, ctx) -> AgentReply:
        return AgentReply("I am sorry, I cannot do anything about that.")


class TransferAtOnce(Agent):
    name = "adversary:transfer-at-once"

    async def act(self, ctx) -> AgentReply:
        tool = next((t for t in ctx.domain.agent_tools() if t.kind == "builtin" and t.spec.builtin == "transfer"
                     or ctx.domain.hands_over(t.name)), None)
        if tool is None or ctx.state.get("transferred"):
            return AgentReply("I am sorry, I cannot do anything about that.")
        ctx.state["transferred"] = True
        return AgentReply("", [{"name": tool.name, "arguments": {"summary": "The customer needs help."}}])


class LookUpThenSay(Agent):
    """Makes the task's read-only gold calls one per turn, then says what `say` picks from all it saw."""

    async def act(self, ctx) -> AgentReply:
        step = ctx.state.setdefault("adversary_step", 0)
        reads = [c for c in map(call_parts, ctx.task.task.expect.actions) if _reads(ctx.domain, c[0])]
        if step < len(reads):
            ctx.state["adversary_step"] = step + 1
            name, args = reads[step]
            return AgentReply("", [{"name": name, "arguments": args}])
        if ctx.state.get("said"):
            return AgentReply("Goodbye.")
        ctx.state["said"] = True
        return AgentReply("Here is what I found: " + ", ".join(self.say(_seen(ctx))) + ".")

    def say(self, seen: str) -> list[str]:
        raise NotImplementedError


class NumberSprayer(LookUpThenSay):
    name = "adversary:number-sprayer"

    def say(self, seen: str) -> list[str]:
        return _unique(NUMBER.findall(seen) + ID.findall(seen))


class IdEcho(LookUpThenSay):
    name = "adversary:id-echo"

    def say(self, seen: str) -> list[str]:
        return _unique(ID.findall(seen))


ADVERSARIES = {"do-nothing": DoNothing, "transfer-at-once": TransferAtOnce, "number-sprayer": NumberSprayer,
               "id-echo": IdEcho}
