"""Models keep their own chat format (agents/formats.py): a checkpoint whose tokenizer has a tool-capable
chat template is prompted with it and parsed in its family's tool-call format, with the tokenizer's
end-of-turn ids; muactl's own cards stay ChatML; a template without tools is refused.

Each family gets a small byte-level BPE tokenizer built here with the `tokenizers` library and a chat
template written here from the family's documented prompt format (no hub download). Real bank
episodes with the scripted user; the model is faked only at its boundary: it says what the oracle
would, in the family's format, and the trace must be token-exact.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from muactl.models.formats import STAND_IN, parse_llama3, parse_mistral
from muactl.episode.agents.local import LocalAgent
from muactl.episode.agents.oracle import OracleAgent
from muactl.episode.user import ScriptedUser
from muactl.errors import ModelError
from muactl.models.folder import MODEL_CARD, chat_format, load_tokenizer, read_card
from muactl.models.tiny import domain_corpus, tiny_path
from muactl.episode.rollout import RolloutConfig, run_episode

# ---------------------------------------------------------------- the three families' templates

# Qwen2.5 / Hermes: ChatML turns, tools listed in the system turn, calls in <tool_call> tags, consecutive
# tool results grouped in one user turn.
HERMES = (
    "{%- set sys = messages[0].content if messages and messages[0].role == 'system' else 'You are a helpful assistant.' -%}"
    "{{- '<|im_start|>system\\n' + sys -}}"
    "{%- if tools -%}{{- '\\n\\n# Tools\\n<tools>' -}}{%- for t in tools -%}{{- '\\n' + (t | tojson) -}}{%- endfor -%}"
    "{{- '\\n</tools>\\nTo call a function, write <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>.' -}}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}"
    "{%- elif m.role == 'assistant' -%}{{- '<|im_start|>assistant\\n' + (m.content or '') -}}"
    "{%- for tc in m.tool_calls or [] -%}{%- if m.content or not loop.first -%}{{- '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>\\n{\"name\": \"' + tc.function.name + '\", \"arguments\": ' + (tc.function.arguments | tojson) + '}\\n</tool_call>' -}}"
    "{%- endfor -%}{{- '<|im_end|>\\n' -}}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if loop.first or loop.previtem.role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' -}}"
    "{%- if loop.last or loop.nextitem.role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- else -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

# Llama 3.1: header tokens, <|eot_id|> ends every turn, tools in the system turn with "Environment:
# ipython", a call is the whole turn as {"name": ..., "parameters": {...}}, results in ipython turns.
LLAMA3 = (
    "{{- bos_token -}}"
    "{%- set sys = messages[0].content if messages and messages[0].role == 'system' else '' -%}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' -}}"
    "{%- if tools -%}{{- 'Environment: ipython\\n' -}}{%- endif -%}"
    "{{- 'Cutting Knowledge Date: December 2023\\n\\n' + sys -}}"
    "{%- if tools -%}{{- '\\n\\nTo call a function, respond with JSON {\"name\": function name, \"parameters\": "
    "its arguments}. Functions:' -}}{%- for t in tools -%}{{- '\\n' + (t | tojson) -}}{%- endfor -%}{%- endif -%}"
    "{{- '<|eot_id|>' -}}"
    "{%- for m in messages -%}"
    "{%- if m.role == 'system' -%}"
    "{%- elif m.role == 'assistant' and m.tool_calls -%}{%- set f = m.tool_calls[0].function -%}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n{\"name\": \"' + f.name + '\", \"parameters\": ' + (f.arguments | tojson) + '}<|eot_id|>' -}}"
    "{%- elif m.role == 'tool' -%}{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' -}}"
    "{%- else -%}{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + m.content + '<|eot_id|>' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)

# Mistral v0.3: [INST] blocks, the system prompt and [AVAILABLE_TOOLS] go before the LAST user message
# (so they move as the conversation grows), calls as [TOOL_CALLS] and a JSON list, results in
# [TOOL_RESULTS] with the call's 9-character id, which must be one of the calls of the assistant turn
# it answers (else the template raises, as Mistral's do), </s> ends the assistant's turns.
MISTRAL = (
    "{{- bos_token -}}{%- set ns = namespace(calls=[]) -%}"
    "{%- set sys = messages[0].content if messages and messages[0].role == 'system' else '' -%}"
    "{%- set users = messages | selectattr('role', 'equalto', 'user') | list -%}"
    "{%- for m in messages -%}"
    "{%- if m.role != 'tool' and not m.tool_calls -%}{%- set ns.calls = [] -%}{%- endif -%}"
    "{%- if m.role == 'user' -%}{%- set last = m is sameas users[-1] -%}"
    "{%- if tools and last -%}{{- '[AVAILABLE_TOOLS] ' + (tools | tojson) + '[/AVAILABLE_TOOLS]' -}}{%- endif -%}"
    "{{- '[INST] ' + ((sys + '\\n\\n') if sys and last else '') + m.content + '[/INST]' -}}"
    "{%- elif m.role == 'assistant' and m.tool_calls -%}{%- set ns.calls = m.tool_calls | map(attribute='id') | list -%}"
    "{{- '[TOOL_CALLS] [' -}}"
    "{%- for tc in m.tool_calls -%}{{- '{\"name\": \"' + tc.function.name + '\", \"arguments\": ' + (tc.function.arguments | tojson) + '}' -}}"
    "{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}{%- endfor -%}{{- ']' + eos_token -}}"
    "{%- elif m.role == 'assistant' -%}{{- ' ' + m.content + eos_token -}}"
    "{%- elif m.role == 'tool' -%}"
    "{%- if m.tool_call_id not in ns.calls -%}{{- raise_exception('a tool result answers no call of the turn before') -}}{%- endif -%}"
    "{%- if m.tool_call_id | length != 9 -%}{{- raise_exception('tool call ids must be 9 characters') -}}{%- endif -%}"
    "{{- '[TOOL_RESULTS] {\"content\": ' + (m.content | tojson) + ', \"call_id\": \"' + m.tool_call_id + '\"}[/TOOL_RESULTS]' -}}"
    "{%- endif -%}{%- endfor -%}"
)

FAMILIES = {
    "hermes": dict(template=HERMES, eos="<|im_end|>", bos=None, special=["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                                                                        "<tool_response>", "</tool_response>", "<|endoftext|>"]),
    "llama3": dict(template=LLAMA3, eos="<|eot_id|>", bos="<|begin_of_text|>",
                   special=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                            "<|eom_id|>", "<|python_tag|>"]),
    "mistral": dict(template=MISTRAL, eos="</s>", bos="<s>", special=["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]",
                                                                     "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                                                                     "[/TOOL_RESULTS]"]),
}
END_TOKEN = {"hermes": "<|im_end|>", "llama3": "<|eot_id|>", "mistral": "</s>"}


def build_family_tokenizer(family: str, corpus: list[str], out, template: str | None = None, special: tuple[str, ...] = ()):
    """A byte-level BPE tokenizer with the family's special tokens (and `special`) and chat template, saved to `out`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    spec = dict(FAMILIES[family])
    spec["special"] = spec["special"] + list(special)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=600, special_tokens=spec["special"], show_progress=False,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=spec["eos"], bos_token=spec["bos"],
                                   additional_special_tokens=[t for t in spec["special"] if t not in (spec["eos"], spec["bos"])])
    fast.chat_template = spec["template"] if template is None else template
    fast.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def bank():
    from muactl.domain.open import open_domain

    return open_domain("bank")


@pytest.fixture(scope="module")
def tokenizers(bank, tmp_path_factory):
    corpus = domain_corpus(bank.compiled) + [HERMES, LLAMA3, MISTRAL]
    root = tmp_path_factory.mktemp("formats")
    return {f: load_tokenizer(build_family_tokenizer(f, corpus, root / f)) for f in FAMILIES}


# ---------------------------------------------------------------- the fake model: the oracle, in the family's words


def turn_text(fmt, message: dict) -> str:
    """An assistant turn exactly as the family's template writes it, through its end token."""
    before = fmt.render([STAND_IN], add_generation_prompt=True)
    body = fmt.render([STAND_IN, message])[len(before):]
    end = END_TOKEN[fmt.family]
    return body[:body.rindex(end) + len(end)]


class ScriptedModel(LocalAgent):
    """A local agent whose 'model' says the oracle's turns in its family's format, token by token."""

    def __init__(self, tokenizer, task, domain, replies: list[str] | None = None):
        super().__init__("scripted")
        self.tokenizer, self.format = tokenizer, chat_format(tokenizer)
        # the oracle waits for consent before writes: the scripted user will say yes, so the stand-in has
        oracle = OracleAgent()
        ctx = SimpleNamespace(state={}, task=task, domain=domain, messages=[{"role": "user", "content": "yes"}])
        self.replies = replies or []
        for _ in range(len(task.task.expect.actions) * 2 + 3):
            r = asyncio.run(oracle.act(ctx))
            calls = [{"name": c["name"], "arguments": c["arguments"]} for c in r.tool_calls]
            self.replies.append(turn_text(self.format, {"role": "assistant", "content": r.content, "tool_calls": calls}))
        self.produced: list[tuple[list[int], list[int]]] = []

    async def _complete(self, prompt, ctx):
        ids = self._encode(self.replies[len(self.produced)])
        self.produced.append((list(prompt), ids))
        return ids, [-0.25] * len(ids)


def play(bank, tok, task_id="move-mia", **kw):
    task = bank.task(task_id)
    agent = ScriptedModel(tok, task, bank.compiled, **kw)
    ep = asyncio.run(run_episode(task, bank.compiled, agent, ScriptedUser(), RolloutConfig()))
    return agent, ep


# ---------------------------------------------------------------- telling the family


@pytest.mark.parametrize("family", list(FAMILIES))
def test_a_tokenizer_keeps_its_template_and_gets_its_family(tokenizers, family):
    tok = tokenizers[family]
    fmt = chat_format(tok)
    assert fmt.family == family
    assert tok.chat_template == FAMILIES[family]["template"]  # kept, not replaced by ChatML
    assert tok.convert_ids_to_tokens(fmt.end_ids[0]) == END_TOKEN[family]
    if family == "llama3":
        assert tok.convert_ids_to_tokens(fmt.end_ids) == ["<|eot_id|>", "<|eom_id|>"]


def test_muactl_cards_stay_chatml(bank, tmp_path):
    path = tiny_path(bank.compiled)
    assert read_card(path) == {"format": "chatml", "tools": "compact"}
    assert chat_format(load_tokenizer(path)).family == "chatml"
    legacy = tmp_path / "legacy"  # a checkpoint saved before cards named their format
    shutil.copytree(path, legacy)
    (legacy / MODEL_CARD).write_text(json.dumps({"tools": "compact"}))
    fmt = chat_format(load_tokenizer(legacy))
    assert (fmt.family, fmt.tool_list) == ("chatml", "compact")


def test_a_template_without_tools_is_refused_with_what_to_pass(bank, tmp_path):
    corpus = domain_corpus(bank.compiled)
    plain = "{%- for m in messages -%}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}{%- endfor -%}"
    folder = build_family_tokenizer("hermes", corpus, tmp_path / "plain", template=plain)
    tok = load_tokenizer(folder)  # fine for a user simulator, which needs no tools
    assert chat_format(tok, tools=False).family == "plain"
    with pytest.raises(ModelError) as err:
        chat_format(tok)
    assert "cannot express tool calls" in str(err.value) and f'{folder}/muactl.json' in str(err.value)
    assert '{"format": "chatml"}' in str(err.value)


def test_the_cli_refuses_such_a_model_before_any_episode(bank, tmp_path, monkeypatch):
    """End to end: `muactl eval --agent hf:FOLDER` on a checkpoint whose template has no tools exits 2
    with the message, instead of ending every episode as agent_error."""
    from muactl.cli import app

    model = tmp_path / "model"
    shutil.copytree(tiny_path(bank.compiled), model)
    (model / MODEL_CARD).unlink()
    (model / "chat_template.jinja").unlink(missing_ok=True)
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    cfg["chat_template"] = "{%- for m in messages -%}{{- m.content + '<|im_end|>' -}}{%- endfor -%}"
    (model / "tokenizer_config.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    result = CliRunner().invoke(app, ["eval", "bank", "--agent", f"hf:{model}", "--task", "move-mia"])
    assert result.exit_code == 2, result.output
    assert "cannot express tool calls" in result.output and "muactl.json" in result.output
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


# ---------------------------------------------------------------- token-exact episodes in each family


@pytest.mark.parametrize("family", list(FAMILIES))
def test_episodes_in_each_family_are_token_exact(bank, tokenizers, family):
    tok = tokenizers[family]
    fmt = chat_format(tok)
    agent, ep = play(bank, tok)
    assert (ep.termination, ep.reward) == ("user_stop", 1.0), (ep.error, ep.breakdown, ep.messages[-3:])
    tr = ep.trace
    assert len(tr.ids) == len(tr.mask) == len(tr.logprobs) and ep.turns == len(agent.produced)

    # mask 1 exactly on what the model produced (its end token included), logprobs there only
    mask, lps = [0] * len(tr.ids), [0.0] * len(tr.ids)
    for prompt, ids in agent.produced:
        assert tr.ids[len(prompt):len(prompt) + len(ids)] == ids and ids[-1] == fmt.end_ids[0]
        mask[len(prompt):len(prompt) + len(ids)] = [1] * len(ids)
        lps[len(prompt):len(prompt) + len(ids)] = [-0.25] * len(ids)
    assert tr.mask == mask and tr.logprobs == lps
    assert tr.prompt_len == len(agent.produced[0][0])

    # the first prompt is the template's own rendering of the opening, tools included
    tools = [t.openai_schema() for t in bank.compiled.agent_tools()]
    opening = fmt.render(ep.messages[:3], tools, add_generation_prompt=True)
    assert tok.decode(tr.ids[:tr.prompt_len], skip_special_tokens=False) == opening
    assert "transfer_funds" in opening

    # the whole trace is the conversation as the template writes it (through the agent's last turn,
    # tools where the first prompt put them), and its ids are that text's tokenization
    last = max(i for i, m in enumerate(ep.messages) if m["role"] == "assistant")
    convo = ep.messages[:last + 1]
    rendered = fmt.render(convo, tools) if family != "mistral" else mistral_as_first_prompt(fmt, convo, tools)
    rendered = rendered[:rendered.rindex(END_TOKEN[family]) + len(END_TOKEN[family])]
    assert tok.decode(tr.ids, skip_special_tokens=False) == rendered
    assert tr.ids == tok.encode(rendered, add_special_tokens=False)


def mistral_as_first_prompt(fmt, convo, tools):
    """Mistral's template moves the system prompt and tools to the last user message; the trace keeps
    them before the first one, where the first prompt had them (earlier ids never change)."""
    first_user = next(i for i, m in enumerate(convo) if m["role"] == "user")
    head = fmt.render(convo[:first_user + 1], tools)
    rest = fmt.render([STAND_IN] + convo[first_user + 1:])[len(fmt.render([STAND_IN])):]
    return head + rest


def test_a_template_that_rewrites_past_turns_still_grows_the_trace(bank, tmp_path):
    """Qwen3-style: the turn after the last user message carries an empty <think></think> block that
    later renderings drop. The trace keeps what the model saw and said; the episode still works."""
    last_user = ("{%- set ns = namespace(last_user=-1) -%}{%- for m in messages -%}"
                 "{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}")
    thinking = last_user + HERMES.replace(
        "{%- elif m.role == 'assistant' -%}{{- '<|im_start|>assistant\\n' + (m.content or '') -}}",
        "{%- elif m.role == 'assistant' -%}{{- '<|im_start|>assistant\\n' -}}"
        "{%- if loop.index0 > ns.last_user -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}{{- m.content or '' -}}")
    assert thinking != HERMES
    tok = load_tokenizer(build_family_tokenizer("hermes", domain_corpus(bank.compiled), tmp_path / "think", template=thinking))
    fmt = chat_format(tok)
    assert fmt.family == "hermes" and "<think>" in turn_text(fmt, {"role": "assistant", "content": "hi"})
    assert "<think>" not in fmt.render([STAND_IN, {"role": "assistant", "content": "hi"}, STAND_IN])
    agent, ep = play(bank, tok)
    assert (ep.termination, ep.reward) == ("user_stop", 1.0), (ep.error, ep.breakdown)
    for prompt, ids in agent.produced:  # every turn the model produced sits in the trace as produced
        assert ep.trace.ids[len(prompt):len(prompt) + len(ids)] == ids
    assert tok.decode(ep.trace.ids, skip_special_tokens=False).count("<think>") == ep.turns


def test_mistral_call_ids_are_what_its_template_accepts(bank, tokenizers):
    _agent, ep = play(bank, tokenizers["mistral"])
    ids = [c["id"] for m in ep.messages for c in m.get("tool_calls", [])]
    assert ids and all(len(i) == 9 and i.isalnum() for i in ids) and len(set(ids)) == len(ids)


@pytest.mark.parametrize("family,bad,fragment", [
    ("hermes", '<tool_call>\n{"name": "find_customer", "arguments": {"name": }\n</tool_call><|im_end|>', "not valid JSON"),
    ("llama3", '{"name": "find_customer", "parameters": {"name": <|eot_id|>', "not valid JSON"),
    ("mistral", '[TOOL_CALLS] [{"name": "find_customer", "arguments": "Mia"}]</s>', "must be a JSON object"),
])
def test_malformed_calls_become_error_turns(bank, tokenizers, family, bad, fragment):
    """The error turn answers no call, so the template gets it as a user message (a tool message
    there would have no call id to answer, which Mistral's template refuses): the episode goes on."""
    tok = tokenizers[family]
    agent, ep = play(bank, tok, replies=[bad])
    err = next(m for m in ep.messages if m["role"] == "tool")
    assert fragment in err["content"] and ep.messages[3].get("malformed")
    assert err["content"].endswith(f"Call a tool with {chat_format(tok).call_syntax}, or write a message.")
    assert ep.trace.mask.count(1) == sum(len(ids) for _, ids in agent.produced)
    assert (ep.termination, ep.reward) == ("user_stop", 1.0), (ep.error, ep.messages[-3:])
    assert err["content"] in tok.decode(ep.trace.ids, skip_special_tokens=False)  # the agent saw it


def test_a_template_that_checks_call_ids_refuses_a_tool_result_that_answers_no_call(tokenizers):
    """The test's Mistral template checks ids as Mistral's does (what the test above relies on)."""
    from jinja2 import TemplateError

    tok = tokenizers["mistral"]
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c00010000", "type": "function", "function": {"name": "find_customer", "arguments": {}}}]}
    answer = {"role": "tool", "tool_call_id": "c00010000", "content": "c84"}
    assert "c84" in tok.apply_chat_template([STAND_IN, call, answer], tokenize=False)
    for stray in ({"role": "tool", "content": "Error"}, dict(answer, tool_call_id="c00020000")):
        with pytest.raises(TemplateError, match="answers no call"):
            tok.apply_chat_template([STAND_IN, call, answer, {"role": "assistant", "content": "ok"}, stray], tokenize=False)


# ---------------------------------------------------------------- parsers


def test_llama3_parser():
    call = parse_llama3('{"name": "find_customer", "parameters": {"name": "Mia"}}')
    assert call.tool_calls == [{"name": "find_customer", "arguments": {"name": "Mia"}}] and call.content == ""
    tagged = parse_llama3('<|python_tag|>{"name": "list_accounts", "arguments": "{\\"customer_id\\": \\"c1\\"}"}')
    assert tagged.tool_calls == [{"name": "list_accounts", "arguments": {"customer_id": "c1"}}]
    assert parse_llama3("Sure, {braces} are fine in text.").tool_calls == []
    assert parse_llama3('{"name": "x", "parameters": [1]}').error == "the arguments of x must be a JSON object"
    assert parse_llama3('{"name": "x", "parameters": {').error.startswith("the tool call is not valid JSON")


def test_mistral_parser():
    p = parse_mistral('Let me look. [TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]')
    assert p.content == "Let me look." and [c["name"] for c in p.tool_calls] == ["a", "b"] and p.error is None
    assert parse_mistral("Hello there").tool_calls == []
    bad = parse_mistral('[TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}}, {"arguments": {}}]')
    assert [c["name"] for c in bad.tool_calls] == ["a"] and "must be" in bad.error
    assert parse_mistral("[TOOL_CALLS] [[[[" * 3000).error.startswith("the tool call is not valid JSON")


def test_sft_needs_assistant_markers_and_says_so(tokenizers):
    """Assistant-only SFT needs {% generation %} markers: muactl's ChatML has them, TRL patches the
    templates it knows, and any other template is a clear error rather than a loss over nothing."""
    from muactl.errors import UsageError
    from muactl.train.sft import tokenize_example

    record = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."}], "tools": []}
    with pytest.raises(UsageError, match="generation"):
        tokenize_example(tokenizers["hermes"], record, 10_000)
