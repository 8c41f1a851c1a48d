"""LocalLM: a local model that generates for many prompts at once, reusing the keys and values of their
shared prefix (the system prompt and tools), and load_model, which keeps one per model and device."""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ModelError
from .batcher import Batcher
from .chatml import split_reasoning
from .folder import chat_format, load_tokenizer
from .precision import import_torch, training_precision
from .registry import resolve

if TYPE_CHECKING:
    from ..compile import CompiledDomain

PREFIX_CACHE_ENTRIES = 8  # the shared system prompt and tools of a few domains/batch shapes, plus recent prompts


PREFIX_CACHE_TOKENS = 65_536  # all entries together: bounds memory for bigger models and long sequential prompts


MIN_PREFIX = 32  # shorter shared prefixes are not worth a forward pass and a cache entry


def prefix_cache_default() -> bool:
    return os.environ.get("MUACTL_PREFIX_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def context_length(model) -> int | None:
    """Positions the model was built for (its config's max_position_embeddings, or GPT-2's n_positions);
    None when the config names none."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _common_length(a, b, limit: int) -> int:
    n = 0
    while n < limit and a[n] == b[n]:
        n += 1
    return n


class LocalLM:
    """A causal LM and its tokenizer on CPU or GPU, with batched generation that returns token ids
    and their logprobs (never re-tokenized).

    Prefix cache: the key/value states of the longest prefix shared by a batch's prompts (the system
    prompt and tool schemas, ~1,600 tokens in bank, for a one-prompt batch everything but its last
    token) are computed once and kept for later calls, so a turn only runs the model over its new
    tokens. Entries are keyed by their token ids, bounded (PREFIX_CACHE_ENTRIES, PREFIX_CACHE_TOKENS,
    least recently used first out) and dropped whenever the weights change (`invalidate_cache`, or
    automatically when a parameter is modified in place, as optimizers do). Off with
    `prefix_cache=False` or MUACTL_PREFIX_CACHE=0; results are the same either way up to float
    rounding (see tests/test_prefix_cache.py)."""

    def __init__(self, path: Path | str, device: str | None = None, dtype: str | None = None,
                 prefix_cache: bool | None = None):
        torch = import_torch()
        from transformers import AutoModelForCausalLM

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if device == "cuda" else torch.float32)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device)
        model.eval()
        self._attach(model, load_tokenizer(path), path, prefix_cache)
        # float32 weights on a CPU with native bf16: run the matmuls in bf16, as training does
        self.autocast = device == "cpu" and not dtype and training_precision(None)[1]

    @classmethod
    def from_model(cls, model, tokenizer, prefix_cache: bool | None = None) -> LocalLM:
        """Wrap a model already in memory (GRPO generates with the policy being trained; it wraps it
        afresh for every rollout, so no cached prefix outlives a weight update)."""
        self = cls.__new__(cls)
        self._attach(model, tokenizer, getattr(model, "name_or_path", "policy"), prefix_cache)
        return self

    def _attach(self, model, tokenizer, path, prefix_cache: bool | None = None) -> None:
        import inspect

        self.path = path
        self.model = model
        self.tokenizer = tokenizer
        self.device = str(next(model.parameters()).device)
        self.format = chat_format(tokenizer, tools=False)  # agents check for tools themselves; users need none
        self.end_ids = list(self.format.end_ids)
        self.eos_id = self.end_ids[0]
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        self.prefix_cache = (prefix_cache_default() if prefix_cache is None else prefix_cache) and full_attention_only(model)
        # transformers 5 renamed past_key_values to cache (the old name still works there, with a warning)
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self._prefixes: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self._weights_seen: tuple | None = None
        self.prefix_stats = {"hits": 0, "misses": 0, "reused_tokens": 0, "computed_tokens": 0}
        self.autocast = False
        # an agent and an LLM user on the same model generate from two threads: one at a time (the prefix
        # cache is not thread-safe, and two batches would only fight over the same cores)
        self._generating = threading.Lock()
        self._stop = threading.Event()  # set by stop(): the generate call in flight ends at its next token
        self._batchers: dict[str, tuple[Any, Batcher]] = {}
        self.context_length = context_length(model)

    def batcher(self, role: str, max_batch: int = 64) -> Batcher:
        """The queue that batches one role's turns (an LLM user's) on this model in the running event loop:
        shared by every episode, though each makes its own user object."""
        loop = asyncio.get_running_loop()
        held = self._batchers.get(role)
        if held is None or held[0] is not loop:
            held = self._batchers[role] = (loop, Batcher(self.generate, max_batch, self.context_length, stop=self.stop))
        return held[1]

    def _no_grad(self):
        """no_grad, plus bf16 autocast where it was chosen at load time."""
        import contextlib

        torch = import_torch()
        stack = contextlib.ExitStack()
        stack.enter_context(torch.no_grad())
        if self.autocast:
            stack.enter_context(torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16))
        return stack

    def invalidate_cache(self) -> None:
        """Forget every cached prefix (call after changing the weights)."""
        self._prefixes.clear()
        self._weights_seen = None

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def generate(self, prompts: list[list[int]], max_new_tokens: int, temperature: float = 0.0,
                 seed: int | None = None) -> list[tuple[list[int], list[float]]]:
        """Batch generation; each result is (new ids up to and including the end-of-turn token, logprobs).

        Rows are laid out [shared prefix][padding][rest of the prompt] (plain left padding when no prefix
        is cached): the prefix's cached keys/values then line up with every row, and since generate
        derives position ids from the attention mask (cumsum), each token keeps the position it has
        in its unpadded prompt."""
        with self._generating:
            self._stop.clear()
            return self._generate(prompts, max_new_tokens, temperature, seed)

    def stop(self) -> None:
        """End the generate call in flight at its next token (its results are cut short): a Ctrl-C then
        waits for one token, not for a whole batch of turns."""
        self._stop.set()

    def _generate(self, prompts, max_new_tokens, temperature, seed):
        torch = import_torch()
        past, shared = self._shared_prefix(prompts) if self.prefix_cache else (None, 0)
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            rest = len(p) - shared
            input_ids[i, :shared] = torch.tensor(p[:shared], dtype=torch.long)
            attention[i, :shared] = 1
            input_ids[i, width - rest:] = torch.tensor(p[shared:], dtype=torch.long)
            attention[i, width - rest:] = 1
        kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, eos_token_id=self.end_ids, pad_token_id=self.pad_id,
                                      output_scores=True, return_dict_in_generate=True,
                                      stopping_criteria=self._stopping())
        if past is not None:
            kwargs[self._cache_kw] = past
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            if seed is not None:
                torch.manual_seed(seed)
        else:
            kwargs.update(do_sample=False)
        with self._no_grad():
            out = self.model.generate(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device), **kwargs)
            scores = self.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        results = []
        new = out.sequences[:, width:].tolist()
        for row, lp in zip(new, scores.tolist()):
            ids, lps = [], []
            for tok, logp in zip(row, lp):
                ids.append(tok)
                lps.append(float(logp))
                if tok in self.end_ids:
                    break
            results.append((ids, lps))
        return results

    def _stopping(self):
        from transformers import StoppingCriteria, StoppingCriteriaList

        stop = self._stop

        class Stopped(StoppingCriteria):
            def __call__(self, input_ids, scores, **kw):
                torch = import_torch()
                return torch.full((input_ids.shape[0],), stop.is_set(), dtype=torch.bool, device=input_ids.device)

        return StoppingCriteriaList([Stopped()])

    # ------------------------------------------------ prefix cache

    def _shared_prefix(self, prompts: list[list[int]]):
        """(a cache holding the batch's shared prefix, repeated per row; its length) or (None, 0)."""
        # every row keeps at least one token out of the cache: generate needs an input to score the next token
        shared = min(len(p) for p in prompts) - 1
        first = prompts[0]
        for p in prompts[1:]:
            shared = _common_length(first, p, shared)
        if shared < MIN_PREFIX:
            return None, 0
        self._check_weights()
        key = tuple(first[:shared])
        kv = self._prefixes.get(key)
        if kv is not None:
            self._prefixes.move_to_end(key)
            self.prefix_stats["hits"] += 1
            self.prefix_stats["reused_tokens"] += shared
        else:
            # a stored prefix that starts this one (the system prompt, or this episode's previous turn)
            # saves the forward pass over its tokens: keys/values of a causal model never look ahead
            base, start = None, 0
            for stored, stored_kv in self._prefixes.items():
                m = _common_length(stored, key, min(len(stored), shared))
                if m > start:
                    base, start = stored_kv, m
            kv = self._compute_prefix(key, base, start)
            self.prefix_stats["misses"] += 1
            self.prefix_stats["reused_tokens"] += start
            self.prefix_stats["computed_tokens"] += shared - start
            self._prefixes[key] = kv
            while len(self._prefixes) > 1 and (len(self._prefixes) > PREFIX_CACHE_ENTRIES
                                               or sum(map(len, self._prefixes)) > PREFIX_CACHE_TOKENS):
                self._prefixes.popitem(last=False)
        return self._new_cache([(k.expand(len(prompts), -1, -1, -1), v.expand(len(prompts), -1, -1, -1)) for k, v in kv]), shared

    def _check_weights(self) -> None:
        # in-place updates (optimizer steps, load_state_dict) bump tensors' version counters; swapped
        # tensors change data pointers: either way cached keys/values were made by other weights
        try:
            seen = tuple((p.data_ptr(), p._version) for p in self.model.parameters())
        except RuntimeError:  # inference tensors keep no version: such weights are not being trained
            seen = tuple(p.data_ptr() for p in self.model.parameters())
        if seen != self._weights_seen:
            self._prefixes.clear()
            self._weights_seen = seen

    def _new_cache(self, layers):
        from transformers import DynamicCache

        cache = DynamicCache()
        for i, (k, v) in enumerate(layers):
            cache.update(k, v, i)
        return cache

    def _compute_prefix(self, ids: tuple[int, ...], base, start: int) -> list[tuple[Any, Any]]:
        torch = import_torch()
        if base is not None and start == len(ids):  # a longer stored prefix holds all of it
            return [(k[:, :, :start], v[:, :, :start]) for k, v in base]
        past = self._new_cache([(k[:, :, :start], v[:, :, :start]) for k, v in base] if base is not None else [])
        with self._no_grad():
            out = self.model(input_ids=torch.tensor([ids[start:]], dtype=torch.long, device=self.device),
                             position_ids=torch.arange(start, len(ids), device=self.device).unsqueeze(0),
                             use_cache=True, logits_to_keep=1, **{self._cache_kw: past})
        cache = out.cache if getattr(out, "cache", None) is not None else out.past_key_values
        if hasattr(cache, "layers"):
            return [(layer.keys, layer.values) for layer in cache.layers]
        return list(zip(cache.key_cache, cache.value_cache))

    def chat(self, messages: list[dict], max_new_tokens: int = 128, temperature: float = 0.0, seed: int | None = None) -> str:
        out, _ = self.generate([self.prompt_ids(messages)], max_new_tokens, temperature, seed)[0]
        return self.reply_text(out)

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """A chat's messages as the ids the model continues (its template, with the generation prompt)."""
        return self.encode(self.format.render(messages, add_generation_prompt=True))

    def reply_text(self, ids: list[int]) -> str:
        """What the model said, without its end token or its reasoning (a thinking user or judge)."""
        return split_reasoning(self.format.strip_end(self.decode(ids)))[0].strip()


def full_attention_only(model) -> bool:
    """Sliding-window layers keep a rolling cache that a stored prefix cannot simply be copied into."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "is_encoder_decoder", False):
        return False
    types = getattr(cfg, "layer_types", None)
    if types and any(t != "full_attention" for t in types):
        return False
    return not (getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None))


_LOADED: dict[tuple, LocalLM] = {}


def load_model(ref: str, domain: CompiledDomain | None = None, device: str | None = None) -> LocalLM:
    path = resolve(ref, domain)
    key = (str(path), device)
    if key not in _LOADED:
        try:
            _LOADED[key] = LocalLM(path, device)
        except OSError as e:
            raise ModelError(f"could not load model {ref} ({path}): {e}") from None
    return _LOADED[key]


def release_models() -> None:
    """Forget every model load_model kept (and its cached prefixes): a train recipe's eval stage loads the base,
    SFT and GRPO models in turn, and each would otherwise stay in memory for the rest of the process."""
    for lm in _LOADED.values():
        lm.invalidate_cache()
    _LOADED.clear()
