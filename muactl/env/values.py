"""Values in and out of tools: a stored value as its column was declared (`typed`), text that may hold JSON
(`decode_json_text`), and an author's message with the call's arguments filled in (`fill`)."""

from __future__ import annotations

import json
import re
from typing import Any

from ..spec.models import GUESSED_TYPE

_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")


def fill(template: str, args: dict[str, Any]) -> str:
    """Fill {param} placeholders in a message; unknown ones stay as they are."""
    # not str.format: an author's text with other braces (JSON, "{0}", a lone "{") would raise mid-call
    def sub(m: re.Match) -> str:
        if m[1] not in args:
            return m[0]
        return "" if args[m[1]] is None else str(args[m[1]])

    return _PLACEHOLDER.sub(sub, template)


def decode_json_text(value: Any) -> Any:
    """Best-effort decoding of a value whose column type is unknown (assertions, template samples):
    text that parses as a JSON array or object. Tool results use `typed` instead."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def typed(value: Any, ctype: str | None) -> Any:
    """A result value as its column was declared: json text decoded, booleans as true/false; other text
    is never parsed (a name that happens to start with '[' stays a string). GUESSED_TYPE: text that holds a
    JSON array or object is decoded, the rest left as it is (spec_version 1's meaning)."""
    if ctype == GUESSED_TYPE:
        return decode_json_text(value)
    if ctype == "json" and isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    if ctype == "boolean" and isinstance(value, int):
        return bool(value)
    return value
