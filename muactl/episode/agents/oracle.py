"""The oracle agent: follows the task's gold actions and says its required outputs.

Used to check that tasks are sound (oracle + scripted user must score 100%), to make SFT data and to
measure user simulators. It talks like a careful agent: asks for the user's details, asks for consent
before each write and waits for it (a clear yes; a no, or no clear answer twice, means no write and
nothing further), acts one tool call per turn, asks the user to make the gold path's user-side calls
(dual control) in their turn, then says why it refuses (`expect.refusal`, the rule or value that blocks the
request) or reports the required outputs.

`oracle:varied` is the same agent with several phrasings per situation, picked from the episode's seed: SFT
data from the plain oracle says each thing one way, so a model trained on it samples almost one sequence
per situation (rollout entropy near 0) and a GRPO group has little to compare.
"""

from __future__ import annotations

import json
import random
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


# Each situation's phrasings, the plain oracle's first. Every one keeps what the scripted user keys on: a
# question asks (`?`), a consent request says "(yes/no)", a user-side step names the call, an ending asks nothing.
PHRASES: dict[str, tuple[str, ...]] = {
    "ask": ("I can help with that. Could you please give me the details I need to find your records?",
            "Happy to help. Could you tell me the details I need to look up your records?",
            "Sure, I can look into that. What details can you give me so I can find your account?",
            "Of course. To find your records, could you share your details with me?"),
    "user_side": ("Please {call} on your side, then tell me what you see.",
                  "Could you {call} on your side and tell me what it shows?",
                  "On your side, please {call}, then let me know the result."),
    "confirm": ("I will {call}. Shall I proceed? (yes/no)",
                "Next I would {call}. Shall I go ahead? (yes/no)",
                "To confirm, I am about to {call}. Do you want me to proceed? (yes/no)"),
    "unclear": ("Sorry, I need a clear answer: shall I {call}? (yes/no)",
                "I did not get a clear yes or no. Shall I {call}? (yes/no)"),
    "declined": ("Understood: I have not made that change. Your request is complete.",
                 "Okay, I have left everything as it was. Your request is complete.",
                 "No problem: nothing has been changed."),
    "refusal": ("I am sorry, I cannot do that. {reason}",
                "Unfortunately I cannot do that. {reason}",
                "I'm afraid that is not possible. {reason}"),
    "outputs": ("Here is what you asked for: {outputs}. Your request is complete.",
                "Here you go: {outputs}. Your request is complete.",
                "I have found it: {outputs}. That completes your request."),
    "done": ("Your request is complete.",
             "All done: your request is complete.",
             "That is taken care of. Your request is complete."),
}


class OracleAgent(Agent):
    name = "oracle"

    def __init__(self, varied: bool = False):
        self.varied = varied
        if varied:
            self.name = "oracle:varied"

    def say(self, ctx, situation: str, **fields: str) -> str:
        """The situation's phrasing: the first, or with `varied` one drawn from the episode's seed and the turn
        (an episode replayed says the same; another episode may say it otherwise)."""
        options = PHRASES[situation]
        pick = random.Random(f"{ctx.seed}:{situation}:{len(ctx.messages)}").randrange(len(options)) if self.varied else 0
        return options[pick].format(**fields)

    async def act(self, ctx) -> AgentReply:
        task = ctx.task.task
        if task.turns:
            return self.act_in_turn(ctx)
        st = ctx.state.setdefault("oracle", {"asked": False, "step": 0, "confirmed": -1, "done": False, "unclear": 0})
        actions = [call_parts(c) for c in task.expect.actions]
        if task.user.known and not st["asked"] and not task.solo:
            st["asked"] = True
            return AgentReply(self.say(ctx, "ask"))
        if st["step"] < len(actions):
            name, args = actions[st["step"]]
            tool = ctx.domain.tools.get(name)
            if tool is not None and tool.side == "user":  # dual control: the user does it on their side
                st["step"] += 1
                return AgentReply(self.say(ctx, "user_side", call=_describe(name, args)))
            if ctx.domain.writes(name) and not task.solo:  # a solo task has nobody to ask
                if st["confirmed"] != st["step"]:
                    st["confirmed"] = st["step"]
                    return AgentReply(self.say(ctx, "confirm", call=self.proposal(task, name, args)))
                answer = consent_in(_last_user_text(ctx))
                if answer is None and not st["unclear"]:  # ask once more before taking it as a no
                    st["unclear"] = 1
                    return AgentReply(self.say(ctx, "unclear", call=_describe(name, args)))
                if not answer:
                    st["step"], st["done"] = len(actions), True
                    return AgentReply(self.say(ctx, "declined"))
                st["unclear"] = 0
            st["step"] += 1
            return AgentReply("", [{"name": name, "arguments": args}])
        if not st["done"]:
            st["done"] = True
            if task.expect.refusal:  # why it cannot be done, which carries the outputs
                return AgentReply(self.say(ctx, "refusal", reason=task.expect.refusal.strip()))
            if task.expect.outputs:
                return AgentReply(self.say(ctx, "outputs", outputs="; ".join(task.expect.outputs)))
            return AgentReply(self.say(ctx, "done"))
        return AgentReply("Your request is complete. Goodbye.")

    @staticmethod
    def proposal(task, name: str, args: dict) -> str:
        """The write it asks consent for. When the task's user will decline (user.consent: false), the proposal
        is the last thing the agent says that matters, so it carries the task's outputs (its evidence of the work,
        such as a price difference worked out from the look-ups)."""
        call = _describe(name, args)
        if task.user.consent or not task.expect.outputs:
            return call
        return f"{call}, which means: {'; '.join(task.expect.outputs)}"

    @staticmethod
    def act_in_turn(ctx) -> AgentReply:
        """Fixed turns: the current turn's gold calls, all in one step (as BFCL's gold is a turn's list of
        calls, none of which reads an earlier one's result), then a reply without calls, which ends the turn."""
        turn = next(m["turn"] for m in reversed(ctx.messages) if m["role"] == "user" and "turn" in m)
        st = ctx.state.setdefault("oracle_turns", set())
        actions = ctx.task.task.turns[turn].actions
        if turn in st or not actions:
            return AgentReply("Done." if actions else "I cannot do that with the tools and details I have.")
        st.add(turn)
        return AgentReply("", [{"name": n, "arguments": a} for n, a in map(call_parts, actions)])
