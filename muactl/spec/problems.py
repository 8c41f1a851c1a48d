"""Pydantic's validation errors as problems at a file:line:column, with hints for misspelt keys."""

from __future__ import annotations

import difflib
from typing import Any

from pydantic import BaseModel, ValidationError

from ..errors import Problem
from . import models as m
from .source import Located


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


def clean_loc(loc: tuple, data: Any) -> tuple:
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
        errors = [(clean_loc(tuple(err["loc"]), data), err) for err in e.errors()]
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
