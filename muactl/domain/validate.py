"""`muactl validate`: the domain's own checks (checks.py), seed rows (via the compiler), and every task's
references, arguments, assertions and gold path replayed on a fresh sandbox; task templates too."""

from __future__ import annotations

import re

from ..compile import compile_domain
from ..compile.sql import Guard, explain, param_names, unknown_name
from ..env.sandbox import OUTSIDE_KINDS, new_env
from ..errors import Problem, SpecError
from ..spec.library import find_domain
from ..env.gold import assertion_result
from ..spec import models as m
from ..spec.tasks import TaskSpec
from .checks import check_domain, hint, schema_or_none
from .open import Opened, open_domain


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
    # tables and views left out of a broken domain.yaml: an assertion over one cannot be checked
    gone = {u[2] for u in dropped if len(u) == 3 and u[:2] in (("database", "tables"), ("database", "views"))}
    conn = None if ("database", "tables") in dropped else schema_or_none(d, tolerate=compiled is None)
    guard = Guard(set(d.database.tables))
    if conn is not None:
        guard.install(conn)
    for t in opened.tasks:
        task = t.task
        bad = False
        if task.persona is not None and task.persona not in d.personas and ("personas", task.persona) not in dropped:
            problems.append(t.problem(("persona",), f"undefined persona '{task.persona}'{hint(task.persona, d.personas)}"))
        for group, calls in (("setup", task.setup), ("actions", task.expect.actions)):
            path0 = ("setup",) if group == "setup" else ("expect", "actions")
            for i, call in enumerate(calls):
                tool_name, args = m.call_parts(call)
                if tool_name not in tools:
                    if ("tools", tool_name) not in dropped:
                        problems.append(t.problem(path0 + (i, tool_name), f"undefined tool '{tool_name}'{hint(tool_name, tools)}"))
                        bad = True
                    elif not reads_only(opened.spec.doc.data, tool_name):
                        bad = True  # without its writes the replay's end state would be a false problem
                    continue
                tool = tools[tool_name]
                for err in tool.argument_errors(args) if tool is not None else ():
                    problems.append(t.problem(path0 + (i, tool_name), f"arguments break {tool_name}'s schema: {err}"))
                    bad = True
        for name in task.user_tools or ():  # the user's own tools in this task
            tool = tools.get(name)
            if name not in tools and ("tools", name) not in dropped:
                problems.append(t.problem(("user_tools",), f"undefined tool '{name}'{hint(name, tools)}", word=name))
            elif tool is not None and tool.side != "user":
                problems.append(t.problem(("user_tools",), f"tool '{name}' is not the user's (side: {tool.side})",
                                          word=name))
        named = [(("tools",), n) for n in task.tools or ()]
        named += [(("turns", k, "tools"), n) for k, turn in enumerate(task.turns) for n in turn.tools]
        for path, name in named:  # the task's own tools and those that appear at a turn: the agent's
            tool = tools.get(name)
            if name not in tools and ("tools", name) not in dropped:
                problems.append(t.problem(path, f"undefined tool '{name}'{hint(name, tools)}", word=name))
            elif tool is not None and tool.side != "agent":
                problems.append(t.problem(path, f"tool '{name}' is not the agent's (side: {tool.side}); a task "
                                          "names only agent tools", word=name))
        for i, a in enumerate(task.expect.assert_ if conn is not None else ()):
            if not checkable(a, gone, dropped):
                continue
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
                problems.append(t.problem(("expect", "assert", i, "query"), error, word=unknown_name(error)))
                bad = True
        if replay and not bad:
            problems.extend(_replay(opened, t, verify_hash, lambda a: checkable(a, gone, dropped)))
    if conn is not None:
        conn.close()
    return problems


def reads_only(domain_data, tool_name: str) -> bool:
    """Whether a tool, as written in domain.yaml, is a sql tool without writes: a gold path may be replayed
    without it when it was left out for a problem of its own (its reads change nothing)."""
    raw = (domain_data.get("tools") or {}).get(tool_name) if isinstance(domain_data, dict) else None
    # an unknown key may be a misspelt `writes`: then it cannot be told to read only
    return (isinstance(raw, dict) and m.tool_kind(raw) == "sql" and not raw.get("writes")
            and set(raw) <= set(m.SqlTool.model_fields))


def _assert_call_error(call: dict, tools: dict, dropped) -> str | None:
    """Why an assertion's tool call cannot run on a final state (None when it can): an assertion reads."""
    name, args = m.call_parts(call)
    if name not in tools:
        return None if ("tools", name) in dropped else f"undefined tool '{name}'{hint(name, tools)}"
    tool = tools[name]
    if tool is None:
        return None
    if tool.kind != "sql" or tool.spec.writes:
        return (f"tool '{name}' {'writes' if tool.kind == 'sql' else f'is a {tool.kind} tool'}; an assertion may "
                "call only a sql tool without writes (it reads the final state)")
    errors = tool.argument_errors(args)
    return f"arguments break {name}'s schema: {errors[0]}" if errors else None


def checkable(a: m.Assertion, gone: set[str], dropped) -> bool:
    """Whether an assertion can be checked on what parsed: it reads no table or view left out of the domain,
    and calls no tool left out."""
    if a.call is not None:
        return ("tools", m.call_parts(a.call)[0]) not in dropped
    return not names_any(a.query, gone)


def _replay(opened: Opened, t: TaskSpec, verify_hash: bool = False, checked=lambda a: True) -> list[Problem]:
    from ..env.gold import gold_actions
    from .task_templates import domain_for

    env = new_env(domain_for(opened, t))  # a generated task runs on the random database it was drawn on
    task = t.task
    gold = gold_actions(t.task, opened.compiled)  # without the writes a user who declines them (consent: false) stops
    skipped: list[str] = []
    try:
        for group, calls, path0 in (("setup", task.setup, ("setup",)), ("gold action", gold, ("expect", "actions"))):
            for i, call in enumerate(calls):
                tool_name, args = m.call_parts(call)
                if tool_name not in opened.compiled.tools:
                    skipped.append(tool_name)  # a read-only tool left out for its own problem (check_tasks)
                    continue
                if opened.compiled.tools[tool_name].kind in OUTSIDE_KINDS:
                    continue  # played outside the sandbox (an LLM, an MCP server): nothing here to replay
                result = env.call(tool_name, args)
                expected = m.expected_error(call)
                got = result.content.removeprefix("Error: ") if result.error else None
                note = f" (replayed without {', '.join(dict.fromkeys(skipped))}, left out for the problems above)" if skipped else ""
                if expected is None and result.error:
                    return [t.problem(path0 + (i, tool_name), f"{group} fails when replayed: {result.content}{note}")]
                if expected is not None and got != expected:
                    what = f"fails with {got!r}" if result.error else "succeeds"
                    return [t.problem(path0 + (i, "error"), f"{group} is expected to fail with {expected!r} but {what}")]
        out = []
        if verify_hash and env.state_hash() != env.full_state_hash():
            out.append(t.problem(("expect", "actions"), "the state hash after the gold actions differs from a full "
                                 "recompute: a muactl bug, please report it with this domain"))
        for i, a in enumerate(task.expect.assert_):
            if not checked(a):
                continue
            ok, why = assertion_result(env, a)
            if not ok and a.holds_after_gold:
                out.append(t.problem(("expect", "assert", i), f"assertion does not hold after the gold actions: {why}"))
            elif ok and not a.holds_after_gold:
                out.append(t.problem(("expect", "assert", i, "holds_after_gold"),
                                     "assertion holds after the gold actions, but holds_after_gold is false"))
        return out
    finally:
        env.close()


def domain_warnings(opened: Opened) -> list[Problem]:
    """Things that work but are probably not what the author meant."""
    out = []
    d, root = opened.spec.domain, opened.ref.root
    if d.name != root.name:
        out.append(opened.spec.doc.problem(("name",), f"name '{d.name}' differs from the folder '{root.name}'; "
                                           f"`muactl ... {root.name}` finds this domain, runs record '{d.name}'"))
    out += version_warnings(opened)
    out += reason_warnings(opened)
    held = untrusted_mcp_tools(opened)
    if held:
        out.append(opened.spec.doc.problem(("tools", held[0], "mcp", "command"),
                                           f"not started, so not checked: mcp tools {', '.join(held)}; "
                                           f"{opened.ref.trust_hint()}"))
    return out


# A sentence that steers the simulated user rather than saying what it wants: the scripted user and the small
# local users say `reason` aloud, so these belong in `instructions`.
_STEERING = re.compile(r"\b(?:if|when|once|unless|after|should|whatever) the agent\b|\bif (?:asked|they ask)\b|"
                       r"\b(?:end|close|finish|leave) the (?:conversation|chat|call)\b|\baccept (?:that|it|this)\b|"
                       r"\b(?:say|answer|reply) (?:yes|no)\b", re.I)


def reason_warnings(opened: Opened) -> list[Problem]:
    """A task's or template's `user.reason` that reads like an instruction to the user ("If the agent says
    ..., accept that and end the conversation"): it is the user's first message, said to the agent."""
    out = []
    for t in [*opened.tasks, *opened.templates]:
        goal = t.task.user if isinstance(t, TaskSpec) else t.template.user
        for sentence in re.split(r"(?<=[.!?])\s+", " ".join(goal.reason.split())):
            if _STEERING.search(sentence):
                out.append(t.problem(("user", "reason"), f"reads like an instruction to the user, which the scripted "
                                     f"user would say to the agent: {sentence!r}; move it to `user.instructions`"))
                break
    return out


def version_warnings(opened: Opened) -> list[Problem]:
    """A domain written for an older spec_version keeps that version's meaning; say so, and name each tool
    whose results the current version gives back differently, with what to change to move up."""
    d, doc = opened.spec.domain, opened.spec.doc
    if d.spec_version >= m.SPEC_VERSION or opened.compiled is None:
        return []
    declared = isinstance(doc.data, dict) and "spec_version" in doc.data
    changed = {name: t.changed_by_current for name, t in opened.compiled.tools.items() if t.changed_by_current}
    which = f"spec_version {d.spec_version}" if declared else "no spec_version"
    out = [doc.problem(("spec_version",) if declared else ("name",),
                       f"{which}: read with version {d.spec_version}'s meaning ({m.SPEC_VERSIONS[d.spec_version]}); "
                       f"version {m.SPEC_VERSION}, the current one, means: {m.SPEC_VERSIONS[m.SPEC_VERSION]}"
                       + ("" if changed else f". No tool's results differ: set `spec_version: {m.SPEC_VERSION}`"))]
    for name, columns in changed.items():
        out.append(doc.problem(("tools", name, "query"), f"under spec_version {m.SPEC_VERSION} this tool's results may "
                               f"change: {'; '.join(columns)}. To move up, type the computed JSON columns in "
                               f"`types:`, check the task outputs that quote them, and set `spec_version: {m.SPEC_VERSION}`"))
    return out


def untrusted_mcp_tools(opened: Opened) -> list[str]:
    """The mcp tools whose servers were held back: the domain is someone else's and --trust was not given."""
    if not opened.ref.untrusted or opened.compiled is None or opened.compiled.trust:
        return []
    return [n for n, t in opened.compiled.tools.items() if t.kind == "mcp"]


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
        from .template_checks import check_templates

        problems += check_templates(opened)
    if problems:
        raise SpecError(problems)
    return opened


def _checks_on_what_parsed(name: str, trust: bool) -> list[Problem]:
    """The checks open_domain stopped short of, on what parsed: the domain's own checks on the entries
    that loaded; then, with the broken tools and tables left out (and what reads or writes those tables),
    the seed rows (compiling) and the tasks (references, arguments, assertion SQL, and the gold paths that
    avoid what was left out)."""
    import dataclasses

    from ..spec.load import load_domain_salvaged
    from ..spec.tasks import load_tasks_partial

    ref = find_domain(name)
    salvaged = load_domain_salvaged(ref.root)
    if salvaged.spec is None:
        return []
    spec, dropped = salvaged.spec, set(salvaged.dropped)
    tasks, _ = load_tasks_partial(*ref.task_dirs)  # their own parse problems were reported by open_domain
    if ("database", "tables") in dropped:  # no table declaration could be read: only the checks that need none
        return check_tasks(Opened(ref, spec, None, tasks), replay=False, dropped=dropped)
    # a table left out would make every statement, view and key that uses it a second, false problem:
    # those are left out with it before the domain's own checks
    spec, gone, problems = _checked_without(spec, {u[2] for u in dropped if u[:2] == ("database", "tables")})
    flawed = {p.key.split(".")[2] for p in problems if p.key.startswith("database.tables.")}
    if flawed:  # tables that parsed but are wrong (a key naming no column): the rest is checked without them
        spec, more = without_tables(spec, flawed)
        gone |= more
        problems = [p for p in problems if p.key.startswith("database.tables.")] + \
                   [p for p in check_domain(spec) if not p.key.startswith("database.tables.")]
    dropped |= gone
    broken = {p.key.split(".")[1] for p in problems if p.key.startswith("tools.")}
    dropped |= {("tools", t) for t in broken}
    tables_ok = not any(p.key.startswith("database.") and not p.key.startswith("database.tables.") for p in problems) \
        and not any(u[:1] == ("database",) and u[:2] != ("database", "tables") for u in dropped)
    spec = dataclasses.replace(spec, domain=spec.domain.model_copy(
        update={"tools": {k: v for k, v in spec.domain.tools.items() if k not in broken}}))
    compiled = None
    if tables_ok and not any(isinstance(t, m.McpTool) for t in spec.domain.tools.values()):
        try:
            compiled = compile_domain(spec)
            compiled.trust = trust
        except SpecError as e:  # seed rows that do not fit the schema
            problems += e.problems
    problems += check_tasks(Opened(ref, spec, compiled, tasks), replay=compiled is not None, dropped=dropped)
    return problems


def _checked_without(spec, left_out: set[str]):
    """(spec without the tables left out of a broken domain.yaml and what uses them, those as `dropped` units,
    check_domain's problems on the rest). What names a table that is not declared is left out too when some table
    was: the broken table may be it under the name the author meant (a quote in `pat"ients`)."""
    if not left_out:
        return spec, set(), check_domain(spec)
    declared = spec.domain.database.tables
    undeclared = {ref.partition(".")[0] for t in declared.values() for ref in t.foreign_keys.values()} - set(declared)
    spec, gone = without_tables(spec, left_out | undeclared)
    problems = check_domain(spec)
    missing = {found.group(1) for p in problems for found in [_NO_SUCH_TABLE.search(p.message)] if found}
    if missing:
        spec, more = without_tables(spec, missing)
        gone |= more
        problems = check_domain(spec)
    return spec, gone, problems


_NO_SUCH_TABLE = re.compile(r"no such table: (?:main\.)?(\w+)")


def without_tables(spec, tables: set[str]):
    """(spec without `tables` and what names them: views, fragments and after_write statements over them, sql
    tools whose statements use them, foreign keys into them, their seed rows and random generators; the tools,
    tables and views left out, as `dropped` units). A statement names a table when its name occurs in it as a word."""
    import dataclasses

    if not tables:
        return spec, set()
    db = spec.domain.database
    db_views = set(db.views)
    gone = set(tables)
    for _ in range(len(db.views) + len(db.fragments)):  # a view or fragment over a gone one is gone too
        more = {n for n, sql in {**db.views, **db.fragments}.items() if n not in gone and names_any(sql, gone)}
        if not more:
            break
        gone |= more
    kept = {t: table.model_copy(update={"foreign_keys": {c: r for c, r in table.foreign_keys.items()
                                                          if r.partition(".")[0] not in gone}})
            for t, table in db.tables.items() if t not in gone}
    db = db.model_copy(update={
        "tables": kept, "views": {n: v for n, v in db.views.items() if n not in gone},
        "fragments": {n: f for n, f in db.fragments.items() if n not in gone},
        "after_write": [w for w in db.after_write if not names_any(w, gone)],
        "generate": db.generate if not db.generate or not any(names_any(str(g), gone) or t in gone
                                                              for t, g in db.generate.items()) else None})
    tools = {n for n, t in spec.domain.tools.items() if isinstance(t, m.SqlTool) and names_any(" ".join(sql_of(t)), gone)}
    domain = spec.domain.model_copy(update={"database": db,
                                            "tools": {n: t for n, t in spec.domain.tools.items() if n not in tools}})
    left_out = {("tools", t) for t in tools} | {("database", "views" if n in db_views else "tables", n)
                                                 for n in gone if n in db_views or n in spec.domain.database.tables}
    return dataclasses.replace(spec, domain=domain, seeds={t: s for t, s in spec.seeds.items() if t not in gone}), left_out


def sql_of(tool: m.SqlTool) -> list[str]:
    """Every SQL text of a sql tool: its checks (and their `each`), writes and query."""
    out = [c.query for c in tool.checks] + [v for c in tool.checks for v in (c.each or {}).values()]
    return out + list(tool.writes) + ([tool.query] if tool.query else [])


def names_any(sql: str, names: set[str]) -> bool:
    return any(re.search(rf"\b{re.escape(n)}\b", sql, re.I) for n in names)
