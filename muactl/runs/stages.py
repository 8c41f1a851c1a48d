"""The stages of a `muactl train` run (runs/<id>/stages.json): which finished, and their eval rows."""

from __future__ import annotations

import json
from typing import Any

from .store import RunStore


def stages_state(store: RunStore) -> dict[str, Any]:
    f = store.path / "stages.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def save_stages(store: RunStore, state: dict[str, Any]) -> None:
    tmp = store.path / "stages.json.tmp"
    tmp.write_text(json.dumps(state, indent=2))
    tmp.replace(store.path / "stages.json")


def before_after_table(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"stage": label, **row} for label, row in state.get("eval", {}).items()]
