"""The one chat format of local models: ChatML turns with Hermes/Qwen tool calls.

The same Jinja template renders SFT data (TRL reads its {% generation %} markers for assistant-only
loss), GRPO rollouts, eval and chat. Tool calls are `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
inside the assistant turn; tool results come back as a user turn wrapped in `<tool_response>`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

def decode_arguments(args: Any) -> Any:
    """A tool call's arguments as an object when they arrive as JSON text (some models and APIs send a
    string); an empty string is no arguments. Anything else comes back unchanged, for the caller to
    report as malformed."""
    if not isinstance(args, str):
        return args
    if not args.strip():
        return {}
    try:
        return json.loads(args)
    except (json.JSONDecodeError, RecursionError):
        return args


IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [IM_START, IM_END, "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|endoftext|>"]

TOOLS_PREAMBLE = (
    "\n\n# Tools\n\nYou may call one function at a time. The functions are listed within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FORMAT = (
    "\n</tools>\n\nTo call a function, reply with only a JSON object inside <tool_call></tool_call> XML tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

# Whitespace matters (generated ids are compared with rendered text), so the template is written
# without Jinja line breaks. An assistant message marked `fixed` (the domain's greeting) is template
# text, not policy output: it sits outside the {% generation %} markers, as it has mask 0 in rollouts.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(start=0) -%}"
    "{%- if messages and messages[0].role == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0].content -}}"
    "{%- if tools -%}"
    "{{- " + json.dumps(TOOLS_PREAMBLE) + " -}}"
    "{%- for tool in tools -%}{{- '\\n' + (tool.text if tool.type == 'compact' else (tool | tojson)) -}}{%- endfor -%}"
    "{{- " + json.dumps(TOOLS_FORMAT) + " -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- set ns.start = 1 -%}"
    "{%- endif -%}"
    "{%- for message in messages[ns.start:] -%}"
    "{%- if message.role == 'assistant' and message.fixed -%}"
    "{{- '<|im_start|>assistant\\n' + message.content + '<|im_end|>\\n' -}}"
    "{%- elif message.role == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}"
    "{{- message.content or '' -}}"
    "{%- for tc in (message.tool_calls or []) -%}"
    "{%- if message.content or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + tc.function.name + '\", \"arguments\": ' + (tc.function.arguments | tojson) + '}\\n</tool_call>' -}}"
    "{%- endfor -%}"
    "{{- '<|im_end|>' -}}"
    "{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- elif message.role == 'tool' -%}"
    "{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' -}}"
    "{%- else -%}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

GENERATION_PROMPT = f"{IM_START}assistant\n"
TOOL_FORMATS = ("json", "compact")
AFTER_TURN = "\n"  # what the template puts after an assistant turn's <|im_end|>


@dataclass
class Parsed:
    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # [{"name": str, "arguments": dict}]
    error: str | None = None
    reasoning: str | None = None  # what the model wrote inside <think>...</think> (never shown, never parsed)


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def split_reasoning(text: str) -> tuple[str, str | None]:
    """(the visible reply, the reasoning or None) of a turn a thinking model wrote. Every <think>...</think>
    block is reasoning; so is the text before a `</think>` that opens no block (a template whose
    generation prompt already opened it) and everything after a `<think>` left open (a turn cut short).
    What is left is all the user, the reward, the judge and the tool-call parser get to read."""
    if THINK_OPEN not in text and THINK_CLOSE not in text:
        return text, None
    thoughts, visible = [], []
    head, sep, rest = text.partition(THINK_CLOSE)
    if sep and THINK_OPEN not in head:  # opened by the prompt
        thoughts.append(head)
        text = rest
    while text:
        before, sep, after = text.partition(THINK_OPEN)
        visible.append(before)
        if not sep:
            break
        thought, _, text = after.partition(THINK_CLOSE)
        thoughts.append(thought)
    reasoning = "\n\n".join(t.strip() for t in thoughts if t.strip())
    return "".join(visible).replace(THINK_CLOSE, "").strip(), reasoning or None


_CALL = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.S)


def parse_assistant(text: str) -> Parsed:
    """Split generated text into the message for the user and Hermes tool calls.
    Malformed calls are reported in `error` (the agent sees it as an error turn), never raised."""
    text = text.replace(IM_END, "").replace("<|endoftext|>", "")
    calls, errors = [], []
    for m in _CALL.finditer(text):
        body, closed = m.group(1).strip(), m.group(2)
        if not closed:
            errors.append("a <tool_call> was not closed with </tool_call>")
            continue
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            errors.append(f"the tool call is not valid JSON ({e.msg})")
            continue
        except RecursionError:  # a degenerate generation like "[[[[..." nests past json's recursion limit
            errors.append("the tool call is not valid JSON (nested too deeply)")
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            errors.append('a tool call must be {"name": ..., "arguments": {...}}')
            continue
        args = decode_arguments(obj.get("arguments", {}))
        if not isinstance(args, dict):
            errors.append(f"the arguments of {obj['name']} must be a JSON object")
            continue
        calls.append({"name": obj["name"], "arguments": args})
    content = _CALL.sub("", text).strip()
    if "</tool_call>" in content:
        errors.append("found </tool_call> without <tool_call>")
    return Parsed(content, calls, "; ".join(errors) or None)


def answers_no_call(message: dict[str, Any]) -> bool:
    """The engine's error turn after a reply that could not be parsed: a tool-role turn (hidden from the
    simulated user, counted as a tool error) that answers no call, so it has no tool_call_id. muactl's
    ChatML shows it in <tool_response> like any result; where messages carry call ids (OpenAI's API,
    templates that check them) it is a user message."""
    return message["role"] == "tool" and not message.get("tool_call_id")


def to_chat_template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """muactl messages -> the shape the template (and TRL) reads: tool_calls as {type, function{name, arguments}}."""
    out = []
    for msg in messages:
        m = {"role": msg["role"], "content": msg.get("content") or ""}
        if msg.get("fixed"):
            m["fixed"] = True
        if msg.get("tool_calls"):
            m["tool_calls"] = [{"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                               for c in msg["tool_calls"]]
        if msg["role"] == "tool" and msg.get("name"):  # which tool answered (OpenAI's shape; not rendered)
            m["name"] = msg["name"]
        out.append(m)
    return out


def compact_tool(schema: dict[str, Any]) -> str:
    """One line per tool for small models: signature, description, then each parameter's description.
    `transfer_funds(from_account: string, amount?: integer) Move money. from_account: Account ...`
    (? marks an optional parameter). About a third of the tokens of the JSON schema; nested object
    shapes are not spelled out."""
    f = schema.get("function", schema)
    params = f.get("parameters") or {}
    required = set(params.get("required") or [])
    args, notes = [], []
    for name, p in (params.get("properties") or {}).items():
        kind = "|".join(json.dumps(v) for v in p["enum"]) if p.get("enum") else p.get("type", "any")
        if kind == "array" and isinstance(p.get("items"), dict):
            kind = f"list of {p['items'].get('type', 'any')}"
        args.append(f"{name}{'' if name in required else '?'}: {kind}")
        if p.get("description"):
            notes.append(f"{name}: {p['description']}")
    return " ".join([f"{f['name']}({', '.join(args)})", (f.get("description") or "").strip(), *notes]).strip()


def prompt_tools(tools: list[dict] | None, tool_format: str = "json") -> list | None:
    """The tool list as the template gets it: schemas (json) or compact_tool lines (compact), the latter
    as {"type": "compact", "text": line}, since transformers' apply_chat_template accepts only dicts."""
    if not tools or tool_format == "json":
        return tools or None
    return [{"type": "compact", "text": compact_tool(t)} for t in tools]


def render(messages: list[dict[str, Any]], tools: list[dict] | None = None, add_generation_prompt: bool = False) -> str:
    """Render with the chat template (jinja2, as transformers does), without needing a tokenizer."""
    return _chat_template().render(messages=to_chat_template_messages(messages), tools=tools or None,
                              add_generation_prompt=add_generation_prompt)


def _chat_template():
    global _COMPILED
    if _COMPILED is None:
        from jinja2 import nodes
        from jinja2.ext import Extension
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        class Generation(Extension):  # renders its body unchanged; TRL uses the markers for masks
            tags = {"generation"}

            def parse(self, parser):
                lineno = next(parser.stream).lineno
                body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
                return nodes.Scope(body, lineno=lineno)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation])
        env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
        _COMPILED = env.from_string(CHAT_TEMPLATE)
    return _COMPILED


_COMPILED = None
