"""The recorded ground truth of τ²-bench's own tools, and how muactl's results are compared with it.

`benchmarks/tau2_record.py` runs τ²'s Python tools on every gold action of every task and writes
`tests/data/tau2/<domain>.json`: per action the error text (or null) and a digest of the output, per
task τ²'s final database hash and a digest of each changed record. Only digests are kept, so no τ²
data is copied into this repository. This module is plain standard library: the recorder (which runs
under τ²'s dependencies) and the verifier (under muactl's) share it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def tau2_hash(dump: Any) -> str:
    """τ²'s database hash: sha256 of json.dumps(model_dump, sort_keys=True, default=str)."""
    return hashlib.sha256(json.dumps(dump, sort_keys=True, default=str).encode()).hexdigest()


def _plain(value: Any) -> Any:
    # "equal as parsed JSON" in Python's sense: 2.0 == 2, so integral floats are written as ints
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def digest(value: Any) -> str:
    """A short digest of a JSON value, independent of key order and of 2 vs 2.0."""
    text = json.dumps(_plain(value), sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def output_digest(content: str) -> str:
    """Digest of a tool's text output, parsed as JSON when it is JSON (a plain string otherwise)."""
    try:
        value = json.loads(content)
    except (ValueError, TypeError):
        value = content
    return digest(value)


def changed_records(before: dict, after: dict) -> dict[str, str]:
    """'table/key' -> digest of the record, for every record added, changed or removed (None)."""
    out: dict[str, str] = {}
    for table in sorted(set(before) | set(after)):
        old, new = before.get(table), after.get(table)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            for key in sorted(set(old) | set(new), key=str):
                if old.get(key) != new.get(key):
                    out[f"{table}/{key}"] = digest(new[key]) if key in new else None
        else:
            out[table] = digest(new)
    return out
