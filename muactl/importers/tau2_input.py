"""A τ²-bench checkout read as untrusted input: every file `muactl import tau2` reads comes through here.

A checkout is someone else's folder. Each file must lie inside it once links are resolved (a linked
policy.md would otherwise put any file of this machine into every system prompt; links that stay
inside are fine), be a regular file (a FIFO would block the import forever), stay within its limit in
muactl/limits.py, and be UTF-8 text without NUL bytes. JSON is counted before it is parsed; tools.py is
parsed with `ast`, never run. τ²'s tasks and splits are checked for the shape the importer relies on.
Every refusal is a SpecError naming the file (and line, column and field where there is one), raised
before anything is written.
"""

from __future__ import annotations

import ast
import json
import os
import re
import stat
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ..errors import Problem, SpecError
from ..limits import (MAX_TAU2_JSON_BYTES, MAX_TAU2_JSON_VALUES, MAX_TAU2_SOURCE_BYTES, MAX_TAU2_TASKS,
                      MAX_TAU2_TOML_BYTES, quote)
from ..spec.seeds import parse_json

# ---------------------------------------------------------------- files


def read_text(root: Path, path: Path, max_bytes: int, limit_name: str) -> str:
    """The UTF-8 text of `path`, a regular file inside the checkout `root` (resolved), of at most max_bytes."""
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as e:  # RuntimeError: a link loop
        raise SpecError.single(path, f"cannot resolve this path: {e}") from None
    if not real.is_relative_to(root):
        raise SpecError.single(path, f"links to {real}, outside the checkout {root}; muactl reads only files inside "
                                     "the τ²-bench checkout (copy the file in instead of linking it)")
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK)  # O_NONBLOCK: opening a FIFO must not wait for a writer
    except OSError as e:
        raise SpecError.single(path, f"cannot read file: {e.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise SpecError.single(path, "not a regular file (a folder, FIFO or device); expected a τ²-bench data file")
    with os.fdopen(fd, "rb") as f:
        if info.st_size > max_bytes:
            raise too_big(path, info.st_size, max_bytes, limit_name)
        raw = f.read(max_bytes + 1)  # the file may have grown since fstat
    if len(raw) > max_bytes:
        raise too_big(path, len(raw), max_bytes, limit_name)
    return decoded(path, raw)


def too_big(path: Path, size: int, max_bytes: int, limit_name: str) -> SpecError:
    return SpecError.single(path, f"file is {size:,} bytes, over the {max_bytes:,}-byte limit ({limit_name}); "
                                  "τ²-bench's own files are far smaller")


def decoded(path: Path, raw: bytes) -> str:
    nul = raw.find(b"\0")
    if nul >= 0:
        raise SpecError.single(path, "holds a NUL byte; expected UTF-8 text", *line_col(raw, nul))
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise SpecError.single(path, f"not valid UTF-8 (byte {e.start}); save the file as UTF-8",
                               *line_col(raw, e.start)) from None


def line_col(raw: bytes | str, offset: int) -> tuple[int, int]:
    newline = b"\n" if isinstance(raw, bytes) else "\n"
    return raw.count(newline, 0, offset) + 1, offset - (raw.rfind(newline, 0, offset) + 1) + 1


def json_value(path: Path, text: str) -> Any:
    """Parsed JSON within MAX_TAU2_JSON_VALUES and the seed limits (nesting, integer range)."""
    values = text.count(",") + text.count("[") + text.count("{") + 1
    if values > MAX_TAU2_JSON_VALUES:
        raise SpecError.single(path, f"holds {values:,} commas and brackets, more JSON values than the limit of "
                                     f"{MAX_TAU2_JSON_VALUES:,} (MAX_TAU2_JSON_VALUES)")
    try:
        return parse_json(text)
    except json.JSONDecodeError as e:
        raise SpecError.single(path, f"not valid JSON: {e.msg}", e.lineno, e.colno) from None
    except ValueError as e:  # past a seed limit: nesting, integer range, NaN
        raise SpecError.single(path, str(e)) from None


def read_json(root: Path, path: Path) -> Any:
    return json_value(path, read_text(root, path, MAX_TAU2_JSON_BYTES, "MAX_TAU2_JSON_BYTES"))


def read_toml(root: Path, path: Path) -> dict:
    import tomllib

    text = read_text(root, path, MAX_TAU2_TOML_BYTES, "MAX_TAU2_TOML_BYTES")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        where = re.search(r" \(at line (\d+), column (\d+)\)$", str(e))
        what = str(e)[:where.start()] if where else str(e)
        raise SpecError.single(path, f"not valid TOML: {what}",
                               *(map(int, where.groups()) if where else (1, 1))) from None
    except RecursionError:
        raise SpecError.single(path, "TOML nested too deeply to read") from None


def read_python(root: Path, path: Path, max_bytes: int = MAX_TAU2_SOURCE_BYTES,
                limit_name: str = "MAX_TAU2_SOURCE_BYTES") -> ast.Module:
    """A checkout's Python module (τ²'s tools.py, BFCL's classes) as a syntax tree: parsed, never run."""
    text = read_text(root, path, max_bytes, limit_name)
    try:
        return ast.parse(text, filename=str(path))
    except SyntaxError as e:
        raise SpecError.single(path, f"Python syntax error: {e.msg}", e.lineno or 1, e.offset or 1) from None
    except (RecursionError, MemoryError):  # CPython's parser reports deep nesting as either
        raise SpecError.single(path, "Python nested too deeply to parse") from None


def kind(value: Any) -> str:
    """What a JSON value is, for messages ('a list', 'a string' ...)."""
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


# ---------------------------------------------------------------- tasks and splits


class Tau2Shape(BaseModel):
    """The parts of a τ² task the importer reads; other fields are τ²'s own and ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)


class Tau2Instructions(Tau2Shape):
    domain: str | None = None
    plain_text: str | None = None  # the instructions were a plain text (below): τ² prints them as they are
    reason_for_call: str
    known_info: str | None = None
    unknown_info: str | None = None
    task_instructions: str | None = None


class Tau2Scenario(Tau2Shape):
    persona: str | None = None
    instructions: Tau2Instructions

    @field_validator("instructions", mode="before")
    @classmethod
    def plain_text(cls, value: Any) -> Any:  # older τ² tasks give the reason for the call as plain text
        return {"reason_for_call": value, "plain_text": value} if isinstance(value, str) else value


class Tau2Action(Tau2Shape):
    name: str
    arguments: dict[str, Any] | None = None
    compare_args: list[str] | None = None
    requestor: Literal["assistant", "user"] | None = None


class Tau2EnvCall(Tau2Shape):
    func_name: str
    arguments: dict[str, Any] | None = None
    assert_value: bool = True


class Tau2Call(Tau2Shape):
    name: str
    arguments: dict[str, Any] | None = None


class Tau2Message(Tau2Shape):
    tool_calls: list[Tau2Call] | None = None


class Tau2InitData(Tau2Shape):
    agent_data: dict[str, dict[str, Any]] | None = None  # table -> record key -> fields
    user_data: dict[str, dict[str, Any]] | None = None


class Tau2State(Tau2Shape):
    initialization_data: Tau2InitData | None = None
    initialization_actions: list[Tau2EnvCall] | None = None
    message_history: list[Tau2Message] | None = None


class Tau2Criteria(Tau2Shape):
    actions: list[Tau2Action] | None = None
    env_assertions: list[Tau2EnvCall] | None = None
    communicate_info: list[str] | None = None
    nl_assertions: list[str] | None = None
    reward_basis: list[str] | None = None


class Tau2Task(Tau2Shape):
    id: str
    user_scenario: Tau2Scenario
    initial_state: Tau2State | None = None
    evaluation_criteria: Tau2Criteria | None = None
    required_documents: list[str] | None = None  # banking_knowledge: the documents golden retrieval shows
    user_tools: list[str] | None = None  # banking_knowledge: the user's tools in the task (None: all)


def task_id(raw: str) -> str:
    """τ²'s task id as a muactl one: runs of other characters become '_', and it starts with a letter or digit."""
    return re.sub(r"[^A-Za-z0-9_.:-]+", "_", raw).lstrip("_.:-").rstrip("_") or "task"


def read_tasks(root: Path, path: Path) -> list[dict]:
    """τ²'s tasks.json: each task checked and given every field of Tau2Task (absent ones as null), ids
    unique once made muactl ids."""
    text = read_text(root, path, MAX_TAU2_JSON_BYTES, "MAX_TAU2_JSON_BYTES")
    raw = json_value(path, text)
    if not isinstance(raw, list):
        raise SpecError.single(path, f"expected a list of tasks at the top level, found {kind(raw)}")
    if len(raw) > MAX_TAU2_TASKS:
        raise SpecError.single(path, f"holds {len(raw):,} tasks, over the limit of {MAX_TAU2_TASKS:,} (MAX_TAU2_TASKS)")
    tasks, bad = [], []
    for i, item in enumerate(raw):
        try:
            tasks.append(Tau2Task.model_validate(item).model_dump())
        except ValidationError as e:
            bad.append((i, item, e))
    if bad:
        at = item_positions(text)
        raise SpecError([p for i, item, e in bad for p in shape_problems(
            path, f"[{i}]", e, at[i], f" (task {item['id']!r})" if isinstance(item, dict) and "id" in item else "")])
    check_ids(path, text, tasks)
    return tasks


def read_task_folder(root: Path, folder: Path) -> list[dict]:
    """τ²'s tasks kept one per file (banking_knowledge's tasks/task_*.json, which its get_tasks reads; its
    tasks.json is an older copy), in file name order, each checked as read_tasks checks them."""
    files = sorted(folder.glob("task_*.json"))
    if len(files) > MAX_TAU2_TASKS:
        raise SpecError.single(folder, f"holds {len(files):,} tasks, over the limit of {MAX_TAU2_TASKS:,} (MAX_TAU2_TASKS)")
    tasks, problems = [], []
    for path in files:
        item = read_json(root, path)
        try:
            tasks.append(Tau2Task.model_validate(item).model_dump())
        except ValidationError as e:
            problems += shape_problems(path, "", e, (1, 1))
    if problems:
        raise SpecError(problems)
    text = json.dumps([t["id"] for t in tasks])  # check_ids points at the item: here, the task's place in order
    check_ids(folder, text, tasks)
    return tasks


def check_ids(path: Path, text: str, tasks: list[dict]) -> None:
    """Two τ² tasks must not share an id, nor become the same muactl id ('a b' and 'a_b' both give 'a_b')."""
    first: dict[str, int] = {}
    problems, at = [], None
    for i, t in enumerate(tasks):
        mine = task_id(t["id"])
        if mine in first:
            other = tasks[first[mine]]["id"]
            same = "the same id" if other == t["id"] else f"muactl id {mine!r}, as task {other!r} does"
            at = at or item_positions(text)
            problems.append(Problem(str(path), *at[i], f"[{i}].id",
                                    f"task {quote(t['id'])} has {same} (task [{first[mine]}]); muactl ids hold only "
                                    "letters, digits and _ . : -, so rename one of them"))
        else:
            first[mine] = i
    if problems:
        raise SpecError(problems)


def read_splits(root: Path, path: Path) -> dict[str, list[str]]:
    """τ²'s split_tasks.json: split name -> task ids; no task both in train and in test."""
    raw = read_json(root, path)
    if not isinstance(raw, dict):
        raise SpecError.single(path, f"expected an object of split name -> list of task ids (train, test, base) "
                                     f"at the top level, found {kind(raw)}")
    problems = []
    for name, ids in raw.items():
        if not isinstance(ids, list):
            problems.append(Problem(str(path), 1, 1, name, f"expected a list of task ids, found {kind(ids)}"))
            continue
        problems += [Problem(str(path), 1, 1, f"{name}[{j}]", f"expected a task id (a string), found {quote(x)}")
                     for j, x in enumerate(ids) if not isinstance(x, str)]
    if problems:
        raise SpecError(problems)
    both = sorted(set(raw.get("train", [])) & set(raw.get("test", [])))
    if both:
        raise SpecError.single(path, f"tasks in both train and test: {', '.join(map(quote, both[:5]))}"
                                     + (f" and {len(both) - 5} more" if len(both) > 5 else ""), key="test")
    return raw


EXPECTED = {"model_type": "expected an object", "dict_type": "expected an object", "list_type": "expected a list",
            "string_type": "expected a string", "bool_type": "expected true or false"}


def shape_problems(path: Path, prefix: str, error: ValidationError, at: tuple[int, int], of: str = "") -> list[Problem]:
    """A pydantic error on τ² data as problems at line and column `at`, keyed by the JSON path (prefix, then the field's)."""
    out = []
    for e in error.errors():
        key = prefix + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"])
        if e["type"] == "missing":
            what = "required field missing"
        else:
            what = EXPECTED.get(e["type"], e["msg"]) + f", found {kind(e['input'])} {quote(e['input'], 40)}"
        out.append(Problem(str(path), *at, key, what + of))
    return out


def item_positions(text: str) -> list[tuple[int, int]]:
    """Line and column where each item of the JSON list that is the whole (valid) `text` starts."""
    decoder, space = json.JSONDecoder(), re.compile(r"[ \t\n\r]*")
    pos = space.match(text, text.index("[") + 1).end()
    out, line, start, counted = [], 1, 0, 0  # start: where the current line starts
    while text[pos] != "]":
        line += text.count("\n", counted, pos)
        start = max(start, text.rfind("\n", counted, pos) + 1)
        counted = pos
        out.append((line, pos - start + 1))
        _, pos = decoder.raw_decode(text, pos)
        pos = space.match(text, pos).end()
        if text[pos] == ",":
            pos = space.match(text, pos + 1).end()
    return out
