"""Trusted Python tool handlers run in child processes (env/pyhandler.py): never forked from muactl's
own multi-threaded process, where a child can inherit a lock another thread held and hang. Real
SQLite, a real domain folder with a handler module, real child processes."""

from __future__ import annotations

import concurrent.futures
import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from muactl.domain.open import open_domain
from muactl.env.sandbox import new_env

DOMAIN = """\
name: pyshop
description: A domain with Python tools.
policy: None.
database:
  tables:
    items: {columns: {id: text, name: text}, primary_key: id}
  seed:
    items: [{id: i1, name: apple}]
tools:
  py_add:
    description: Add an item from Python.
    params:
      id: {type: string}
    python: "pyshop_handlers:add"
  py_where:
    description: Which process runs the handler.
    python: "pyshop_handlers:where"
"""
HANDLERS = """\
import os


def add(db, id):
    db.execute("INSERT INTO items (id, name) VALUES (?, 'x')", (id,))
    return {"added": id}


def where(db):
    threads = None
    try:
        status = open(f"/proc/{os.getppid()}/status").read()
        threads = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Threads:")))
    except OSError:
        pass
    return {"pid": os.getpid(), "parent": os.getppid(), "parent_threads": threads, "cwd": os.getcwd()}
"""


@pytest.fixture
def pyshop(tmp_path: Path):
    folder = tmp_path / "pyshop"
    folder.mkdir()
    (folder / "domain.yaml").write_text(DOMAIN)
    (folder / "pyshop_handlers.py").write_text(HANDLERS)
    return open_domain(str(folder), trust=True).compiled


def test_handlers_are_not_forked_from_the_threaded_caller(pyshop, tmp_path, monkeypatch):
    """With other threads running, the handler's parent is not this process but a single-threaded
    starter; the handler still runs in the caller's working folder."""
    stop = threading.Event()
    busy = [threading.Thread(target=stop.wait, daemon=True) for _ in range(4)]
    for t in busy:
        t.start()
    monkeypatch.chdir(tmp_path)
    try:
        env = new_env(pyshop, trust=True)
        result = env.call("py_where", {})
    finally:
        stop.set()
    assert not result.error, result.content
    where = json.loads(result.content)
    assert where["parent"] != os.getpid() and where["cwd"] == str(tmp_path)
    if sys.platform.startswith("linux"):
        assert where["parent_threads"] == 1


def test_untrusted_handlers_still_never_run(pyshop):
    env = new_env(pyshop, trust=False)
    result = env.call("py_where", {})
    assert result.error and "--trust" in result.content


@pytest.mark.slow
def test_many_handler_calls_from_many_threads_all_answer(pyshop):
    """A stress run: 8 tool threads, 48 calls; each gets its handler's answer well inside the tool's
    5 s timeout (fork() from this process hung a trivial handler in such runs)."""
    def one(k: int):
        env = new_env(pyshop, trust=True)
        try:
            return env.call("py_add", {"id": f"n{k}"})
        finally:
            env.close()

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(48)))
    assert [r.content for r in results] == [json.dumps({"added": f"n{k}"}) for k in range(48)]
    assert all(r.changed for r in results) and time.monotonic() - t0 < 120


def test_a_starter_killed_from_outside_is_replaced(pyshop):
    from muactl.env import pyhandler

    env = new_env(pyshop, trust=True)
    assert env.call("py_add", {"id": "a1"}).changed
    starter = pyhandler._STARTER
    starter.proc.kill()
    starter.proc.wait(10)
    result = env.call("py_add", {"id": "a2"})
    assert result.changed and not result.error, result.content
    assert pyhandler._STARTER is not starter and pyhandler._STARTER.alive
