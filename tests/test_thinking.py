"""Thinking models (issue 31): a model that writes <think>...</think> before its reply or tool call.

The chat template is written here in the manner of Qwen3's (no hub download): it drops the reasoning of
assistant turns before the last user message when it renders a conversation, and its generation prompt
holds an empty <think></think> block when `enable_thinking` is false. Its tokenizer is built here as
tests/test_formats.py builds its families' (byte-level BPE on the bank domain's text, <think> and </think>
special). Real bank episodes, real sandboxes, the real scripted user or an LLM user behind a real local
HTTP server; the model is faked at its generate boundary (it says a fixed script of turns, each after a
<think> block unless the prompt already closed one), and so is the LLM user (a function behind the server).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from muactl.episode.agents.local import HFAgent
from muactl.episode.rollout import RolloutConfig, run_episode
from muactl.models.chatml import split_reasoning
from muactl.models.folder import chat_format, load_tokenizer
from muactl.models.tiny import domain_corpus, tiny_path
from tests.fakes.openai_server import FakeOpenAI, Reply, fake_user
from tests.test_formats import HERMES, build_family_tokenizer

# Qwen3's way with reasoning, on the Hermes template of test_formats: an assistant turn's reasoning (its
# content before </think>) is rendered only for turns after the last user message; earlier turns lose it.
LAST_USER = ("{%- set ns = namespace(last_user=-1) -%}{%- for m in messages -%}"
             "{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}")
QWEN3_LIKE = LAST_USER + HERMES.replace(
    "{%- elif m.role == 'assistant' -%}{{- '<|im_start|>assistant\\n' + (m.content or '') -}}",
    "{%- elif m.role == 'assistant' -%}{%- set content = m.content or '' -%}{%- set reasoning = '' -%}"
    "{%- if '</think>' in content -%}{%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip() -%}"
    "{%- set content = content.split('</think>')[-1].lstrip() -%}{%- endif -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if loop.index0 > ns.last_user -%}{{- '<think>\\n' + reasoning + '\\n</think>\\n\\n' -}}{%- endif -%}"
    "{{- content -}}").replace(
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}",
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
    "{%- endif -%}")
NO_THINKING = "<think>\n\n</think>\n\n"  # what the generation prompt holds with enable_thinking=False
GEN = "<|im_start|>assistant\n"


@pytest.fixture(scope="module")
def bank():
    from muactl.domain.open import open_domain

    return open_domain("bank")


@pytest.fixture(scope="module")
def folder(bank, tmp_path_factory):
    corpus = domain_corpus(bank.compiled) + [QWEN3_LIKE, "Let me think about it. The balance is 185."]
    return build_family_tokenizer("hermes", corpus, tmp_path_factory.mktemp("qwen3like") / "tok", template=QWEN3_LIKE,
                                  special=("<think>", "</think>"))


@pytest.fixture
def tok(folder):
    return load_tokenizer(folder)


def call(name: str, arguments: dict) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call><|im_end|>'


def balance_script(close_id: str, said: str) -> list[tuple[str, str]]:
    """balance-sam (Sam's checking balance is 185) as (reasoning, visible turn): two look-ups, the answer
    `said`, a goodbye. The third turn's reasoning holds the outputs and a call to close an account."""
    closing = call("close_account", {"account_id": close_id}).removesuffix("<|im_end|>")
    return [("The user is Sam; find the customer first.", call("find_customer", {"name": "Sam"})),
            ("Customer c78. List the accounts.", call("list_accounts", {"customer_id": "c78"})),
            (f"The checking balance is 185. I could also close it: {closing}",
             f"{said} Could you tell me your name once more, for my notes?<|im_end|>"),
            ("Nothing is left to do.", "All done: your request is complete. Goodbye.<|im_end|>")]


class ThinkingLM:
    """The model boundary of HFAgent, faked: `generate` says the script's turn (counted from the assistant
    headers in the prompt), after a <think> block unless the prompt already closed one, token by token."""

    context_length = None
    stop = None
    autocast = False
    device = "cpu"

    def __init__(self, tokenizer, script: list[tuple[str, str]]):
        self.tokenizer, self.script = tokenizer, script
        self.produced: list[tuple[list[int], list[int]]] = []

    def generate(self, prompts, max_new_tokens, temperature=0.0, seed=None):
        out = []
        for p in prompts:
            text = self.tokenizer.decode(p, skip_special_tokens=False)
            turn = text.count(GEN) - 2  # the greeting and the generation prompt
            thought, body = self.script[min(turn, len(self.script) - 1)]
            said = body if text.endswith(NO_THINKING) else f"<think>\n{thought}\n</think>\n\n{body}"
            ids = self.tokenizer.encode(said, add_special_tokens=False)
            self.produced.append((list(p), ids))
            out.append((ids, [-0.5] * len(ids)))
        return out


def sams_checking(bank) -> str:
    from muactl.env.sandbox import new_env

    env = new_env(bank.compiled)
    try:
        return re.findall(r"a\d+", env.call("list_accounts", {"customer_id": "c78"}).content)[0]
    finally:
        env.close()


# ---------------------------------------------------------------- reading a turn


def test_reasoning_is_split_from_the_visible_reply():
    assert split_reasoning("Hello.") == ("Hello.", None)
    assert split_reasoning("<think>\nplan\n</think>\n\nHello.") == ("Hello.", "plan")
    assert split_reasoning("<think>\n\n</think>\n\nHello.") == ("Hello.", None)  # the non-thinking mode's empty block
    assert split_reasoning("opened by the prompt</think>\n\nHello.") == ("Hello.", "opened by the prompt")
    assert split_reasoning("<think>cut off at max_new_tokens") == ("", "cut off at max_new_tokens")
    assert split_reasoning("<think>a</think>One <think>b</think>two") == ("One two", "a\n\nb")


def test_a_call_written_while_thinking_is_not_made(tok):
    fmt = chat_format(tok)
    parsed = fmt.parse('<think>maybe <tool_call>\n{"name": "close_account", "arguments": {"account_id": "a1"}}\n'
                       '</tool_call></think>\n\nWhich account?<|im_end|>')
    assert (parsed.content, parsed.tool_calls, parsed.error) == ("Which account?", [], None)
    assert "close_account" in parsed.reasoning


def test_the_template_drops_earlier_reasoning_and_reads_the_switch(tok, bank):
    from dataclasses import replace

    fmt = chat_format(tok)
    assert fmt.family == "hermes" and fmt.reads_thinking and not fmt.thinking
    convo = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think>\nplan A\n</think>\n\nHello."},
             {"role": "user", "content": "and?"}, {"role": "assistant", "content": "<think>\nplan B\n</think>\n\nDone."}]
    text = fmt.render(convo)
    assert "plan A" not in text and "plan B" in text  # what makes a re-rendered conversation differ from the trace
    assert fmt.render(convo[:1], add_generation_prompt=True).endswith(GEN + NO_THINKING)
    assert replace(fmt, thinking=True).render(convo[:1], add_generation_prompt=True).endswith(GEN)
    assert not chat_format(load_tokenizer(tiny_path(bank.compiled))).reads_thinking  # muactl's ChatML has no switch


def is_agent(stored: dict) -> bool:
    """A stored message the policy wrote (not the domain's fixed greeting)."""
    return stored["role"] == "assistant" and not json.loads(stored["meta"] or "{}").get("fixed")


# ---------------------------------------------------------------- GRPO: what was generated is what is trained


class FakeTrainer:
    """Only what rollout_func reads from TRL's trainer; the policy itself is ThinkingLM (LocalLM.from_model)."""

    def __init__(self):
        import torch

        self.model = torch.nn.Linear(1, 1)
        self.accelerator = SimpleNamespace(unwrap_model=lambda m: m)
        self.state = SimpleNamespace(global_step=0)
        self.args = SimpleNamespace(bf16=False)
        self._metrics = {"train": defaultdict(list)}


def grpo_rollouts(bank, tok, tmp_path, monkeypatch, thinking: bool):
    from muactl.episode.user import ScriptedUser
    from muactl.models.generation import LocalLM
    from muactl.runs.store import RunStore
    from muactl.train.grpo import Rollouts
    from muactl.train.recipes import compose

    lm = ThinkingLM(tok, balance_script(sams_checking(bank), "Your checking account holds 185."))
    monkeypatch.setattr(LocalLM, "from_model", classmethod(lambda cls, model, tokenizer, prefix_cache=None: lm))
    cfg = compose(None, ["domain=bank", "grpo.group_size=2", "grpo.tasks_per_step=1", "grpo.max_turns=6",
                         "grpo.draw_rounds=1", f"model.thinking={str(thinking).lower()}"])
    store = RunStore.create("grpo", "bank", {}, path=tmp_path / "run")
    rollouts = Rollouts(cfg, bank, store, tok, ScriptedUser)
    return lm, store, rollouts([[{"role": "user", "content": "balance-sam"}]] * 2, FakeTrainer())


@pytest.mark.parametrize("thinking", [True, False], ids=["thinking", "not-thinking"])
def test_grpo_trains_on_exactly_the_tokens_the_model_generated(bank, tok, tmp_path, monkeypatch, thinking):
    lm, store, out = grpo_rollouts(bank, tok, tmp_path, monkeypatch, thinking)
    assert out["episode_reward"] == [1.0, 1.0]
    fmt = chat_format(tok)
    for prompt_ids, completion_ids, env_mask in zip(out["prompt_ids"], out["completion_ids"], out["env_mask"]):
        trained = prompt_ids + completion_ids
        mask = [0] * len(prompt_ids) + env_mask
        turns = {len(p): (p, ids) for p, ids in lm.produced if trained[:len(p)] == p}  # this episode's prompts
        assert len(turns) == 4
        expected = [0] * len(trained)
        for p, ids in turns.values():  # each prompt is the one before, what was sampled and template text after
            assert trained[len(p):len(p) + len(ids)] == ids
            expected[len(p):len(p) + len(ids)] = [1] * len(ids)
            # model.thinking reached the template: its generation prompt, mask 0, holds the empty block or not
            assert tok.decode(p, skip_special_tokens=False).endswith(GEN if thinking else GEN + NO_THINKING)
        assert mask == expected
        text = tok.decode(trained, skip_special_tokens=False)
        thoughts = [t for t, _ in lm.script]
        if thinking:  # every turn's reasoning is in the trained sequence, sampled (mask 1)
            assert all(t in text for t in thoughts)
            sampled = tok.decode([t for t, m in zip(trained, mask) if m], skip_special_tokens=False)
            assert sampled.count("<think>") == 4 and all(t in sampled for t in thoughts)
            # the template, re-rendering the conversation as the model wrote it, drops the reasoning of the
            # turns before the last user message: training on a re-rendering would train other tokens
            said = iter(tok.decode(ids, skip_special_tokens=False).removesuffix("<|im_end|>") for _, ids in
                        sorted(turns.values(), key=lambda t: len(t[0])))
            stored = store.messages(store.episodes(step=1)[0]["id"])
            messages = [dict(role=m["role"], content=next(said) if is_agent(m) else m["content"]) for m in stored]
            rendered = fmt.render(messages[:-1])  # through the last agent turn
            assert sum(t in rendered for t in thoughts) == 1  # only the turn after the last user message keeps it
        else:
            assert "<think>" not in tok.decode([t for t, m in zip(trained, mask) if m], skip_special_tokens=False)
    # the episode keeps the reasoning beside the visible reply, which never holds a <think> block
    for e in store.episodes(step=1):
        agent = [m for m in store.messages(e["id"]) if is_agent(m)]
        assert len(agent) == 4 and not any("<think>" in m["content"] or "</think>" in m["content"] for m in agent)
        assert [m["reasoning"] for m in agent] == ([t for t, _ in lm.script] if thinking else [None] * 4)


# ---------------------------------------------------------------- the reward, the user and the judge read the visible reply


def thinking_user(body: dict) -> Reply:
    """fake_user (its goal and known facts, then ###STOP### after a goodbye) that thinks before it speaks."""
    reply = fake_user(body)
    return Reply(content=f"<think>\nWhat does the agent want from me?\n</think>\n\n{reply.content}")


def play_against_llm_user(bank, tok, script):
    lm = ThinkingLM(tok, script)
    agent = HFAgent("qwen3-like", lm=lm, thinking=True)
    from muactl.episode.user import make_user

    with FakeOpenAI(thinking_user) as server:
        user = make_user("openai/fake-user", api_base=server.base, retries=0)
        ep = asyncio.run(run_episode(bank.task("balance-sam"), bank.compiled, agent, user, RolloutConfig(max_turns=6)))
    return ep, server.requests


@pytest.mark.parametrize("said", ["Your checking account holds 185.", "I have looked at your accounts."])
def test_the_reward_the_user_and_the_judge_read_only_the_visible_reply(bank, tok, said):
    from muactl.episode.judge import transcript

    close_id = sams_checking(bank)
    script = balance_script(close_id, said)
    ep, requests = play_against_llm_user(bank, tok, script)
    assert ep.termination == "user_stop", (ep.error, ep.messages[-3:])
    # the balance said only while thinking is not shown: the reward pays only when the reply says it
    shown = "185" in said
    assert ep.breakdown["outputs"] == {"checking": shown, "185": shown} and ep.reward == float(shown)
    # the close_account written while thinking was not made: two look-ups, the database as the gold path left it
    assert [r["tool"] for r in ep.records] == ["find_customer", "list_accounts"] and ep.breakdown["db_match"]
    agent = [m for m in ep.messages if m["role"] == "assistant" and not m.get("fixed")]
    assert [m.get("reasoning") for m in agent] == [t for t, _ in script]
    # the LLM user saw the agent's visible replies only; its own thinking never reached the conversation
    seen = json.dumps([r["messages"] for r in requests])
    assert requests and "<think>" not in seen and "What does the agent want" not in seen
    assert not any(t in seen for t, _ in script) and said in seen
    users = [m["content"] for m in ep.messages if m["role"] == "user"]
    assert users and not any("<think>" in u or "What does the agent want" in u for u in users)
    said_to_judge = transcript(ep.messages)
    assert said in said_to_judge and not any(t in said_to_judge for t, _ in script)


def test_an_api_models_reasoning_is_set_apart_too(bank, tmp_path, monkeypatch):
    """An OpenAI-compatible server that leaves <think> in the content (vLLM without a reasoning parser): the
    agent's reasoning is stored apart, the LLM user never reads it, the reward counts what was said."""
    from muactl.eval.config import EvalConfig
    from muactl.eval.evaluate import run_eval
    from tests.fakes.openai_server import gold_agent, is_user_request, two_sided

    gold = gold_agent([bank.task("balance-sam").task])

    def thinking_agent(body: dict) -> Reply:
        reply = gold(body)
        return Reply(content=f"<think>\nsecret plan 999\n</think>\n\n{reply.content or ''}", tool_calls=reply.tool_calls)

    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    with FakeOpenAI(two_sided(thinking_agent, thinking_user)) as server:
        store, summary = run_eval(EvalConfig(domain="bank", agent="openai/thinker", api_base=server.base, user="openai/user",
                                             user_api_base=server.base, tasks=["balance-sam"], max_turns=8))
    assert summary["pass^1"] == 1.0
    [ep] = store.episodes()
    agent = [m for m in store.messages(ep["id"]) if is_agent(m)]
    assert agent and all(m["reasoning"] == "secret plan 999" and "<think>" not in m["content"] for m in agent)
    users = [r for r in server.requests if is_user_request(r)]
    assert users and "secret plan" not in json.dumps([r["messages"] for r in users])


# ---------------------------------------------------------------- the stored episode, runs show, and the CLI switch


def test_runs_show_prints_the_reasoning_the_user_never_saw(bank, tok, tmp_path, monkeypatch):
    from muactl.cli import app
    from muactl.runs.store import RunStore

    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    ep, _ = play_against_llm_user(bank, tok, balance_script(sams_checking(bank), "Your checking account holds 185."))
    store = RunStore.create("eval", "bank", {})
    store.save_episode(ep)
    store.update(status="done")
    out = CliRunner().invoke(app, ["runs", "show", store.id, "--episode", "1"], env={"COLUMNS": "250"}).output
    assert out.count("agent thinking:") == 4 and "The checking balance is 185." in out and "close_account" in out
    assert "agent: Your checking account holds 185." in out
    # a run saved before messages had a reasoning column reads as before, without reasoning
    store.db.conn.execute("ALTER TABLE messages DROP COLUMN reasoning")
    old = RunStore.open(store.id)
    assert all(m["reasoning"] is None for m in old.messages(old.episodes()[0]["id"]))


def random_model_folder(folder, tmp_path):
    """A random-weights Qwen2 on the Qwen3-like tokenizer: a real model for the CLI to load."""
    import shutil

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from muactl.models.tiny import TINY_CONFIG

    out = tmp_path / "qwen3like-model"
    shutil.copytree(folder, out)
    tok = load_tokenizer(out)
    config = Qwen2Config(vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.eos_token_id,
                         **{**TINY_CONFIG, "num_hidden_layers": 1})
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).save_pretrained(out)
    return out


@pytest.mark.slow  # ~7 s each: builds and loads a model (test_grpo_trains_... checks model.thinking in the default run)
@pytest.mark.parametrize("flag", [[], ["--thinking"]], ids=["default", "thinking"])
def test_eval_thinking_reaches_the_template(folder, tmp_path, monkeypatch, flag):
    """End to end from the command line: a real (random) model on the Qwen3-like template; the stored trace's
    first prompt is the template's, with the empty <think></think> block unless --thinking."""
    from muactl.cli import app
    from muactl.runs.store import RunStore

    model = random_model_folder(folder, tmp_path)
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    r = CliRunner().invoke(app, ["eval", "bank", "--agent", f"hf:{model}", "--task", "balance-sam", "--max-turns", "1",
                                 "--max-new-tokens", "4", *flag], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    [run] = list((tmp_path / "runs").iterdir())
    store = RunStore.open(str(run))
    assert store.info()["config"]["thinking"] is bool(flag)
    row = next(iter(store.db["traces"].rows))
    first = load_tokenizer(model).decode(json.loads(row["ids"])[:row["prompt_len"]], skip_special_tokens=False)
    assert first.endswith(GEN if flag else GEN + NO_THINKING)
