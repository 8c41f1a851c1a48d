"""A model folder on disk: its card (muactl.json: chat and tool format), its tokenizer, saved atomically and
cached once."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from ..errors import FormatError, ModelError
from ..locks import locked
from .chatml import TOOL_FORMATS
from .formats import ChatFormat, detect


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
        fmt = tokenizer.muactl_format = detect_format(tokenizer, read_card(origin) if origin else {}, origin)
    if tools and fmt.refusal:
        raise ModelError(f"model {getattr(tokenizer, 'name_or_path', '') or '?'}: {fmt.refusal}")
    return fmt


def detect_format(tokenizer, card: dict[str, Any], where) -> ChatFormat:
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


def mark_card(out: Path | str, **fields: Any) -> None:
    """Add fields to a model folder's card (`muactl train user` marks its checkpoints {"plays": "user"})."""
    card = {**read_card(out), **fields}
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
    tok.muactl_format = detect_format(tok, card, path)  # muactl's own cards: ChatML; others keep their template
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok
