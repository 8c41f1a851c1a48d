"""The one chat template: render() equals transformers' rendering, parse_assistant() never raises, and
TRL's {% generation %} masks cover exactly the assistant turns."""

from __future__ import annotations

import itertools

import pytest

from muactl.models.chatml import (
    IM_END,
    IM_START,
    compact_tool,
    parse_assistant,
    prompt_tools,
    render,
    to_chat_template_messages,
)



@pytest.fixture(scope="module")
def tokenizer(bank):
    from muactl.models.folder import load_tokenizer
    from muactl.models.tiny import tiny_path

    return load_tokenizer(tiny_path(bank.compiled))


@pytest.fixture(scope="module")
def tools(bank):
    return [t.openai_schema() for t in bank.compiled.agent_tools()]


def conversation(system: str = "You are the support agent of a small bank.") -> list[dict]:
    return [
        {"role": "system", "content": system},
        {"role": "assistant", "content": "Hi! How can I help you today?", "fixed": True},
        {"role": "user", "content": "I want 150 moved to my holiday account. My name is Mia."},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1_0", "name": "find_customer", "arguments": {"name": "Mia"}}]},
        {"role": "tool", "tool_call_id": "call_1_0", "name": "find_customer", "content": "c84", "error": False},
        {"role": "assistant", "content": "Let me look at your accounts.",
         "tool_calls": [{"id": "call_2_0", "name": "list_accounts", "arguments": {"customer_id": "c84"}},
                        {"id": "call_2_1", "name": "transfer_funds",
                         "arguments": {"from_account": "a778", "to_account": "a295", "amount": 150}}]},
        {"role": "tool", "tool_call_id": "call_2_0", "name": "list_accounts",
         "content": '[{"account_id": "a295", "kind": "holiday", "balance": 0}]'},
        {"role": "tool", "tool_call_id": "call_2_1", "name": "transfer_funds", "content": "Error: Account a778 has less than 150."},
        {"role": "assistant", "content": "Your holiday account is a295. Shall I proceed? (yes/no)"},
        {"role": "user", "content": "Yes, please go ahead. Ünïcödé – “quotes” 😀"},
    ]


# ---------------------------------------------------------------- render == transformers


@pytest.mark.parametrize("with_tools", [None, "json", "compact"])
@pytest.mark.parametrize("gen_prompt", [True, False])
def test_render_matches_transformers_apply_chat_template(tokenizer, tools, with_tools, gen_prompt):
    msgs = conversation()
    shown = prompt_tools(tools, with_tools) if with_tools else None
    ours = render(msgs, shown, add_generation_prompt=gen_prompt)
    theirs = tokenizer.apply_chat_template(to_chat_template_messages(msgs), tools=shown,
                                           tokenize=False, add_generation_prompt=gen_prompt)
    assert ours == theirs
    if with_tools == "json":
        assert "<tools>" in ours and '"name": "find_customer"' in ours
    if with_tools == "compact":
        assert "<tools>\nfind_customer(name: string) Find a customer's id from their name. name: The customer's name" in ours
        assert '"type": "function"' not in ours
    assert ours.endswith(f"{IM_START}assistant\n" if gen_prompt else f"{IM_END}\n")


def test_compact_tool_lines():
    schema = {"type": "function", "function": {"name": "update_order", "description": "Change an order.", "parameters": {
        "type": "object", "required": ["order_id", "status"], "additionalProperties": False, "properties": {
            "order_id": {"type": "string", "description": "The order's id, e.g. #W1."},
            "status": {"type": "string", "enum": ["pending", "cancelled"]},
            "items": {"type": "array", "items": {"type": "string"}, "description": "Item ids."},
            "note": {"type": "string"}}}}}
    assert compact_tool(schema) == ('update_order(order_id: string, status: "pending"|"cancelled", items?: list of string, '
                                    "note?: string) Change an order. order_id: The order's id, e.g. #W1. items: Item ids.")
    assert compact_tool({"name": "ping", "description": "Ping."}) == "ping() Ping."
    assert prompt_tools(None, "compact") is None and prompt_tools([schema], "json") == [schema]


def test_render_shape_of_each_turn(tools):
    text = render(conversation(), tools)
    assert text.startswith(f"{IM_START}system\nYou are the support agent of a small bank.\n\n# Tools")
    # arguments are objects rendered as JSON (not a JSON string inside JSON)
    assert ('<tool_call>\n{"name": "transfer_funds", "arguments": {"from_account": "a778", "to_account": "a295", '
            '"amount": 150}}\n</tool_call>') in text
    # text then two calls, one per line
    assert (f"{IM_START}assistant\nLet me look at your accounts.\n<tool_call>\n" in text
            and "</tool_call>\n<tool_call>\n" in text)
    # a turn with only a call starts right after the header
    assert f"{IM_START}assistant\n<tool_call>\n" in text
    # tool results are user turns wrapped in <tool_response>
    assert f"{IM_START}user\n<tool_response>\nc84\n</tool_response>{IM_END}\n" in text
    assert text.count(IM_START) == text.count(IM_END) == len(conversation())


def test_render_without_system_message():
    msgs = conversation()[2:4]
    text = render(msgs)
    assert text.startswith(f"{IM_START}user\n")
    assert "# Tools" not in text


def test_render_round_trips_through_parse(tools):
    """What the template writes for an assistant turn parses back to the same message."""
    for msg in conversation():
        if msg["role"] != "assistant":
            continue
        body = render([msg])[len(f"{IM_START}assistant\n"):-1]
        parsed = parse_assistant(body)
        assert parsed.error is None
        assert parsed.content == msg["content"]
        assert parsed.tool_calls == [{"name": c["name"], "arguments": c["arguments"]} for c in msg.get("tool_calls", [])]


# ---------------------------------------------------------------- parse_assistant


def test_parse_plain_text():
    p = parse_assistant(f"  Hello, how can I help?{IM_END}")
    assert (p.content, p.tool_calls, p.error) == ("Hello, how can I help?", [], None)


def test_parse_one_call():
    p = parse_assistant('<tool_call>\n{"name": "find_customer", "arguments": {"name": "Mia"}}\n</tool_call><|im_end|>')
    assert p.error is None and p.content == ""
    assert p.tool_calls == [{"name": "find_customer", "arguments": {"name": "Mia"}}]


def test_parse_multiple_calls_and_text():
    p = parse_assistant('Let me check.\n<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
                        '<tool_call>{"name": "b", "arguments": {"y": [1, 2], "z": null}}</tool_call>')
    assert p.error is None
    assert p.content == "Let me check."
    assert p.tool_calls == [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {"y": [1, 2], "z": None}}]


def test_parse_lenient_forms():
    # missing arguments -> {}; arguments given as a JSON string (as some models do) -> decoded
    p = parse_assistant('<tool_call>{"name": "transfer_to_human_agents"}</tool_call>')
    assert p.error is None and p.tool_calls == [{"name": "transfer_to_human_agents", "arguments": {}}]
    p = parse_assistant('<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>')
    assert p.error is None and p.tool_calls == [{"name": "a", "arguments": {"x": 1}}]


@pytest.mark.parametrize("text, fragment", [
    ('<tool_call>{"name": "a", "arguments": {}}', "not closed"),
    ("<tool_call>{bad json", "not closed"),
    ('<tool_call>{"name": "a", "arguments": {"x": 1}</tool_call>', "not valid JSON"),
    ("<tool_call>not json at all</tool_call>", "not valid JSON"),
    ("<tool_call></tool_call>", "not valid JSON"),
    ('<tool_call>{"arguments": {"x": 1}}</tool_call>', '{"name": ..., "arguments": {...}}'),
    ('<tool_call>{"name": 5, "arguments": {}}</tool_call>', '{"name": ..., "arguments": {...}}'),
    ('<tool_call>["a", {}]</tool_call>', '{"name": ..., "arguments": {...}}'),
    ('<tool_call>{"name": "a", "arguments": [1, 2]}</tool_call>', "must be a JSON object"),
    ('<tool_call>{"name": "a", "arguments": "x"}</tool_call>', "must be a JSON object"),
    ('<tool_call>{"name": "a", "arguments": null}</tool_call>', "must be a JSON object"),
    ("Sure.</tool_call>", "without <tool_call>"),
    ('<tool_call>{"name": "a", "arguments": {}}</tool_call></tool_call>', "without <tool_call>"),
    ('<tool_call>{"name": "a", "arguments": ' + "[" * 5000 + "</tool_call>", "not valid JSON"),
    ('<tool_call>{"name": "a", "arguments": "' + "[" * 5000 + '"}</tool_call>', "must be a JSON object"),
])
def test_parse_malformed_reports_an_error(text, fragment):
    p = parse_assistant(text)
    assert p.error and fragment in p.error
    assert isinstance(p.content, str)


def test_parse_keeps_good_calls_next_to_bad_ones():
    p = parse_assistant('<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>{oops</tool_call>')
    assert p.tool_calls == [{"name": "a", "arguments": {}}]
    assert "not valid JSON" in p.error


@pytest.mark.parametrize("text", ["", IM_END, "<tool_call>", "</tool_call>", "<tool_call><tool_call></tool_call>",
                                  "<|im_start|>assistant\n<tool_call>\n", "\x00\uffff", "{" * 3000,
                                  "<tool_call>" + "{" * 3000 + "</tool_call>", "<tool_call>1e999999</tool_call>"])
def test_parse_never_raises(text):
    p = parse_assistant(text)
    assert isinstance(p.content, str) and isinstance(p.tool_calls, list)


# ---------------------------------------------------------------- TRL assistant masks


def test_assistant_mask_covers_exactly_the_assistant_turns(tokenizer, tools):
    msgs = conversation()
    out = tokenizer.apply_chat_template(to_chat_template_messages(msgs), tools=tools, return_assistant_tokens_mask=True,
                                        return_dict=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert len(ids) == len(mask)
    assert tokenizer.decode(ids, skip_special_tokens=False) == render(msgs, tools)

    # the masked spans are the assistant bodies, each ending with its <|im_end|>
    spans, start = [], None
    for i, m in enumerate(mask + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append(tokenizer.decode(ids[start:i], skip_special_tokens=False))
            start = None
    # the fixed greeting is template text (mask 0 in rollouts), so it is not trained either
    expected = [render([m])[len(f"{IM_START}assistant\n"):-1] for m in msgs if m["role"] == "assistant" and not m.get("fixed")]
    assert spans == expected
    assert all(s.endswith(IM_END) for s in spans)
    assert any("<tool_call>" in s for s in spans)

    # walk the turns: system, user and tool turns (and every turn header) carry mask 0
    im_start = tokenizer.convert_tokens_to_ids(IM_START)
    starts = [i for i, t in enumerate(ids) if t == im_start] + [len(ids)]
    roles = []
    fixed = iter([bool(m.get("fixed")) for m in msgs if m["role"] == "assistant"])
    for a, b in itertools.pairwise(starts):
        turn = tokenizer.decode(ids[a:b], skip_special_tokens=False)
        role = turn[len(IM_START):].split("\n", 1)[0]
        roles.append(role)
        header_len = len(tokenizer.encode(f"{IM_START}{role}\n", add_special_tokens=False))
        assert not any(mask[a:a + header_len]), f"header of a {role} turn is masked"
        if role == "assistant" and not next(fixed):
            assert all(mask[a + header_len:b - 1]) and mask[b - 1] == 0  # the "\n" after <|im_end|> is not trained
        else:
            assert not any(mask[a:b]), f"a {role} turn carries mask 1: {turn!r}"
    assert roles == ["system", "assistant", "user", "assistant", "user", "assistant", "user", "user", "assistant", "user"]


def test_decode_arguments_shared_by_the_parser_and_api_agents():
    from muactl.models.chatml import decode_arguments

    assert decode_arguments({"x": 1}) == {"x": 1}
    assert decode_arguments('{"x": 1}') == {"x": 1}
    assert decode_arguments("  ") == {}
    assert decode_arguments("{not json") == "{not json"  # left for the caller to report
    assert decode_arguments("[" * 5000) == "[" * 5000
