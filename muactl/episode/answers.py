"""Reading a judge model's answer: the JSON object inside its text (muactl's judge and τ²'s judge prompt)."""

from __future__ import annotations

import json
from typing import Any


def json_object_in(text: str) -> Any:
    """The JSON object a judge's answer holds (from its first `{` to its last `}`, prose around it ignored);
    ValueError when there is none or it does not parse."""
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("the answer holds no JSON object")
    try:
        return json.loads(text[start:end + 1])
    except (json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"the answer is not valid JSON ({e})") from None
