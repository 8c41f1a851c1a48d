"""Task success. Issue-2 scope: SQL assertions over a final state (used by validate's gold replay)."""

from __future__ import annotations

import json
import math
import sqlite3
from typing import Any

from .spec import models as m


def _normalize(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def values_equal(got: Any, want: Any) -> bool:
    got = _normalize(got)
    if isinstance(want, bool) and isinstance(got, int):
        return bool(got) == want
    if isinstance(got, (int, float)) and isinstance(want, (int, float)) and not isinstance(got, bool):
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-6)
    if isinstance(got, (int, float)) and isinstance(want, str):
        try:
            return math.isclose(float(want), got, rel_tol=1e-9, abs_tol=1e-6)
        except ValueError:
            return False
    return got == want


def assertion_result(env, assertion: m.Assertion) -> tuple[bool, str]:
    """Evaluate one SQL assertion on an environment's state. Returns (holds, explanation)."""
    env.guard.mode = "read"
    try:
        row = env.conn.execute(assertion.query).fetchone()
    except sqlite3.Error as e:
        return False, f"query failed: {e}"
    got = row[0] if row else None
    if "equals" in assertion.model_fields_set:
        ok = values_equal(got, assertion.equals)
        return ok, "" if ok else f"got {got!r}, expected {assertion.equals!r}"
    ok = bool(got)
    return ok, "" if ok else f"got {got!r}, expected a true value"
