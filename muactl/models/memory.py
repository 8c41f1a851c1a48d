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
`unbound_heap` when its training ends, for whatever generates after it in the same process. GRPO, which
generates and trains in turn, instead gives the freed heap pages back after every step (`step_memory`): without it
its resident memory grew by about 1 GB a step (issue 26's bank runs, smollm2-135m, 16 groups a step: 21.6 and 22.5
GB peaks after 16 steps on a 24 GB machine; 4 steps: 8.6 -> 12.5 GB after the steps and a 12.7 GB peak without,
2.9 -> 3.3 GB and 9.5 GB with, the same CPU time; benchmarks/results/anchor26.md). MUACTL_GIVE_BACK=0 turns it
off, to measure it. None of them changes a computed value, only where the bytes live.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import os
import resource


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


def give_back_each_step() -> bool:
    return os.environ.get("MUACTL_GIVE_BACK", "1") != "0"  # as MUACTL_CPU_BF16: only 0 turns it off


def step_memory() -> dict[str, float]:
    """After a training step: give freed memory back (unless MUACTL_GIVE_BACK=0), then the process's resident
    memory now and at its peak so far, in GB, as a step's metrics."""
    if give_back_each_step():
        give_back()
    now = resident_bytes()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux updates it lazily: it may lag `now`
    return {"memory/rss_gb": now / 1e9, "memory/peak_rss_gb": max(now, peak) / 1e9}


def resident_bytes() -> int:
    """Resident memory now (Linux's /proc; 0 where there is none)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _mmap_threshold(size: int) -> bool:
    libc = _glibc()
    return libc is not None and bool(libc.mallopt(M_MMAP_THRESHOLD, size))
