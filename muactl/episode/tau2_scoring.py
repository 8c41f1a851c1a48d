"""τ²-bench's reward (`scoring: tau2`, `muactl eval --scoring tau2`): what τ²'s evaluator pays for an episode,
with its per-check breakdown, so a pass^1 measured through muactl is τ²'s (README, "τ²-bench").

τ² scores a task by its `reward_basis` (expect.reward_basis): the product of the components named there,
each 1.0 only when every one of its checks holds; the other checks are computed and reported, not counted.

- DB: the end state equals the gold path's (both databases in telecom). τ² replays only the
  state-changing calls of the trajectory, failed ones included; muactl's sandbox ran every call live and
  reads change nothing, so its end state is that replay's. An error does not matter, the state does.
  τ²'s gold path is played without its sync of the two databases (telecom's after_write), so a gold
  path whose sync changes something does not match its own end state there (never counted: telecom's
  basis has no DB).
- ENV_ASSERTION: each `assert: [{call: ...}]` on the end state.
- ACTION: each gold action was made somewhere in the trajectory, by the agent or the user: same name, and
  the arguments its compare_args name (expect.compare_args) equal, or, when it has none, the arguments the
  call carried (those the gold action lacks compare as missing; a call without arguments matches).
- COMMUNICATE: each communicate_info string occurs, ignoring case, in one of the agent's texts with its
  commas removed (the info's own commas are kept: "1,000" is never found). "12" counts inside "112".
- NL_ASSERTION: the judge's verdicts with τ²'s judge prompt (`judge_prompt`); without a judge they are
  reported as not judged and do not count.
Only an ending by a stop counts: the user's stop, transfer or out-of-scope token, or the agent's transfer
(after which τ²'s user says ###TRANSFER###); any other ending (max turns, too many errors, a timeout, an
error) pays 0 with no checks, as in τ².
"""

from __future__ import annotations

from typing import Any

# muactl's endings that τ² counts as a stop (USER_STOP; the agent's transfer tool call is followed by the
# user's ###TRANSFER###). Everything else is a premature termination there: reward 0.
STOPS = ("user_stop", "user_transfer", "out_of_scope", "transfer")
# τ²'s order of the components in its reward_breakdown
COMPONENTS = ("DB", "ENV_ASSERTION", "ACTION", "NL_ASSERTION", "COMMUNICATE")


def predicted_calls(episode) -> list[tuple[str, dict[str, Any]]]:
    """Every tool call of the trajectory, the agent's and the user's side, failed ones included (τ² reads
    its whole trajectory, requestor ignored)."""
    calls = [(c.get("name"), c.get("arguments") if isinstance(c.get("arguments"), dict) else {})
             for m in episode.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    return calls + [(c["name"], c.get("arguments") or {}) for c in episode.user_calls]


def action_matches(gold_name: str, gold_args: dict[str, Any], compare: list[str] | None,
                   name: str, args: dict[str, Any]) -> bool:
    if name != gold_name:
        return False
    keys = list(args) if compare is None else compare
    if not keys:
        return True
    return {k: v for k, v in args.items() if k in keys} == {k: v for k, v in gold_args.items() if k in keys}


def action_checks(task, episode) -> list[bool]:
    from ..spec.models import call_parts

    expect, made = task.task.expect, predicted_calls(episode)
    out = []
    for i, call in enumerate(expect.actions):
        name, args = call_parts(call)
        compare = expect.compare_args.get(i)
        out.append(any(action_matches(name, args, compare, got, got_args) for got, got_args in made))
    return out


def communicated(info: str, episode) -> bool:
    texts = [m["content"] for m in episode.messages
             if m["role"] == "assistant" and isinstance(m.get("content"), str) and m["content"].strip()]
    return any(info.lower() in text.lower().replace(",", "") for text in texts)


def env_assertion(env, assertion) -> bool:
    """An env assertion as τ²'s evaluator runs it: a call that fails (mock: the status of a task never
    created) makes τ²'s evaluation itself fail, so the episode cannot be scored (infra_error)."""
    from ..env.gold import assertion_result
    from ..errors import Tau2ScoringFailed
    from ..spec.models import call_parts

    if assertion.call is not None:
        name, args = call_parts(assertion.call)
        result = env.call(name, args)  # read-only (validate checks it)
        if result.error:
            raise Tau2ScoringFailed(f"τ²'s evaluator fails on this episode: its env assertion {name} fails: "
                                    f"{result.content}")
    return assertion_result(env, assertion)[0]


def basis_of(task) -> list[str]:
    """The task's reward_basis; a task without one is scored by τ²'s default basis."""
    from ..spec.models import TAU2_DEFAULT_BASIS

    return list(task.task.expect.reward_basis or TAU2_DEFAULT_BASIS)


def score_tau2(task, domain, env, episode, nl_verdicts: list[dict[str, Any]] | None = None) -> tuple[float, dict[str, Any]]:
    """τ²'s reward of an episode and its breakdown (`checks`: every check, counted or not; `reward_breakdown`:
    the counted components, τ²'s own shape)."""
    from ..env.gold import unsynced_gold_hash
    from .reward import partial_credit

    expect, basis = task.task.expect, basis_of(task)
    # muactl's partial signals ride along (the summary's first_call_right, gold_calls_made), never counted
    head = {"scoring": "tau2", "termination": episode.termination, "reward_basis": basis,
            "partial": partial_credit(task, episode, domain)}
    if episode.termination not in STOPS:
        return 0.0, {**head, "ended_normally": False, "checks": None, "reward_breakdown": None, "success": False}
    # a task with neither gold actions nor env assertions: τ²'s environment check passes without looking
    db_match = expect.env_unchecked or episode.final_hash == unsynced_gold_hash(task, domain)
    asserts = [] if expect.env_unchecked else [env_assertion(env, a) for a in expect.assert_]
    actions = action_checks(task, episode)
    comm = [communicated(o, episode) for o in expect.outputs]
    # τ² runs its judge only when the basis names NL_ASSERTION; no assertions: met, with no checks
    nl = None
    if "NL_ASSERTION" in basis:
        nl = nl_verdicts if expect.nl_assertions else []
    judged = nl is not None or "NL_ASSERTION" not in basis
    parts = {"DB": float(db_match), "ENV_ASSERTION": float(all(asserts)), "ACTION": float(all(actions)),
             "COMMUNICATE": float(all(comm))}
    if nl is not None:
        parts["NL_ASSERTION"] = float(all(v["ok"] for v in nl))
    counted = {k: parts[k] for k in COMPONENTS if k in basis and k in parts
               and not (expect.env_unchecked and k in ("DB", "ENV_ASSERTION"))}
    reward = 1.0
    for value in counted.values():
        reward *= value
    # τ²'s shape: no action or communicate checks at all (None) when the task has none to check
    checks = {"db_match": db_match, "env_assertions": None if expect.env_unchecked else asserts, "actions": actions if expect.actions else None,
              "communicate": comm if expect.outputs else None,
              "nl_assertions": None if nl is None else [v["ok"] for v in nl]}
    breakdown = {**head, "ended_normally": True, "checks": checks, "reward_breakdown": counted, "nl_judged": judged,
                 "nl_verdicts": nl, "success": reward == 1.0}
    return reward, breakdown


# ---------------------------------------------------------------- τ²'s judge prompt


def judge_messages(prompt: dict[str, str], assertions: list[str], messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The judge's request as τ² builds it: its system prompt, and its user prompt with the whole trajectory
    ("role: content" per message, tool calls and results included) and the assertions as a Python list."""
    lines = []
    for m in messages:
        if m["role"] == "system":  # τ²'s trajectory starts after the system prompt
            continue
        content = m.get("content")
        if m["role"] == "assistant" and not content and m.get("tool_calls"):
            content = None  # a turn of calls only has no content in τ²
        lines.append(f"{m['role']}: {content}")
    user = prompt["user"].replace("{trajectory_str}", "\n".join(lines)).replace("{nl_assertions}", repr(list(assertions)))
    return [{"role": "system", "content": prompt["system"]}, {"role": "user", "content": user}]


def parse_results(text: str) -> list[dict[str, Any]]:
    """τ²'s judge answer ({"results": [{"expectedOutcome", "reasoning", "metExpectation"}]}) as muactl's
    verdicts; ValueError says what is wrong with it."""
    from .answers import json_object_in

    data = json_object_in(text)
    items = data.get("results") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise ValueError("expected a 'results' list")
    out = []
    for i, item in enumerate(items, 1):
        if not isinstance(item, dict) or not isinstance(item.get("metExpectation"), bool):
            raise ValueError(f"result {i} has no true/false 'metExpectation'")
        out.append({"assertion": str(item.get("expectedOutcome") or ""), "ok": item["metExpectation"],
                    "reason": str(item.get("reasoning") or "")[:500]})
    return out


# ---------------------------------------------------------------- agreement with τ²'s evaluator


def play_trajectory(task, compiled, trajectory: dict):
    """A trajectory of importers/tau2_trajectories.py played as a muactl episode would: the agent's calls on the
    sandbox in its messages (a transfer ends it), the user's own calls on the sandbox beside them. A trajectory
    ended by a transfer that ends nothing in muactl (a `hands_over` tool) ends as τ²'s recorder ends it, by the
    user's ###TRANSFER###. Returns the episode and its sandbox (closed by the caller)."""
    from ..env.sandbox import new_env
    from .types import Episode

    env = new_env(compiled)
    env.replay(task.task.setup)
    messages: list[dict[str, Any]] = [{"role": "system", "content": compiled.system_prompt_for(task.task)}]
    ep = Episode(task.task.id, 0, 0, messages, trajectory["end"])
    for n, step in enumerate(trajectory["steps"]):
        if "text" in step:
            fixed = {"fixed": True} if n == 0 and step["by"] == "assistant" else {}
            messages.append({"role": step["by"], "content": step["text"], **fixed})
            continue
        result = env.call(step["call"], step["args"])
        if step["by"] == "user":
            ep.user_calls.append({"name": step["call"], "arguments": step["args"]})
            continue
        call_id = f"call_{n}"
        messages.append({"role": "assistant", "content": "", "tool_calls": [
            {"id": call_id, "name": step["call"], "arguments": step["args"]}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "name": step["call"], "content": result.content,
                         "error": result.error})
        if result.transfer:
            break
    else:
        if ep.termination == "transfer":
            ep.termination = "user_transfer"
    ep.final_hash = env.state_hash()
    return ep, env


def scored_as_recorded(task, compiled, env, episode, verdicts) -> dict[str, Any]:
    """score_tau2 in the recorder's shape, with whether τ²'s evaluator would fail on it (`error`: then no reward
    and no checks)."""
    from ..errors import Tau2ScoringFailed

    try:
        return {"error": False, **comparable(*score_tau2(task, compiled, env, episode, verdicts))}
    except Tau2ScoringFailed:
        return {"error": True, **dict.fromkeys(("reward", "reward_breakdown", "db_match", "env_assertions",
                                                        "actions", "communicate", "nl_assertions"))}


def comparable(reward: float, breakdown: dict[str, Any]) -> dict[str, Any]:
    """muactl's tau2 breakdown in the shape of the recorded τ² results (benchmarks/tau2_reward_record.py)."""
    checks = breakdown.get("checks") or {}
    return {"reward": reward, "reward_breakdown": breakdown.get("reward_breakdown"),
            **{k: checks.get(k) for k in ("db_match", "env_assertions", "actions", "communicate", "nl_assertions")}}


def tau2_mutating(compiled):
    """τ²'s mutates_state of a tool, by name: one that writes, and the unlock and call of discoverable tools
    (banking_knowledge's unlock_discoverable_agent_tool and call_discoverable_agent_tool are state-changing in τ²)."""
    def mutating(name: str) -> bool:
        tool = compiled.tools.get(name)
        return compiled.writes(name) or (tool is not None and tool.kind == "builtin"
                                         and tool.spec.builtin in ("unlock", "call_unlocked"))
    return mutating


def agreement(opened, raw_tasks: list[dict], records: dict) -> dict[str, Any]:
    """Every recorded trajectory (tests/data/tau2/<domain>_rewards.json) scored by muactl's scoring: tau2 and by
    muactl's own reward, against τ²'s recorded reward and checks. NL assertions get the recorder's stub verdict
    (all met). Returns the counts and the first differences."""
    from ..importers.tau2_input import task_id
    from ..importers.tau2_trajectories import trajectories
    from .reward import score

    by_id = {t.task.id: t for t in opened.tasks}
    raw = {t["id"]: t for t in raw_tasks}
    n = same = same_reward = muactl_same = 0
    diffs: list[str] = []
    muactl_diffs: dict[str, int] = {}
    by_reason: dict[str, int] = {}
    reason_kinds: dict[str, dict[str, int]] = {}
    for tid, rows in records["tasks"].items():
        task = by_id.get(task_id(tid))
        made = {t["kind"]: t for t in trajectories(raw[tid], tau2_mutating(opened.compiled))} if tid in raw else {}
        for row in rows:
            n += 1
            traj = made.get(row["kind"])
            if task is None or traj is None or traj["digest"] != row["digest"]:
                diffs.append(f"task {tid} {row['kind']}: not the trajectory τ² was scored on")
                continue
            ep, env = play_trajectory(task, opened.compiled, traj)
            try:
                stub = [{"assertion": a, "ok": True, "reason": "stub"} for a in task.task.expect.nl_assertions]
                got = scored_as_recorded(task, opened.compiled, env, ep, stub)
                own, own_breakdown = score(task, opened.compiled, env, ep, stub)
            finally:
                env.close()
            want = {**{k: row.get(k) for k in got}, "error": "error" in row}
            same_reward += got["reward"] == want["reward"]
            if got == want:
                same += 1
            else:
                wrong = [k for k in got if got[k] != want[k]]
                diffs.append(f"task {tid} {row['kind']}: " + "; ".join(f"{k} {got[k]} (τ² {want[k]})" for k in wrong))
            if own == (want["reward"] or 0.0):  # τ²'s failed evaluation pays nothing
                muactl_same += 1
            else:
                muactl_diffs[row["kind"]] = muactl_diffs.get(row["kind"], 0) + 1
                why = own_reward_differs_because(task, row, own_breakdown)
                by_reason[why] = by_reason.get(why, 0) + 1
                kinds = reason_kinds.setdefault(why, {})
                kinds[row["kind"]] = kinds.get(row["kind"], 0) + 1
    return {"trajectories": n, "same": same, "same_reward": same_reward, "muactl_same_reward": muactl_same,
            "muactl_differs_by_kind": muactl_diffs, "muactl_differs_by_reason": by_reason,
            "muactl_differs_by_reason_kind": reason_kinds, "mismatches": diffs}


# why muactl's own reward differs from τ²'s on a recorded trajectory (README, "τ²-bench", the table of reasons)
OWN_REWARD_REASONS = {
    "user_transfer": "the user's ###TRANSFER### ends the conversation: a stop for τ²; for muactl only the agent's "
                     "transfer is one (its transfer call, or the user's ###TRANSFER### after the agent's hand-over), "
                     "so it pays nothing",
    "info_unsaid": "a communicate_info left unsaid: the basis has no COMMUNICATE; muactl requires every output",
    "info_inside_word": "an info glued inside a longer word: a substring for τ², not whole tokens for muactl",
    "unchanged_task": "the task changes nothing, and the conversation says nothing or ends otherwise than expected: "
                      "τ² pays the unchanged DB, muactl requires the expected ending and every output",
    "assertion_false_after_gold": "an env assertion τ²'s own gold path leaves false: τ² pays 0 whatever happens, "
                                  "muactl's reward leaves it out",
    "actions_unchecked": "an [ACTION] task without env assertions: τ² pays only when every gold action was made; "
                         "muactl's import compares no DB there and requires no call, so it pays any stop",
    "db_beyond_basis": "an end state off the gold path's in a task without DB in its basis nor env assertions (a retry "
                       "that succeeds with a wrong argument; one of eight identical writes left out or made once more): "
                       "τ² pays the gold actions found (any call of one meets all its copies), muactl's import keeps "
                       "the DB check there as the evidence of the work, so that state pays nothing",
    "other": "not one of the reasons above",
}


def own_reward_differs_because(task, row: dict[str, Any], own: dict[str, Any]) -> str:
    """The key of OWN_REWARD_REASONS for a recorded trajectory on which muactl's own reward (its breakdown `own`)
    differs from what τ²'s evaluator paid (`row`, as recorded)."""
    expect = task.task.expect
    if own["success"]:  # τ² pays 0
        if False in (row.get("env_assertions") or []) and any(not a.holds_after_gold for a in expect.assert_):
            return "assertion_false_after_gold"
        if "ACTION" in (expect.reward_basis or ()) and not (expect.compare_db or expect.assert_ or expect.required_calls):
            return "actions_unchecked"
        return "other"
    if own["termination"] == "user_transfer" and not own["ended_normally"]:
        return "user_transfer"
    if row["kind"] in ("empty", "early_transfer"):  # τ² paid it: the gold path leaves the state as it was
        return "unchanged_task"
    if own["db_compared"] and not own["db_match"] and "DB" not in (expect.reward_basis or ("DB",)):
        return "db_beyond_basis"
    if own["ended_normally"] and not all(own["outputs"].values()):
        return "info_inside_word" if all(row.get("communicate") or [False]) else "info_unsaid"
    return "other"
