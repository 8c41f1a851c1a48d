"""The model cache is shared by processes: two that need the same entry at once (two `muactl train`
converting smollm2-135m, or building the same tiny model) take turns on a lock, one builds, and the
entry appears whole (built aside and renamed into place). The conversion is faked cheaply in the first
test; the second builds the real tiny model in two processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

BUILD = textwrap.dedent("""\
    import os, sys, time
    from pathlib import Path
    from muactl.models.folder import cached_model

    out, log = Path(sys.argv[1]), Path(sys.argv[2])

    def convert(out):  # a slow conversion that writes its folder aside, then renames it into place
        with open(log, "a") as f:
            f.write(f"build {os.getpid()}\\n")
        tmp = out.parent / f".tmp-{os.getpid()}"
        tmp.mkdir()
        time.sleep(1.0)
        (tmp / "weights.bin").write_bytes(b"w" * 1000)
        os.replace(tmp, out)

    print(cached_model(out, convert))
    """)


def _run_twice(code: str, *args: str, env=None) -> list[subprocess.CompletedProcess]:
    procs = [subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def test_two_processes_needing_one_cache_entry_build_it_once(tmp_path):
    out, log = tmp_path / "models" / "smollm2-135m", tmp_path / "builds.log"
    results = _run_twice(BUILD, str(out), str(log))
    for r in results:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == str(out)
    assert len(log.read_text().splitlines()) == 1  # the second waited, then found it built
    assert (out / "weights.bin").stat().st_size == 1000


@pytest.mark.slow
def test_two_processes_building_the_tiny_model_at_once(tmp_path):
    import os

    code = textwrap.dedent("""\
        import time
        import muactl.models.tiny as tiny
        from muactl.domain.open import open_domain

        real = tiny.save_atomically

        def slow(model, tokenizer, out):  # widen the window in which both processes are building
            time.sleep(1.5)
            return real(model, tokenizer, out)

        tiny.save_atomically = slow
        print(tiny.tiny_path(open_domain("bank", with_tasks=False).compiled))
        """)
    env = dict(os.environ, MUACTL_CACHE=str(tmp_path / "cache"))
    results = _run_twice(code, env=env)
    for r in results:
        assert r.returncode == 0, r.stderr[-2000:]
    assert results[0].stdout == results[1].stdout
    entry = results[0].stdout.strip()
    assert (tmp_path / "cache" / "models").is_dir() and os.path.isfile(os.path.join(entry, "config.json"))
