"""Tool specs -> OpenAI function schemas and argument validators. One description, written once,
feeds the model's schema, the docs (`muactl tools`) and the MCP server."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jsonschema

from ..spec import models as m
from .arguments import ArgumentValidator, argument_errors

BUILTIN_DESCRIPTIONS = {
    "transfer": "Transfer the user to a human agent, with a summary of the issue. Use only when the request "
    "cannot be handled within the policy and the tools.",
    "think": "Think through a complex step. Has no effect on the database and is not shown to the user.",
    "unlock": "Unlock a tool the knowledge you were given names, so that you can call it with the tool that calls "
    "unlocked tools. Answers with its description and parameters.",
    "call_unlocked": "Call a tool you have unlocked, by name, with its arguments as a JSON object.",
    "merge": "Merge records into a table by primary key: the given columns of an existing row are replaced, a "
    "record with a new key is inserted.",
}
BUILTIN_PARAMS = {
    "transfer": {"summary": m.Param(type="string", description="A short summary of the user's issue.")},
    "think": {"thought": m.Param(type="string", description="Your reasoning.")},
    "unlock": {"agent_tool_name": m.Param(type="string", description="The name of the tool to unlock.")},
    "call_unlocked": {"agent_tool_name": m.Param(type="string", description="The name of the unlocked tool."),
                      "arguments": m.Param(type="string", default="{}", description="Its arguments: a JSON object, "
                                           "e.g. '{\"user_id\": \"abc123\"}'.")},
    "merge": {"table": m.Param(type="string", description="A declared table."),
              "records": m.Param(type="array", items=m.Param(type="object"), description="Rows: column -> value, "
                                 "each with the table's primary key.")},
}


@dataclass
class CompiledTool:
    name: str
    kind: str  # sql | builtin | python | simulated | mcp
    spec: Any  # the spec model
    description: str
    params: dict[str, m.Param]
    side: str
    # an mcp tool's JSON schema, as its server declares it (set when the server is discovered)
    schema: dict[str, Any] | None = None
    # result column -> declared type (json, boolean...), for typing sql tool results
    result_types: dict[str, str] = field(default_factory=dict)
    # the type of a result column result_types leaves out: None (as stored) or GUESSED_TYPE (spec_version 1)
    untyped_result: str | None = None
    # spec_version 1: the result columns the current version would give back differently (for validate)
    changed_by_current: list[str] = field(default_factory=list)
    # the parameters' schema as the model is shown it (the spec's `schema:`), when not the one built from params
    shown: dict[str, Any] | None = None

    @property
    def parameters(self) -> dict[str, Any]:
        if self.kind == "mcp":
            # before discovery nothing is known about the arguments: accept any object, let the server judge
            return self.schema or {"type": "object", "properties": {}, "required": []}
        return {
            "type": "object",
            "properties": {k: p.json_schema() for k, p in self.params.items()},
            "required": [k for k, p in self.params.items() if p.is_required()],
            "additionalProperties": False,
        }

    def openai_schema(self) -> dict[str, Any]:
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.shown or self.parameters}}

    def validator(self) -> jsonschema.Validator:
        # rebuilt when discovery sets an mcp tool's schema
        if not hasattr(self, "_validator") or self._validator_for is not self.schema:
            self._validator = ArgumentValidator(self.parameters)
            self._validator_for = self.schema
        return self._validator

    def argument_errors(self, args: Any) -> list[str]:
        """Every way `args` breaks the schema (sizes first, bounded work: compile/arguments.py)."""
        return argument_errors(self.validator(), args)

    def with_defaults(self, args: dict[str, Any]) -> dict[str, Any]:
        out = dict(args)
        for k, p in self.params.items():
            if k not in out:
                out[k] = p.default
        return out


def result_types(domain: m.Domain, conn, sql: str | None) -> dict[str, str]:
    """Result column -> declared type, for the table columns a query reads: SQLite's authorizer names
    every (table, column) it reads while compiling, so `SELECT * FROM users` types users' columns and
    a `name` that is json in one table and text in another is typed by the table actually read."""
    import sqlite3

    if not sql:
        return {}
    from .sql import param_names

    read: set[tuple[str, str]] = set()

    def spy(action, arg1, arg2, *_):
        if action == sqlite3.SQLITE_READ:
            read.add((arg1, arg2))
        return sqlite3.SQLITE_OK

    conn.set_authorizer(spy)
    try:
        conn.execute("EXPLAIN " + sql, {p: None for p in param_names(sql)}).fetchall()
    except sqlite3.Error:
        return {}  # validate reports the statement
    finally:
        conn.set_authorizer(None)
    seen: dict[str, set[str]] = {}
    for table, col in read:
        ctype = domain.database.tables.get(table) and domain.database.tables[table].columns.get(col)
        if ctype:
            seen.setdefault(col, set()).add(ctype)
    return {col: next(iter(types)) for col, types in seen.items() if len(types) == 1}


def compile_tool(name: str, spec: Any, domain: m.Domain | None = None, conn=None) -> CompiledTool:
    tool = built_tool(name, spec, domain, conn)
    tool.shown = getattr(spec, "shown_schema", None)
    return tool


def built_tool(name: str, spec: Any, domain: m.Domain | None, conn) -> CompiledTool:
    kind = spec.kind
    if kind == "builtin":
        return CompiledTool(name, kind, spec, spec.description or BUILTIN_DESCRIPTIONS[spec.builtin],
                            BUILTIN_PARAMS[spec.builtin], spec.side)
    if kind == "mcp":  # the schema comes from the server when the tool is discovered
        return CompiledTool(name, kind, spec, spec.description or f"MCP tool {spec.mcp.tool}", {}, spec.side)
    if kind != "sql" or domain is None:
        return CompiledTool(name, kind, spec, spec.description.strip(), spec.params, spec.side)
    types = {**result_types(domain, conn, spec.query), **spec.types}
    if domain.spec_version < 2:
        # version 1's meaning, kept for the files written for it: what the author typed, and a guess for the rest
        return CompiledTool(name, kind, spec, spec.description.strip(), spec.params, spec.side,
                            result_types=dict(spec.types), untyped_result=m.GUESSED_TYPE,
                            changed_by_current=changed_columns(conn, spec, types))
    return CompiledTool(name, kind, spec, spec.description.strip(), spec.params, spec.side, result_types=types)


def changed_columns(conn, spec: m.SqlTool, current: dict[str, str]) -> list[str]:
    """The result columns of a spec_version 1 tool that the current version gives back differently: a boolean
    column (0/1 then, true/false now), a json one (only arrays and objects were decoded) and each computed
    column the author did not type (JSON text in it was decoded; now it stays text unless `types:` says json)."""
    columns = result_columns(conn, spec.query)
    if columns is None:
        return ["its columns (the query could not be read without running it: check each JSON or boolean one)"]
    out = []
    for col in columns:
        if col in spec.types:
            continue
        ctype = current.get(col)
        if ctype == "boolean":
            out.append(f"{col} (boolean: 0/1 in version 1, true/false now)")
        elif ctype == "json":
            out.append(f"{col} (json: version 1 decoded arrays and objects only, now every JSON value)")
        elif ctype is None:
            out.append(f"{col} (computed: JSON text in it was decoded in version 1; now it stays text unless "
                       f"`types: {{{col}: json}}`)")
    return out


def result_columns(conn, sql: str | None) -> list[str] | None:
    """The names of the columns a query returns, read off the statement without running it (LIMIT 0 on an
    empty schema); [] for no query, None when it does not compile here (muactl's SQL functions are not
    registered on this connection; validate reports a query that is wrong)."""
    import sqlite3

    if not sql:
        return []
    from .sql import param_names

    try:
        cur = conn.execute(f"SELECT * FROM (\n{sql.strip().rstrip(';')}\n) LIMIT 0", {p: None for p in param_names(sql)})
    except sqlite3.Error:
        return None
    return [d[0] for d in cur.description or ()]
