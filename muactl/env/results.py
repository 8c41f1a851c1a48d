"""What a tool call returns: ToolResult, and a sql tool's rows turned into it (JSON values only, bounded)."""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..limits import MAX_RESULT_BYTES, MAX_RESULT_ROWS
from .values import fill, typed

if TYPE_CHECKING:
    from ..compile import CompiledTool


@dataclass
class ToolResult:
    content: str
    error: bool = False
    transfer: bool = False  # the builtin transfer tool ends the episode
    changed: bool = False  # the call committed a write

    def to_dict(self) -> dict[str, Any]:
        return {"content": self.content, "error": self.error, "transfer": self.transfer, "changed": self.changed}


def query_result(conn: sqlite3.Connection, tool: CompiledTool, bound: dict, args: dict) -> ToolResult:
    """A sql tool's answer once its checks and writes ran: its query's rows as the declared shape, or its message."""
    spec = tool.spec
    if spec.query is None:
        return ToolResult(fill(spec.message, args) if spec.message else "Done.")
    cur = conn.execute(spec.query, bound)
    names = [d[0] for d in cur.description]
    raw = cur.fetchmany(MAX_RESULT_ROWS + 1)
    bad = result_problem(names, raw)
    if bad:
        return ToolResult(f"Error: {tool.name} {bad}.", error=True)
    types = [tool.result_types.get(n, tool.untyped_result) for n in names]
    rows = [{n: typed(v, t) for n, v, t in zip(names, r, types)} for r in raw]
    if not rows:
        if spec.if_empty:
            return ToolResult("Error: " + fill(spec.if_empty, args), error=True)
        return ToolResult("null" if spec.returns != "rows" else "[]")
    if spec.returns == "value":
        value = next(iter(rows[0].values()))
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    elif spec.returns == "row":
        text = json.dumps(rows[0], ensure_ascii=False)
    else:
        text = json.dumps(rows, ensure_ascii=False)
    if len(text) > MAX_RESULT_BYTES:
        return ToolResult(f"Error: {tool.name} returned {len(text):,} characters, over the "
                          f"{MAX_RESULT_BYTES:,} a tool may return (MAX_RESULT_BYTES); narrow the query.", error=True)
    return ToolResult(text)


def result_problem(names: list[str], rows: list[tuple]) -> str | None:
    """What a tool may return: rows of text, integers, finite reals and nulls (json columns are text and
    come back decoded). None when the rows are fine, else why not, for the tool's error."""
    if len(rows) > MAX_RESULT_ROWS:
        return f"returned more than {MAX_RESULT_ROWS:,} rows, the most a tool may return (MAX_RESULT_ROWS); narrow the query"
    for row in rows:
        for name, v in zip(names, row):
            if isinstance(v, bytes):
                return (f"returned binary data (a BLOB) in column '{name}'; a tool returns text, numbers, "
                        "null or JSON: convert it in SQL (hex(), CAST(... AS TEXT))")
            if isinstance(v, float) and not math.isfinite(v):
                return f"returned a non-finite number ({v}) in column '{name}'; a tool returns JSON numbers only"
    return None
