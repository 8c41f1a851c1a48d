"""What a model is shown through muactl's τ² import, compared as bytes with what τ² shows its LLM agent
and user simulator (tests/data/tau2/seen/<domain>.json, recorded by benchmarks/tau2_record.py): each gold
call's output text, each tool's schema in τ²'s order, the agent's system prompt, the user simulator's
system prompt per task, and the greeting."""

from __future__ import annotations

from typing import Any

from ..env.sandbox import new_env
from .tau2_input import task_id
from .tau2_truth import schema_digest, text_digest


def verify_seen(opened, seen: dict) -> dict[str, Any]:
    """Counts of what is byte-identical to τ²'s record, and the first mismatches."""
    mismatches: list[str] = []
    row: dict[str, Any] = {}
    row["outputs_bytes"], row["outputs_bytes_same"] = same_outputs(opened, seen["outputs"], mismatches)
    for side in ("agent", "user"):
        row[f"{side}_schemas"], row[f"{side}_schemas_same"] = same_schemas(opened, side, seen[f"{side}_tools"],
                                                                           mismatches)
    row["agent_prompt_same"] = text_digest(opened.compiled.system_prompt) == seen["agent_prompt"]
    if not row["agent_prompt_same"]:
        mismatches.append("the agent's system prompt differs from τ²'s")
    greeting = opened.spec.domain.greeting
    row["greeting_same"] = greeting is not None and text_digest(greeting) == seen["greeting"]
    if not row["greeting_same"]:
        mismatches.append(f"greeting {greeting!r} differs from τ²'s")
    row["user_prompts"], row["user_prompts_same"] = same_user_prompts(opened, seen["user_prompts"], mismatches)
    row["seen_mismatches"] = mismatches
    return row


def same_outputs(opened, outputs: dict[str, list[str]], mismatches: list[str]) -> tuple[int, int]:
    """Every gold call's text (output or error, as the agent reads it) against τ²'s."""
    from ..spec.models import call_parts

    by_id = {t.task.id: t for t in opened.tasks}
    total = same = 0
    for raw_id, digests in outputs.items():
        t = by_id.get(task_id(raw_id))
        if t is None:
            total += len(digests)
            mismatches.append(f"task {raw_id}: not imported")
            continue
        env = new_env(opened.compiled)
        try:
            env.replay(t.task.setup)
            for i, (call, want) in enumerate(zip(t.task.expect.actions, digests)):
                name, args = call_parts(call)
                got = env.call(name, args)
                total += 1
                if text_digest(got.content) == want:
                    same += 1
                else:
                    mismatches.append(f"task {raw_id} call {i} {name}: text {got.content[:80]!r}... differs from τ²'s")
        finally:
            env.close()
    return total, same


def same_schemas(opened, side: str, want: list[list[str]], mismatches: list[str]) -> tuple[int, int]:
    """The side's tool schemas, in muactl's order, against τ²'s (name and digest per position): a tool in
    another place counts as different."""
    mine = opened.compiled.agent_tools() if side == "agent" else opened.compiled.user_tools()  # as the model is shown them
    same = 0
    for i, (name, digest) in enumerate(want):
        tool = mine[i] if i < len(mine) else None
        if tool is not None and tool.name == name and schema_digest(tool.openai_schema()) == digest:
            same += 1
        elif tool is None or tool.name != name:
            mismatches.append(f"{side} tool {i}: τ² has {name}, muactl {tool.name if tool else 'nothing'}")
        else:
            mismatches.append(f"{side} tool {name}: schema differs from τ²'s")
    extra = [t.name for t in mine[len(want):]]
    if extra:
        mismatches.append(f"{side} tools τ² lacks: {', '.join(extra)}")
    return max(len(want), len(mine)), same


def same_golden_prompts(opened, prompts: dict[str, str], mismatches: list[str]) -> tuple[int, int]:
    """banking_knowledge imported with --retrieval golden: each task's agent system prompt (its required
    documents in the policy) against τ²'s golden_retrieval prompt for it."""
    by_id = {t.task.id: t for t in opened.tasks}
    same = 0
    for raw_id, digest in prompts.items():
        t = by_id.get(task_id(raw_id))
        if t is not None and text_digest(opened.compiled.system_prompt_for(t.task)) == digest:
            same += 1
        else:
            mismatches.append(f"task {raw_id}: the golden-retrieval agent prompt differs from τ²'s"
                              + (" (not imported)" if t is None else ""))
    return len(prompts), same


def same_user_prompts(opened, prompts: dict[str, str], mismatches: list[str]) -> tuple[int, int]:
    from ..compile.prompt import user_system_prompt

    by_id = {t.task.id: t for t in opened.tasks}
    same = 0
    for raw_id, digest in prompts.items():
        t = by_id.get(task_id(raw_id))
        if t is not None and text_digest(user_system_prompt(opened.spec, t.task)) == digest:
            same += 1
        else:
            mismatches.append(f"task {raw_id}: the user simulator's system prompt differs from τ²'s")
    return len(prompts), same
