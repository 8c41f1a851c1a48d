"""What a process that trains and generates on the CPU gives back to the machine between the stages of a recipe.

A stage frees gigabytes (a trainer's model, optimizer state and activations; the models eval loaded), but not all
of it leaves the process by itself: objects in reference cycles wait for the collector, and glibc's malloc keeps
freed heap pages for reuse. `give_back` returns them before the next stage starts, so a recipe's peak is its
largest stage's rather than their sum. Within a stage, `bound_heap` keeps large blocks out of the heaps: glibc
raises its threshold for giving a block its own mapping as such blocks are freed (up to 32 MiB), so a training
step's activations come to be carved from heaps that its frees leave fragmented and resident; fixed at
HEAP_BLOCK_MIN, every block that large is mapped on its own and unmapped when freed (2 SFT steps of smollm2-135m on
the demo's 4 longest conversations: 7.58 -> 6.91 GB peak, the same losses). SFT only: every fresh mapping is
faulted in page by page, which generation pays on every decoded token (an eval of the demo's SFT model on its 20
test tasks: 266 s wall and 150 s system time bounded, 138 s and 29 s not, 5.5 vs 6.8 GB peak), so SFT calls
`unbound_heap` when its training ends, for whatever generates after it in the same process. Neither changes a
computed value, only where the bytes live.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc


HEAP_BLOCK_MIN = 1 << 20  # bytes: while training, blocks this large and up get a mapping of their own
HEAP_BLOCK_REUSE = 32 << 20  # bytes: glibc's own ceiling for its threshold (64-bit), where generation's blocks stay

M_MMAP_THRESHOLD = -3  # mallopt's parameter number in glibc's malloc.h


@functools.cache
def _glibc():
    """glibc, whose malloc_trim gives free heap pages back; None elsewhere (musl, macOS): nothing to call."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018 - only glibc has them
    except (OSError, AttributeError):
        return None
    return libc


def bound_heap() -> bool:
    """Map blocks of HEAP_BLOCK_MIN bytes and up on their own (while SFT trains); whether it could be set."""
    return _mmap_threshold(HEAP_BLOCK_MIN)


def unbound_heap() -> bool:
    """After training: blocks below glibc's ceiling come from the heap again, as generation needs."""
    return _mmap_threshold(HEAP_BLOCK_REUSE)


def give_back() -> None:
    """After a stage: collect cycles, and give free heap pages back to the system."""
    gc.collect()
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)


def _mmap_threshold(size: int) -> bool:
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, size))
