"""`tiny`: a Qwen2-architecture model with random weights and a byte-level BPE tokenizer trained on the domain's
own text (one token per digit, whitespace and punctuation isolated), built in seconds and cached per domain.
For plumbing tests and CPU experiments."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..compile.database import cache_dir
from ..errors import MuactlError
from .chatml import IM_END, SPECIAL_TOKENS
from .formats import detect
from .folder import cached_model, save_atomically
from .precision import import_torch

if TYPE_CHECKING:
    from ..compile import CompiledDomain

TINY_CONFIG = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=2, max_position_embeddings=8192, rope_theta=10000.0, tie_word_embeddings=True)


TINY_VOCAB = 1024


TINY_FORMAT = 3  # bump when the tiny recipe changes, so caches rebuild


def domain_corpus(domain: CompiledDomain) -> list[str]:
    """The text a tiny tokenizer is trained on: everything the domain can put in a conversation."""
    from .chatml import TOOLS_FORMAT, TOOLS_PREAMBLE, compact_tool
    from ..compile.prompt import DEFAULT_GUIDELINES
    from ..spec.library import find_domain
    from ..spec.tasks import task_files

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


def build_tiny(domains: list[CompiledDomain], out: Path, seed: int = 0) -> Path:
    """Write a tiny random-init Qwen2 model and its tokenizer, trained on the domains' text, to `out` (atomically)."""
    torch = import_torch()
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = build_tokenizer([text for d in domains for text in domain_corpus(d)])
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


def tiny_path(domain: CompiledDomain | list[CompiledDomain]) -> Path:
    """The tiny model of a domain, or of several (a run over a mix: one tokenizer covers all their text)."""
    domains = domain if isinstance(domain, list) else [domain]
    hashes = ":".join(d.content_hash for d in domains)
    digest = hashlib.sha256(f"{TINY_FORMAT}:{hashes}:{json.dumps(TINY_CONFIG, sort_keys=True)}".encode()).hexdigest()[:16]
    name = "+".join(d.name for d in domains)
    return cached_model(cache_dir() / "models" / f"tiny-{name}-{digest}", lambda out: build_tiny(domains, out))
