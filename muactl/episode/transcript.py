"""What each side of a conversation sees of it: the user only the agent's text turns, and whether the agent handed
the user over. The simulators, the reward and the judge read a conversation the same way through these."""

from __future__ import annotations

from typing import Any


def handed_over(domain, messages: list[dict[str, Any]]) -> bool:
    """Whether the agent handed the user over to a human with a call of a `hands_over` tool (which ends nothing by
    itself) that ran without an error: what ends a transfer task by the user's ###TRANSFER### (reward.py)."""
    return domain is not None and any(m["role"] == "tool" and not m.get("error") and domain.hands_over(m.get("name"))
                                      for m in messages)


def shown_to_user(m: dict[str, Any]) -> bool:
    """Whether an agent message reaches the user: text turns only. A turn that carries tool calls, or
    that failed to parse as one, goes to the tools, and its text with it. The reward reads the same."""
    return (m["role"] == "assistant" and bool((m.get("content") or "").strip()) and not m.get("tool_calls")
            and not m.get("malformed"))
