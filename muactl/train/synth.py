"""Cold-start data (MUA-RL's SFT stage): run a teacher through the episode engine and keep only the
episodes whose reward is 1 (rejection sampling), without exact duplicates.

Output is JSONL that TRL and the `datasets` library read: `messages` (assistant `tool_calls` as
{"type": "function", "function": {"name", "arguments": {...}}}, tool results as role "tool") and a
`tools` column with the agent's OpenAI function schemas. Runs are resumable: every episode is in
runs/<id>/runs.sqlite, and the JSONL is appended to as episodes succeed.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Callable


from ..eval.evaluate import run_eval
from ..runs.store import RunStore
from .synth_config import SynthConfig


def to_record(ep, tools: list[dict[str, Any]], domain: str | None = None) -> dict[str, Any]:
    """An episode as one training example in OpenAI's chat shape (what TRL's SFTTrainer and chat
    templates read): each assistant tool call carries its `id` and each tool result the `tool_call_id`
    it answers. The greeting is template text, not policy output: it is rendered but never trained on,
    and the row lists it by index in `not_trained` (messages carry no muactl-only keys). `domain` names the
    domain the episode was played in (a mix of several keeps it per row)."""
    from ..models.chatml import to_chat_template_messages

    messages, not_trained = to_chat_template_messages(ep.messages), []
    for i, (src, msg) in enumerate(zip(ep.messages, messages)):
        if msg.pop("fixed", None):
            not_trained.append(i)
        for call, made in zip(msg.get("tool_calls") or [], src.get("tool_calls") or []):
            if made.get("id"):
                call["id"] = made["id"]
        if src.get("tool_call_id"):
            msg["tool_call_id"] = src["tool_call_id"]
    record = {"messages": messages, "tools": tools, "task_id": ep.task_id, "trial": ep.trial, "reward": ep.reward}
    if domain is not None:
        record["domain"] = domain
    if not_trained:
        record["not_trained"] = not_trained
    return record


def record_key(record: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record["messages"], sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    from ..errors import UsageError

    if not path.is_file():
        raise UsageError(f"data file {path} not found; make one with `muactl synth DOMAIN -o {path}`")
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"{path}:{n}: invalid JSON ({e.msg})") from None
        if not isinstance(row, dict) or not isinstance(row.get("messages"), list):
            raise UsageError(f"{path}:{n}: each line must be an object with a 'messages' list")
        out.append(row)
    return out


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def run_synth(cfg: SynthConfig, resume: str | None = None,
              on_progress: Callable[[dict[str, Any]], None] | None = None) -> tuple[RunStore, dict[str, Any]]:
    from ..errors import UsageError

    if cfg.tools not in ("real", "simulated"):
        raise UsageError("--tools must be 'real' or 'simulated'")
    if cfg.tools == "simulated" and not cfg.tool_model:
        raise UsageError("--tools simulated needs --tool-model MODEL (the LLM that plays the tools)")
    if cfg.contrast and not resume:  # a resumed run draws what its stored config says
        check_contrast(cfg)
    if cfg.output:
        from ..outputs import prepare_output

        prepare_output(cfg.output)  # before the run folder exists: a bad -o leaves nothing behind
    state: dict[str, Any] = {"keys": None, "path": None, "tools": None}

    def on_episode(ep, store: RunStore) -> None:
        if state["path"] is None:
            state["path"] = Path(cfg.output) if cfg.output else store.path / "sft.jsonl"
            state["path"].parent.mkdir(parents=True, exist_ok=True)
            existing = read_jsonl(state["path"]) if state["path"].is_file() and resume else []
            if not resume and state["path"].is_file():
                state["path"].unlink()  # a new run starts a new file; --resume appends
            state["keys"] = {record_key(r) for r in existing}
        if ep.reward < 1:
            return
        record = to_record(ep, ep_tools(ep), opened.spec.domain.name)
        key = record_key(record)
        if key in state["keys"]:
            return
        state["keys"].add(key)
        with open(state["path"], "a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")

    def ep_tools(ep) -> list[dict[str, Any]]:
        return state["tools"]

    from ..domain.open import open_domain

    if resume:
        from ..eval.evaluate import stored_config

        cfg = stored_config(SynthConfig, RunStore.open(resume), concurrency=cfg.concurrency)
    opened = open_domain(cfg.domain, trust=cfg.trust)
    state["tools"] = [t.openai_schema() for t in opened.compiled.agent_tools()]
    store, summary = run_eval(cfg, resume=resume, on_progress=on_progress, opened=opened, kind="synth",
                              on_episode=on_episode)
    path = state["path"] or (Path(cfg.output) if cfg.output else store.path / "sft.jsonl")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    stats = synth_stats(store, path)
    (path.parent / (path.stem + ".stats.json")).write_text(json.dumps(stats, indent=2))
    store.update(summary={**summary, "synth": stats})
    return store, stats


def check_contrast(cfg: SynthConfig) -> None:
    """--contrast pairs template instances: refused before anything runs when there is nothing to pair."""
    from ..domain.open import open_domain
    from ..domain.task_templates import is_template_spec, select_templates
    from ..errors import UsageError

    if not is_template_spec(cfg.tasks):
        raise UsageError("--contrast pairs instances drawn from templates; give --tasks template:<id>|all")
    templates = select_templates(open_domain(cfg.domain, trust=cfg.trust), cfg.tasks[0])
    if not any(ts.template.contrast for ts in templates):
        raise UsageError(f"--contrast: none of the templates {', '.join(dict.fromkeys(ts.id for ts in templates))} "
                         "declares a contrast (a template's `contrast: {template: ID, same: [COLUMN, ...]}`)")


def describe(stats: dict[str, Any]) -> str:
    """The one line a synth run ends with (the command and the recipe's synth stage)."""
    infra = f", {stats['infra_errors']} not run (infra or user-simulator errors)" if stats.get("infra_errors") else ""
    return (f"kept {stats['kept']} of {stats['episodes']} episodes: {stats['duplicates_dropped']} duplicates dropped, "
            f"{stats['failed']} failed (reward 0){infra} -> {stats['output']}")


def synth_stats(store: RunStore, path: Path) -> dict[str, Any]:
    eps = store.episodes()
    records = read_jsonl(path)
    per_task: dict[str, dict[str, int]] = {}
    for e in eps:
        row = per_task.setdefault(e["task_id"], {"total": 0, "successes": 0, "kept": 0})
        row["total"] += 1
        row["successes"] += int(e["success"])
    for r in records:
        if r.get("task_id") in per_task:
            per_task[r["task_id"]]["kept"] += 1
    turns = [sum(1 for m in r["messages"] if m["role"] == "assistant") for r in records]
    chars = [sum(len(m.get("content") or "") for m in r["messages"]) for r in records]
    infra = sum(e["termination"] in ("infra_error", "user_error") for e in eps)
    successes = sum(int(e["success"]) for e in eps)
    return {"output": str(path), "episodes": len(eps), "successes": successes,
            "kept": len(records), "duplicates_dropped": successes - len(records),
            "failed": len(eps) - successes - infra, "infra_errors": infra,
            "avg_assistant_turns": sum(turns) / len(turns) if turns else 0,
            "avg_chars": sum(chars) / len(chars) if chars else 0,
            "agent_completion_tokens": sum(e["completion_tokens"] or 0 for e in eps), "per_task": per_task}


# ---------------------------------------------------------------- chats a person rated (muactl chat)


def chat_kept(row: dict[str, Any], min_rating: int) -> bool:
    """A person's rating decides when there is one; an unrated chat is kept when its task was done."""
    if row["rating"] is not None:
        return row["rating"] >= min_rating
    return row["reward"] is not None and row["reward"] >= 1


def export_chats(run_id: str, output: Path, min_rating: int = 4) -> dict[str, Any]:
    """Write a chat run's good episodes as SFT records (the same format as synth, via to_record)."""
    from types import SimpleNamespace

    from ..errors import UsageError

    store = RunStore.open(run_id)
    info = store.info()
    if info["kind"] != "chat":
        raise UsageError(f"run {store.id} is a {info['kind']} run, not a chat run (make one with `muactl chat DOMAIN`)")
    tools = info["config"].get("tools") or []
    rows = [e for e in store.episodes() if e["human"]]
    kept, keys = [], set()
    for e in rows:
        if not chat_kept(e, min_rating):
            continue
        messages = []
        for m in store.messages(e["id"]):
            msg = {"role": m["role"], "content": m["content"], "tool_calls": m["tool_calls"], "name": m["name"],
                   "tool_call_id": m["tool_call_id"], **json.loads(m["meta"] or "{}")}
            messages.append(msg)
        ep = SimpleNamespace(messages=messages, task_id=e["task_id"], trial=e["trial"], reward=e["reward"])
        record = {**to_record(ep, tools, info["domain"]), "rating": e["rating"], "note": e["note"]}
        key = record_key(record)
        if key not in keys:
            keys.add(key)
            kept.append(record)
    write_jsonl(output, kept)
    return {"output": str(output), "chats": len(rows), "kept": len(kept), "min_rating": min_rating}
