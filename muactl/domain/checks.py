"""Checks of a domain spec on its own: tables and references, SQL statements against the real schema,
views, parameters and placeholders."""

from __future__ import annotations

import difflib
import re
import sqlite3

from ..compile import changelog
from ..compile.arguments import ArgumentValidator, pattern_error
from ..compile.database import schema_connection
from ..compile.sql import Guard, explain, param_names, unknown_name
from ..errors import Problem
from ..spec import models as m
from ..spec.load import DomainSpec

_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")


def hint(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"; did you mean '{close[0]}'?" if close else f"; declared: {', '.join(options) or 'none'}"


def check_domain(spec: DomainSpec) -> list[Problem]:
    d, doc = spec.domain, spec.doc
    problems: list[Problem] = []
    tables = d.database.tables
    for tname, table in tables.items():
        base = ("database", "tables", tname)
        if tname.startswith(changelog.PREFIX):
            problems.append(doc.problem(base, f"table names starting with '{changelog.PREFIX}' are muactl's own "
                                        "(its change log); rename the table"))
        for col in table.pk_columns():
            if col not in table.columns:
                problems.append(doc.problem(base + ("primary_key",), f"primary key column '{col}' is not declared{hint(col, table.columns)}"))
        for col, ref in table.foreign_keys.items():
            if col not in table.columns:
                problems.append(doc.problem(base + ("foreign_keys", col), f"column '{col}' is not declared{hint(col, table.columns)}"))
            other, _, other_col = ref.partition(".")
            if not other_col:
                problems.append(doc.problem(base + ("foreign_keys", col), f"'{ref}' should be 'table.column'"))
            elif other not in tables:
                problems.append(doc.problem(base + ("foreign_keys", col), f"references undefined table '{other}'{hint(other, tables)}"))
            elif other_col not in tables[other].columns:
                problems.append(doc.problem(base + ("foreign_keys", col), f"references undefined column '{ref}'{hint(other_col, tables[other].columns)}"))
    from ..compile.randomdb import check_generators

    problems += check_generators(spec)
    conn = schema_or_none(d, tolerate=bool(problems))
    if conn is None:
        return problems
    guard = Guard(set(tables))
    guard.install(conn)
    view_problems = _check_views(spec, conn, guard)
    problems += view_problems
    if view_problems:
        conn.close()
        return problems  # tools read the views
    for i, sql in enumerate(d.database.after_write):
        error = explain(conn, guard, sql, "write")
        if not error and sql.split(None, 1)[0].upper() not in ("INSERT", "UPDATE", "DELETE", "REPLACE", "WITH"):
            error = "only INSERT, UPDATE or DELETE on declared tables is allowed here"
        if not error and param_names(sql):  # nothing binds them after an arbitrary tool's call
            error = f"after_write statements take no parameters (:{param_names(sql)[0]}); read values from the tables"
        if error:
            problems.append(doc.problem(("database", "after_write", i), error, word=unknown_name(error)))
    for name, tool in d.tools.items():
        if isinstance(tool, m.SqlTool):
            problems.extend(_check_sql_tool(spec, name, tool, conn, guard))
        elif isinstance(tool, (m.PythonTool, m.SimulatedTool)):
            problems.extend(_check_param_specs(spec, name, tool))
    conn.close()
    return problems


def schema_or_none(d: m.Domain, tolerate: bool) -> sqlite3.Connection | None:
    """The empty schema to compile SQL against; with `tolerate`, None when the table declarations have
    problems (reported elsewhere) that keep it from being built (a key naming an undeclared column)."""
    try:
        return schema_connection(d, views=False)
    except Exception:
        if not tolerate:
            raise
        return None


def _check_views(spec: DomainSpec, conn, guard: Guard) -> list[Problem]:
    """Each view must be a parameterless SELECT over the tables and the views declared above it."""
    from ..compile.database import create_view

    out = []
    for name, select in spec.domain.database.views.items():
        path = ("database", "views", name)
        if not re.match(m.IDENT, name):
            out.append(spec.doc.problem(path, f"view name {name!r} must be an identifier (letters, digits, underscores)"))
            continue
        if name in spec.domain.database.tables:
            out.append(spec.doc.problem(path, f"'{name}' is already a table; give the view another name"))
            continue
        error = explain(conn, guard, select, "read")
        if not error and param_names(select):
            error = f"a view takes no parameters (:{param_names(select)[0]}); filter it in the tool's query instead"
        if error:
            out.append(spec.doc.problem(path, error, word=unknown_name(error)))
            continue
        guard.mode = "off"
        try:
            create_view(conn, name, select)
        finally:
            guard.mode = "read"
    return out


def _columns(conn, sql: str) -> list[str] | None:
    """Result column names of a SELECT, read from the empty schema database (None if it cannot run)."""
    try:
        cur = conn.execute(f"SELECT * FROM ({sql}) LIMIT 0", {p: None for p in param_names(sql)})
    except Exception:
        return None
    return [d[0] for d in cur.description]


def _check_param_specs(spec: DomainSpec, name: str, tool) -> list[Problem]:
    out = []
    for pname, p in tool.params.items():
        out.extend(_check_param(spec, ("tools", name, "params", pname), p))
    return out


def _check_param(spec: DomainSpec, path: tuple, p: m.Param) -> list[Problem]:
    # nested items/properties too: a bad pattern there would crash jsonschema when arguments are validated
    out = []
    if p.pattern is not None and pattern_error(p.pattern):
        out.append(spec.doc.problem(path + ("pattern",), pattern_error(p.pattern)))
    if p.type == "array" and p.items is None:
        out.append(spec.doc.problem(path, "an array param needs 'items' (the schema of each element)"))
    if p.items is not None:
        out.extend(_check_param(spec, path + ("items",), p.items))
    for key, sub in (p.properties or {}).items():
        out.extend(_check_param(spec, path + ("properties", key), sub))
    if not out and "default" in p.model_fields_set and p.default is not None:
        # the default is passed to the tool as if the model had sent it, so it must fit the schema too
        schema = {k: v for k, v in p.json_schema().items() if k != "default"}
        for err in ArgumentValidator(schema).iter_errors(p.default):
            out.append(spec.doc.problem(path + ("default",), f"default does not fit the param: {err.message}"))
            break
    return out


def _check_sql_tool(spec: DomainSpec, name: str, tool: m.SqlTool, conn, guard: Guard) -> list[Problem]:
    doc = spec.doc
    base = ("tools", name)
    problems = _check_param_specs(spec, name, tool)
    used: set[str] = set()
    statements = [(("checks", i, "query"), c.query, "read") for i, c in enumerate(tool.checks)]
    statements += [(("writes", i), s, "write") for i, s in enumerate(tool.writes)]
    if tool.query:
        statements.append((("query",), tool.query, "read"))
    if not tool.query and not tool.writes:
        problems.append(doc.problem(base, "a sql tool needs a 'query' (to read) or 'writes' (to change data), or both"))
    bound_by = {i: dict(c.each or {}) for i, c in enumerate(tool.checks)}  # names `each` binds, per check
    for i, each in bound_by.items():
        for elem, array in each.items():
            where = base + ("checks", i, "each", elem)
            if array not in tool.params:
                problems.append(doc.problem(where, f"'{array}' is not a declared param{hint(array, tool.params)}"))
            elif tool.params[array].type != "array":
                problems.append(doc.problem(where, f"'{array}' is a {tool.params[array].type} param; each walks arrays"))
            else:
                used.add(array)
            if elem in tool.params:
                problems.append(doc.problem(where, f"'{elem}' is already a param; name the element differently"))
    for path, sql, mode in statements:
        error = explain(conn, guard, sql, mode)
        if error:
            problems.append(doc.problem(base + path, error, word=unknown_name(error)))
        local = bound_by.get(path[1], {}) if path[0] == "checks" else {}
        for p in param_names(sql):
            used.add(p)
            if p not in tool.params and p not in local:
                problems.append(doc.problem(base + path, f"parameter :{p} is used but not declared under params{hint(p, tool.params)}"))
    texts = [(("checks", i, "error"), c.error, bound_by[i], _columns(conn, c.query) or [])
             for i, c in enumerate(tool.checks)]
    texts += [((k,), getattr(tool, k), {}, []) for k in ("if_empty", "message") if getattr(tool, k)]
    for path, text, local, computed in texts:
        for p in _PLACEHOLDER.findall(text):
            used.add(p)
            if p not in tool.params and p not in local and p not in computed[1:]:
                known = list(tool.params) + list(local) + computed[1:]
                also = " (nor an each name or a column the check computes)" if path[0] == "checks" else ""
                problems.append(doc.problem(base + path, f"placeholder {{{p}}} is not a declared param{hint(p, known)}{also}"))
    if tool.types and tool.query:
        columns = _columns(conn, tool.query)
        for col in tool.types:
            if columns is not None and col not in columns:
                problems.append(doc.problem(base + ("types", col), f"the query returns no column '{col}'{hint(col, columns)}"))
    for p in tool.params:
        if p not in used:
            problems.append(doc.problem(base + ("params", p), f"param '{p}' is declared but never used in the tool's SQL or messages"))
    return problems
