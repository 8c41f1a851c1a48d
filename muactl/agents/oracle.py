"""The oracle agent: follows the task's gold actions and says its required outputs.

Used to check that tasks are sound (oracle + scripted user must score 100%) and to make SFT data.
It talks like a careful agent: asks for the user's details, confirms before each write, acts one
tool call per turn, then reports the required outputs.
"""

from __future__ import annotations

import json

from ..spec.models import call_parts
from .base import Agent, AgentReply


def _writes(domain, name: str) -> bool:
    tool = domain.tools.get(name)
    if tool is None:
        return False
    if tool.kind == "sql":
        return bool(tool.spec.writes)
    return tool.kind == "python"


def _describe(name: str, args: dict) -> str:
    shown = ", ".join(f"{k} {json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
    return f"{name.replace('_', ' ')} ({shown})" if shown else name.replace("_", " ")


class OracleAgent(Agent):
    name = "oracle"

    async def act(self, ctx) -> AgentReply:
        st = ctx.state.setdefault("oracle", {"asked": False, "step": 0, "confirmed": -1, "done": False})
        task = ctx.task.task
        actions = [call_parts(c) for c in task.expect.actions]
        if task.user.known and not st["asked"]:
            st["asked"] = True
            return AgentReply("I can help with that. Could you please give me the details I need to find your records?")
        if st["step"] < len(actions):
            name, args = actions[st["step"]]
            if _writes(ctx.domain, name) and st["confirmed"] != st["step"]:
                st["confirmed"] = st["step"]
                return AgentReply(f"I will {_describe(name, args)}. Shall I proceed? (yes/no)")
            st["step"] += 1
            return AgentReply("", [{"name": name, "arguments": args}])
        if not st["done"]:
            st["done"] = True
            if task.expect.outputs:
                return AgentReply("Here is what you asked for: " + "; ".join(task.expect.outputs) + ". Your request is complete.")
            return AgentReply("Your request is complete.")
        return AgentReply("Your request is complete. Goodbye.")
