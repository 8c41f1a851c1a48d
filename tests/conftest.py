"""Shared fixtures. Tests use real SQLite and the real built-in domains; only models/LLMs are faked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# No network at import or in tests; caches and installed packs go to a throwaway folder.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(autouse=True, scope="session")
def _isolated_home(tmp_path_factory):
    root = tmp_path_factory.mktemp("muactl-home")
    old = {k: os.environ.get(k) for k in ("MUACTL_CACHE", "MUACTL_HOME")}
    os.environ["MUACTL_CACHE"] = str(root / "cache")
    os.environ["MUACTL_HOME"] = str(root / "home")
    yield root
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture
def ctrl_c_interrupts():
    """SIGINT raises KeyboardInterrupt, as in a terminal, during the test. A shell that starts pytest in the
    background (`cmd &`, nohup) leaves SIGINT ignored, and then a Ctrl-C test measures the launcher, not muactl."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.fixture
def project(tmp_path: Path, monkeypatch) -> Path:
    """An empty project folder as the working directory, with `muactl init clinic` already run."""
    from muactl.scaffold import scaffold

    monkeypatch.chdir(tmp_path)
    scaffold("clinic", tmp_path)
    return tmp_path


@pytest.fixture
def clinic(project):
    """The scaffolded clinic domain, opened (loaded, checked, compiled, tasks loaded)."""
    from muactl.domain.open import open_domain

    return open_domain("clinic")


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch) -> Path:
    """An empty working directory whose runs/ folder is private to the test, with progress bars off."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("MUACTL_NO_PROGRESS", "1")
    return tmp_path


# Opened built-in domains, shared within a test module (a module may register tool players on it).
@pytest.fixture(scope="module")
def bank():
    from muactl.domain.open import open_domain

    return open_domain("bank")


@pytest.fixture(scope="module")
def retail():
    from muactl.domain.open import open_domain

    return open_domain("retail")
