"""Output paths the user names (-o): checked, and their folder made, before any work starts, so a bad
path is one clear error instead of a failure after minutes of episodes (or a half-made run folder)."""

from __future__ import annotations

import os
from pathlib import Path

from .errors import UsageError


def prepare_output(path: Path | str, option: str = "-o") -> Path:
    """Make the folder that will hold `path` (a file, or an output folder that is created later) and
    check that it is writable; a UsageError naming the option and the path otherwise."""
    path = Path(path)
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot write {option} {path}: {e.strerror or e} ({e.filename or parent})") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {option} {path}: the folder {parent} is not writable")
    return path
