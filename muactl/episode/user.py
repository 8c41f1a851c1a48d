"""User simulators: litellm (any provider or local server), hf (a local model), scripted (from the task).

All three see the same thing: the user's goal, and the conversation with roles flipped (the agent's
messages are "user" to the simulator). The agent's tool calls and tool results are hidden. A
simulator ends the conversation with ###STOP### (goal met or abandoned), ###TRANSFER### (handed to a
human) or ###OUT-OF-SCOPE### (the agent asks for something the goal does not cover).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..compile.prompt import DEFAULT_GUIDELINES

if TYPE_CHECKING:
    from .types import EpisodeContext

STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
# the user's ###TRANSFER### is `user_transfer`: only the agent's transfer tool call ends as `transfer`
STOP_TOKENS = {STOP: "user_stop", TRANSFER: "user_transfer", OUT_OF_SCOPE: "out_of_scope"}

def user_system_prompt(ctx: EpisodeContext) -> str:
    domain = ctx.domain.spec
    goal = ctx.task.task.user
    if domain.domain.user_prompt is not None:  # the domain's own prompt (a benchmark's), goal in place
        lines = [goal.reason, goal.known, goal.unknown, goal.instructions]
        return domain.domain.user_prompt.replace("{instruction}", "\n".join(x.strip() for x in lines if x))
    persona = domain.domain.personas.get(ctx.task.task.persona or "", "")
    parts = [domain.guidelines_text or DEFAULT_GUIDELINES, f"\n# Company\n{domain.domain.description.strip()}"]
    if persona:
        parts.append(f"\n# Your personality\n{persona.strip()}")
    parts.append(f"\n# Your goal\n{goal.reason.strip()}")
    if goal.known:
        parts.append(f"\n# What you know\n{goal.known.strip()}")
    if goal.unknown:
        parts.append(f"\n# What you do not know\n{goal.unknown.strip()}")
    if goal.instructions:
        parts.append(f"\n# Further instructions\n{goal.instructions.strip()}")
    parts.append("\n# When the agent asks you to confirm a change\n" + (
        "Say yes." if goal.consent else "Say no: you do not want that change made. Then end the conversation."))
    return "\n".join(parts)


def shown_to_user(m: dict[str, Any]) -> bool:
    """Whether an agent message reaches the user: text turns only. A turn that carries tool calls, or
    that failed to parse as one, goes to the tools, and its text with it. The reward reads the same."""
    return (m["role"] == "assistant" and bool((m.get("content") or "").strip()) and not m.get("tool_calls")
            and not m.get("malformed"))


def flipped_history(ctx: EpisodeContext) -> list[dict[str, str]]:
    """The conversation as the simulator sees it: agent text as "user", its own as "assistant", no tools."""
    out = []
    for m in ctx.messages:
        if shown_to_user(m):
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "user":
            out.append({"role": "assistant", "content": m["content"]})
    return out


@dataclass
class UserReply:
    content: str
    stop: str | None = None  # a termination reason when the simulator ended the conversation
    usage: dict[str, float] = field(default_factory=dict)


def split_stop(text: str, phrases: list[str] = ()) -> UserReply:
    """The reply and the ending it asks for: a stop token, or one of the domain's `user_stop` phrases."""
    for token, reason in [*STOP_TOKENS.items(), *((p, "user_stop") for p in phrases)]:
        if token in text:
            return UserReply(text.replace(token, "").strip(), reason)
    return UserReply(text.strip())


class UserSimulator(ABC):
    name = "user"

    @abstractmethod
    async def respond(self, ctx: EpisodeContext) -> UserReply: ...

    def describe(self) -> dict[str, Any]:
        return {"user": self.name}


# ---------------------------------------------------------------- scripted


_SWAPS = [(r"\byou are\b", "I am"), (r"\byou were\b", "I was"), (r"\byou're\b", "I'm"), (r"\byou've\b", "I've"),
          (r"\byou'll\b", "I'll"), (r"\byourself\b", "myself"), (r"\byours\b", "mine"), (r"\byour\b", "my")]
# after these words a bare "you" is a subject ("because you ..."), elsewhere an object ("told you")
_SUBJECT_AFTER = {"", "and", "but", "because", "if", "that", "so", "when", "as", "since", "until", "or", "then", "now"}


def _cased(word: str, repl: str) -> str:
    return repl if repl.startswith("I") or not word[0].isupper() else repl.capitalize()


def first_person(text: str) -> str:
    """Turn a task's second-person goal ("You want to cancel your order") into the user's words."""
    out = " ".join(text.split())
    for pattern, repl in _SWAPS:
        out = re.sub(pattern, lambda m, r=repl: _cased(m.group(0), r), out, flags=re.I)

    def you(m: re.Match) -> str:
        before = re.findall(r"[A-Za-z']+|[.!?;:,]", out[: m.start()])
        prev = before[-1].lower() if before and before[-1][0].isalpha() else ""
        return "I" if prev in _SUBJECT_AFTER else "me"

    out = re.sub(r"\byou\b", you, out, flags=re.I)
    return out[:1].upper() + out[1:]


_CONFIRM = re.compile(r"\b(confirm|proceed|shall i|should i|do you want me|would you like me|go ahead|is that (right|correct|ok))\b|\(yes/no\)", re.I)
# "Anything else?" after an answer or a refusal offers to end the conversation; it asks for nothing
_CLOSING = re.compile(r"(?:\b(?:is there|was there|do you have|can i help(?: you)?(?: with)?|could i help(?: you)?(?: with)?|"
                      r"may i help(?: you)?(?: with)?)\s+)?\banything else\b[^.!?]*\?|\bhow else can i (?:help|assist)\b[^.!?]*\?",
                      re.I)
_ASK = re.compile(r"\?|\b(please (provide|share|tell|give)|could you|can you|may i have|what is your|let me know)\b", re.I)


class ScriptedUser(UserSimulator):
    """Deterministic, driven by the task file: states the goal, gives the known facts when asked,
    answers confirmations as the task says (user.consent), makes the gold path's user-side calls when the
    agent names them, and stops when the agent no longer asks anything (a closing "Anything else?" asks
    nothing). For tests, cheap
    debugging and CPU training; it does not change its mind or wander like an LLM user."""

    name = "scripted"

    async def respond(self, ctx: EpisodeContext) -> UserReply:
        goal = ctx.task.task.user
        said = [m["content"] for m in ctx.messages if m["role"] == "user"]
        agent_msgs = [m for m in ctx.messages if m["role"] == "assistant" and not m.get("tool_calls")]
        last = (agent_msgs[-1].get("content") or "") if agent_msgs else ""
        last = _CLOSING.sub("", last)
        if not said:
            return UserReply(first_person(goal.reason))
        done = await self._user_side_call(ctx, last)
        if done is not None:
            return UserReply(done)
        if _CONFIRM.search(last):
            return UserReply("Yes, please go ahead." if goal.consent else "No, please do not make that change.")
        if _ASK.search(last):
            known = first_person(goal.known) if goal.known else ""
            if known and known not in said:
                return UserReply(known)
            if said.count("I don't know that, sorry.") < 2:
                return UserReply("I don't know that, sorry.")
            return UserReply("", "user_stop")
        return UserReply("Thank you, that's all.", "user_stop")

    @staticmethod
    async def _user_side_call(ctx: EpisodeContext, last: str) -> str | None:
        """Dual control: when the agent's last message names the next user-side call of the task's gold
        path ("toggle data" for toggle_data), make it on the sandbox and report what it showed."""
        from ..spec.models import call_parts

        mine = [call_parts(c) for c in ctx.task.task.expect.actions
                if getattr(ctx.domain.tools.get(call_parts(c)[0]), "side", None) == "user"]
        log = ctx.state.setdefault("user_tool_log", [])
        if len(log) >= len(mine):
            return None
        name, args = mine[len(log)]
        if name.replace("_", " ") not in last.lower():
            return None
        result = await ctx.env.acall(name, args)
        log.append(f"- {name}({args}) -> {result.content[:200]}")
        return f"Done. {result.content}"


# ---------------------------------------------------------------- LLM users


MAX_USER_TOOL_ROUNDS = 4


def _is_user_tool(ctx: EpisodeContext, name: str) -> bool:
    return any(t["function"]["name"] == name for t in ctx.user_tools)


def _not_yours(name: str):
    from ..env.results import ToolResult

    return ToolResult(f"Error: {name} is not something you can do yourself.", error=True)


class LiteLLMUser(UserSimulator):
    """Any litellm model (a provider, or a local OpenAI-compatible server via api_base)."""

    def __init__(self, llm_cfg):
        self.cfg = llm_cfg
        self.name = f"litellm:{llm_cfg.model}"

    async def respond(self, ctx: EpisodeContext) -> UserReply:
        from ..models.llm import complete

        history = flipped_history(ctx)
        if not history or history[-1]["role"] != "user":
            history.append({"role": "user", "content": "(The support chat has opened. Write your first message.)"})
        log = ctx.state.setdefault("user_tool_log", [])
        system = user_system_prompt(ctx)
        if log:  # what the user did on their side earlier (dual control); the agent never sees it
            system += "\n\n# Actions you took on your side so far\n" + "\n".join(log)
        messages = [{"role": "system", "content": system}, *history]
        total: dict[str, float] = {}
        for _ in range(MAX_USER_TOOL_ROUNDS):
            msg, usage = await complete(self.cfg, messages, tools=ctx.user_tools or None, seed=ctx.seed)
            for k, v in usage.items():
                total[k] = total.get(k, 0.0) + v
            if not msg["tool_calls"]:
                break
            # user-side tools (e.g. toggling a setting on the customer's own device) run on the same sandbox
            messages.append({"role": "assistant", "content": msg["content"] or None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in msg["tool_calls"]]})
            for c in msg["tool_calls"]:
                result = await ctx.env.acall(c["name"], c["arguments"]) if _is_user_tool(ctx, c["name"]) else \
                    _not_yours(c["name"])
                log.append(f"- {c['name']}({c['arguments']}) -> {result.content[:200]}")
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": result.content})
        reply = split_stop(msg["content"] or "", ctx.domain.spec.domain.user_stop)
        reply.usage = total
        return reply

    def describe(self) -> dict[str, Any]:
        return {"user": "litellm", "model": self.cfg.model, "temperature": self.cfg.temperature, "api_base": self.cfg.api_base}


def small_model_messages(ctx: EpisodeContext) -> list[dict[str, str]]:
    """The user's prompt for small local models, which slip into the assistant role they were tuned for:
    a short system prompt in the customer's voice, the agent's words marked as the agent's, and a reminder
    of the role, the goal and the stop token after the agent's last message. (HFUser writes the opening
    message itself, from the goal, so the model sees one customer turn before it writes any.)"""
    goal = ctx.task.task.user
    persona = ctx.domain.spec.domain.personas.get(ctx.task.task.persona or "", "")
    lines = [f"You are a customer of this company: {ctx.domain.spec.domain.description.strip()} You are chatting "
             "with its support agent. You are the customer, not the agent: never offer help. Write one short "
             "sentence per message, in the first person.",
             f"Your request: {first_person(goal.reason)}"]
    if goal.known:
        lines.append(f"Facts you give when the agent asks: {first_person(goal.known)}")
    if goal.unknown:
        lines.append(f"You do not know: {first_person(goal.unknown)} Never make such things up.")
    if goal.instructions:
        lines.append(f"Also: {goal.instructions.strip()}")
    if persona:
        lines.append(f"Your manner: {persona.strip()}")
    lines.append("When the agent asks you to confirm a change, answer " + (
        "'Yes, please go ahead.'" if goal.consent else "'No, please do not make that change.'"))
    lines.append(f"When the agent says your request is complete, or you have nothing left to ask, write only {STOP}.")
    history = [dict(m, content=f"Support agent: {m['content']}") if m["role"] == "user" else m
               for m in flipped_history(ctx)]
    reminder = (f"(You are the customer. Your request: {first_person(goal.reason)} Reply to the agent in one or "
                f"two sentences; write {STOP} if your request is complete.)")
    if not history or history[-1]["role"] != "user":
        history.append({"role": "user", "content": "Support agent: Hello, how can I help you today?"})
    history[-1] = dict(history[-1], content=f"{history[-1]['content']}\n\n{reminder}")
    return [{"role": "system", "content": "\n".join(lines)}, *history]


class HFUser(UserSimulator):
    """A local transformers model plays the user. Concurrent episodes' user turns share generate calls
    (models/batcher.py), as a local agent's turns do: one at a time, an LLM user made a 100-episode
    evaluation on a CPU take hours. As with local agents, a sampled (temperature > 0) reply's randomness
    comes from its batch (the seed derives from the batch's contents), not from the episode alone.
    `prompt`: "small" (default: the opening message is the goal in the first person, then
    small_model_messages) or "full" (the same prompt as LLM users, every message from the model)."""

    def __init__(self, model_ref: str, temperature: float = 0.0, max_new_tokens: int = 128, prompt: str = "small",
                 max_batch: int = 64):
        self.model_ref, self.temperature, self.max_new_tokens, self.prompt = model_ref, temperature, max_new_tokens, prompt
        self.name = f"hf:{model_ref}"
        self.max_batch = max_batch

    async def respond(self, ctx: EpisodeContext) -> UserReply:
        if self.prompt == "small":
            if not any(m["role"] == "user" for m in ctx.messages):  # the opening: the goal, as the scripted user says it
                return UserReply(first_person(ctx.task.task.user.reason))
            messages = small_model_messages(ctx)
        else:
            history = flipped_history(ctx) or [{"role": "user", "content": "(The support chat has opened. Write your first message.)"}]
            messages = [{"role": "system", "content": user_system_prompt(ctx)}, *history]
        from ..models.generation import load_model

        lm = load_model(self.model_ref, domain=ctx.domain)  # loaded once per process, shared by every episode
        ids, _ = await self.queue(lm).submit(lm.prompt_ids(messages), self.max_new_tokens, self.temperature, ctx.seed)
        return split_stop(lm.reply_text(ids), ctx.domain.spec.domain.user_stop)

    def queue(self, lm):
        """This user's queue on `lm` in the running event loop, shared by the users with its settings (a batch
        is generated with one max_new_tokens and one temperature)."""
        return lm.batcher(f"user {self.max_new_tokens} {self.temperature}", self.max_batch)


def make_user(spec: str, api_base: str | None = None, temperature: float = 0.0, timeout_s: float = 60.0,
              retries: int = 4, backoff_s: float = 1.0, max_tokens: int | None = 1024) -> UserSimulator:
    """'scripted', 'hf:<model>', or any litellm model id (e.g. openai/gpt-4o-mini)."""
    if spec == "scripted":
        return ScriptedUser()
    if spec.startswith("hf:"):
        return HFUser(spec[3:], temperature)
    from ..models.llm import LLMConfig

    return LiteLLMUser(LLMConfig(spec, api_base=api_base, temperature=temperature, timeout_s=timeout_s, retries=retries,
                                backoff_s=backoff_s, max_tokens=max_tokens))
