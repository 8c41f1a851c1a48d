"""The two README commands install exactly the tested set: constraints.txt pins every package, and
each pin satisfies the range pyproject.toml declares for people who install muactl as a library."""

from __future__ import annotations

import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parent.parent


def _pins() -> dict[str, Version]:
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: '{line}' is not an exact pin"
            pins[_norm(name)] = Version(version)
    return pins


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed_requirements() -> list[Requirement]:
    """What `make` installs: the core dependencies, the dev, mcp and openenv extras, and openenv itself
    (installed with --no-deps, see pyproject.toml)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in project["dependencies"] + extras["dev"] + extras["mcp"] + extras["openenv"]
            + ["openenv>=0.10,<0.11"]]


def test_every_dependency_is_pinned_within_its_range():
    pins = _pins()
    for req in _installed_requirements():
        name = _norm(req.name)
        assert name in pins, f"{req.name} is not pinned in constraints.txt (run make lock)"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"constraints.txt pins {req.name}=={pins[name]}, outside pyproject's {req.specifier}"


def test_makefile_installs_with_the_pins():
    makefile = (REPO / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line and "$(PY)" in line]
    assert installs and all("-c constraints.txt" in line for line in installs), installs


@pytest.mark.skipif(Path(sys.prefix).resolve() != (REPO / ".venv").resolve(),
                    reason="checks the environment make builds (.venv); this interpreter is another one")
def test_the_environment_is_the_tested_set():
    pins = _pins()
    drift = []
    for dist in metadata.distributions():
        name = _norm(dist.metadata["Name"])
        if name in pins and Version(dist.version) != pins[name]:
            drift.append(f"{name} {dist.version} (pinned {pins[name]})")
    assert not drift, "installed versions differ from constraints.txt: " + ", ".join(drift)
