"""The prompts a domain compiles to: the agent's system prompt (the domain's policy plus the conventions every
muactl agent follows), and the user simulator's guidelines where the domain brings none."""

from __future__ import annotations

import re

AGENT_CONVENTIONS = """\
You are a customer service agent. Help the user with their request while following the policy below.
- Use the tools to look up and change data; never invent ids, prices or facts the tools did not give you.
- Make at most one tool call at a time, and do not send a message to the user in the same turn as a tool call.
- If the request cannot be handled within the policy, say so, or transfer to a human agent when the policy allows."""


def agent_system_prompt(domain_description: str, policy: str, template: str | None = None) -> str:
    """muactl's prompt, or the domain's own `agent_prompt` with the policy where it says {policy} (as is: a
    benchmark's prompt is reproduced byte for byte)."""
    if template is not None:
        return template.replace("{policy}", policy)
    return f"{AGENT_CONVENTIONS}\n\n# Domain\n{domain_description.strip()}\n\n# Policy\n{policy.strip()}\n"


DEFAULT_GUIDELINES = """\
You play a customer who contacts a company's support agent. Stay in character for the whole conversation.
- Pursue the goal below. Reveal what you want step by step, as a real person would, not all at once.
- Give only the facts listed as known, and only when they are relevant or asked for. Never invent ids,
  numbers or facts you were not given; if asked for something you do not know, say you do not know.
- Write short, natural messages. Never pretend to be the agent and never call tools unless you were given some.
- When your goal is fully met, or cannot be met and you accept that, end with ###STOP### on its own.
- If the agent hands you over to a human, end with ###TRANSFER###.
- If the agent keeps asking for something your goal gives no way to answer, end with ###OUT-OF-SCOPE###."""


def user_system_prompt(spec, task) -> str:
    """The user simulator's system prompt for a task (a TaskSpec's model) of a domain (a DomainSpec): the
    domain's `user_prompt` with the task's scenario or instruction, or muactl's guidelines and the goal's sections."""
    domain, goal = spec.domain, task.user
    template = spec.user_prompt_text
    if task.user_tools == [] and spec.user_prompt_no_tools_text is not None:
        template = spec.user_prompt_no_tools_text
    if template is not None:
        fields = {"scenario": goal.scenario if goal.scenario is not None else goal_sections(goal),
                  "instruction": "\n".join(x.strip() for x in (goal.reason, goal.known, goal.unknown, goal.instructions) if x)}
        # one pass: a scenario that happens to contain "{instruction}" is left as written
        return re.sub(r"\{(scenario|instruction)\}", lambda m: fields[m.group(1)], template)
    persona = domain.personas.get(task.persona or "", "")
    parts = [spec.guidelines_text or DEFAULT_GUIDELINES, f"\n# Company\n{domain.description.strip()}"]
    if persona:
        parts.append(f"\n# Your personality\n{persona.strip()}")
    parts.append(goal_sections(goal))
    parts.append("\n# When the agent asks you to confirm a change\n" + (
        "Say yes." if goal.consent else "Say no: you do not want that change made. Then end the conversation."))
    return "\n".join(parts)


def goal_sections(goal) -> str:
    parts = [f"\n# Your goal\n{goal.reason.strip()}"]
    if goal.known:
        parts.append(f"\n# What you know\n{goal.known.strip()}")
    if goal.unknown:
        parts.append(f"\n# What you do not know\n{goal.unknown.strip()}")
    if goal.instructions:
        parts.append(f"\n# Further instructions\n{goal.instructions.strip()}")
    return "\n".join(parts)
