# The package list lives here only because pyproject.toml cannot combine `packages.find` with the
# mapped packages that carry the built-in domains (domains/ and tasks/ at the repo's top level).
from setuptools import find_packages, setup

setup(packages=find_packages(include=["muactl", "muactl.*"]) + ["muactl._builtin.domains", "muactl._builtin.tasks"])
