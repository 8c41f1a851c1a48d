"""Opening a domain: find it, load and check its spec, compile it, load its tasks and task templates.
Every command that works on a domain starts here."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from ..compile import CompiledDomain, compile_domain
from ..errors import Problem, SpecError
from ..spec.library import DomainRef, find_domain
from ..spec.load import DomainSpec, load_domain
from ..spec.tasks import TaskSpec, load_tasks
from .checks import check_domain


@dataclass
class Opened:
    ref: DomainRef
    spec: DomainSpec
    compiled: CompiledDomain
    tasks: list[TaskSpec] = field(default_factory=list)
    templates: list = field(default_factory=list)  # TaskTemplateSpec (muactl/domain/task_templates.py)

    def task(self, task_id: str) -> TaskSpec:
        for t in self.tasks:
            if t.task.id == task_id:
                return t
        close = difflib.get_close_matches(task_id, [t.task.id for t in self.tasks], n=3)
        from ..errors import UsageError

        raise UsageError(f"no task '{task_id}' in domain {self.ref.name}" + (f"; did you mean {', '.join(close)}?" if close else ""))


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
                from ..env.mcp_tools import attach

                # a command from a pack is someone else's code: start it only with --trust
                problems += attach(spec, compiled, refused=ref.trust_hint() if ref.untrusted and not trust else None)
    except SpecError as e:
        problems += e.problems
    if with_tasks:  # task files are checked even when the domain is broken: report everything at once
        try:
            tasks = load_tasks(*ref.task_dirs)
        except SpecError as e:
            problems += e.problems
        try:
            from .task_templates import load_templates

            templates = load_templates(ref.tasks_dir)
        except SpecError as e:
            problems += e.problems
    if problems:
        raise SpecError(problems)
    return Opened(ref, spec, compiled, tasks, templates if with_tasks else [])
