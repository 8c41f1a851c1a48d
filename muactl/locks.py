"""Advisory file locks between muactl processes (flock): the OS releases a lock when its holder dies,
so a process killed with kill -9 never leaves a stale lock behind. Where flock does not exist
(Windows) locking is skipped; the callers stay correct without it, only less polite."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

NO_LOCKS = -1  # the descriptor returned where the platform has no flock


def acquire(path: Path, wait: bool = True) -> int | None:
    """Lock `path` (created if missing) for this process and note who holds it in the file. Returns a
    descriptor for release(), or None when `wait` is False and another process holds the lock."""
    try:
        import fcntl
    except ImportError:
        return NO_LOCKS
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} (muactl {' '.join(sys.argv[1:])[:200]})".encode())
    return fd


def holder(path: Path) -> str:
    """Who holds the lock on `path`, as its holder wrote it."""
    try:
        return path.read_text(errors="replace").strip() or "another muactl process"
    except OSError:
        return "another muactl process"


def release(fd: int) -> None:
    if fd != NO_LOCKS:
        os.close(fd)  # closing the descriptor drops the lock


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the lock on `path` for the block, waiting for another holder to finish first."""
    fd = acquire(path)
    try:
        yield
    finally:
        release(fd)
