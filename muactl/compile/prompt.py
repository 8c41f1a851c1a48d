"""The agent's system prompt: the domain's policy plus the conventions every muactl agent follows."""

from __future__ import annotations

AGENT_CONVENTIONS = """\
You are a customer service agent. Help the user with their request while following the policy below.
- Use the tools to look up and change data; never invent ids, prices or facts the tools did not give you.
- Make at most one tool call at a time, and do not send a message to the user in the same turn as a tool call.
- If the request cannot be handled within the policy, say so, or transfer to a human agent when the policy allows."""


def agent_system_prompt(domain_description: str, policy: str) -> str:
    return f"{AGENT_CONVENTIONS}\n\n# Domain\n{domain_description.strip()}\n\n# Policy\n{policy.strip()}\n"
