"""Load domain.yaml and task files into spec models, reporting every problem with file:line:column."""

from __future__ import annotations

import csv
import difflib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import Problem, SpecError
from ..limits import (
    MAX_CSV_FIELD_BYTES,
    MAX_JSON_DEPTH,
    MAX_JSONL_LINE_BYTES,
    MAX_POLICY_BYTES,
    SQLITE_INT_MAX,
    SQLITE_INT_MIN,
)
from . import models as m
from .source import Located, load_yaml, read_text

TASK_FILE_SPLITS = {"train", "test"}
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass
class SeedSource:
    """Where a table's seed rows came from, so bad rows can be reported at their line."""

    table: str
    file: Path
    lines: list[int]  # one 1-based line per row
    rows: list[dict[str, Any]]
    key_prefix: tuple = ()


@dataclass
class DomainSpec:
    domain: m.Domain
    root: Path  # folder holding domain.yaml
    doc: Located
    policy_text: str
    guidelines_text: str | None
    seeds: dict[str, SeedSource] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)  # every file the domain is built from (for the cache key)


@dataclass
class TaskSpec:
    task: m.Task
    file: Path
    index: int
    doc: Located

    @property
    def split(self) -> str:
        # task files not named after a split must say it per task (load_task_file checks); "train" is
        # for tasks made in code (template instances, the free chat)
        return self.task.split or (self.file.stem if self.file.stem in TASK_FILE_SPLITS else "train")

    def problem(self, path: tuple, message: str) -> Problem:
        return self.doc.problem(path, message, prefix=self._prefix)

    @property
    def _prefix(self) -> tuple:
        return ("tasks", self.index) if isinstance(self.doc.data, dict) else (self.index,)


# ---------------------------------------------------------------- pydantic errors -> problems


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model class that owns the last key of `loc`, for did-you-mean suggestions."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        if isinstance(current, type) and issubclass(current, BaseModel):
            f = _field(current, part)
            if f is None:
                tag = {"sql": m.SqlTool, "builtin": m.BuiltinTool, "python": m.PythonTool,
                       "simulated": m.SimulatedTool, "mcp": m.McpTool}.get(part)
                current = tag or current
                continue
            current = _inner_model(f.annotation)
        else:
            current = None
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _field(model: type[BaseModel], name: str):
    for fname, f in model.model_fields.items():
        if name in (fname, f.alias):
            return f
    return None


def _inner_model(annotation: Any) -> Any:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _clean_loc(loc: tuple, data: Any) -> tuple:
    """Drop pydantic's union tags (sql, builtin, str, list[...]) that are not keys in the data."""
    out: list = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            out.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        elif isinstance(node, (dict, list)) and not _is_tag(part):
            out.append(part)  # a missing or unknown key: keep it, it names the problem
            node = None
    return tuple(out)


def _is_tag(part: Any) -> bool:
    return isinstance(part, str) and (part in ("sql", *m.TOOL_KINDS) or "[" in part or part in
                                      ("str", "int", "float", "bool", "list", "dict", "none", "function-after"))


# SQL and JSON-Schema habits (varchar, float, str) are too far from muactl's type names for difflib;
# each maps to its column-type and param-type equivalents, and whichever the field allows is suggested
_SYNONYMS = {
    "varchar": ("text", "string"), "char": ("text", "string"), "string": ("text",), "str": ("text", "string"),
    "text": ("string",), "date": ("text", "string"), "datetime": ("text", "string"), "timestamp": ("text", "string"),
    "int": ("integer",), "bigint": ("integer",), "smallint": ("integer",),
    "float": ("real", "number"), "double": ("real", "number"), "decimal": ("real", "number"),
    "numeric": ("real", "number"), "number": ("real",), "real": ("number",),
    "bool": ("boolean",), "jsonb": ("json",), "dict": ("object", "json"), "list": ("array", "json"),
    "object": ("json",), "array": ("json",),
}


def _known_keys(model: type[BaseModel], loc: tuple) -> list[str]:
    owner = _model_at(model, loc)
    return sorted({f.alias or n for n, f in owner.model_fields.items()}) if owner else []


def _misspelt(errors: list[tuple[tuple, dict]], model: type[BaseModel]) -> set[tuple]:
    """Key paths reported missing only because the key is there with a typo ('descripton'): the
    unknown-key problem already says 'did you mean', a second problem would only blur it."""
    out = set()
    for loc, err in errors:
        if err["type"] == "extra_forbidden" and loc:
            for close in difflib.get_close_matches(str(loc[-1]), _known_keys(model, loc), n=1):
                out.add(loc[:-1] + (close,))
    return out


def _message(err: dict, model: type[BaseModel], loc: tuple) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        known = _known_keys(model, loc)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"allowed keys: {', '.join(known)}" if known else ""
        return f"unknown key '{loc[-1]}'; {hint}".rstrip("; ")
    if kind == "missing":
        return f"required key '{loc[-1]}' is missing"
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        got = err.get("input")
        options = [x.strip(" '") for x in expected.replace(" or ", ",").split(",")]
        close = difflib.get_close_matches(str(got), options, n=1)
        if not close:
            close = [x for x in _SYNONYMS.get(str(got).strip().lower().split("(")[0], ()) if x in options][:1]
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"{got!r} is not allowed here; expected {expected}{hint}"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    got = err.get("input")
    if kind.endswith("_type") and not isinstance(got, (dict, list)):
        msg += f" (got {type(got).__name__} {got!r})"
    return msg


def validate(doc: Located, model: type[BaseModel], data: Any = None, prefix: tuple = ()) -> tuple[Any, list[Problem]]:
    """Validate `data` (default: the whole document) against `model`; problems carry positions."""
    data = doc.data if data is None else data
    try:
        return model.model_validate(data), []
    except ValidationError as e:
        problems = []
        seen = set()
        errors = [(_clean_loc(tuple(err["loc"]), data), err) for err in e.errors()]
        misspelt = _misspelt(errors, model)
        for loc, err in errors:
            if err["type"] == "missing" and loc in misspelt:
                continue
            # a union of str|list|dict reports the same place several times; keep the first
            if loc in seen and err["type"] not in ("extra_forbidden", "missing"):
                continue
            seen.add(loc)
            problems.append(doc.problem(loc, _message(err, model, loc), prefix=prefix))
        return None, problems


# ---------------------------------------------------------------- domain


def _inside(root: Path, value: str, doc: Located, key: tuple, problems: list[Problem]) -> Path | None:
    """`root / value` when it stays inside the domain's folder (after `..` and symbolic links are
    followed), else a problem naming the key: a domain, and above all a pack from someone else, must
    never read local files into prompts or databases (an absolute path, `../..`, a link out)."""
    path = root / value
    try:
        inside = path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        inside = False
    if not inside:
        problems.append(doc.problem(key, f"'{value}' is outside the domain's folder; every file a domain uses "
                                         f"must be inside {root} (copy the file in)"))
        return None
    return path


def _text_or_file(root: Path, value: str, doc: Located, key: str, problems: list[Problem], files: list[Path]) -> str:
    """Policy and guidelines are either a file beside domain.yaml or inline text."""
    if "\n" not in value and value.strip().endswith((".md", ".txt")):
        path = _inside(root, value.strip(), doc, (key,), problems)
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
    seeds = _load_seeds(root, domain, doc, problems, files)
    domain = _expand_fragments(domain, doc, problems)
    if problems and strict:
        raise SpecError(problems)
    return DomainSpec(domain, root, doc, policy, guidelines, seeds, files)


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
            units = {_unit(_clean_loc(tuple(err["loc"]), data)) for err in e.errors()}
            units.discard(())
            if not units or not all(_drop(data, u) for u in units):
                return Salvaged(None, problems, dropped)
            dropped |= units
            continue
        files_problems: list[Problem] = []
        spec = _finish_domain(root, doc, domain, files_problems, strict=False)
        problems += [p for p in files_problems if p not in problems]
        if any(p.key not in ("policy", "user_guidelines") for p in files_problems):
            dropped.add(("database", "seed"))  # seed rows went missing: compiling them would report false problems
        return Salvaged(spec, problems, dropped)
    return Salvaged(None, problems, dropped)


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


def _expand_fragments(domain: m.Domain, doc: Located, problems: list[Problem]) -> m.Domain:
    """Tools' statements with every {{fragment}} pasted in (database.fragments)."""
    from ..compile.sql import expand_fragments

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


def _load_seeds(root: Path, domain: m.Domain, doc: Located, problems: list[Problem], files: list[Path]) -> dict[str, SeedSource]:
    seed = domain.database.seed
    tables = domain.database.tables
    out: dict[str, SeedSource] = {}
    if seed is None:
        return out
    if isinstance(seed, str):
        folder = _inside(root, seed, doc, ("database", "seed"), problems)
        if folder is None:
            return out
        if not folder.is_dir():
            problems.append(doc.problem(("database", "seed"), f"folder '{seed}' not found beside domain.yaml"))
            return out
        for file in sorted(folder.iterdir()):
            if file.suffix not in (".jsonl", ".csv") or file.name.startswith("."):
                continue
            if _inside(root, str(file.relative_to(root)), doc, ("database", "seed"), problems) is None:
                continue  # a link inside the seed folder that points out of the domain
            if file.stem not in tables:
                close = difflib.get_close_matches(file.stem, list(tables), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else f"; declared tables: {', '.join(tables)}"
                problems.append(Problem(str(file), 1, 1, "", f"seed file for undeclared table '{file.stem}'{hint}"))
                continue
            if file.stem in out:  # patients.csv and patients.jsonl: one would silently replace the other
                problems.append(Problem(str(file), 1, 1, "", f"table '{file.stem}' already has seed file "
                                        f"{out[file.stem].file.name}; keep one file per table"))
                continue
            src = _read_seed_file(file, file.stem, problems)
            if src:
                files.append(file)
                out[file.stem] = src
        return out
    for table, value in seed.items():
        key = ("database", "seed", table)
        if table not in tables:
            close = difflib.get_close_matches(table, list(tables), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            problems.append(doc.problem(key, f"seed rows for undeclared table '{table}'{hint}"))
            continue
        if isinstance(value, str):
            file = _inside(root, value, doc, key, problems)
            if file is None:
                continue
            if not file.is_file():
                problems.append(doc.problem(key, f"seed file '{value}' not found beside domain.yaml"))
                continue
            if file.suffix not in (".jsonl", ".csv"):  # anything else would be misread as CSV
                problems.append(doc.problem(key, f"seed file '{value}' must be .jsonl or .csv"))
                continue
            src = _read_seed_file(file, table, problems)
            if src:
                files.append(file)
                out[table] = src
        else:
            lines = [doc.pos(key + (i,))[0] for i in range(len(value))]
            out[table] = SeedSource(table, doc.file, lines, value, key)
    return out


def _read_seed_file(file: Path, table: str, problems: list[Problem]) -> SeedSource | None:
    try:
        text = read_text(file)
    except SpecError as e:
        problems.extend(e.problems)
        return None
    rows, lines = [], []
    if file.suffix == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            if len(line) > MAX_JSONL_LINE_BYTES // 4 and len(line.encode()) > MAX_JSONL_LINE_BYTES:
                problems.append(Problem(str(file), n, 1, "", f"line is over the {MAX_JSONL_LINE_BYTES:,}-byte limit "
                                        "for one row (MAX_JSONL_LINE_BYTES)"))
                continue
            try:
                row = parse_json(line)
            except json.JSONDecodeError as e:
                problems.append(Problem(str(file), n, e.colno, "", f"invalid JSON: {e.msg}"))
                continue
            except ValueError as e:
                problems.append(Problem(str(file), n, 1, "", str(e)))
                continue
            if not isinstance(row, dict):
                problems.append(Problem(str(file), n, 1, "", "each line must be a JSON object (one row)"))
                continue
            rows.append(row)
            lines.append(n)
        return SeedSource(table, file, lines, rows)
    csv.field_size_limit(MAX_CSV_FIELD_BYTES)  # Python's default, stated here so the message below stays true
    reader = csv.reader(io.StringIO(text), strict=True)  # strict: a stray or unterminated quote is an error
    header: list[str] | None = None
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            why = str(e)
            if "field larger" in why:
                why = f"a field is over the {MAX_CSV_FIELD_BYTES:,}-byte limit (MAX_CSV_FIELD_BYTES)"
            elif "unexpected end of data" in why:
                why = "a quoted field starting on this line is never closed (unterminated \")"
            problems.append(Problem(str(file), start, 1, "", f"CSV error: {why}"))
            break  # the reader cannot resync after a quoting error: later lines would be misread
        if header is None:
            header = fields
        elif fields:  # csv yields [] for a blank line
            if len(fields) != len(header):
                more = "more" if len(fields) > len(header) else "fewer"
                problems.append(Problem(str(file), start, 1, "", f"row has {more} fields than the header "
                                        f"({len(fields)}, the header has {len(header)})"))
                continue
            rows.append(dict(zip(header, fields)))
            lines.append(start)
    return SeedSource(table, file, lines, rows)


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > 19 or not SQLITE_INT_MIN <= int(text) <= SQLITE_INT_MAX:
        raise ValueError(f"integer {text[:30]}{'...' if len(text) > 30 else ''} is out of range "
                         f"(SQLite integers lie between {SQLITE_INT_MIN} and {SQLITE_INT_MAX})")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:30]} is out of range for a real")
    return value


def _json_constant(name: str):
    raise ValueError(f"{name} is not JSON; write null or a number")


def parse_json(text: str) -> Any:
    """json.loads within the seed limits (MAX_JSON_DEPTH nesting, SQLite's integer range, finite numbers).
    Raises json.JSONDecodeError for syntax errors and ValueError, with a short message, for broken limits."""
    too_deep = f"JSON nested deeper than {MAX_JSON_DEPTH} levels (MAX_JSON_DEPTH)"
    try:
        value = json.loads(text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant)
    except RecursionError:
        raise ValueError(too_deep) from None
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(too_deep)
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return value


# ---------------------------------------------------------------- tasks


def load_task_file(path: Path) -> list[TaskSpec]:
    """A task file is a list of tasks, or a mapping with a `tasks:` list."""
    out, problems = load_task_file_partial(path)
    if problems:
        raise SpecError(problems)
    return out


def load_task_file_partial(path: Path) -> tuple[list[TaskSpec], list[Problem]]:
    """The tasks of a file that parsed, and the problems of those that did not."""
    try:
        doc = load_yaml(path)
    except SpecError as e:
        return [], list(e.problems)
    data = doc.data
    prefix: tuple = ()
    if isinstance(data, dict):
        if "tasks" not in data or set(data) - {"tasks"}:
            extra = sorted(set(data) - {"tasks"})
            return [], [doc.problem((extra[0],) if extra else (), "a task file is a list of tasks, or a mapping with only a 'tasks:' list")]
        data, prefix = data["tasks"], ("tasks",)
    if not isinstance(data, list):
        return [], [doc.problem(prefix, "expected a list of tasks (each starting with '- id: ...')")]
    out, problems = [], []
    for i, item in enumerate(data):
        task, found = validate(doc, m.Task, item, prefix=prefix + (i,))
        problems.extend(found)
        if task is not None:
            spec = TaskSpec(task, path, i, doc)
            if task.split is None and path.stem not in TASK_FILE_SPLITS:
                # a file's name is its tasks' split only for train and test: dev.yaml silently becoming
                # train (or a split no command knows) would put held-out tasks into training
                problems.append(spec.problem(("id",), f"{path.name} is not named after a split (train.yaml, "
                                             "test.yaml), so each of its tasks needs `split: train` or `split: test`"))
            out.append(spec)
    return out, problems


def task_files(tasks_dir: Path | None) -> list[Path]:
    """Task files: every *.yaml and *.yml in the folder but the templates file."""
    if tasks_dir is None or not tasks_dir.is_dir():
        return []
    return sorted(p for p in tasks_dir.iterdir() if p.suffix in YAML_SUFFIXES and p.stem != "templates" and p.is_file())


def load_tasks(tasks_dir: Path | None) -> list[TaskSpec]:
    """All tasks of a domain, every file's problems reported together; duplicate ids are problems."""
    out, problems = load_tasks_partial(tasks_dir)
    if problems:
        raise SpecError(problems)
    return out


def load_tasks_partial(tasks_dir: Path | None) -> tuple[list[TaskSpec], list[Problem]]:
    """The tasks that parsed (the first of each id) and every problem of the task files."""
    out, problems = [], []
    for path in task_files(tasks_dir):
        tasks, found = load_task_file_partial(path)
        out.extend(tasks)
        problems.extend(found)
    seen: dict[str, TaskSpec] = {}
    for t in out:
        if t.task.id in seen:
            first = seen[t.task.id]
            problems.append(t.problem(("id",), f"duplicate task id '{t.task.id}' (first defined at {first.file.name}:{first.doc.pos(first._prefix + ('id',))[0]})"))
        else:
            seen[t.task.id] = t
    return list(seen.values()), problems
