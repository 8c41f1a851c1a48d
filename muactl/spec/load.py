"""Load domain.yaml (with its policy, guidelines, seeds and fragments) into spec models, reporting every problem
with file:line:column. Task files: tasks.py."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from ..errors import Problem, SpecError
from ..limits import MAX_POLICY_BYTES
from . import models as m
from .fragments import expand_domain_fragments
from .problems import clean_loc, validate
from .seeds import SeedSource, load_seeds
from .source import Located, inside_folder, load_yaml, read_text


PROMPT_KEYS = ("agent_prompt", "user_prompt", "user_prompt_no_tools")  # whole prompts a domain may bring, read like its policy


@dataclass
class DomainSpec:
    domain: m.Domain
    root: Path  # folder holding domain.yaml
    doc: Located
    policy_text: str
    guidelines_text: str | None
    seeds: dict[str, SeedSource] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)  # every file the domain is built from (for the cache key)
    agent_prompt_text: str | None = None  # the domain's agent_prompt / user_prompt, read
    user_prompt_text: str | None = None
    user_prompt_no_tools_text: str | None = None


# ---------------------------------------------------------------- domain


def _text_or_file(root: Path, value: str, doc: Located, key: str, problems: list[Problem], files: list[Path]) -> str:
    """Policy and guidelines are either a file beside domain.yaml or inline text."""
    if "\n" not in value and value.strip().endswith((".md", ".txt")):
        path = inside_folder(root, value.strip(), doc, (key,), problems)
        if path is None:
            return ""
        if not path.is_file():
            problems.append(doc.problem((key,), f"file '{value}' not found beside domain.yaml"))
            return ""
        try:
            text = read_text(path, MAX_POLICY_BYTES, "MAX_POLICY_BYTES")
        except SpecError as e:
            problems.extend(e.problems)
            return ""
        files.append(path)
        if not text.strip():
            problems.append(Problem(str(path), 1, 1, key, "file is empty; write the rules the agent must follow"))
        return text
    return value


def load_domain(root: Path) -> DomainSpec:
    """Load and structurally validate `root/domain.yaml` and its seed files. Semantic checks: check.py."""
    path = root / "domain.yaml"
    doc = load_yaml(path)
    if not isinstance(doc.data, dict):
        raise SpecError.single(path, "expected a mapping at the top level (name:, description:, database:, tools: ...)")
    domain, problems = validate(doc, m.Domain)
    if domain is None:
        raise SpecError(problems)
    return _finish_domain(root, doc, domain, problems)


def _finish_domain(root: Path, doc: Located, domain: m.Domain, problems: list[Problem], strict: bool = True) -> DomainSpec:
    """Policy, guidelines and seed files; with `strict`, any problem raises, else the spec keeps what loaded."""
    path = root / "domain.yaml"
    files = [path]
    policy = _text_or_file(root, domain.policy, doc, "policy", problems, files)
    guidelines = None
    if domain.user_guidelines:
        guidelines = _text_or_file(root, domain.user_guidelines, doc, "user_guidelines", problems, files)
    prompts = {key: _text_or_file(root, getattr(domain, key), doc, key, problems, files) if getattr(domain, key) else None
               for key in PROMPT_KEYS}
    seeds = load_seeds(root, domain, doc, problems, files)
    domain = expand_domain_fragments(domain, doc, problems)
    if problems and strict:
        raise SpecError(problems)
    return DomainSpec(domain, root, doc, policy, guidelines, seeds, files, prompts["agent_prompt"], prompts["user_prompt"],
                      prompts["user_prompt_no_tools"])


@dataclass
class Salvaged:
    """What `muactl validate` can still check when domain.yaml has problems: the spec without its broken
    entries (None when nothing usable remains), every problem found so far, and what was left out."""

    spec: DomainSpec | None
    problems: list[Problem]
    dropped: set[tuple] = field(default_factory=set)  # ("tools", name), ("personas", name), ("database", "tables", t) ...


def load_domain_salvaged(root: Path) -> Salvaged:
    """Like load_domain, but instead of stopping at the first round of problems, leaves out each broken
    entry (a tool, a table, a persona, an unknown key) and validates the rest, so the later checks
    (SQL, seed rows, tasks) run on what parsed and `muactl validate` reports everything in one run."""
    try:
        return Salvaged(load_domain(root), [])
    except SpecError as e:
        problems = list(e.problems)
    try:
        doc = load_yaml(root / "domain.yaml")
    except SpecError:
        return Salvaged(None, problems)
    if not isinstance(doc.data, dict):
        return Salvaged(None, problems)
    data, dropped = json.loads(json.dumps(doc.data, default=str)), set()
    for _ in range(4):
        try:
            domain = m.Domain.model_validate(data)
        except ValidationError as e:
            units = {_unit(clean_loc(tuple(err["loc"]), data)) for err in e.errors()}
            units.discard(())
            if not units or not all(_drop(data, u) for u in units):
                return Salvaged(None, problems, dropped)
            dropped |= units
            continue
        files_problems: list[Problem] = []
        spec = _finish_domain(root, doc, domain, files_problems, strict=False)
        problems += [p for p in files_problems if p not in problems]
        left_out = {u[2] for u in dropped if u[:2] == ("database", "tables") and len(u) == 3}
        files_problems = [p for p in files_problems if not seeds_of_left_out(p, left_out)]
        if any(p.key not in ("policy", "user_guidelines", *PROMPT_KEYS) for p in files_problems):
            dropped.add(("database", "seed"))  # seed rows went missing: compiling them would report false problems
        return Salvaged(spec, problems, dropped)
    return Salvaged(None, problems, dropped)


def seeds_of_left_out(p: Problem, tables: set[str]) -> bool:
    """A seed problem that only says a table left out for its own problem is not declared (a second, false one)."""
    return "for undeclared table" in p.message and (Path(p.file).stem in tables and p.key == ""
                                                    or p.key.removeprefix("database.seed.") in tables)


def _unit(loc: tuple) -> tuple:
    """The entry to leave out for a problem at `loc`: a whole tool, persona or table, else the top-level key."""
    if loc[:2] == ("database", "tables") and len(loc) >= 3:
        return loc[:3]
    if loc and loc[0] in ("tools", "personas", "database") and len(loc) >= 2:
        return loc[:2]
    return loc[:1]


def _drop(data: dict, unit: tuple) -> bool:
    node = data
    for key in unit[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    if isinstance(node, dict) and unit[-1] in node:
        del node[unit[-1]]
        return True
    return False


