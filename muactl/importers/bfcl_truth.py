"""BFCL multi-turn facts both sides share: how a gold call string is read, and the digests of the recorded
ground truth.

`benchmarks/bfcl_record.py` runs BFCL's own classes and checker (its code, offline) on every entry's gold
calls, turn by turn, and writes tests/data/bfcl/truth.json: per gold call a digest of its output bytes, per
turn a digest of the involved classes' public attributes (what BFCL's state check compares), and BFCL's own
multi_turn_checker verdict on the gold trajectory. muactl's import (importers/bfcl.py) reads the same call
strings with `parse_call` and its verifier compares the same digests. Plain standard library: the recorder
runs under BFCL's checkout, the verifier under muactl.
"""

from __future__ import annotations

import ast
import hashlib
import json
from typing import Any

from ..errors import CallUnreadable
from .acebench_truth import literal

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
# the function-doc file of each class (bfcl_eval/data/multi_turn_func_doc/<file>.json)
CLASS_DOCS = {"GorillaFileSystem": "gorilla_file_system", "MathAPI": "math_api", "MessageAPI": "message_api",
              "TwitterAPI": "posting_api", "TicketAPI": "ticket_api", "TradingBot": "trading_bot",
              "TravelAPI": "travel_booking", "VehicleControlAPI": "vehicle_control"}


def digest(text: str) -> str:
    """A short digest of an output's exact bytes."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def state_digest(state: dict[str, dict[str, Any]]) -> str:
    """Class -> public attributes, as BFCL's state check compares them: dict order does not count (Python's ==),
    list order does; dict keys as JSON writes them (12345 -> "12345")."""
    plain = json.loads(json.dumps(state))
    return digest(json.dumps(plain, sort_keys=True))


def parse_call(text: str, params: list[str]) -> tuple[str, dict[str, Any]]:
    """`name(a, k=v, ...)` as (name, args): positional arguments named in the order of the function's
    parameters (`params`, its doc's), values literals only (nothing is evaluated)."""
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise CallUnreadable(f"not a call: {getattr(e, 'msg', e)}") from None
    if not isinstance(tree, ast.Call) or not isinstance(tree.func, ast.Name):
        raise CallUnreadable("expected name(arguments)")
    if len(tree.args) > len(params):
        raise CallUnreadable(f"{tree.func.id} takes {len(params)} arguments, the call gives {len(tree.args)}")
    args = {p: literal(a) for p, a in zip(params, tree.args)}
    for k in tree.keywords:
        if k.arg is None or k.arg in args:
            raise CallUnreadable(f"{tree.func.id}: argument {k.arg or '**'} given twice or unpacked")
        args[k.arg] = literal(k.value)
    return tree.func.id, args
