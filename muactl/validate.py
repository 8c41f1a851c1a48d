"""Semantic checks of a domain and its tasks: references, SQL against the real schema, parameters,
seed rows (via the compiler), and every task's gold path replayed on a fresh sandbox."""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

import jsonschema

from .compile import CompiledDomain, changelog, compile_domain
from .compile.database import schema_connection
from .compile.sql import Guard, explain, param_names
from .env.sandbox import OUTSIDE_KINDS
from .errors import Problem, SpecError
from .library import DomainRef, find_domain
from .reward import assertion_result
from .spec import models as m
from .spec.load import DomainSpec, TaskSpec, load_domain, load_tasks

_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")


@dataclass
class Opened:
    ref: DomainRef
    spec: DomainSpec
    compiled: CompiledDomain
    tasks: list[TaskSpec] = field(default_factory=list)
    templates: list = field(default_factory=list)  # TemplateSpec (muactl/templates.py)

    def task(self, task_id: str) -> TaskSpec:
        for t in self.tasks:
            if t.task.id == task_id:
                return t
        close = difflib.get_close_matches(task_id, [t.task.id for t in self.tasks], n=3)
        from .errors import UsageError

        raise UsageError(f"no task '{task_id}' in domain {self.ref.name}" + (f"; did you mean {', '.join(close)}?" if close else ""))


def _hint(name: str, options) -> str:
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
                problems.append(doc.problem(base + ("primary_key",), f"primary key column '{col}' is not declared{_hint(col, table.columns)}"))
        for col, ref in table.foreign_keys.items():
            if col not in table.columns:
                problems.append(doc.problem(base + ("foreign_keys", col), f"column '{col}' is not declared{_hint(col, table.columns)}"))
            other, _, other_col = ref.partition(".")
            if not other_col:
                problems.append(doc.problem(base + ("foreign_keys", col), f"'{ref}' should be 'table.column'"))
            elif other not in tables:
                problems.append(doc.problem(base + ("foreign_keys", col), f"references undefined table '{other}'{_hint(other, tables)}"))
            elif other_col not in tables[other].columns:
                problems.append(doc.problem(base + ("foreign_keys", col), f"references undefined column '{ref}'{_hint(other_col, tables[other].columns)}"))
    if problems:
        return problems  # SQL checks need a sound schema
    from .randomdb import check_generators

    problems += check_generators(spec)
    conn = schema_connection(d)
    guard = Guard(set(tables))
    guard.install(conn)
    for name, tool in d.tools.items():
        if isinstance(tool, m.SqlTool):
            problems.extend(_check_sql_tool(spec, name, tool, conn, guard))
        elif isinstance(tool, (m.PythonTool, m.SimulatedTool)):
            problems.extend(_check_param_specs(spec, name, tool))
    conn.close()
    return problems


def _check_param_specs(spec: DomainSpec, name: str, tool) -> list[Problem]:
    out = []
    for pname, p in tool.params.items():
        out.extend(_check_param(spec, ("tools", name, "params", pname), p))
    return out


def _check_param(spec: DomainSpec, path: tuple, p: m.Param) -> list[Problem]:
    # nested items/properties too: a bad pattern there would crash jsonschema when arguments are validated
    out = []
    if p.pattern is not None:
        try:
            re.compile(p.pattern)
        except re.error as e:
            out.append(spec.doc.problem(path + ("pattern",), f"invalid regular expression: {e}"))
    if p.type == "array" and p.items is None:
        out.append(spec.doc.problem(path, "an array param needs 'items' (the schema of each element)"))
    if p.items is not None:
        out.extend(_check_param(spec, path + ("items",), p.items))
    for key, sub in (p.properties or {}).items():
        out.extend(_check_param(spec, path + ("properties", key), sub))
    if not out and "default" in p.model_fields_set and p.default is not None:
        # the default is passed to the tool as if the model had sent it, so it must fit the schema too
        schema = {k: v for k, v in p.json_schema().items() if k != "default"}
        for err in jsonschema.Draft202012Validator(schema).iter_errors(p.default):
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
    for path, sql, mode in statements:
        error = explain(conn, guard, sql, mode)
        if error:
            problems.append(doc.problem(base + path, error))
        for p in param_names(sql):
            used.add(p)
            if p not in tool.params:
                problems.append(doc.problem(base + path, f"parameter :{p} is used but not declared under params{_hint(p, tool.params)}"))
    texts = [(("checks", i, "error"), c.error) for i, c in enumerate(tool.checks)]
    texts += [((k,), getattr(tool, k)) for k in ("if_empty", "message") if getattr(tool, k)]
    for path, text in texts:
        for p in _PLACEHOLDER.findall(text):
            used.add(p)
            if p not in tool.params:
                problems.append(doc.problem(base + path, f"placeholder {{{p}}} is not a declared param{_hint(p, tool.params)}"))
    for p in tool.params:
        if p not in used:
            problems.append(doc.problem(base + ("params", p), f"param '{p}' is declared but never used in the tool's SQL or messages"))
    return problems


def check_tasks(opened: Opened, replay: bool = True, verify_hash: bool = False) -> list[Problem]:
    """Every task's references, arguments and assertions; with `replay`, its gold path on a fresh sandbox
    (and with `verify_hash`, the incremental state hash checked against a full recompute there)."""
    d = opened.spec.domain
    compiled = opened.compiled
    problems: list[Problem] = []
    conn = schema_connection(d)
    guard = Guard(set(d.database.tables))
    guard.install(conn)
    for t in opened.tasks:
        task = t.task
        bad = False
        if task.persona is not None and task.persona not in d.personas:
            problems.append(t.problem(("persona",), f"undefined persona '{task.persona}'{_hint(task.persona, d.personas)}"))
        for group, calls in (("setup", task.setup), ("actions", task.expect.actions)):
            path0 = ("setup",) if group == "setup" else ("expect", "actions")
            for i, call in enumerate(calls):
                tool_name, args = m.call_parts(call)
                tool = compiled.tools.get(tool_name)
                if tool is None:
                    problems.append(t.problem(path0 + (i, tool_name), f"undefined tool '{tool_name}'{_hint(tool_name, compiled.tools)}"))
                    bad = True
                    continue
                for err in tool.argument_errors(args):
                    problems.append(t.problem(path0 + (i, tool_name), f"arguments break {tool_name}'s schema: {err}"))
                    bad = True
        for i, a in enumerate(task.expect.assert_):
            error = explain(conn, guard, a.query, "read")
            if not error and param_names(a.query):  # nothing binds them: replay would fail with a driver error
                error = f"assertions take no parameters (:{param_names(a.query)[0]}); write the value into the SQL"
            if error:
                problems.append(t.problem(("expect", "assert", i, "query"), error))
                bad = True
        if replay and not bad:
            problems.extend(_replay(opened, t, verify_hash))
    conn.close()
    return problems


def _replay(opened: Opened, t: TaskSpec, verify_hash: bool = False) -> list[Problem]:
    from .templates import domain_for

    env = domain_for(opened, t).environment()  # a generated task runs on the random database it was drawn on
    task = t.task
    try:
        for group, calls, path0 in (("setup", task.setup, ("setup",)), ("gold action", task.expect.actions, ("expect", "actions"))):
            for i, call in enumerate(calls):
                tool_name, args = m.call_parts(call)
                if opened.compiled.tools[tool_name].kind in OUTSIDE_KINDS:
                    continue  # played outside the sandbox (an LLM, an MCP server): nothing here to replay
                result = env.call(tool_name, args)
                if result.error:
                    return [t.problem(path0 + (i, tool_name), f"{group} fails when replayed: {result.content}")]
        out = []
        if verify_hash and env.state_hash() != env.full_state_hash():
            out.append(t.problem(("expect", "actions"), "the state hash after the gold actions differs from a full "
                                 "recompute: a muactl bug, please report it with this domain"))
        for i, a in enumerate(task.expect.assert_):
            ok, why = assertion_result(env, a)
            if not ok:
                out.append(t.problem(("expect", "assert", i), f"assertion does not hold after the gold actions: {why}"))
        return out
    finally:
        env.close()


def open_domain(name: str | DomainRef, with_tasks: bool = True, trust: bool = False,
                start_mcp: bool = True) -> Opened:
    """Find, load, check and compile a domain (and load its tasks). Raises SpecError with every problem.
    `start_mcp=False` leaves MCP tool servers unstarted (checking an untrusted pack runs nothing)."""
    ref = name if isinstance(name, DomainRef) else find_domain(name)
    problems: list[Problem] = []
    spec = compiled = None
    tasks: list[TaskSpec] = []
    try:
        spec = load_domain(ref.root)
        problems += check_domain(spec)
        if not problems:
            compiled = compile_domain(spec)
            compiled.trust = trust
            if start_mcp and any(t.kind == "mcp" for t in compiled.tools.values()):
                from .mcp_client import attach

                # a command from an installed pack is someone else's code: start it only with --trust
                problems += attach(spec, compiled, allowed=trust or ref.origin != "installed")
    except SpecError as e:
        problems += e.problems
    if with_tasks:  # task files are checked even when the domain is broken: report everything at once
        try:
            tasks = load_tasks(ref.tasks_dir)
        except SpecError as e:
            problems += e.problems
        try:
            from .templates import load_templates

            templates = load_templates(ref.tasks_dir)
        except SpecError as e:
            problems += e.problems
    if problems:
        raise SpecError(problems)
    return Opened(ref, spec, compiled, tasks, templates if with_tasks else [])


def validate_domain(name: str, trust: bool = False, verify_hash: bool = False) -> Opened:
    """Everything `muactl validate` checks; raises SpecError listing every problem. Gold paths that call
    python tools are replayed only with trust (otherwise they are reported as needing --trust).
    `verify_hash` also checks each gold end state's incremental hash against a full recompute."""
    opened = open_domain(name, trust=trust)
    problems = check_tasks(opened, verify_hash=verify_hash)
    if opened.templates:
        from .templates import check_templates

        problems += check_templates(opened)
    if problems:
        raise SpecError(problems)
    return opened
