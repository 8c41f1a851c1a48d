"""`muactl validate` on task templates: static checks (SQL, placeholders, tools, personas) of each, then a
few instances drawn and replayed on the seed database and, where declared, on random databases."""

from __future__ import annotations

import sqlite3
from typing import Any, Iterator

from ..compile.database import schema_connection
from ..compile.sql import Guard, explain, param_names
from ..env.budget import SqlBudget
from ..errors import Problem
from ..spec import models as m
from ..spec.task_templates import placeholder_fields
from .task_templates import (PLACEHOLDER, LimitStop, NoPartner, TaskTemplateSpec, contrast_partner, instantiate,
                             placeholders, stream_seed)


def _strings(node: Any, path: tuple) -> Iterator[tuple[tuple, str]]:
    if isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(k, path + (k,)) if isinstance(k, str) and "{" in k else iter(())
            yield from _strings(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, path + (i,))


def check_templates(opened, sample_seeds: int = 3) -> list[Problem]:
    """Static checks (SQL, placeholders, tools, personas) of every template, then a few instances of
    each drawn and replayed on the seed database and, if declared, on random databases."""
    d = opened.spec.domain
    conn = schema_connection(d)
    guard = Guard(set(d.database.tables))
    guard.install(conn)
    problems: list[Problem] = []
    for ts in opened.templates:
        found = _check_static(ts, opened, conn, guard)
        problems += found
        if not found:
            found = _check_instances(ts, opened, sample_seeds)
            problems += found
        if not found and ts.template.contrast is not None:  # pairs of instances that replay
            problems += _check_contrast(ts, opened, sample_seeds)
    conn.close()
    return problems


def _check_static(ts: TaskTemplateSpec, opened, conn, guard) -> list[Problem]:
    t, d = ts.template, opened.spec.domain
    out: list[Problem] = []
    for p in [t.persona] if isinstance(t.persona, str) else (t.persona or []):
        if p not in d.personas:
            out.append(ts.problem(("persona",), f"undefined persona '{p}'; declared: {', '.join(d.personas) or 'none'}"))
    error = explain(conn, guard, t.sample, "read")
    if not error and param_names(t.sample):
        error = f"the sample query takes no parameters (:{param_names(t.sample)[0]})"
    if error:
        return out + [ts.problem(("sample",), error)]
    guard.mode = "read"
    budget = SqlBudget(conn, d.limits.sql_steps)  # executing it steps to its first row, even on no data
    try:
        with budget.limit():
            bound = [c[0] for c in conn.execute(t.sample).description]
    except sqlite3.Error as e:
        return out + [ts.problem(("sample",), f"the sample query {budget.stopped(e) or f'failed: {e}'}")]
    for name, spec in t.derive.items():
        path = ("derive", name)
        if name in bound:
            out.append(ts.problem(path, f"'{name}' is already bound by the sample query"))
        if isinstance(spec, str):
            error = explain(conn, guard, spec, "read")
            if error:
                out.append(ts.problem(path, error))
            for p in param_names(spec):
                if p not in bound:
                    out.append(ts.problem(path, f":{p} is not bound (bound so far: {', '.join(bound)})"))
        elif spec.kind in ("ref", "parent"):
            out.append(ts.problem(path, f"'{spec.kind}' only works in database generators; use a SELECT here"))
        bound.append(name)
    body = placeholder_fields(ts.data)
    for path, text in _strings(body, ()):
        for ph in placeholders(text):
            if ph.split(".")[0] not in bound:
                out.append(ts.problem(path, f"placeholder {{{ph}}} is not bound; bound: {', '.join(bound)}"))
    for group, calls, path0 in (("setup", t.setup, ("setup",)), ("actions", t.expect.actions, ("expect", "actions"))):
        for i, call in enumerate(calls):
            name, _ = m.call_parts(call)
            if name not in opened.compiled.tools:
                out.append(ts.problem(path0 + (i, name), f"undefined tool '{name}'"))
    for i, a in enumerate(t.expect.assert_):
        if a.query is None:
            continue  # a tool call: checked with the filled task
        error = explain(conn, guard, PLACEHOLDER.sub("0", a.query), "read")
        if error:
            out.append(ts.problem(("expect", "assert", i, "query"), error))
    return out


def _checked_databases(opened, n: int) -> list[int | None]:
    """The seed database (None) and, where the domain draws random ones, the first n of the test stream."""
    return [None] + ([stream_seed("test", 0, k) for k in range(n)] if opened.spec.domain.database.generate else [])


def _check_instances(ts: TaskTemplateSpec, opened, n: int) -> list[Problem]:
    out: list[Problem] = []
    for db_seed in _checked_databases(opened, n):
        reasons = set()
        for k in range(n):
            task, why = instantiate(ts, opened, k, db_seed)
            if task is None:
                reasons.add(why)
        where = "the seed database" if db_seed is None else f"random database {db_seed}"
        for why in sorted(reasons):
            path = (("sample",) if why.startswith("the sample query") else ("derive",) if why.startswith("derive")
                    else ("expect", "assert") if why.startswith("assertion") else ("expect", "actions"))
            out.append(ts.problem(path, f"on {where}: {why}"))
    return out


def _check_contrast(ts: TaskTemplateSpec, opened, n: int) -> list[Problem]:
    """A contrast names columns both templates have, and a pair can be drawn: instances are tried until the first
    pair, at most 4n on each database the instance checks use. An instance without a partner is normal (its pair is
    dropped); a partner that fails on its own is reported at its own template."""
    reasons: list[str] = []
    for db_seed in _checked_databases(opened, n):
        for k in range(4 * n):
            task, why = instantiate(ts, opened, k, db_seed)
            if isinstance(why, LimitStop):  # every later try would spend the budget again
                return []
            if task is None:
                continue
            partner, why = contrast_partner(ts, task, opened, k, db_seed, None)
            if partner is not None:
                return []
            if isinstance(why, LimitStop):  # reported at the partner's own template
                return []
            if not why.startswith("contrast: "):
                continue
            if not isinstance(why, NoPartner):
                return [ts.problem(("contrast",), why)]
            reasons.append(why)
    if reasons:
        return [ts.problem(("contrast",), f"no pair could be drawn in {len(reasons)} tries: {reasons[0]}")]
    return []
