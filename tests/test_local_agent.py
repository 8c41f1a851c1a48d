"""Local policies (hf:, vllm:) keep token-exact trajectories.

Real bank episodes, the real scripted user, the real tiny tokenizer; the model is faked only at its
boundary (`generate(prompts, max_new_tokens, temperature, seed) -> [(ids, logprobs)]`), where a
scripted "model" says what the oracle would say, as Hermes text, token by token. The real tiny model
(random weights) is used only for reproducibility.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import types
import zlib
from types import SimpleNamespace

import pytest

from muactl.models.chatml import GENERATION_PROMPT, IM_END, IM_START, render
from muactl.episode.agents.local import HFAgent, VLLMAgent
from muactl.episode.agents.oracle import OracleAgent
from muactl.episode.user import ScriptedUser, first_person
from muactl.errors import MuactlError
from muactl.episode.rollout import Job, RolloutConfig, run_many
from muactl.domain.open import open_domain

# ---------------------------------------------------------------- fixtures and the fake model


@pytest.fixture(scope="module")
def bank():
    return open_domain("bank")


@pytest.fixture(scope="module")
def tools(bank, tok):
    """The tool list as the tiny model's prompt shows it (its model card says compact)."""
    from muactl.models.chatml import prompt_tools
    from muactl.models.folder import tool_format_of

    assert tool_format_of(tok) == "compact"
    return prompt_tools([t.openai_schema() for t in bank.compiled.agent_tools()], "compact")


@pytest.fixture(scope="module")
def tok(bank):
    from muactl.models.folder import load_tokenizer
    from muactl.models.tiny import tiny_path

    return load_tokenizer(tiny_path(bank.compiled))


def hermes(content: str, calls: list[dict] | None = None) -> str:
    """An assistant turn's body exactly as the template writes it, with its <|im_end|>."""
    return render([{"role": "assistant", "content": content, "tool_calls": calls or []}])[len(GENERATION_PROMPT):-1]


def oracle_script(task, compiled) -> list[str]:
    """What the oracle says, turn by turn, against the scripted user (it reads only the consent)."""
    # the user said yes to every proposed change
    agent, ctx = OracleAgent(), SimpleNamespace(state={}, task=task, domain=compiled,
                                                messages=[{"role": "user", "content": "Yes, go ahead."}])
    out = []
    for _ in range(len(task.task.expect.actions) * 2 + 3):
        reply = asyncio.run(agent.act(ctx))
        out.append(hermes(reply.content, reply.tool_calls))
    return out


class FakeLM:
    """The model boundary of HFAgent: the real tokenizer, scripted replies, fake logprobs.

    The prompt tells it which task it is in (the user's opening words) and how many turns it has
    taken (assistant headers minus the greeting and the generation prompt)."""

    def __init__(self, tokenizer, tasks, compiled, overrides: dict[str, list[str]] | None = None):
        self.tokenizer = tokenizer
        self.eos_id = tokenizer.convert_tokens_to_ids(IM_END)
        self.scripts = {t.task.id: oracle_script(t, compiled) for t in tasks}
        self.scripts.update(overrides or {})
        # (opening words, what the user says when asked): tasks can share the first but not both
        self.keys = [(first_person(t.task.user.reason), first_person(t.task.user.known or ""), t.task.id) for t in tasks]
        self.produced: list[tuple[list[int], list[int], list[float]]] = []  # (prompt, ids, logprobs)

    def reply(self, prompt: list[int]) -> str:
        text = self.tokenizer.decode(prompt, skip_special_tokens=False)
        assert text.endswith(GENERATION_PROMPT)
        opening = text.split(f"{IM_START}user\n", 1)[1].split(IM_END, 1)[0]
        turn = text.count(GENERATION_PROMPT) - 2
        same = [(known, task_id) for first, known, task_id in self.keys if first == opening]
        told = [task_id for known, task_id in same if f"{IM_START}user\n{known}{IM_END}" in text]
        replies = {self.say(task_id, turn) for task_id in told or [task_id for _, task_id in same]}
        assert len(replies) == 1, (opening, replies)  # before the user says who they are, tasks agree
        return replies.pop()

    def say(self, task_id: str, turn: int) -> str:
        script = self.scripts[task_id]
        return script[min(turn, len(script) - 1)]

    def generate(self, prompts, max_new_tokens, temperature=0.0, seed=None):
        out = []
        for p in prompts:
            ids = self.tokenizer.encode(self.reply(p), add_special_tokens=False)[:max_new_tokens]
            lps = [-((zlib.crc32(bytes(str(p), "ascii")) + 7 * i) % 1000 + 1) / 1000 for i in range(len(ids))]
            self.produced.append((list(p), ids, lps))
            out.append((ids, lps))
        return out


def run(agent, bank, tasks, concurrency=32, **cfg):
    jobs = [Job(t, 0) for t in tasks]
    eps = asyncio.run(run_many(jobs, bank.compiled, agent, ScriptedUser, RolloutConfig(**cfg), concurrency=concurrency))
    return {e.task_id: e for e in eps}


def generated_turns(lm: FakeLM, ep) -> list[tuple[list[int], list[int], list[float]]]:
    """The generate results that belong to this episode, in order: their prompt and output are in its
    trace (episodes of tasks that open alike share their first prompt and reply; keep one)."""
    ids = ep.trace.ids
    mine = {len(p): (p, g, lp) for p, g, lp in lm.produced if ids[:len(p)] == p and ids[len(p):len(p) + len(g)] == g}
    return [mine[k] for k in sorted(mine)]


def as_generated(tok, ep, turns, tools) -> str:
    """The conversation up to the last generated turn, rendered with each generated assistant turn
    replaced by the text the model produced (what the trace holds; identical for well-formed turns)."""
    msgs, raw = [], iter(tok.decode(g, skip_special_tokens=False).removesuffix(IM_END) for _, g, _ in turns)
    last = max(i for i, m in enumerate(ep.messages) if m["role"] == "assistant" and not m.get("fixed"))
    for m in ep.messages[: last + 1]:
        if m["role"] == "assistant" and not m.get("fixed"):
            m = {"role": "assistant", "content": next(raw)}
        msgs.append(m)
    return render(msgs, tools)


def check_trace(tok, lm, ep, tools, well_formed=True):
    """Every invariant of a token-exact trajectory."""
    tr = ep.trace
    assert len(tr.ids) == len(tr.mask) == len(tr.logprobs)
    turns = generated_turns(lm, ep)
    assert len(turns) == ep.turns > 0

    # mask: 1 exactly on what the model produced, logprobs stored there and only there
    expect_mask, expect_lp = [0] * len(tr.ids), [0.0] * len(tr.ids)
    for p, g, lp in turns:
        expect_mask[len(p):len(p) + len(g)] = [1] * len(g)
        expect_lp[len(p):len(p) + len(g)] = lp
    assert tr.mask == expect_mask
    assert tr.logprobs == expect_lp
    assert tr.prompt_len == len(turns[0][0])

    # decoding the ids reproduces the rendered conversation up to the last generated turn
    text = tok.decode(tr.ids, skip_special_tokens=False)
    assert text + "\n" == as_generated(tok, ep, turns, tools)
    if well_formed:  # the model said exactly what the template renders: ids equal a fresh tokenization
        last = max(i for i, m in enumerate(ep.messages) if m["role"] == "assistant")
        rendered = render(ep.messages[: last + 1], tools)
        assert text + "\n" == rendered
        assert tr.ids == tok.encode(rendered[:-1], add_special_tokens=False)

    # walk the turns: only assistant bodies (never the fixed greeting) carry mask 1
    im_start = tok.convert_tokens_to_ids(IM_START)
    starts = [i for i, t in enumerate(tr.ids) if t == im_start and not tr.mask[i]] + [len(tr.ids)]
    roles = []
    for a, b in itertools.pairwise(starts):
        turn = tok.decode(tr.ids[a:b], skip_special_tokens=False)
        role = turn[len(IM_START):].split("\n", 1)[0]
        roles.append(role)
        head = len(tok.encode(f"{IM_START}{role}\n", add_special_tokens=False))
        assert not any(tr.mask[a:a + head])
        if role != "assistant" or len(roles) == 2:  # system, user and tool turns, and the greeting
            assert not any(tr.mask[a:b]), f"a {role} turn carries mask 1: {turn!r}"
    assert roles[:3] == ["system", "assistant", "user"] and roles[-1] == "assistant"
    assert roles.count("assistant") == ep.turns + 1
    return turns


# ---------------------------------------------------------------- token-exact trajectories, batching


@pytest.fixture(scope="module")
def batch_run(bank, tok):
    tasks = [t for t in bank.tasks if t.split == "test"][:16] + [t for t in bank.tasks if t.split == "train"][:16]
    lm = FakeLM(tok, tasks, bank.compiled)
    agent = HFAgent("tiny", lm=lm, max_new_tokens=256)
    return lm, agent, tasks, run(agent, bank, tasks, concurrency=32)


def test_scripted_model_completes_real_episodes(batch_run):
    _lm, _agent, _tasks, eps = batch_run
    assert len(eps) == 32
    for ep in eps.values():
        assert ep.termination == "user_stop", (ep.task_id, ep.termination, ep.error)
        assert ep.reward == 1.0, (ep.task_id, ep.breakdown)
        assert ep.tool_calls == sum(1 for m in ep.messages if m["role"] == "tool")


def test_trace_is_the_rendered_conversation_and_mask_is_the_model(batch_run, tok, tools):
    lm, _agent, _tasks, eps = batch_run
    for ep in eps.values():
        turns = check_trace(tok, lm, ep, tools)
        # the model's <|im_end|> is its own: sampled, so mask 1
        for p, g, _ in turns:
            assert g[-1] == lm.eos_id and ep.trace.mask[len(p) + len(g) - 1] == 1
        # the last thing in the conversation (the user's goodbye) was never given to the model
        assert ep.messages[-1]["role"] == "user"
        assert ep.messages[-1]["content"] not in tok.decode(ep.trace.ids, skip_special_tokens=False)


def test_concurrent_episodes_share_generate_calls(batch_run):
    lm, agent, _tasks, eps = batch_run
    sizes = agent.batcher.batch_sizes
    turns = sum(e.turns for e in eps.values())
    assert sum(sizes) == turns == len(lm.produced)
    assert sizes[0] == 32
    assert len(sizes) * 4 <= turns, f"{len(sizes)} generate calls for {turns} agent turns: {sizes}"
    # most turns were generated beside others; counted in turns, not calls: a straggler turn alone between two
    # full batches (CI once saw [32, 32, 1, 32, 1, 32, ...]) is one turn, not half the sharing
    assert sum(s for s in sizes if s > 1) > turns / 2, sizes


def test_malformed_output_becomes_an_error_turn(bank, tok, tools):
    tasks = [t for t in bank.tasks if t.split == "test"][:4]
    base = {t.task.id: oracle_script(t, bank.compiled) for t in tasks}
    a, b, c, d = (t.task.id for t in tasks)
    garbage = tok.decode([tok.convert_tokens_to_ids(IM_START), 5, 77, tok.convert_tokens_to_ids("<tool_call>"), 300, 9])
    overrides = {
        a: [base[a][0], "<tool_call>{bad json" + IM_END, *base[a][1:]],
        b: [base[b][0], '<tool_call>\n{"name": "find_customer", "arguments": {"name": "x"}\n</tool_call>' + IM_END, *base[b][1:]],
        c: [base[c][0], 'Sure.</tool_call><tool_call>{"name": "find_customer", "arguments": [1]}</tool_call>' + IM_END, *base[c][1:]],
        d: [base[d][0], garbage + IM_END, *base[d][1:]],
    }
    lm = FakeLM(tok, tasks, bank.compiled, overrides)
    eps = run(HFAgent("tiny", lm=lm), bank, tasks)
    for task_id in (a, b, c):
        ep = eps[task_id]
        assert ep.termination == "user_stop" and ep.reward == 1.0, (ep.termination, ep.error, ep.breakdown)
        bad = [m for m in ep.messages if m.get("malformed")]
        assert len(bad) == 1 and ep.tool_errors == 1
        i = ep.messages.index(bad[0])
        error_turn = ep.messages[i + 1]
        assert error_turn["role"] == "tool" and "could not be parsed" in error_turn["content"]
        # the agent saw it: the next prompt holds the error as a tool response
        text = tok.decode(ep.trace.ids, skip_special_tokens=False)
        assert f"{IM_START}user\n<tool_response>\nError: your reply could not be parsed" in text
        check_trace(tok, lm, ep, tools, well_formed=False)
    ep = eps[d]  # random special tokens: whatever parse makes of it, the episode goes on and the trace holds
    assert ep.termination != "agent_error", ep.error
    check_trace(tok, lm, ep, tools, well_formed=False)


def test_generation_cut_at_max_new_tokens_is_closed(bank, tok, tools):
    task = next(t for t in bank.tasks if t.split == "test")
    script = oracle_script(task, bank.compiled)
    long_ask = "What is your name? " + "I need it to find your accounts and " * 20
    cut = [long_ask, *script[1:]]  # the question survives the cut, so the scripted user answers and we go on
    lm = FakeLM(tok, [task], bank.compiled, {task.task.id: cut})
    max_new = max(len(tok.encode(s, add_special_tokens=False)) for s in script)
    assert len(tok.encode(long_ask, add_special_tokens=False)) > max_new
    ep = run(HFAgent("tiny", lm=lm, max_new_tokens=max_new), bank, [task])[task.task.id]
    assert ep.termination == "user_stop" and ep.reward == 1.0, (ep.termination, ep.error, ep.breakdown)
    turns = check_trace(tok, lm, ep, tools, well_formed=False)
    p, g, _ = turns[0]
    assert len(g) == max_new and g[-1] != lm.eos_id
    end = len(p) + len(g)
    tr = ep.trace
    # closed as the template closes a turn, <|im_end|> and newline, none of it sampled
    close = tok.encode(f"{IM_END}\n{IM_START}user\n", add_special_tokens=False)
    assert tr.ids[end:end + len(close)] == close
    assert not any(tr.mask[end:end + len(close)])
    assert ep.messages[3]["content"].startswith("What is your name?")


# ---------------------------------------------------------------- tokenizer reload


def test_reloaded_tiny_tokenizer_splits_like_the_trained_one(bank, tok, tmp_path):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from muactl.models.folder import load_tokenizer

    from muactl.models.tiny import domain_corpus, tiny_path

    path = tiny_path(bank.compiled)
    raw = Tokenizer.from_file(str(path / "tokenizer.json"))  # the `tokenizers` object as trained and saved
    samples = domain_corpus(bank.compiled) + [
        "Move 150 from a778 to a295.", "  two  spaces\n\n\tand tabs ", 'max "max" {"amount": 1234567890}',
        "cafe\u0301 (decomposed) vs caf\u00e9 \u2013 \u201cq\u201d \U0001f600", "don't I'll YOU'RE", render([
            {"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [
                {"name": "transfer_funds", "arguments": {"from_account": "a1", "to_account": "a2", "amount": 30}}]}]),
    ]
    tok.save_pretrained(tmp_path / "again")
    again = load_tokenizer(tmp_path / "again")
    for s in samples:
        want = raw.encode(s, add_special_tokens=False).ids
        assert tok.encode(s, add_special_tokens=False) == want, s[:80]
        assert again.encode(s, add_special_tokens=False) == want, s[:80]
        assert tok.decode(want, skip_special_tokens=False) == s
    pieces = tok.tokenize("a778 has 1205 max")
    assert pieces == ["a", "7", "7", "8", "Ġ", "has", "Ġ", "1", "2", "0", "5", "Ġ", "max"]
    assert type(tok).__name__ in ("PreTrainedTokenizerFast", "TokenizersBackend")

    # AutoTokenizer picks the class from config.json (qwen2); with transformers 5 that class rebuilds the
    # pre-tokenizer (Qwen regex, NFC), so decomposed accents come back re-encoded. load_tokenizer avoids it.
    auto = AutoTokenizer.from_pretrained(path)
    s = "cafe\u0301"
    if type(auto) is not type(tok):
        assert auto.decode(auto.encode(s, add_special_tokens=False)) in (s, "caf\u00e9")


# ---------------------------------------------------------------- the real tiny model: reproducibility


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_same_seed_same_trajectories_with_the_real_tiny_model(bank, temperature):
    tasks = [t for t in bank.tasks if t.split == "test"][:8]
    traces = []
    for _ in range(2):
        agent = HFAgent("tiny", temperature=temperature, max_new_tokens=24)
        eps = run(agent, bank, tasks, max_turns=3, seed=7)
        traces.append({k: (e.trace.ids, e.trace.mask, e.trace.logprobs, e.termination) for k, e in eps.items()})
        for e in eps.values():
            tr = e.trace
            assert e.termination != "agent_error", e.error
            assert sum(tr.mask) > 0 and len(tr.ids) == len(tr.mask) == len(tr.logprobs)
            assert all(lp <= 0.0 for lp, m in zip(tr.logprobs, tr.mask) if m)
            assert all(lp == 0.0 for lp, m in zip(tr.logprobs, tr.mask) if not m)
    assert traces[0] == traces[1]


# ---------------------------------------------------------------- vLLM (faked at the engine)


def fake_vllm(lm: FakeLM, calls: list):
    mod = types.ModuleType("vllm")

    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    class LLM:
        def __init__(self, model, tokenizer=None, gpu_memory_utilization=0.9, **kw):
            self.model = model

        def generate(self, prompts, params, use_tqdm=True):
            calls.append((len(prompts), params.kw))
            outs = []
            for (ids, lps) in lm.generate([p["prompt_token_ids"] for p in prompts], params.kw["max_tokens"]):
                steps = [{t: SimpleNamespace(logprob=lp, rank=1)} for t, lp in zip(ids, lps)]
                outs.append(SimpleNamespace(outputs=[SimpleNamespace(token_ids=tuple(ids), logprobs=steps)]))
            return outs

    mod.LLM, mod.SamplingParams = LLM, SamplingParams
    return mod


def test_vllm_agent_with_a_fake_engine(bank, tok, tools, monkeypatch):
    from muactl.episode.agents import make_agent

    task = next(t for t in bank.tasks if t.split == "test")
    lm, calls = FakeLM(tok, [task], bank.compiled), []
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(lm, calls))
    agent = make_agent("vllm:tiny", max_new_tokens=200)
    assert isinstance(agent, VLLMAgent)
    ep = run(agent, bank, [task], seed=3)[task.task.id]
    assert ep.termination == "user_stop" and ep.reward == 1.0, (ep.termination, ep.error, ep.breakdown)
    check_trace(tok, lm, ep, tools)
    assert calls and all(kw["stop_token_ids"] == [lm.eos_id] and kw["max_tokens"] == 200 and kw["temperature"] == 0.0
                         and kw["logprobs"] == 0 for _, kw in calls)


def test_vllm_missing_is_a_clear_error(monkeypatch):
    from muactl.episode.agents import make_agent

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError, as when it is not installed
    with pytest.raises(MuactlError) as err:
        make_agent("vllm:Qwen/Qwen3-0.6B")
    assert "pip install 'muactl[vllm]'" in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__


def test_tool_format_follows_the_model_card(bank, tmp_path):
    """Loaded by muactl or by someone else (verl), a model is prompted as its card says; no card: JSON."""
    import shutil

    from transformers import PreTrainedTokenizerFast

    from muactl.models.folder import MODEL_CARD, load_tokenizer, tool_format_of

    from muactl.models.tiny import tiny_path

    path = tiny_path(bank.compiled)
    assert tool_format_of(load_tokenizer(path)) == "compact"
    assert tool_format_of(PreTrainedTokenizerFast.from_pretrained(path)) == "compact"
    plain = tmp_path / "plain"
    shutil.copytree(path, plain)
    (plain / MODEL_CARD).unlink()
    assert tool_format_of(load_tokenizer(plain)) == "json"
    assert tool_format_of(PreTrainedTokenizerFast.from_pretrained(plain)) == "json"


# ---------------------------------------------------------------- a prompt past the model's context


def refusing_long_prompts(lm):
    """The real tiny model's generate, refusing a batch that holds a prompt past its context, as vLLM does
    (transformers on a CPU would run past the positions it was built for instead)."""
    seen, real = [], lm.generate

    def generate(prompts, max_new_tokens, temperature=0.0, seed=None):
        seen.append([len(p) for p in prompts])
        if any(len(p) + max_new_tokens > lm.context_length for p in prompts):
            raise ValueError("The decoder prompt is longer than the maximum model length")
        return real(prompts, max_new_tokens, temperature, seed)

    return generate, seen


def test_one_prompt_past_the_context_fails_alone_and_the_batch_goes_on(bank):
    from muactl.errors import ContextOverflow
    from muactl.models.batcher import Batcher
    from muactl.models.generation import LocalLM, load_model

    tiny = load_model("tiny", bank.compiled)
    assert tiny.context_length == 8192  # its config's max_position_embeddings
    lm = LocalLM.from_model(tiny.model, tiny.tokenizer, prefix_cache=False)
    lm.context_length = 200  # a model built for 200 positions
    generate, seen = refusing_long_prompts(lm)
    batcher = Batcher(generate, context=lm.context_length)
    short, long = [5] * 100, [6] * 195

    async def both():
        return await asyncio.gather(batcher.submit(short, 8, 0.0, 1), batcher.submit(long, 8, 0.0, 2),
                                    return_exceptions=True)

    got_short, got_long = asyncio.run(both())
    assert isinstance(got_long, ContextOverflow) and "195 tokens plus 8 new ones exceeds the model's context of 200" in str(got_long)
    assert seen == [[100]]  # the batch went on without it
    assert len(got_short[0]) == len(got_short[1]) and 1 <= len(got_short[0]) <= 8


def test_an_episode_past_the_context_is_the_agents_scored_failure_not_an_outage(bank):
    from muactl.models.generation import LocalLM, load_model

    tiny = load_model("tiny", bank.compiled)
    lm = LocalLM.from_model(tiny.model, tiny.tokenizer, prefix_cache=False)
    tasks = [t for t in bank.tasks if t.split == "test"][:3]
    lm.context_length = 1000  # bank's opening prompt alone is longer
    generate, seen = refusing_long_prompts(lm)
    lm.generate = generate
    eps = run(HFAgent("tiny", lm=lm, max_new_tokens=16), bank, tasks, max_turns=2)
    for e in eps.values():  # the agent's scored failure: not an outage, so never played again on resume
        assert e.termination == "agent_error" and e.counted and e.outcome == "failure" and e.reward == 0.0
        assert "context overflow: a prompt of" in e.error and "exceeds the model's context of 1000" in e.error
    assert seen == []  # refused before generating
