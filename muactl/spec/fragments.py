"""SQL fragments (database.fragments): named pieces of SQL that tools' statements paste in as {{name}}."""

from __future__ import annotations

import difflib
import re

from ..errors import Problem
from . import models as m
from .source import Located

FRAGMENT = re.compile(r"\{\{\s*([A-Za-z_]\w*)\s*\}\}")


def expand_fragments(sql: str, fragments: dict[str, str]) -> tuple[str, list[str]]:
    """Paste named SQL fragments where a statement says {{name}} (fragments may use other fragments).
    Returns the statement and the names that are not declared."""
    unknown: list[str] = []
    for _ in range(10):  # nesting depth; a cycle stays unexpanded and fails to compile
        def sub(m: re.Match) -> str:
            if m[1] in fragments:
                return f"({fragments[m[1]]})"
            unknown.append(m[1])
            return m[0]

        new = FRAGMENT.sub(sub, sql)
        if new == sql:
            break
        sql = new
    return sql, unknown


def expand_domain_fragments(domain: m.Domain, doc: Located, problems: list[Problem]) -> m.Domain:
    """Tools' statements with every {{fragment}} pasted in (database.fragments)."""
    fragments = domain.database.fragments
    tools = dict(domain.tools)
    for name, tool in domain.tools.items():
        if not isinstance(tool, m.SqlTool):
            continue

        def expand(sql: str, path: tuple) -> str:
            out, unknown = expand_fragments(sql, fragments)
            for u in unknown:
                close = difflib.get_close_matches(u, list(fragments), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else f"; declared: {', '.join(fragments) or 'none'}"
                problems.append(doc.problem(("tools", name) + path, f"unknown fragment {{{{{u}}}}}{hint}"))
            return out

        checks = [c.model_copy(update={"query": expand(c.query, ("checks", i, "query"))}) for i, c in enumerate(tool.checks)]
        writes = [expand(w, ("writes", i)) for i, w in enumerate(tool.writes)]
        query = expand(tool.query, ("query",)) if tool.query else None
        tools[name] = tool.model_copy(update={"checks": checks, "writes": writes, "query": query})
    return domain.model_copy(update={"tools": tools})
