"""τ²-bench's prompts, as its LLM agent and user simulator get them, read from a checkout (parsed, never run).

- The agent (tau2/agent/llm_agent.py): SYSTEM_PROMPT with AGENT_INSTRUCTION and the domain's policy.
- The user (tau2/user/user_simulator.py): SYSTEM_PROMPT with the simulation guidelines
  (data/tau2/user_simulator/simulation_guidelines.md, or ..._tools.md when the user has tools; no persona
  guidelines, τ²'s default) and the task's scenario as τ²'s UserScenario prints it.
- The greeting (tau2/orchestrator/orchestrator.py): DEFAULT_FIRST_AGENT_MESSAGE's content.

The import writes them as the domain's `agent_prompt` (with {policy}), `user_prompt` (with {scenario}) and
`greeting`, and each task's scenario as its `user.scenario`.
"""

from __future__ import annotations

import ast
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ..errors import SpecError
from ..limits import MAX_POLICY_BYTES
from .tau2_input import read_python, read_text

AGENT_PY = "src/tau2/agent/llm_agent.py"
USER_PY = "src/tau2/user/user_simulator.py"
ORCHESTRATOR_PY = "src/tau2/orchestrator/orchestrator.py"
GUIDELINES = "data/tau2/user_simulator/simulation_guidelines{}.md"


@dataclass
class Tau2Prompts:
    agent: str  # with {policy} where the policy goes
    user: str  # with {scenario} where the task's scenario goes
    greeting: str
    user_no_tools: str | None = None  # the user's prompt in a task whose user has no tools (banking_knowledge)


def read_prompts(root: Path, checkout: Path, user_has_tools: bool) -> Tau2Prompts | None:
    """τ²'s prompts from the checkout; None when it lacks the files (the import keeps muactl's)."""
    files = [checkout / AGENT_PY, checkout / USER_PY, checkout / ORCHESTRATOR_PY,
             checkout / GUIDELINES.format("_tools" if user_has_tools else "")]
    if not all(f.exists() for f in files):
        return None
    agent_py, user_py, orchestrator_py, guidelines_md = files
    agent = constants(root, agent_py)
    template = needed(agent, "SYSTEM_PROMPT", agent_py)
    try:
        agent_prompt = template.format(agent_instruction=needed(agent, "AGENT_INSTRUCTION", agent_py),
                                       domain_policy="{policy}")
    except (KeyError, IndexError, ValueError) as e:
        raise SpecError.single(agent_py, f"SYSTEM_PROMPT is not the template τ²'s LLMAgent formats: {e}") from None
    guidelines = read_text(root, guidelines_md, MAX_POLICY_BYTES, "MAX_POLICY_BYTES")
    guidelines = guidelines.replace("<PERSONA_GUIDELINES>", "")  # τ²'s default persona adds none
    try:
        user_prompt = needed(constants(root, user_py), "SYSTEM_PROMPT", user_py).format(
            global_user_sim_guidelines_with_persona=guidelines, instructions="{scenario}")
    except (KeyError, IndexError, ValueError) as e:
        raise SpecError.single(user_py, f"SYSTEM_PROMPT is not the template τ²'s UserSimulator formats: {e}") from None
    return Tau2Prompts(agent_prompt, user_prompt, greeting(root, orchestrator_py))


def constants(root: Path, path: Path) -> dict[str, str]:
    """Module-level string constants: NAME = "..." or NAME = \"\"\"...\"\"\".strip()."""
    out = {}
    for node in read_python(root, path).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        value = node.value
        if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "strip"
                and not value.args and isinstance(value.func.value, ast.Constant)
                and isinstance(value.func.value.value, str)):
            out[node.targets[0].id] = value.func.value.value.strip()
        elif isinstance(value, ast.Constant) and isinstance(value.value, str):
            out[node.targets[0].id] = value.value
    return out


def needed(found: dict[str, str], name: str, path: Path) -> str:
    if name not in found:
        raise SpecError.single(path, f"no string constant {name} (τ²'s prompt template); is the checkout τ²-bench's?")
    return found[name]


def greeting(root: Path, path: Path) -> str:
    for node in read_python(root, path).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "DEFAULT_FIRST_AGENT_MESSAGE" and isinstance(node.value, ast.Call)):
            for kw in node.value.keywords:
                if kw.arg == "content" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                    return kw.value.value
    raise SpecError.single(path, "no DEFAULT_FIRST_AGENT_MESSAGE with a text content (τ²'s greeting)")


def scenario_text(scenario: dict) -> str:
    """A τ² task's user scenario as τ²'s UserScenario.__str__ writes it (tau2/data_model/tasks.py)."""
    tab = "\t"
    lines = []
    if scenario.get("persona") is not None:
        lines += ["Persona:", textwrap.indent(scenario["persona"], tab)]
    ins = scenario["instructions"]
    if ins.get("plain_text") is not None:
        text = ins["plain_text"]
    else:
        parts = [f"Domain: {ins.get('domain')}",
                 f"Reason for call:\n{textwrap.indent(ins['reason_for_call'], tab)}"]
        if ins.get("known_info") is not None:
            parts.append(f"Known info:\n{textwrap.indent(ins['known_info'], tab)}")
        if ins.get("unknown_info") is not None:
            parts.append(f"Unknown info:\n{textwrap.indent(ins['unknown_info'], tab)}")
        parts.append(f"Task instructions:\n{textwrap.indent(ins.get('task_instructions') or '', tab)}")
        text = "\n".join(parts)
    lines += ["Instructions:", textwrap.indent(text, tab)]
    return "\n".join(lines)
