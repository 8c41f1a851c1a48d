"""The oracle agent: follows the task's gold actions and says its required outputs.

Used to check that tasks are sound (oracle + scripted user must score 100%), to make SFT data and to
measure user simulators. It talks like a careful agent: asks for the user's details, asks for consent
before each write and waits for it (a clear yes; a no, or no clear answer twice, means no write and
nothing further), acts one tool call per turn, asks the user to make the gold path's user-side calls
(dual control) in their turn, then says why it refuses (`expect.refusal`, the rule or value that blocks the
request) or reports the required outputs.
"""

from __future__ import annotations

import json
import re

from ...spec.models import call_parts
from .base import Agent, AgentReply


def _last_user_text(ctx) -> str:
    return next((m.get("content") or "" for m in reversed(ctx.messages) if m["role"] == "user"), "")


def _describe(name: str, args: dict) -> str:
    shown = ", ".join(f"{k} {json.dumps(v, ensure_ascii=False)}" for k, v in args.items())
    return f"{name.replace('_', ' ')} ({shown})" if shown else name.replace("_", " ")


_YES = re.compile(r"\b(yes|yeah|yep|sure|ok|okay|go ahead|please do|proceed|confirm(ed)?|do it|correct)\b", re.I)
_NO = re.compile(r"\b(no|nope|not|don't|do not|cancel|stop|never|decline|rather not)\b", re.I)


def consent_in(text: str) -> bool | None:
    """A reply to "Shall I proceed?": True (a yes without a no), False (a no), None (no clear answer)."""
    if _NO.search(text or ""):
        return False
    return True if _YES.search(text or "") else None


class OracleAgent(Agent):
    name = "oracle"

    async def act(self, ctx) -> AgentReply:
        st = ctx.state.setdefault("oracle", {"asked": False, "step": 0, "confirmed": -1, "done": False, "unclear": 0})
        task = ctx.task.task
        actions = [call_parts(c) for c in task.expect.actions]
        if task.user.known and not st["asked"] and not task.solo:
            st["asked"] = True
            return AgentReply("I can help with that. Could you please give me the details I need to find your records?")
        if st["step"] < len(actions):
            name, args = actions[st["step"]]
            tool = ctx.domain.tools.get(name)
            if tool is not None and tool.side == "user":  # dual control: the user does it on their side
                st["step"] += 1
                return AgentReply(f"Please {_describe(name, args)} on your side, then tell me what you see.")
            if ctx.domain.writes(name) and not task.solo:  # a solo task has nobody to ask
                if st["confirmed"] != st["step"]:
                    st["confirmed"] = st["step"]
                    return AgentReply(f"I will {_describe(name, args)}. Shall I proceed? (yes/no)")
                answer = consent_in(_last_user_text(ctx))
                if answer is None and not st["unclear"]:  # ask once more before taking it as a no
                    st["unclear"] = 1
                    return AgentReply(f"Sorry, I need a clear answer: shall I {_describe(name, args)}? (yes/no)")
                if not answer:
                    st["step"], st["done"] = len(actions), True
                    return AgentReply("Understood: I have not made that change. Your request is complete.")
                st["unclear"] = 0
            st["step"] += 1
            return AgentReply("", [{"name": name, "arguments": args}])
        if not st["done"]:
            st["done"] = True
            if task.expect.refusal:  # why it cannot be done, which carries the outputs
                return AgentReply(f"I am sorry, I cannot do that. {task.expect.refusal.strip()}")
            if task.expect.outputs:
                return AgentReply("Here is what you asked for: " + "; ".join(task.expect.outputs) + ". Your request is complete.")
            return AgentReply("Your request is complete.")
        return AgentReply("Your request is complete. Goodbye.")
