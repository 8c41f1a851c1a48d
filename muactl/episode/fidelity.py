"""How an episode's simulated user behaved, and how the agent interacted (UserRL's interaction metrics).

User fidelity: τ²-bench names the user simulator as a first source of noise, so before training
against a simulator, measure it: run the oracle agent (which asks for details and waits for consent
before every write) against it, and check each episode's user against its task:

    stated_goal       before the agent's first write, the user's messages carried the goal: every number
                      of the task's `reason` and at least half of its content words
    gave_facts        asked for details, the user gave every known fact (names, ids, emails, numbers of `known`)
    consented         asked to confirm a change, it said yes        (tasks with user.consent: true)
    refused           asked to confirm a change, it said no         (tasks with user.consent: false)
    never_played_agent  no user message reads like the agent (offers help, asks to proceed, calls itself the
                      agent, tool-call syntax) or repeats five words running of an agent message
    right_stop        the user ended the conversation with the stop its task calls for (###STOP###, or the
                      transfer where the task expects one), and not in its opening message or in the one that
                      agreed to a change (a yes and a goodbye at once end the chat before the agent can make it)
    within_budget     the conversation ended before the turn limit and the timeout

Each check is True, False, or None where it does not apply (no facts to give, nothing asked, an agent
or API failure that ended the episode first). An episode's user is `faithful` when every check that
applies holds. These are heuristics over text, written for the oracle's plain phrasing: they measure a
simulator, they do not classify episodes (a broken simulator's episodes are `user_error`).

A user *model* is faithful at FAITHFUL_AT: every check that applied held in at least that share of the episodes
(model_verdict), and it leaves the tasks as hard as they are when the oracle's pass^1 against it is within
PASS_GAP_AT of its pass^1 against the scripted user (train/user_sft.py's pass_gap). Variation (`distinct_n`,
`openings`): how many ways a user says things, over many episodes.

Interaction metrics, per episode:

    effective_turns       agent turns with no tool error and no malformed reply
    first_correct_write   the agent turn of the first write that matches a gold call and changed the
                          database (None: no such write)
    tool_errors           failed tool calls plus malformed replies
    user_turns            messages the user wrote
"""

from __future__ import annotations

import re
from typing import Any

from .types import USER_ENDINGS

FAITHFUL_AT = 0.90  # a user model is faithful when every check held in at least this share of its episodes
PASS_GAP_AT = 0.05  # ... and the oracle's pass^1 against it may differ from that against the scripted user by this
CHECKS = ("stated_goal", "gave_facts", "consented", "refused", "never_played_agent", "right_stop", "within_budget")
INTERACTION = ("effective_turns", "first_correct_write", "tool_errors", "user_turns")

_STOPWORDS = set("""a an the and or but if then than to of in on at by for from into onto with without about as is are
was were be been being am do does did done have has had having you your yours yourself i me my mine we our us it its this
that these those there here what which who whom when where why how all any each some no not only own same so too very can
will just want wants wanted need needs would should could may might must one more most other such""".split())
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_FACT = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+|#?[A-Za-z]*\d[\w-]*|\b[A-Z][a-z]+(?:\s[A-Z][a-z]+)*")
_AGENT_TALK = re.compile(r"<tool_call>|\bhow (can|may) i (help|assist)|\bi can help\b|\banything else i can\b|"
                         r"\bshall i\b|\blet me (check|look)|\byour request is complete\b|\bi (have|'ve) "
                         r"(transferred|cancelled|canceled|updated|moved|closed|processed)\b|\(yes/no\)|"
                         r"\bhere to (?:help|assist)\b|\b(?:i(?:'m| am)|as) (?:a|an|the|your) [\w -]{0,30}"
                         r"(?:agent|assistant|representative)\b", re.I)
_CONFIRM = re.compile(r"\(yes/no\)|\bshall i\b|\bshould i\b|\bdo you want me\b|\bwould you like me\b|\bconfirm\b", re.I)
_ASK = re.compile(r"\?|\b(please (provide|share|tell|give)|could you|can you|may i have|what is your|let me know)\b", re.I)


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 2 and w not in _STOPWORDS]


def _norm(text: str) -> str:
    return " ".join(re.sub(r"(?<=\d),(?=\d{3}\b)", "", text.lower()).split())


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text)}


def _grams(text: str, n: int = 5) -> set[tuple[str, ...]]:
    """Runs of n words: a user message sharing one with the agent's is parroting the agent."""
    words = re.findall(r"[a-z0-9']+", text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def known_facts(known: str | None) -> list[str]:
    """The checkable facts of a task's `known` text: emails, ids and numbers, names."""
    if not known:
        return []
    skip = {"Your", "You", "I", "My", "The", "It", "If", "When"}
    return [f for f in dict.fromkeys(m.strip() for m in _FACT.findall(known)) if f and f not in skip]


def _turns(messages: list[dict[str, Any]]):
    """(role, text, message) for every user and agent text message, in order; tool traffic left out."""
    for m in messages:
        if m["role"] == "user":
            yield "user", m.get("content") or "", m
        elif m["role"] == "assistant" and not m.get("fixed") and (m.get("content") or "").strip():
            yield "agent", m["content"], m


def user_fidelity(task, episode, domain=None) -> dict[str, bool | None]:
    """The checks of the module docstring for one finished episode. `domain` (the compiled domain) tells writes
    from reads and which tools hand the user over; without it every call is a read."""
    writes = domain.writes if domain is not None else lambda name: False
    if task.task.solo or task.task.turns:  # no simulated user played: nothing to check
        return dict.fromkeys(CHECKS)
    goal = task.task.user
    msgs = episode.messages
    turns = list(_turns(msgs))
    user_texts = [t for role, t, _ in turns if role == "user"]
    first_write = next((i for i, m in enumerate(msgs) if m["role"] == "assistant"
                        and any(writes(c["name"]) for c in m.get("tool_calls") or [])), len(msgs))
    before = " ".join(m.get("content") or "" for m in msgs[:first_write] if m["role"] == "user")

    out: dict[str, bool | None] = dict.fromkeys(CHECKS)
    out["stated_goal"] = bool(user_texts) and states_goal(goal.reason, before)
    facts = known_facts(goal.known)
    asked = any(role == "agent" and _ASK.search(t) and not _CONFIRM.search(t) for role, t, _ in turns)
    if facts and asked:
        everything = _norm(" ".join(user_texts))
        out["gave_facts"] = all(_norm(f) in everything for f in facts)
    answers = [msgs[i].get("content") or "" for i in answers_to_confirm(msgs)]
    if answers:
        from .agents.oracle import consent_in

        key = "consented" if goal.consent else "refused"
        out[key] = all(consent_in(a) is goal.consent for a in answers)
    agent_grams = {g for role, t, _ in turns if role == "agent" for g in _grams(t)}
    out["never_played_agent"] = not any(plays_agent(t, agent_grams) for t in user_texts)
    term = episode.termination
    if term in ("agent_error", "infra_error", "too_many_errors"):  # the agent or an API ended it first
        return out
    from .reward import ended_as_expected

    out["right_stop"] = ended_as_expected(task, domain, episode) and not left_early(goal, msgs, term)
    out["within_budget"] = term not in ("max_turns", "timeout")
    return out


def states_goal(reason: str, text: str) -> bool:
    """Whether `text` carries the goal `reason`: every number of it and at least half of its content words."""
    words = set(_words(reason))
    return _numbers(reason) <= _numbers(text) and (not words or len(words & set(_words(text))) * 2 >= len(words))


def plays_agent(text: str, agent_grams: set[tuple[str, ...]]) -> bool:
    """Whether a user message reads like the agent, or repeats five words running of the agent's (`agent_grams`)."""
    return bool(_AGENT_TALK.search(text) or agent_grams & _grams(text))


def reply_breaks(task, messages: list[dict[str, Any]], reply: str, ends: bool = False) -> str | None:
    """The check that the user's next message `reply`, after `messages`, breaks by itself, or None: an opening
    that does not carry the goal (stated_goal) or that ends the chat (`ends`: the reply carried a stop;
    right_stop); an answer to a request for details, while a known fact is still unsaid, that gives none of the
    unsaid ones word for word (gave_facts: a garbled email is not the email); an answer to a request to confirm
    that goes against the task's consent (consented or refused), or that agrees and ends the chat before the
    change is made (right_stop); words that read like the agent's (never_played_agent). The checks of a whole
    episode that one message can decide as it is written; a sampled trained user draws again when its reply breaks
    one (user.py's HFUser)."""
    from .agents.oracle import consent_in

    goal = task.task.user
    turns = list(_turns(messages))
    said = [t for role, t, _ in turns if role == "user"]
    if not said and not states_goal(goal.reason, reply):
        return "stated_goal"
    if not said and ends:
        return "right_stop"
    last = turns[-1][1] if turns and turns[-1][0] == "agent" else None
    if last is not None and _ASK.search(last) and not _CONFIRM.search(last):
        unsaid = [f for f in known_facts(goal.known) if _norm(f) not in _norm(" ".join(said))]
        if unsaid and not any(_norm(f) in _norm(reply) for f in unsaid):
            return "gave_facts"
    if last is not None and _CONFIRM.search(last):
        if consent_in(reply) is not goal.consent:
            return "consented" if goal.consent else "refused"
        if ends and goal.consent:
            return "right_stop"
    if plays_agent(reply, {g for role, t, _ in turns if role == "agent" for g in _grams(t)}):
        return "never_played_agent"
    return None


def left_early(goal, messages: list[dict[str, Any]], termination: str) -> bool:
    """Whether the user ended the chat (`termination`) before the agent could do anything: in its opening message,
    or in reply to a request to confirm a change its task wants (`goal.consent`; a yes and a goodbye in one
    message, or a bare stop). A refusal may end the chat."""
    if termination not in USER_ENDINGS:
        return False
    turns = list(_turns(messages))
    first_user = next((i for i, (role, _, _) in enumerate(turns) if role == "user"), len(turns))
    if not any(role == "agent" for role, _, _ in turns[first_user:]):
        return True
    text, message = next((t, m) for role, t, m in reversed(turns) if role == "agent")
    # a message that asks and calls a tool at once (a hand-over, then "can you confirm you got through?") acted
    return bool(goal.consent and _CONFIRM.search(text) and not message.get("tool_calls"))


def answers_to_confirm(messages: list[dict[str, Any]]) -> list[int]:
    """Where in `messages` the user answered the agent's request to confirm a change: the user messages whose
    agent text just before (tool traffic aside) asked to confirm."""
    out, asked = [], False
    for i, m in enumerate(messages):
        for role, text, _ in _turns([m]):  # a user or agent text message; tool traffic says nothing
            if role == "user" and asked:
                out.append(i)
            asked = role == "agent" and bool(_CONFIRM.search(text))
    return out


def faithful(checks: dict[str, bool | None]) -> bool:
    return all(v is not False for v in checks.values())


def interaction_metrics(task, episode) -> dict[str, float | None]:
    """UserRL-style interaction figures of one finished episode (see the module docstring)."""
    from ..spec.models import call_parts

    bad_turns = {r["turn"] for r in episode.records if r.get("error")}
    gold = [call_parts(c) for c in task.task.expect.actions]
    calls = [c for m in episode.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    results = [r for r in episode.records if r.get("tool") is not None]  # one per call, in order
    first = next((r["turn"] for c, r in zip(calls, results)
                  if r.get("changed") and not r.get("error") and (c["name"], c["arguments"]) in gold), None)
    return {"effective_turns": float(sum(1 for t in range(1, episode.turns + 1) if t not in bad_turns)),
            "first_correct_write": None if first is None else float(first),
            "tool_errors": float(episode.tool_errors),
            "user_turns": float(sum(1 for m in episode.messages if m["role"] == "user"))}


def summarize_fidelity(rows: list[dict[str, bool | None]]) -> dict[str, Any]:
    """Share of episodes where each check held, over the episodes it applies to, and `faithful`."""
    out: dict[str, Any] = {"episodes": len(rows)}
    for key in CHECKS:
        vals = [r.get(key) for r in rows if r.get(key) is not None]
        out[key] = sum(vals) / len(vals) if vals else None
        out[f"{key}_n"] = len(vals)
    out["faithful"] = sum(faithful(r) for r in rows) / len(rows) if rows else None
    return out


def summarize_interaction(rows: list[dict[str, float | None]]) -> dict[str, float | None]:
    """Means per episode; first_correct_write over the episodes that made one (its share beside it)."""
    out: dict[str, float | None] = {}
    for key in INTERACTION:
        vals = [r[key] for r in rows if r.get(key) is not None]
        out[key] = sum(vals) / len(vals) if vals else None
    out["correct_write_share"] = (sum(r.get("first_correct_write") is not None for r in rows) / len(rows)) if rows else None
    return out


def model_verdict(summary: dict[str, Any], threshold: float = FAITHFUL_AT) -> dict[str, Any]:
    """Whether a user model is faithful: every check that applied (summarize_fidelity's shares) held in at least
    `threshold` of its episodes; the checks below it are named."""
    below = [k for k in CHECKS if summary.get(k) is not None and summary[k] < threshold]
    measured = any(summary.get(k) is not None for k in CHECKS)
    return {"threshold": threshold, "faithful": measured and not below, "below": below}


def distinct_n(texts: list[str], n: int = 2) -> float | None:
    """distinct-n: the share of the n-grams of all `texts` (lowercased words) that are different; None: no n-gram."""
    grams = [tuple(w[i:i + n]) for w in (re.findall(r"[a-z0-9'#@.-]+", t.lower()) for t in texts)
             for i in range(len(w) - n + 1)]
    return len(set(grams)) / len(grams) if grams else None


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    """The user's messages of one episode, in order."""
    return [m.get("content") or "" for m in messages if m["role"] == "user"]


def variation(conversations: list[list[dict[str, Any]]], per: int = 100) -> dict[str, float | None]:
    """How varied a user is over episodes' messages: distinct-1 and distinct-2 of every user message, and the
    number of distinct opening messages per `per` episodes (the first `per`; fewer episodes: scaled)."""
    texts = [t for msgs in conversations for t in user_texts(msgs)]
    firsts = [next(iter(user_texts(msgs)), "") for msgs in conversations[:per]]
    opened = len({" ".join(t.lower().split()) for t in firsts})
    return {"episodes": float(len(conversations)), "user_messages": float(len(texts)),
            "distinct_1": distinct_n(texts, 1), "distinct_2": distinct_n(texts, 2),
            "openings_per_100": opened * 100 / len(firsts) if firsts else None}
