"""What an episode pays: the reward and its breakdown (README, "Episodes and rewards"). The SQL assertions
and the gold end state it compares against are in env/gold.py."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from typing import Any

from ..env.gold import assertion_result, gold_hash, values_equal

# A number stands alone: no letter or digit right before or after it, so "12" is not in "112" or in the
# id "a12", and "$50" is not in "$500". Thousands separators are only commas between groups of three.
_TOKEN = re.compile(r"(?<![^\W_])(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![^\W_])|[^\W_]+")


def tokens(text: str) -> list[str | Decimal]:
    """Words (lower-cased) and numbers (as Decimals, so 1,000 = 1000 = 1000.00) of a text; punctuation,
    symbols, underscores and spacing are separators."""
    out: list[str | Decimal] = []
    for mt in _TOKEN.finditer(text.lower()):
        out.append(Decimal(mt["num"].replace(",", "")) if mt["num"] else mt[0])
    return out


def _same(a: str | Decimal, b: str | Decimal) -> bool:
    return type(a) is type(b) and a == b


def _said(required: str, shown: list[str]) -> bool:
    want = tokens(required)
    if not want:  # nothing but punctuation: compare the bare text
        bare = "".join(required.split())
        return bool(bare) and any(bare in "".join(t.split()) for t in shown)
    for text in shown:
        got = tokens(text)
        for i in range(len(got) - len(want) + 1):
            if all(_same(g, w) for g, w in zip(got[i:i + len(want)], want)):
                return True
    return False


def _leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [] if value is None else [json.dumps(value) if isinstance(value, bool) else str(value)]


def output_said(required: str, shown: list[str]) -> bool:
    """A required output counts when its tokens appear, in order and contiguous, in one message the
    user was shown (see `tokens`). A JSON list or object (a template's list value) counts when each of
    its values does, in any message and order."""
    try:
        value = json.loads(required)
    except (ValueError, RecursionError):
        value = None
    if isinstance(value, (list, dict)) and _leaves(value):
        return all(_said(leaf, shown) for leaf in _leaves(value))
    return _said(required, shown)


def shown_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The agent's words the user saw: its text turns, not the domain's fixed greeting (see
    `shown_to_user`)."""
    from .transcript import shown_to_user

    return [m["content"] for m in messages if shown_to_user(m) and not m.get("fixed")]


def _agent_turns(messages: list[dict[str, Any]]):
    """(turn, message) for the agent's messages, numbered as the engine counts turns (the fixed greeting is
    no turn)."""
    turn = 0
    for m in messages:
        if m["role"] == "assistant" and not m.get("fixed"):
            turn += 1
            yield turn, m


def calls_made(messages: list[dict[str, Any]]) -> list[tuple[int, str, dict[str, Any]]]:
    """The agent's tool calls that ran without an error, with the turn each was made in."""
    ran = {m.get("tool_call_id"): not m.get("error") for m in messages if m["role"] == "tool"}
    return [(turn, c["name"], c.get("arguments") if isinstance(c.get("arguments"), dict) else {})
            for turn, m in _agent_turns(messages) for c in m.get("tool_calls") or [] if ran.get(c.get("id"))]


def _argument_equal(got: Any, want: Any) -> bool:
    if isinstance(got, str) and isinstance(want, str):
        return got.strip().casefold() == want.strip().casefold()
    return values_equal(got, want) or values_equal(want, got)


def call_turn(required, made: list[tuple[int, str, dict[str, Any]]]) -> int | None:
    """The first turn in which the agent made the required call (`expect.required_calls`), or None."""
    from ..spec.models import call_parts

    name, args = call_parts(required)
    return next((turn for turn, got, got_args in made if got == name
                 and all(k in got_args and _argument_equal(got_args[k], v) for k, v in args.items())), None)


def output_turn(required: str, messages: list[dict[str, Any]]) -> int | None:
    """The first turn by whose end the required output had been shown to the user, or None."""
    from .transcript import shown_to_user

    shown: list[str] = []
    for turn, m in _agent_turns(messages):
        if shown_to_user(m):
            shown.append(m["content"])
            if output_said(required, shown):
                return turn
    return None


def call_label(call) -> str:
    from ..spec.models import call_parts

    name, args = call_parts(call)
    return f"{name}({', '.join(f'{k}={v}' for k, v in args.items())})"


def expected_ending(task) -> str:
    """A transfer task ends with the agent's transfer, a solo task with the agent's reply without a call, every
    other task with the user's stop. The user's own ###TRANSFER### (user_transfer) earns nothing, but where the
    agent handed the user over first (`ended_as_expected`)."""
    return "transfer" if task.task.expect.transfer else "agent_done" if task.task.solo or task.task.turns else "user_stop"


def ended_as_expected(task, domain, episode) -> bool:
    """The expected ending; a transfer task's is also the user's ###TRANSFER### once the agent handed them over with
    a `hands_over` tool (which ends nothing: τ² banking_knowledge's transfer, after which its user says so). The user's
    ###TRANSFER### in any other case, and a hand-over in a task that expects none, end otherwise than expected."""
    from .transcript import handed_over

    want = expected_ending(task)
    return episode.termination == want or (want == "transfer" and episode.termination == "user_transfer"
                                           and handed_over(domain, episode.messages))


def score(task, domain, env, episode, nl_verdicts: list[dict[str, Any]] | None = None) -> tuple[float, dict[str, Any]]:
    """1.0 only if the episode ended as expected, the final DB equals the gold replay's (when the task
    compares it), every required output was shown to the user, the agent made every required call, every SQL
    assertion holds and, when a judge was given
    (`nl_verdicts`), every natural-language assertion holds. Returns the value and its breakdown."""
    expect = task.task.expect
    ended = ended_as_expected(task, domain, episode)
    db_match = episode.final_hash == gold_hash(task, domain)
    shown = shown_texts(episode.messages)
    outputs = {o: output_said(o, shown) for o in expect.outputs}
    made = calls_made(episode.messages)
    call_turns = [call_turn(c, made) for c in expect.required_calls]
    calls = {call_label(c): t is not None for c, t in zip(expect.required_calls, call_turns)}
    asserts = []
    for a in expect.assert_:
        if not a.holds_after_gold:  # τ²'s data only (scoring: tau2 counts it): no path could pay
            continue
        ok, why = assertion_result(env, a)
        asserts.append({"query": a.query or json.dumps(a.call, default=str), "ok": ok, "why": why})
    judged = nl_verdicts is not None and bool(expect.nl_assertions)
    nl = nl_verdicts if judged else [{"assertion": s, "ok": None, "reason": "not judged (no --judge)"}
                                     for s in expect.nl_assertions]
    turns = turn_checks(task, domain, episode)
    success = (ended and (db_match or not expect.compare_db) and all(outputs.values()) and all(calls.values())
               and all(a["ok"] for a in asserts) and all(t["ok"] for t in turns)
               and (not judged or all(v["ok"] for v in nl)))
    breakdown = {"ended_normally": ended, "termination": episode.termination, "db_match": db_match, "db_compared": expect.compare_db,
                 "outputs": outputs, "required_calls": calls, "assertions": asserts, "turns": turns,
                 "evidence_turns": evidence_turns(task, episode, call_turns), "nl_assertions": nl, "nl_judged": judged,
                 "success": success, "partial": partial_credit(task, episode, domain)}
    return (1.0 if success else 0.0), breakdown


def turn_checks(task, domain, episode) -> list[dict[str, Any]]:
    """BFCL's checks of a task with fixed turns, one per turn whose gold calls are not empty: the agent made a
    call in the turn; the state when the turn ended equals the gold prefix's (state); and the gold calls'
    results of the turn are among the agent's results so far, as a multiset of texts (response). A turn the
    episode never finished fails all three."""
    from ..env.gold import gold_turns

    if not task.task.turns:
        return []
    out = []
    starts = [i for i, msg in enumerate(episode.messages) if msg["role"] == "user" and "turn" in msg]
    for k, (turn, (state, results)) in enumerate(zip(task.task.turns, gold_turns(task, domain))):
        if not turn.actions:
            continue
        if k >= len(episode.turn_ends):
            out.append({"turn": k, "called": False, "state": False, "response": False, "missing": results, "ok": False})
            continue
        end = episode.turn_ends[k]
        seen = episode.messages[:end["messages"]]
        got = [msg["content"] for msg in seen if msg["role"] == "tool" and msg.get("tool_call_id")]
        called = k < len(starts) and any(msg.get("tool_calls") for msg in seen[starts[k]:])
        missing = multiset_missing(results, got)
        same = end["hash"] == state
        out.append({"turn": k, "called": called, "state": same, "response": not missing, "missing": missing,
                    "ok": called and same and not missing})
    return out


def multiset_missing(want: list[str], got: list[str]) -> list[str]:
    """The items of `want` not found in `got`, each item of `got` used at most once (BFCL's unordered check)."""
    pool = list(got)
    missing = []
    for item in want:
        if item in pool:
            pool.remove(item)
        else:
            missing.append(item)
    return missing


def evidence_turns(task, episode, call_turns: list[int | None]) -> list[int | None]:
    """Per required output and required call, the agent turn it was first met in (None: never): what turn-level
    shaping credits where the right outcome writes nothing (train/shaping.py)."""
    return [output_turn(o, episode.messages) for o in task.task.expect.outputs] + call_turns


def partial_credit(task, episode, domain) -> dict[str, float | None]:
    """Signals that move long before full success does (docs/contracts.md, "Reward"), of the agent's calls
    only: whether its first tool call is the gold path's first agent call (same tool, same arguments), and
    the share of the gold path's agent calls it made. The gold path's user-side calls (dual control) are the
    user's to make, so they count in neither. Not part of the reward."""
    from ..spec.models import call_parts

    def agents(name: str) -> bool:
        tool = domain.tools.get(name)
        return tool is None or tool.side not in ("user", "env")

    gold = [(name, args) for name, args in map(call_parts, task.task.expect.actions) if agents(name)]
    made = [(c["name"], c["arguments"]) for m in episode.messages if m["role"] == "assistant"
            for c in m.get("tool_calls") or []]
    out: dict[str, float | None] = {"first_call_right": None, "gold_calls_made": None}
    if gold:
        out = {"first_call_right": float(bool(made) and made[0] == gold[0]),
               "gold_calls_made": sum(g in made for g in gold) / len(gold)}
    if task.task.expect.milestones:
        out["process"] = process_score(task.task.expect.milestones, episode.messages)
    return out


def process_score(paths: list[list[list[dict]]], messages: list[dict[str, Any]]) -> float:
    """ACEBench's process score: over the alternative milestone paths, the best share of a path's steps
    found in order among the agent's turns (each turn used once; a turn matches a step when its calls are
    the step's calls, arguments equal as values)."""
    from ..spec.models import call_parts

    turns = [[(c["name"], c.get("arguments") if isinstance(c.get("arguments"), dict) else {})
              for c in m.get("tool_calls") or []] for _, m in _agent_turns(messages) if m.get("tool_calls")]
    best = 0.0
    for steps in paths:
        if not steps:
            return 1.0
        found, at = 0, 0
        for step in steps:
            want = [call_parts(c) for c in step]
            while at < len(turns):
                at += 1
                if _same_calls(turns[at - 1], want):
                    found += 1
                    break
        best = max(best, found / len(steps))
    return best


def _same_calls(got: list[tuple[str, dict]], want: list[tuple[str, dict]]) -> bool:
    return got == want  # names and arguments, as Python compares them (1 == 1.0)
