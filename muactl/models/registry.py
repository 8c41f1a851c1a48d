"""Model registry for local policies and users: a model name to a local folder.

- `tiny`: built from a domain's own text in seconds (tiny.py), for plumbing tests and CPU experiments.
- `smollm2-135m`: SmolLM2-135M-Instruct converted once from its GGUF (smollm2.py), the embedded default.
- anything else: a Hugging Face id or a local checkpoint folder (runs/<id>/checkpoint-final).

muactl's own models (tiny, smollm2-135m and checkpoints trained from them) are rendered with the one
ChatML + Hermes chat template of chatml.py; any other checkpoint keeps its own chat template and
tool-call format (formats.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ModelError
from .smollm2 import smollm2_path
from .tiny import tiny_path

if TYPE_CHECKING:
    from ..compile import CompiledDomain


# what a folder needs before transformers can load it: any one name per part
CHECKPOINT_PARTS = {
    "weights": ("*.safetensors", "pytorch_model*.bin"),
    "tokenizer": ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json"),
}


def resolve(ref: str, domain: CompiledDomain | list[CompiledDomain] | None = None) -> Path | str:
    """A model reference -> a local folder (or an HF id, for machines with a hub); `tiny` is built from the
    domain's text, or from several domains' (a run over a mix)."""
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
        missing = [part for part, names in CHECKPOINT_PARTS.items()
                   if not any(next(path.glob(name), None) for name in names)]
        if missing:  # caught here, a half-copied folder fails before a run folder exists, not after it
            raise ModelError(f"{path} is not a complete model checkpoint (no {' and no '.join(missing)} file)")
        return path
    if ref.count("/") == 1 and not ref.startswith((".", "/")):
        return ref  # a Hugging Face id
    raise ModelError(f"unknown model '{ref}': use tiny, smollm2-135m, a checkpoint folder or a Hugging Face id")
