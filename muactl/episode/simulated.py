"""Simulated tools: an LLM plays a tool from its spec (MUA-RL's first data-synthesis pipeline).

The model gets the domain's description, the tool's description, parameters and behaviour, and the
calls made so far in this episode with their results, so it can stay consistent. When the spec says
`returns_json`, the output must parse as JSON (one retry, then an error result).
"""

from __future__ import annotations

import json

from ..env.results import ToolResult

PROMPT = """\
You are simulating one tool of a software system, so that an agent can be tested against it.
System: {domain}
Tool: {name}
What it does: {description}
How it behaves: {behaviour}
Parameters (JSON Schema): {params}
Answer with the tool's output only: no explanations, no markdown.{json_rule}
Stay consistent with the earlier calls below; invent plausible, specific data where needed.
Earlier calls in this session:
{history}"""


def simulated_player(model: str, api_base: str | None = None, timeout_s: float = 60.0, retries: int = 4,
                     backoff_s: float = 1.0, max_tokens: int | None = 1024):
    from ..errors import RequestRejected
    from ..models.llm import LLMConfig, complete

    cfg = LLMConfig(model, api_base=api_base, timeout_s=timeout_s, retries=retries, backoff_s=backoff_s,
                    max_tokens=max_tokens)

    async def play(tool, args: dict, env) -> ToolResult:
        returns_json = bool(getattr(tool.spec, "returns_json", False))
        history = env.__dict__.setdefault("simulated_calls", [])
        prompt = PROMPT.format(
            domain=env.domain.spec.domain.description.strip(), name=tool.name, description=tool.description,
            behaviour=(getattr(tool.spec, "simulated", None) or "Return what a real system would, as JSON where natural.").strip(),
            params=json.dumps(tool.parameters),
            json_rule=" The output must be valid JSON." if returns_json else "",
            history="\n".join(f"- {h['name']}({json.dumps(h['args'])}) -> {h['result']}" for h in history) or "(none)")
        messages = [{"role": "system", "content": prompt},
                    {"role": "user", "content": f"{tool.name}({json.dumps(args, ensure_ascii=False)})"}]
        for _ in range(2):
            try:
                msg, _usage = await complete(cfg, messages)
            except RequestRejected as e:  # the agent's arguments made a request the model refused: data
                return ToolResult(f"Error: {tool.name} could not answer: {e}", error=True)
            text = (msg["content"] or "").strip()
            if text.startswith("```"):
                text = text.strip("`").removeprefix("json").strip()
            if not returns_json:
                break
            try:
                json.loads(text)
                break
            except ValueError:
                messages.append({"role": "assistant", "content": text})
                messages.append({"role": "user", "content": "That was not valid JSON. Answer with JSON only."})
        else:
            return ToolResult(f"Error: {tool.name} returned invalid JSON.", error=True)
        history.append({"name": tool.name, "args": args, "result": text})
        return ToolResult(text)

    return play
