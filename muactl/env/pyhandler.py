"""Trusted Python tool handlers, run in a child process so a timeout can really stop them.

The child gets a serialized copy of the episode database, calls `function(db, **args)`, commits,
and sends back the result and the new database bytes; the parent swaps them in only on success,
so a failing or timed-out handler changes nothing.

Children come from a forkserver, not from fork(): muactl's process runs tool threads, the event loop
and model threads, and a child forked from it inherits whatever lock another thread held at that
moment (the import lock, allocator and logging locks), so it can hang before the handler runs
(benchmarks/python_tools.py hung that way in 2 of 3 runs with 8 tool threads). The forkserver is one
single-threaded process, started on the first call with this module already imported, so a child
costs a fork of that small process (benchmarks/python_tools.py; README, Limits).
"""

from __future__ import annotations

import importlib
import json
import multiprocessing as mp
import sqlite3
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any


def _child(root: str, target: str, args: dict, data: bytes, conn_out) -> None:
    try:
        sys.path.insert(0, root)
        module_name, func_name = target.split(":")
        func = getattr(importlib.import_module(module_name), func_name)
        db = sqlite3.connect(":memory:")
        db.deserialize(data)
        db.row_factory = sqlite3.Row
        result = func(db, **args)
        db.commit()
        content = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, default=str)
        conn_out.send((True, content, db.serialize()))
    except BaseException as e:  # report anything the handler raises as the tool's error text
        last = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
        where = f" ({Path(last[0].filename).name}:{last[0].lineno})" if last else ""
        conn_out.send((False, f"{type(e).__name__}: {e}{where}", b""))


def run_handler(root: Path, target: str, args: dict[str, Any], data: bytes, timeout: float,
                stop: threading.Event | None = None) -> tuple[bool, str, bytes]:
    """Run the handler in a child; (ok, content, new database bytes). It is killed after `timeout`
    seconds, or as soon as `stop` is set (the episode it serves has ended)."""
    ctx = _context()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(str(root), target, args, data, send), daemon=True)
    proc.start()
    send.close()
    try:
        deadline = time.monotonic() + timeout
        while not recv.poll(min(0.05, max(0.0, deadline - time.monotonic()))):
            if stop is not None and stop.is_set():
                return False, "stopped: the episode ended", b""
            if time.monotonic() >= deadline:
                return False, f"timed out after {timeout:g} s", b""
        return recv.recv()
    except EOFError:
        return False, "the handler process exited without a result", b""
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(1)
        recv.close()


def _context():
    """Where handler children come from: the forkserver (spawn where there is none)."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])  # takes effect when the server starts (the first call)
    return ctx
