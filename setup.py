# The package list lives here because pyproject.toml cannot combine `packages.find` with the mapped packages
# that carry the built-in domains (domains/ and tasks/ at the repo's top level become muactl/_builtin/...).
# Every data folder is listed as a (namespace) package: setuptools warns, once per folder, about importable
# folders it was not told about, which made `pip install -e .` print hundreds of lines.
from setuptools import find_namespace_packages, setup

SKIP = ["*__pycache__*", "*.egg-info*"]


def mapped(prefix: str, folder: str) -> list[str]:
    return [prefix] + [f"{prefix}.{p}" for p in find_namespace_packages(where=folder, exclude=SKIP)]


setup(packages=find_namespace_packages(include=["muactl", "muactl.*"], exclude=SKIP)
      + mapped("muactl._builtin.domains", "domains") + mapped("muactl._builtin.tasks", "tasks"))
