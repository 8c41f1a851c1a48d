"""Local policies (transformers on CPU/GPU, vLLM on GPUs) with token-exact trajectories and batching.

Each episode's TokenTrace grows as the conversation does: messages the template renders (system,
greeting, user and tool turns) are tokenized segment by segment with mask 0; the generation prompt
(`<|im_start|>assistant\\n` in ChatML) is mask 0; the tokens the policy samples, its end-of-turn token
included, are appended as generated with mask 1 and their logprobs. Nothing generated is ever
re-tokenized. The model's chat format (agents/formats.py) says how turns render and parse.

Batching: every episode waiting for an agent turn puts its prompt in one queue (models/batcher.py), which
runs one generate call for all of them.
"""

from __future__ import annotations

import asyncio
from abc import abstractmethod
from typing import Any

from ...models.batcher import Batcher
from .base import Agent, AgentReply


class LocalAgent(Agent):
    """A policy that samples token ids itself and keeps the token-exact trajectory. Subclasses say how
    a turn's ids are generated (`_complete`); rendering, the trace and parsing are shared."""

    keeps_tokens = True

    def __init__(self, model_ref: str, temperature: float = 0.0, max_new_tokens: int = 256, thinking: bool = False):
        self.model_ref = model_ref
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.thinking = thinking  # model.thinking: the template's enable_thinking, where it has one
        self.tokenizer = None
        self.format = None  # ChatFormat: how turns render and parse, and the end-of-turn ids

    @abstractmethod
    async def _complete(self, prompt: list[int], ctx) -> tuple[list[int], list[float] | None]:
        """The next turn's ids (ending in an end-of-turn token unless cut) and their sampling logprobs."""

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def extend_trace(self, ctx) -> list[int]:
        """Append template ids for every message since the last generation; return the prompt ids."""
        trace = ctx.trace
        if trace.rendered_upto == 0:
            segments = self.format.opening(ctx.messages, ctx.tools)
        else:  # after our last turn, whose end token (sampled, or added after a cut) is in the trace
            segments = self.format.continuation(ctx.messages, trace.rendered_upto)
        for text in segments:
            trace.add(self._encode(text), sampled=False)
        return list(trace.ids)

    @property
    def call_syntax(self) -> str:
        return self.format.call_syntax if self.format else Agent.call_syntax

    async def act(self, ctx) -> AgentReply:
        await self.prepare(ctx.domain)
        prompt = self.extend_trace(ctx)
        ids, logprobs = await self._complete(prompt, ctx)
        trace = ctx.trace
        trace.add(ids, sampled=True, logprobs=logprobs)
        if not ids or ids[-1] not in self.format.end_ids:  # cut at max_new_tokens: close the turn as the template would
            trace.add([self.format.end_ids[0]], sampled=False)
        trace.rendered_upto = len(ctx.messages) + 1  # the engine appends our assistant message next
        parsed = self.format.parse(self._decode(ids))
        if self.format.family != "chatml":  # some templates check ids (Mistral's: 9 letters or digits)
            parsed.tool_calls = [dict(c, id=f"c{len(ctx.messages):04d}{i:04d}") for i, c in enumerate(parsed.tool_calls)]
        return AgentReply(parsed.content, parsed.tool_calls, parsed.error, reasoning=parsed.reasoning,
                          usage={"prompt_tokens": len(prompt), "completion_tokens": len(ids)})

    def describe(self) -> dict[str, Any]:
        return {"agent": self.name, "model": self.model_ref, "temperature": self.temperature,
                "max_new_tokens": self.max_new_tokens, "thinking": self.thinking}

    def agent_format(self):
        """The tokenizer's chat format with this agent's thinking switch (a copy: a user simulator on the
        same tokenizer keeps its own)."""
        from dataclasses import replace

        from ...models.folder import chat_format

        return replace(chat_format(self.tokenizer), thinking=self.thinking)


class BatchedAgent(LocalAgent):
    """A local model loaded on first use, whose concurrent episodes share generate calls (Batcher)."""

    def __init__(self, model_ref: str, temperature: float = 0.0, max_new_tokens: int = 256, max_batch: int = 64,
                 thinking: bool = False):
        super().__init__(model_ref, temperature=temperature, max_new_tokens=max_new_tokens, thinking=thinking)
        self.max_batch = max_batch
        self.batcher: Batcher | None = None
        self._loading: asyncio.Lock | None = None

    @abstractmethod
    def _load(self, domain) -> None:
        """Load the model and tokenizer, then set self.tokenizer, self.format and self.batcher."""

    async def prepare(self, domain) -> None:
        if self.batcher is None:
            self._loading = self._loading or asyncio.Lock()
            async with self._loading:  # many episodes start at once; load the model only once
                if self.batcher is None:
                    await asyncio.to_thread(self._load, domain)

    async def _complete(self, prompt: list[int], ctx) -> tuple[list[int], list[float] | None]:
        return await self.batcher.submit(prompt, self.max_new_tokens, self.temperature, ctx.seed)


class HFAgent(BatchedAgent):
    """transformers generate on CPU or GPU."""

    def __init__(self, model_ref: str, lm=None, **kw):
        super().__init__(model_ref, **kw)
        self.name = f"hf:{model_ref}"
        self.lm = lm

    def _load(self, domain) -> None:
        if self.lm is None:
            from ...models.generation import load_model

            self.lm = load_model(self.model_ref, domain)
        self.tokenizer = self.lm.tokenizer
        self.format = self.agent_format()
        self.batcher = Batcher(self.lm.generate, self.max_batch, getattr(self.lm, "context_length", None),
                               stop=getattr(self.lm, "stop", None))


class VLLMAgent(BatchedAgent):
    """vLLM on GPUs (optional extra `muactl[vllm]`). Same trajectories as HFAgent, through vLLM's engine."""

    def __init__(self, model_ref: str, engine=None, gpu_memory_utilization: float = 0.5, **kw):
        super().__init__(model_ref, **kw)
        self.name = f"vllm:{model_ref}"
        self.engine = engine
        self.gpu_memory_utilization = gpu_memory_utilization

    def _load(self, domain) -> None:
        vllm = import_vllm()
        from ...models.folder import load_tokenizer
        from ...models.registry import resolve

        path = resolve(self.model_ref, domain)
        self.tokenizer = load_tokenizer(path)
        self.format = self.agent_format()
        if self.engine is None:
            self.engine = vllm.LLM(model=str(path), tokenizer=str(path), gpu_memory_utilization=self.gpu_memory_utilization)
        self._vllm = vllm
        # vLLM refuses a prompt past max_model_len, which would fail the whole batch: checked per prompt first
        config = getattr(getattr(self.engine, "llm_engine", None), "model_config", None)
        self.batcher = Batcher(self._generate, self.max_batch, getattr(config, "max_model_len", None))

    def _generate(self, prompts: list[list[int]], max_new_tokens: int, temperature: float, seed: int | None):
        params = self._vllm.SamplingParams(temperature=temperature, max_tokens=max_new_tokens, seed=seed,
                                           stop_token_ids=list(self.format.end_ids), logprobs=0)
        outs = self.engine.generate([{"prompt_token_ids": p} for p in prompts], params, use_tqdm=False)
        results = []
        for o in outs:
            comp = o.outputs[0]
            ids = list(comp.token_ids)
            lps = [float(step[t].logprob) if step and t in step else 0.0 for t, step in zip(ids, comp.logprobs or [{}] * len(ids))]
            results.append((ids, lps))
        return results


def import_vllm():
    """vLLM is an optional GPU extra: a clear message instead of an ImportError deep in a run."""
    try:
        import vllm
    except ImportError:
        from ...errors import MuactlError

        raise MuactlError("vllm is not installed. On a GPU machine: pip install 'muactl[vllm]'; "
                          "on a CPU use an hf:<model> agent instead.") from None
    return vllm
