"""API agents: any litellm model id, with native tool calling (`--api-base` for local OpenAI-compatible
servers such as vLLM's)."""

from __future__ import annotations

import json
from typing import Any

from ...models.llm import LLMConfig, complete
from ...errors import AgentError, RequestRejected
from ...models.chatml import answers_no_call, decode_arguments
from .base import Agent, AgentReply


def to_openai(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """muactl messages -> OpenAI chat messages (tool-call arguments as JSON strings)."""
    out = []
    for m in messages:
        if m["role"] == "assistant":
            msg: dict[str, Any] = {"role": "assistant", "content": m.get("content") or None}
            if m.get("tool_calls"):
                msg["tool_calls"] = [{"id": c["id"], "type": "function",
                                      "function": {"name": c["name"],
                                                   "arguments": c["arguments"] if isinstance(c["arguments"], str)
                                                   else json.dumps(c["arguments"], ensure_ascii=False)}}
                                     for c in m["tool_calls"]]
            elif msg["content"] is None:
                msg["content"] = ""
            out.append(msg)
        elif answers_no_call(m):  # an error turn about the agent's own reply
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "tool":
            out.append({"role": "tool", "tool_call_id": m["tool_call_id"], "content": m["content"]})
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    return out


class APIAgent(Agent):
    def __init__(self, cfg: LLMConfig):
        self.cfg = cfg
        self.name = cfg.model

    async def act(self, ctx) -> AgentReply:
        try:
            msg, usage = await complete(self.cfg, to_openai(ctx.messages), tools=ctx.tools, seed=ctx.seed)
        except RequestRejected as e:  # its own conversation was refused (too long, malformed): its failure
            raise AgentError(str(e)) from e
        # arguments that are not JSON stay text: the sandbox reports them to the agent as the tool's error
        calls = [{"id": c["id"], "name": c["name"], "arguments": decode_arguments(c["arguments"])} for c in msg["tool_calls"]]
        return AgentReply(msg["content"] or "", calls, usage=usage, reasoning=msg.get("reasoning"))

    def describe(self) -> dict[str, Any]:
        return {"agent": "litellm", "model": self.cfg.model, "api_base": self.cfg.api_base, "temperature": self.cfg.temperature}
