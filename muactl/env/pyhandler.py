"""Trusted Python tool handlers, run in a child process so a timeout can really stop them.

The child gets a serialized copy of the episode database, calls `function(db, **args)`, commits,
and sends back the result and the new database bytes; the parent swaps them in only on success,
so a failing or timed-out handler changes nothing.

Children are forked from a starter process, never from muactl's own: muactl runs tool threads, the
event loop and model threads, and a child forked from it inherits whatever lock another thread held
at that moment (allocator, SQLite or import locks), so it can hang before the handler runs
(benchmarks/python_tools.py, 8 tool threads: a trivial handler timed out at 5 s in 7 of 10 runs). The starter is this
file run as a script: one single-threaded process with nothing but the standard library loaded,
started on the first call. multiprocessing's forkserver would do the same but, on Python 3.11, runs
the parent's main script again in every child (for the `muactl` console script, all of muactl.cli:
~0.5 s a call). A child gets the caller's sys.path, working folder and environment with its request,
as a forked child would have had them.

    parent --(socket: request and result pipes)--> starter --fork--> child --(result pipe)--> parent
"""

from __future__ import annotations

import importlib
import json
import os
import pickle
import select
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

_PID = struct.Struct("!q")


def _child(root: str, target: str, args: dict, data: bytes) -> tuple[bool, str, bytes]:
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
        return True, content, db.serialize()
    except BaseException as e:  # report anything the handler raises as the tool's error text
        last = traceback.extract_tb(e.__traceback__)[-1:] if e.__traceback__ else []
        where = f" ({Path(last[0].filename).name}:{last[0].lineno})" if last else ""
        return False, f"{type(e).__name__}: {e}{where}", b""


def run_handler(root: Path, target: str, args: dict[str, Any], data: bytes, timeout: float,
                stop: threading.Event | None = None) -> tuple[bool, str, bytes]:
    """Run the handler in a child; (ok, content, new database bytes). It is killed after `timeout`
    seconds, or as soon as `stop` is set (the episode it serves has ended)."""
    request = pickle.dumps({"path": list(sys.path), "cwd": os.getcwd(), "environ": dict(os.environ),
                            "call": (str(root), target, args, data)})
    request_r, request_w = os.pipe()
    result_r, result_w = os.pipe()
    try:
        pid = _start_child(request_r, result_w)
    except OSError as e:
        os.close(request_w)
        os.close(result_r)
        return False, f"the handler process could not be started: {e}", b""
    finally:
        os.close(request_r)
        os.close(result_w)
    answered = False
    try:
        try:
            with os.fdopen(request_w, "wb") as out:
                out.write(request)
        except BrokenPipeError:
            return False, "the handler process exited without a result", b""
        deadline = time.monotonic() + timeout
        reply, why = _read_reply(result_r, deadline, stop)
        if why:
            return False, why if why != "timed out" else f"timed out after {timeout:g} s", b""
        try:
            answer = pickle.loads(reply)
        except Exception:  # noqa: BLE001 - cut short: the child died mid-write (os._exit, a signal)
            return False, "the handler process exited without a result", b""
        answered = True
        return answer
    finally:
        os.close(result_r)
        if not answered:
            _kill(pid)


def _read_reply(fd: int, deadline: float, stop: threading.Event | None) -> tuple[bytes, str | None]:
    """Everything the child writes, up to its end of the pipe closing; or why it was given up."""
    parts = []
    while True:
        ready, _, _ = select.select([fd], [], [], min(0.05, max(0.0, deadline - time.monotonic())))
        if ready:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(parts), None
            parts.append(chunk)
        elif stop is not None and stop.is_set():
            return b"", "stopped: the episode ended"
        elif time.monotonic() >= deadline:
            return b"", "timed out"


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:  # already gone
        pass


class Starter:
    """The parent's side of the starter process: hands it a request's pipes, gets the child's pid."""

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.proc = subprocess.Popen([sys.executable, "-P", __file__, str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                                     stdin=subprocess.DEVNULL)
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()

    def start(self, request_fd: int, result_fd: int) -> int:
        with self.lock:
            socket.send_fds(self.sock, [b"r"], [request_fd, result_fd])
            reply = b""
            while len(reply) < _PID.size:
                chunk = self.sock.recv(_PID.size - len(reply))
                if not chunk:
                    raise OSError("the handler starter process is gone")
                reply += chunk
        return _PID.unpack(reply)[0]

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


_STARTER: Starter | None = None
_STARTER_LOCK = threading.Lock()


def _start_child(request_fd: int, result_fd: int) -> int:
    """The pid of a new child reading its request from request_fd; a starter that died (killed from
    outside) is replaced once."""
    global _STARTER
    for attempt in (1, 2):
        with _STARTER_LOCK:
            if _STARTER is None or not _STARTER.alive:
                _STARTER = Starter()
            starter = _STARTER
        try:
            return starter.start(request_fd, result_fd)
        except OSError:
            with _STARTER_LOCK:
                if _STARTER is starter:
                    _STARTER = None
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


# ---------------------------------------------------------------- the starter process (this file as a script)


def serve(fd: int) -> None:
    """Fork one child per request until the parent goes (its end of the socket closes)."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped as they exit
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    sock = socket.socket(fileno=fd)
    while True:
        message, fds, _flags, _addr = socket.recv_fds(sock, 1, 2)
        if not message:
            return
        request_fd, result_fd = fds
        pid = os.fork()
        if pid == 0:
            sock.close()
            try:
                _serve_child(request_fd, result_fd)
            finally:
                os._exit(0)
        os.close(request_fd)
        os.close(result_fd)
        sock.sendall(_PID.pack(pid))


def _serve_child(request_fd: int, result_fd: int) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # a handler's own subprocesses are its to wait for
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    with os.fdopen(request_fd, "rb") as f:
        request = pickle.loads(f.read())
    sys.path[:] = request["path"]
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["environ"])
    answer = _child(*request["call"])
    with os.fdopen(result_fd, "wb") as out:
        out.write(pickle.dumps(answer))


if __name__ == "__main__":
    serve(int(sys.argv[1]))
