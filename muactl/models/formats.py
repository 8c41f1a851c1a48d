"""How a local model is prompted and how its turns are read: its chat format.

muactl's own cards (tiny, smollm2-135m and every checkpoint trained from them: a muactl.json model card
beside the weights) are prompted with ChatML and the tool list their card names (chatml.py). Any
other checkpoint keeps the chat template its tokenizer ships, and its turns are parsed in the tool-call
format of its family, told from that template:

- `hermes` (Qwen2.5/3, Hermes, SmolLM3 ...): `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
  anywhere in the turn, text around it for the user.
- `llama3` (Llama 3.1 and later): the whole turn is one JSON object `{"name": ..., "parameters": {...}}`
  (also after `<|python_tag|>`, and with "arguments" for "parameters"); anything else is text.
- `mistral` (v0.3 and later): text, then `[TOOL_CALLS]` and a JSON list of `{"name", "arguments"}`.

A template that renders no tools is refused with what to pass instead. End-of-turn ids come from the
tokenizer: its eos token, and <|im_end|>, <|eot_id|>, <|eom_id|> where it has them.

Token-exact traces under a foreign template: the first prompt is the template's rendering of the
opening (system prompt, tools, greeting, the user's first message) with its generation prompt. Later
turns never re-render what is already in the trace: the text to append after the agent's turn is what
the template writes after that turn's end token in a stand-in conversation, `[user ".", <the agent's
turn>] + new messages`, with the generation prompt. A stand-in keeps system prompts and tool lists
(which some templates move to the last user message) out of it, and counting end tokens instead of
comparing text lets a template rewrite earlier turns (Qwen3 drops past reasoning); tools stay where
the first prompt put them.

Thinking models: a turn's `<think>...</think>` blocks are its reasoning (chatml.split_reasoning), kept apart
from the visible reply, which alone is parsed for calls and shown to the user. Its ids stay in the trace as
sampled, so GRPO trains on the reasoning the model wrote even where the template would drop it from a
re-rendering. `thinking` (model.thinking) goes to templates that take `enable_thinking`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..errors import FormatError
from .chatml import (answers_no_call, decode_arguments, AFTER_TURN, CHAT_TEMPLATE, GENERATION_PROMPT, IM_END, Parsed, parse_assistant, prompt_tools,
                     render, split_reasoning, to_chat_template_messages)

FAMILIES = ("chatml", "hermes", "llama3", "mistral")  # and "plain": a template without tools (fine for a user)
END_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<|endoftext|>", "</s>")
STAND_IN = {"role": "user", "content": "."}
CALL_SYNTAX = {
    "hermes": '<tool_call>{"name": ..., "arguments": {...}}</tool_call>',
    "llama3": 'a reply that is only {"name": ..., "parameters": {...}}',
    "mistral": '[TOOL_CALLS] [{"name": ..., "arguments": {...}}]',
}
_SENTINEL = "muactl_probe_tool"


@dataclass
class ChatFormat:
    family: str
    tokenizer: Any = field(repr=False)
    end_ids: list[int] = field(default_factory=list)  # the first closes a turn cut at max_new_tokens
    tool_list: str = "json"  # chatml only: json schemas or compact lines
    refusal: str | None = None  # why this model cannot be an agent (family "plain"); None: it can
    # model.thinking: passed to a template that reads `enable_thinking` (Qwen3's); False is MUA-RL's non-thinking
    # mode, whose generation prompt holds an empty <think></think> block (template text, mask 0)
    thinking: bool = False

    # ------------------------------------------------ prompts

    def render(self, messages: list[dict], tools: list[dict] | None = None, add_generation_prompt: bool = False) -> str:
        if self.family == "chatml":
            return render(messages, prompt_tools(tools, self.tool_list), add_generation_prompt)
        from jinja2 import TemplateError

        switch = {"enable_thinking": self.thinking} if self.reads_thinking else {}
        try:
            return self.tokenizer.apply_chat_template(_with_ids(messages), tools=tools or None, tokenize=False,
                                                      add_generation_prompt=add_generation_prompt, **switch)
        except TemplateError as e:
            from ..errors import AgentError

            raise AgentError(f"the model's chat template refused the conversation: {e}") from None

    @property
    def reads_thinking(self) -> bool:
        """Whether the chat template has a thinking switch (`enable_thinking`, as Qwen3's does)."""
        return self.family != "chatml" and "enable_thinking" in (_template_text(self.tokenizer) or "")

    def opening(self, messages: list[dict], tools: list[dict] | None) -> list[str]:
        """The first prompt, as text segments (each tokenized on its own)."""
        if self.family == "chatml":
            return [render(messages, prompt_tools(tools, self.tool_list)), GENERATION_PROMPT]
        return [self.render(messages, tools, add_generation_prompt=True)]

    def continuation(self, messages: list[dict], upto: int) -> list[str]:
        """What follows the agent's last turn (messages[upto - 1], already in the trace with its end
        token) up to the next generation prompt, as text segments."""
        new = messages[upto:]
        if self.family == "chatml":
            return [AFTER_TURN, render(new), GENERATION_PROMPT] if new else [AFTER_TURN, GENERATION_PROMPT]
        base = [STAND_IN, messages[upto - 1]]
        turns = len(self._turn_ends(self.render(base)))  # the agent's turn is the last of them
        after = self.render(base + new, add_generation_prompt=True)
        ends = self._turn_ends(after)
        if not turns or len(ends) < turns:
            from ..errors import AgentError

            raise AgentError("the model's chat template does not end turns with the tokenizer's end-of-turn token, "
                             "so muactl cannot tell where the agent's turn ends")
        return [after[ends[turns - 1]:]]

    def _turn_ends(self, text: str) -> list[int]:
        """Where each end-of-turn token in `text` ends."""
        ends = [t for t in (self.tokenizer.convert_ids_to_tokens(i) for i in self.end_ids) if t]
        return [m.end() for m in re.finditer("|".join(map(re.escape, ends)), text)]

    # ------------------------------------------------ replies

    @property
    def call_syntax(self) -> str:
        """How this family writes a tool call (shown to the model after a reply that could not be parsed)."""
        return CALL_SYNTAX.get(self.family, CALL_SYNTAX["hermes"])

    def strip_end(self, text: str) -> str:
        for t in END_TOKENS:
            text = text.replace(t, "")
        return text

    def parse(self, text: str) -> Parsed:
        """Split a generated turn into its reasoning (<think> blocks), text for the user and tool calls;
        malformed calls are reported in `error` (the agent sees it as an error turn), never raised. Only the
        visible text is parsed: a call written while thinking is not made."""
        visible, reasoning = split_reasoning(self.strip_end(text))
        parsed = self._parse_visible(visible)
        parsed.reasoning = reasoning
        return parsed

    def _parse_visible(self, text: str) -> Parsed:
        if self.family in ("chatml", "hermes"):
            return parse_assistant(text)
        if self.family == "llama3":
            return parse_llama3(text)
        if self.family == "mistral":
            return parse_mistral(text)
        return Parsed(text.strip())


def _with_ids(messages: list[dict]) -> list[dict]:
    """to_chat_template_messages, keeping tool-call ids and tool_call_id (some templates render or check
    them). The error turn after a reply that could not be parsed answers no call, so it goes to the
    template as a user message: a tool message without a call to answer is refused by templates that
    check ids (Mistral's), as by OpenAI's API."""
    out = to_chat_template_messages(messages)
    for m, src in zip(out, messages):
        for tc, call in zip(m.get("tool_calls", []), src.get("tool_calls") or []):
            if call.get("id"):
                tc["id"] = call["id"]
        if answers_no_call(src):
            m.clear()
            m.update(role="user", content=src.get("content") or "")
        elif src["role"] == "tool":
            m["tool_call_id"] = src["tool_call_id"]
    return out


def _call(obj: Any, args_key: str) -> tuple[dict | None, str | None]:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None, f'a tool call must be {{"name": ..., "{args_key}": {{...}}}}'
    args = decode_arguments(obj.get(args_key, obj.get("arguments", obj.get("parameters", {}))))
    if not isinstance(args, dict):
        return None, f"the arguments of {obj['name']} must be a JSON object"
    return {"name": obj["name"], "arguments": args}, None


def _json(text: str) -> tuple[Any, str | None]:
    try:
        return json.loads(text), None
    except json.JSONDecodeError as e:
        return None, f"the tool call is not valid JSON ({e.msg})"
    except RecursionError:
        return None, "the tool call is not valid JSON (nested too deeply)"


def parse_llama3(text: str) -> Parsed:
    body = text.strip()
    tagged = body.startswith("<|python_tag|>")
    body = body.removeprefix("<|python_tag|>").strip()
    if not body.startswith("{") or not (tagged or '"name"' in body):
        return Parsed(text.strip())
    obj, err = _json(body)
    if err:
        return Parsed("", [], err)
    call, err = _call(obj, "parameters")
    return Parsed("", [call] if call else [], err)


_MISTRAL_CALLS = "[TOOL_CALLS]"


def parse_mistral(text: str) -> Parsed:
    if _MISTRAL_CALLS not in text:
        return Parsed(text.strip())
    content, _, body = text.partition(_MISTRAL_CALLS)
    calls, errors = [], []
    for part in body.split(_MISTRAL_CALLS):
        obj, err = _json(part.strip())
        if err:
            errors.append(err)
            continue
        for item in obj if isinstance(obj, list) else [obj]:
            call, err = _call(item, "arguments")
            if call:
                calls.append(call)
            else:
                errors.append(err)
    return Parsed(content.strip(), calls, "; ".join(errors) or None)


# ---------------------------------------------------------------- telling the family


def end_ids(tokenizer) -> list[int]:
    """The tokenizer's end-of-turn ids, the one that closes a turn first."""
    vocab = tokenizer.get_vocab()
    names = [t for t in ("<|im_end|>", "<|eot_id|>", "<|eom_id|>") if t in vocab]
    if tokenizer.eos_token and tokenizer.eos_token not in names:
        names.append(tokenizer.eos_token)
    return [vocab[n] for n in names]


def _template_text(tokenizer) -> str | None:
    tpl = tokenizer.chat_template
    if isinstance(tpl, dict):  # several named templates: the tool-use one if there is one
        tpl = tpl.get("tool_use") or tpl.get("default")
    return tpl


def family_of(template: str) -> str | None:
    if "<tool_call>" in template:
        return "hermes"
    if "[TOOL_CALLS]" in template:
        return "mistral"
    if "<|start_header_id|>" in template and re.search(r"parameters|tool_calls", template):
        return "llama3"
    return None


REFUSAL = ("{what}. Pass a checkpoint whose chat template renders tools (Qwen2.5/3 or Hermes <tool_call>, "
           "Llama 3.1+ JSON, Mistral v0.3+ [TOOL_CALLS]), or have muactl prompt this one with its own ChatML "
           "format (then teach it that format with SFT): write {{\"format\": \"chatml\"}} into {where}/muactl.json "
           "(a hub model: download it to a folder first).")


def detect(tokenizer, card_format: str | None, tool_list: str = "json", where: str = "the model folder") -> ChatFormat:
    """The format to prompt `tokenizer` with: its card's, else its template's family (checked to render
    tools). A template that cannot be an agent's comes back as family "plain" with the refusal."""
    if card_format == "chatml":
        tokenizer.chat_template = CHAT_TEMPLATE
        ids = [tokenizer.convert_tokens_to_ids(IM_END)]
        if ids[0] is None or ids[0] == tokenizer.unk_token_id:
            raise FormatError(f"the tokenizer has no {IM_END} token, which muactl's ChatML format needs")
        return ChatFormat("chatml", tokenizer, ids, tool_list)
    template = _template_text(tokenizer)
    ids = end_ids(tokenizer)
    if not template:
        raise FormatError(REFUSAL.format(what="the tokenizer has no chat template", where=where))
    if not ids:
        raise FormatError("the tokenizer has no end-of-turn token (no eos token)")
    family = card_format if card_format in FAMILIES else family_of(template)
    tools = _renders_tools(tokenizer)
    if family is None or not tools:
        what = ("the chat template cannot express tool calls" if not tools else
                "the chat template writes tool calls in a format muactl does not parse")
        return ChatFormat("plain", tokenizer, ids, refusal=REFUSAL.format(what=what, where=where))
    return ChatFormat(family, tokenizer, ids)


def _renders_tools(tokenizer) -> bool:
    """Whether the template shows a tool list, a tool call and a tool result (a template that drops
    any of them would leave the model blind to what happened)."""
    tools = [{"type": "function", "function": {"name": _SENTINEL, "description": "probe",
                                               "parameters": {"type": "object", "properties": {"probe_arg": {"type": "string"}}}}}]
    messages = [{"role": "system", "content": "probe"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "abcdefghi", "type": "function", "function": {"name": "probe_call", "arguments": {"probe_arg": "probe_value"}}}]},
                {"role": "tool", "tool_call_id": "abcdefghi", "name": "probe_call", "content": "probe_result"},
                {"role": "user", "content": "ok"}]
    try:
        text = tokenizer.apply_chat_template(messages, tools=tools, tokenize=False)
    except Exception:  # noqa: BLE001 - any template error means it cannot render this conversation
        return False
    return all(s in text for s in (_SENTINEL, "probe_call", "probe_value", "probe_result"))
