"""Semantic checks of a domain and its tasks: references, SQL against the real schema, parameters,
seed rows (via the compiler), and every task's gold path replayed on a fresh sandbox."""

from __future__ import annotations

import difflib
import re
import sqlite3
from dataclasses import dataclass, field

from .compile import CompiledDomain, changelog, compile_domain
from .compile.arguments import ArgumentValidator, pattern_error
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
    from .randomdb import check_generators

    problems += check_generators(spec)
    conn = _schema_or_none(d, tolerate=bool(problems))
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
            problems.append(doc.problem(("database", "after_write", i), error))
    for name, tool in d.tools.items():
        if isinstance(tool, m.SqlTool):
            problems.extend(_check_sql_tool(spec, name, tool, conn, guard))
        elif isinstance(tool, (m.PythonTool, m.SimulatedTool)):
            problems.extend(_check_param_specs(spec, name, tool))
    conn.close()
    return problems


def _schema_or_none(d: m.Domain, tolerate: bool) -> sqlite3.Connection | None:
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
    from .compile.database import create_view

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
            out.append(spec.doc.problem(path, error))
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
                problems.append(doc.problem(where, f"'{array}' is not a declared param{_hint(array, tool.params)}"))
            elif tool.params[array].type != "array":
                problems.append(doc.problem(where, f"'{array}' is a {tool.params[array].type} param; each walks arrays"))
            else:
                used.add(array)
            if elem in tool.params:
                problems.append(doc.problem(where, f"'{elem}' is already a param; name the element differently"))
    for path, sql, mode in statements:
        error = explain(conn, guard, sql, mode)
        if error:
            problems.append(doc.problem(base + path, error))
        local = bound_by.get(path[1], {}) if path[0] == "checks" else {}
        for p in param_names(sql):
            used.add(p)
            if p not in tool.params and p not in local:
                problems.append(doc.problem(base + path, f"parameter :{p} is used but not declared under params{_hint(p, tool.params)}"))
    texts = [(("checks", i, "error"), c.error, bound_by[i], _columns(conn, c.query) or [])
             for i, c in enumerate(tool.checks)]
    texts += [((k,), getattr(tool, k), {}, []) for k in ("if_empty", "message") if getattr(tool, k)]
    for path, text, local, computed in texts:
        for p in _PLACEHOLDER.findall(text):
            used.add(p)
            if p not in tool.params and p not in local and p not in computed[1:]:
                known = list(tool.params) + list(local) + computed[1:]
                also = " (nor an each name or a column the check computes)" if path[0] == "checks" else ""
                problems.append(doc.problem(base + path, f"placeholder {{{p}}} is not a declared param{_hint(p, known)}{also}"))
    if tool.types and tool.query:
        columns = _columns(conn, tool.query)
        for col in tool.types:
            if columns is not None and col not in columns:
                problems.append(doc.problem(base + ("types", col), f"the query returns no column '{col}'{_hint(col, columns)}"))
    for p in tool.params:
        if p not in used:
            problems.append(doc.problem(base + ("params", p), f"param '{p}' is declared but never used in the tool's SQL or messages"))
    return problems


def check_tasks(opened: Opened, replay: bool = True, dropped: set[tuple] = frozenset(),
                verify_hash: bool = False) -> list[Problem]:
    """Task references, arguments, assertion SQL and (with `replay`) every gold path, and with
    `verify_hash` the incremental state hash checked against a full recompute there. Without a compiled
    domain (it has problems of its own) the checks that need none still run; references to entries that
    were left out of a broken domain.yaml (`dropped`) are not reported twice."""
    d = opened.spec.domain
    compiled = opened.compiled
    tools = compiled.tools if compiled is not None else dict.fromkeys(d.tools)
    problems: list[Problem] = []
    tables_dropped = any(u[:2] == ("database", "tables") for u in dropped)
    conn = None if tables_dropped else _schema_or_none(d, tolerate=compiled is None)
    guard = Guard(set(d.database.tables))
    if conn is not None:
        guard.install(conn)
    for t in opened.tasks:
        task = t.task
        bad = False
        if task.persona is not None and task.persona not in d.personas and ("personas", task.persona) not in dropped:
            problems.append(t.problem(("persona",), f"undefined persona '{task.persona}'{_hint(task.persona, d.personas)}"))
        for group, calls in (("setup", task.setup), ("actions", task.expect.actions)):
            path0 = ("setup",) if group == "setup" else ("expect", "actions")
            for i, call in enumerate(calls):
                tool_name, args = m.call_parts(call)
                if tool_name not in tools:
                    if ("tools", tool_name) not in dropped:
                        problems.append(t.problem(path0 + (i, tool_name), f"undefined tool '{tool_name}'{_hint(tool_name, tools)}"))
                    bad = True
                    continue
                tool = tools[tool_name]
                for err in tool.argument_errors(args) if tool is not None else ():
                    problems.append(t.problem(path0 + (i, tool_name), f"arguments break {tool_name}'s schema: {err}"))
                    bad = True
        for i, a in enumerate(task.expect.assert_ if conn is not None else ()):
            if a.call is not None:
                error = _assert_call_error(a.call, tools, dropped)
                if error:
                    problems.append(t.problem(("expect", "assert", i, "call"), error))
                    bad = True
                continue
            error = explain(conn, guard, a.query, "read")
            if not error and param_names(a.query):  # nothing binds them: replay would fail with a driver error
                error = f"assertions take no parameters (:{param_names(a.query)[0]}); write the value into the SQL"
            if error:
                problems.append(t.problem(("expect", "assert", i, "query"), error))
                bad = True
        if replay and not bad:
            problems.extend(_replay(opened, t, verify_hash))
    if conn is not None:
        conn.close()
    return problems


def _assert_call_error(call: dict, tools: dict, dropped) -> str | None:
    """Why an assertion's tool call cannot run on a final state (None when it can): an assertion reads."""
    name, args = m.call_parts(call)
    if name not in tools:
        return None if ("tools", name) in dropped else f"undefined tool '{name}'{_hint(name, tools)}"
    tool = tools[name]
    if tool is None:
        return None
    if tool.kind != "sql" or tool.spec.writes:
        return (f"tool '{name}' {'writes' if tool.kind == 'sql' else f'is a {tool.kind} tool'}; an assertion may "
                "call only a sql tool without writes (it reads the final state)")
    errors = tool.argument_errors(args)
    return f"arguments break {name}'s schema: {errors[0]}" if errors else None


def _replay(opened: Opened, t: TaskSpec, verify_hash: bool = False) -> list[Problem]:
    from .reward import gold_actions
    from .templates import domain_for

    env = domain_for(opened, t).environment()  # a generated task runs on the random database it was drawn on
    task = t.task
    gold = gold_actions(t, opened.compiled)  # without the writes a user who declines them (consent: false) stops
    try:
        for group, calls, path0 in (("setup", task.setup, ("setup",)), ("gold action", gold, ("expect", "actions"))):
            for i, call in enumerate(calls):
                tool_name, args = m.call_parts(call)
                if opened.compiled.tools[tool_name].kind in OUTSIDE_KINDS:
                    continue  # played outside the sandbox (an LLM, an MCP server): nothing here to replay
                result = env.call(tool_name, args)
                expected = m.expected_error(call)
                got = result.content.removeprefix("Error: ") if result.error else None
                if expected is None and result.error:
                    return [t.problem(path0 + (i, tool_name), f"{group} fails when replayed: {result.content}")]
                if expected is not None and got != expected:
                    what = f"fails with {got!r}" if result.error else "succeeds"
                    return [t.problem(path0 + (i, "error"), f"{group} is expected to fail with {expected!r} but {what}")]
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
                problems += attach(spec, compiled, allowed=trust or not ref.untrusted)
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


def domain_warnings(opened: Opened) -> list[Problem]:
    """Things that work but are probably not what the author meant."""
    out = []
    d, root = opened.spec.domain, opened.ref.root
    if d.name != root.name:
        out.append(opened.spec.doc.problem(("name",), f"name '{d.name}' differs from the folder '{root.name}'; "
                                           f"`muactl ... {root.name}` finds this domain, runs record '{d.name}'"))
    return out


def validate_domain(name: str, trust: bool = False, verify_hash: bool = False) -> Opened:
    """Everything `muactl validate` checks; raises SpecError listing every problem. Gold paths that call
    python tools are replayed only with trust (otherwise they are reported as needing --trust).
    When the domain or some tasks have problems, the later checks still run on what parsed, so one run
    reports everything it can. `verify_hash` also checks each gold end state's incremental hash against a
    full recompute."""
    try:
        opened = open_domain(name, trust=trust)
    except SpecError as e:
        raise SpecError(e.problems + _checks_on_what_parsed(name, trust)) from None
    problems = check_tasks(opened, verify_hash=verify_hash)
    if opened.templates:
        from .templates import check_templates

        problems += check_templates(opened)
    if problems:
        raise SpecError(problems)
    return opened


def _checks_on_what_parsed(name: str, trust: bool) -> list[Problem]:
    """The checks open_domain stopped short of, on what parsed: the domain's own checks on the entries
    that loaded; then, with the broken tools left out, the seed rows (compiling) and the tasks
    (references, arguments, assertion SQL, and the gold paths that avoid the broken tools)."""
    import dataclasses

    from .spec.load import load_domain_salvaged, load_tasks_partial

    ref = find_domain(name)
    salvaged = load_domain_salvaged(ref.root)
    if salvaged.spec is None:
        return []
    spec, dropped = salvaged.spec, set(salvaged.dropped)
    if any(u[:2] == ("database", "tables") for u in dropped):
        # a table left out would make every statement and task that uses it a second, false problem:
        # only the task checks that need no schema run
        tasks, _ = load_tasks_partial(ref.tasks_dir)
        return check_tasks(Opened(ref, spec, None, tasks), replay=False, dropped=dropped)
    problems = check_domain(spec)
    broken = {p.key.split(".")[1] for p in problems if p.key.startswith("tools.")}
    dropped |= {("tools", t) for t in broken}
    tables_ok = not any(p.key.startswith("database.") for p in problems) and not any(u[:1] == ("database",) for u in dropped)
    spec = dataclasses.replace(spec, domain=spec.domain.model_copy(
        update={"tools": {k: v for k, v in spec.domain.tools.items() if k not in broken}}))
    compiled = None
    if tables_ok and not any(isinstance(t, m.McpTool) for t in spec.domain.tools.values()):
        try:
            compiled = compile_domain(spec)
            compiled.trust = trust
        except SpecError as e:  # seed rows that do not fit the schema
            problems += e.problems
    tasks, _ = load_tasks_partial(ref.tasks_dir)  # their own parse problems were reported by open_domain
    problems += check_tasks(Opened(ref, spec, compiled, tasks), replay=compiled is not None, dropped=dropped)
    return problems
