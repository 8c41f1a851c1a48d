"""What a process that trains and generates on the CPU gives back to the machine between the stages of a recipe.

A stage frees gigabytes (a trainer's model, optimizer state and activations; the models eval loaded), but not all
of it leaves the process by itself: objects in reference cycles wait for the collector, and glibc's malloc keeps
freed heap pages for reuse. `release` gives them back before the next stage starts, so a recipe's peak is its
largest stage's rather than their sum. It changes no computed value, only where the bytes live.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


@functools.cache
def _glibc():
    """glibc, whose malloc_trim gives free heap pages back; None elsewhere (musl, macOS): nothing to call."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim  # noqa: B018 - only glibc has it
    except (OSError, AttributeError):
        return None
    return libc


def release() -> None:
    """After a stage: drop the models loaded for generation, collect cycles, and give free heap pages back."""
    from .generation import release_models

    release_models()
    gc.collect()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
