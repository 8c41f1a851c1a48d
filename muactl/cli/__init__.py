"""The muactl command line. Each command composes its inputs, makes one library call and formats the
result; every MuactlError becomes its message on stderr and exit code 2 (app.py). Heavy libraries (torch,
transformers, trl, litellm) are imported inside the commands that need them.

One module per command group; importing them registers their commands, in the order `--help` lists them."""

from __future__ import annotations

from . import domains, episodes, train, runs, share, chat, tasks  # noqa: F401  (registers the commands)
from .app import app

__all__ = ["app", "run"]


def run() -> None:  # pragma: no cover - console entry for `python -m muactl`
    app()
