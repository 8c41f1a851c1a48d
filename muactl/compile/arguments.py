"""Tool arguments checked against a tool's JSON schema, with JSON Schema's meaning and bounded work.

Arguments come from a model, so they are untrusted:
- Sizes are checked first, before jsonschema walks anything: every string, array and object is measured
  against its param's maxLength / maxItems, or the defaults in muactl/limits.py where the param sets none,
  and nesting is bounded. A million item_ids is refused at once, not after validating each.
- `pattern` follows JSON Schema, which means ECMA-262 regular expressions, not Python's: `\\d`, `\\w`, `\\s`
  and `\\b` are ASCII (Python's `\\d` takes Arabic-Indic digits) and `$` matches only at the very end
  (Python's also matches before a final newline). Patterns come from domain authors, so a match has a
  time limit (the `regex` package's timeout; `re` has none): `^(a|a)*$` against 30 a's and a b would
  otherwise backtrack for minutes, in validate, install or any episode.
- Messages name the argument and quote at most a short prefix of its value.
"""

from __future__ import annotations

import functools
from typing import Any, Iterator

import jsonschema
import regex
from jsonschema.exceptions import ValidationError

from ..limits import DEFAULT_MAX_ITEMS, DEFAULT_MAX_STRING, MAX_JSON_DEPTH, PATTERN_SECONDS, quote


@functools.lru_cache(maxsize=1024)
def ecma_regex(pattern: str) -> regex.Pattern:
    """Compile a JSON Schema (ECMA-262) pattern for Python. Raises regex.error for a bad pattern."""
    out, i, in_class = [], 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == "[" and not in_class:
            in_class = True
        elif c == "]" and in_class:
            in_class = False
        elif c == "$" and not in_class:
            c = r"\Z"  # end of input only
        out.append(c)
        i += 1
    return regex.compile("".join(out), regex.ASCII | regex.VERSION0)  # VERSION0: re's syntax


def pattern_error(pattern: str) -> str | None:
    """Why a param's pattern cannot be used, or None."""
    try:
        ecma_regex(pattern)
    except regex.error as e:
        return f"invalid regular expression: {e}"
    return None


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    if pattern_error(pattern):  # an MCP server's schema is not checked by validate
        yield ValidationError(f"the tool's pattern {quote(pattern)} is not a valid regular expression")
        return
    try:
        found = ecma_regex(pattern).search(instance, timeout=PATTERN_SECONDS)
    except TimeoutError:
        yield ValidationError(f"matching {quote(instance)} against {quote(pattern)} took over {PATTERN_SECONDS} s "
                              "(PATTERN_SECONDS): the pattern backtracks too much; simplify it")
        return
    if not found:
        yield ValidationError(f"{quote(instance)} does not match {quote(pattern)}")


def _short(keyword: str):
    """jsonschema's own check for `keyword`, its message rebuilt so it never echoes the whole value."""
    check = jsonschema.Draft202012Validator.VALIDATORS[keyword]

    def run(validator: Any, value: Any, instance: Any, schema: dict) -> Iterator[ValidationError]:
        for err in check(validator, value, instance, schema):
            if keyword == "additionalProperties" and value is False:
                extra = sorted(set(instance) - set(schema.get("properties", {})))
                names = ", ".join(map(quote, extra[:5])) + (f" and {len(extra) - 5:,} more" if len(extra) > 5 else "")
                err.message = f"Additional properties are not allowed ({names} {'was' if len(extra) == 1 else 'were'} unexpected)"
            elif keyword == "enum":
                err.message = f"{quote(instance)} is not one of {quote(value, 200)}"
            elif keyword == "type":
                err.message = f"{quote(instance)} is not of type {value!r}"
            elif keyword in ("minimum", "maximum"):
                err.message = f"{quote(instance)} is {'less' if keyword == 'minimum' else 'greater'} than the {keyword} of {value}"
            elif keyword in ("minItems", "minLength"):
                err.message = f"{quote(instance)} is too short (at least {value})"
            yield err

    return run


ArgumentValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    {"pattern": _pattern, **{k: _short(k) for k in ("additionalProperties", "enum", "type", "minimum", "maximum",
                                                     "minItems", "minLength")}},
)


def size_errors(schema: dict, value: Any, path: tuple = (), depth: int = 0) -> list[str]:
    """Strings, arrays and objects past their caps, and nesting past MAX_JSON_DEPTH; [] when all fit."""
    where = "'" + ".".join(map(str, path)) + "': " if path else ""
    schema = schema if isinstance(schema, dict) else {}
    if depth > MAX_JSON_DEPTH:
        return [f"{where}nested deeper than {MAX_JSON_DEPTH} levels"]
    if isinstance(value, str):
        cap = schema.get("maxLength", DEFAULT_MAX_STRING)
        if len(value) > cap:
            return [f"{where}{quote(value)} is {len(value):,} characters, over the {cap:,} allowed (maxLength)"]
        return []
    if isinstance(value, (list, dict)):
        cap = schema.get("maxItems" if isinstance(value, list) else "maxProperties", DEFAULT_MAX_ITEMS)
        if len(value) > cap:
            what = "items" if isinstance(value, list) else "keys"
            key = "maxItems" if isinstance(value, list) else "maxProperties"
            return [f"{where}{quote(value)} has {len(value):,} {what}, over the {cap:,} allowed ({key})"]
        out: list[str] = []
        if isinstance(value, list):
            for i, v in enumerate(value):
                out += size_errors(schema.get("items", {}), v, path + (i,), depth + 1)
        else:
            props = schema.get("properties", {})
            for k, v in value.items():
                out += size_errors(props.get(k, {}), v, path + (k,), depth + 1)
        return out[:5]
    return []


def argument_errors(validator: jsonschema.Validator, args: Any) -> list[str]:
    """Every way `args` breaks the schema, as short sentences naming the argument."""
    if not isinstance(args, dict):
        return [f"arguments must be a JSON object, got {type(args).__name__}"]
    sized = size_errors(validator.schema, args)
    if sized:
        return sized
    out = []
    for err in sorted(validator.iter_errors(args), key=lambda e: [str(p) for p in e.path]):
        where = ".".join(str(p) for p in err.path)
        message = err.message if len(err.message) <= 300 else err.message[:300] + "..."
        out.append(f"'{where}': {message}" if where else message)
    return out
