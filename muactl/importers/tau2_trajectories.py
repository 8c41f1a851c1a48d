"""The trajectories τ²'s evaluator and muactl's `scoring: tau2` are both run on, made from a τ² task alone.

`benchmarks/tau2_reward_record.py` plays each of them on τ²'s own environment and records what τ²'s
evaluator pays (tests/data/tau2/<domain>_rewards.json); `reward_agreement` (importers/tau2.py) plays
the same ones on muactl's import and compares. Per task: the gold path and perturbations of it, each
testing one of τ²'s scoring rules (the list is KINDS). Plain standard library, as tau2_truth.py: the
recorder runs under τ²'s dependencies. Only each trajectory's digest is stored, never τ²'s data.

A trajectory is {"kind", "steps", "end"}: steps are {"by": "assistant"|"user", "text": ...} or
{"by": ..., "call": name, "args": {...}} (a user call is the user's own tool, dual control); `end` is
how muactl's episode ended (user_stop, transfer, user_transfer, max_turns).
"""

from __future__ import annotations

from typing import Any, Callable

from .tau2_truth import digest

GREETING = "Hi! How can I help you today?"
TRANSFER = "transfer_to_human_agents"
# what each perturbation tests (README, "τ²-bench")
KINDS = {
    "gold": "the gold path, every communicate_info said",
    "no_reads": "the gold path without its reads (τ² checks no read)",
    "missing_write": "the last state-changing gold call left out",
    "wrong_argument": "the first state-changing gold call with an argument changed (it fails or writes elsewhere)",
    "retry_after_failure": "the wrong call first, then the whole gold path (a failed write changes nothing)",
    "extra_write": "the last state-changing gold call made twice",
    "omitted_info": "the first communicate_info left unsaid",
    "info_shouted": "every communicate_info said in capitals, thousands with commas",
    "info_inside_words": "every communicate_info glued inside a longer word (τ²: a substring counts)",
    "early_transfer": "a transfer to a human before anything else",
    "empty": "the greeting, then the user's stop",
    "max_turns": "the gold path cut by the turn limit (not a stop: τ² pays 0)",
    "user_transfer": "the gold path ended by the user's ###TRANSFER### (a stop for τ²)",
}


def gold_calls(task: dict) -> list[dict]:
    crit = task.get("evaluation_criteria") or {}
    return [{"by": "user" if a.get("requestor") == "user" else "assistant", "call": a["name"],
             "args": dict(a.get("arguments") or {})} for a in crit.get("actions") or []]


def info_of(task: dict) -> list[str]:
    return [str(x) for x in (task.get("evaluation_criteria") or {}).get("communicate_info") or []]


def said(infos: list[str]) -> dict:
    return {"by": "assistant", "text": ("Here is what I found: " + " ; ".join(infos) + ".") if infos else "All done."}


def with_commas(text: str) -> str:
    """Digits of runs longer than three grouped by thousands (1234.5 -> 1,234.5)."""
    import re

    return re.sub(r"(?<![\d.])\d{4,}", lambda m: f"{int(m[0]):,}", text)


def changed_argument(call: dict) -> dict | None:
    for key, value in call["args"].items():
        if isinstance(value, bool):
            new = not value
        elif isinstance(value, (int, float)):
            new = value + 1
        elif isinstance(value, str):
            new = value + "_x"
        else:
            continue
        return {**call, "args": {**call["args"], key: new}}
    return None


def path(calls: list[dict], text: dict, transfer: dict | None, end: str = "user_stop") -> tuple[list[dict], str]:
    """Greeting, the user's request, the calls, the agent's words, then the transfer (which ends a muactl
    episode) or the given end."""
    steps = [{"by": "assistant", "text": GREETING}, {"by": "user", "text": "Hi, I need help with my request."},
             *calls, text]
    if transfer is not None:
        return [*steps, transfer], "transfer" if end == "user_stop" else end
    return steps, end


def trajectories(task: dict, writes: Callable[[str], bool]) -> list[dict[str, Any]]:
    """The task's trajectories (KINDS, those that apply to it). `writes(name)`: whether the tool changes
    state (τ²'s mutates_state; muactl's tools that write), which decides the perturbed calls."""
    calls = gold_calls(task)
    transfer = next((c for c in calls if c["call"] == TRANSFER), None)
    body = [c for c in calls if c["call"] != TRANSFER]
    infos = info_of(task)
    text = said(infos)
    write_at = [i for i, c in enumerate(body) if writes(c["call"])]
    out = {"gold": path(body, text, transfer),
           "no_reads": path([c for c in body if writes(c["call"])], text, transfer),
           "max_turns": path(body, text, transfer, "max_turns"),
           "empty": ([{"by": "assistant", "text": GREETING}], "user_stop"),
           "early_transfer": path([], {"by": "assistant", "text": "Let me get you a human agent."},
                                  {"by": "assistant", "call": TRANSFER, "args": {"summary": "The user needs help."}})}
    if transfer is None:
        out["user_transfer"] = path(body, text, None, "user_transfer")
    if write_at:
        last = write_at[-1]
        out["missing_write"] = path(body[:last] + body[last + 1:], text, transfer)
        out["extra_write"] = path(body + [body[last]], text, transfer)
        changed = [(i, changed_argument(body[i])) for i in write_at]
        i, wrong = next(((i, w) for i, w in changed if w is not None), (None, None))
        if wrong is not None:
            out["wrong_argument"] = path(body[:i] + [wrong] + body[i + 1:], text, transfer)
            out["retry_after_failure"] = path([wrong, *body], text, transfer)
    if infos:
        out["omitted_info"] = path(body, said(infos[1:]), transfer)
        out["info_shouted"] = path(body, {"by": "assistant", "text": with_commas(said(infos)["text"].upper())}, transfer)
        out["info_inside_words"] = path(body, said([f"ref{x}9" for x in infos]), transfer)
    return [{"kind": k, "steps": steps, "end": end, "digest": digest({"steps": steps, "end": end})}
            for k, (steps, end) in out.items()]
