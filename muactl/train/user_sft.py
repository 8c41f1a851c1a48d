"""`muactl train user`: supervised fine-tuning of a model to play the user, scored by the fidelity checks.

    data (faithful episodes) -> one example per user message -> sft -> the trained user evaluated

The data is episodes where the user was faithful (episode/fidelity.py, recomputed here for every episode): the
runs named in user_sft.runs (synth or eval runs with the scripted or an API user, chats a person played), or, when
none is named, a synth run made here with user_sft.agent against user_sft.user (oracle:varied and scripted:varied:
several phrasings, so that the trained user does not learn one sentence per situation).

Each user message becomes one example: the prompt a trained `hf:` user is given at that point (user.py's
small_model_messages: the persona, the goal, the facts it may give and the conversation with the agent's words
marked as the agent's; never the agent's tools or the database) and the message as the reply, with the stop token
where it ended the episode. The loss is on that reply only: earlier user messages are context (`not_trained`).
With user_sft.consent_pairs, each answer to a request to confirm a change also comes the other way (consent_pair):
the same conversation with the task's consent flipped and the opposite answer, so that the answer follows the
prompt's instruction, not how often the data's users said yes.
The checkpoint's card says it plays the user (so it writes its opening message too) and how many times a sampled
reply that breaks the user's instructions is drawn (user_sft.draws; user.py's HFUser), and it loads as
`--user hf:PATH` wherever a user is accepted. Then the oracle agent plays the held-out tasks against it, and
against the scripted user for reference: the fidelity checks per check and overall with intervals, whether the
trained user is faithful (FAITHFUL_AT), pass^1 against both users, and how varied the trained user's messages are.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

from ..episode.agents.oracle import consent_in
from ..episode.fidelity import answers_to_confirm, faithful, user_fidelity, variation
from ..episode.user import STOP_TOKENS, persona_phrasings, user_prompt
from ..runs.stages import save_stages, stages_state
from ..runs.store import RunStore
from .checkpoints import drop_resumable

STOP_TEXT = {reason: token for token, reason in STOP_TOKENS.items()}  # termination -> the token that asks for it


def user_examples(spec, task, messages: list[dict[str, Any]], termination: str,
                  consent_pairs: bool = False) -> list[dict[str, Any]]:
    """One SFT record per user message of a finished episode (see the module docstring); a user stop that came
    with no words is a last example whose reply is the stop token alone. `consent_pairs`: each answer to a request
    to confirm is also taught the other way (consent_pair)."""
    out = []
    ends = STOP_TEXT.get(termination)
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=-1)
    targets = [(i, m.get("content") or "") for i, m in enumerate(messages) if m["role"] == "user"]
    if ends and last_user < len(messages) - 1:  # the stop was the user's last turn, with nothing said
        targets.append((len(messages), ""))
        last_user = len(messages)
    for i, text in targets:
        reply = f"{text} {ends}".strip() if ends and i == last_user else text
        out.append(example(user_prompt(spec, task.task, messages[:i]), reply, task.task.id))
    if consent_pairs:
        out += [consent_pair(spec, task, messages, i) for i in answers_to_confirm(messages)
                if consent_in(messages[i].get("content") or "") is task.task.user.consent]
    return out


def consent_pair(spec, task, messages: list[dict[str, Any]], i: int) -> dict[str, Any]:
    """The counterpart of the user's answer at `i` to a request to confirm: the same conversation, the task's
    consent the other way (its `instructions` left out, as they may say which way) and an answer that way, in the
    task persona's manner. A model taught only the answers its data's users gave learns how often users say yes;
    with the pair, the answer can only come from the instruction line that differs."""
    goal = task.task.user
    flipped = task.task.model_copy(update={"user": goal.model_copy(update={"consent": not goal.consent,
                                                                            "instructions": None})})
    options = persona_phrasings(task.task.persona, "no" if goal.consent else "yes")
    reply = options[random.Random(f"{task.task.id}:{i}:consent-pair").randrange(len(options))]
    return {**example(user_prompt(spec, flipped, messages[:i]), reply, task.task.id), "consent_pair": True}


def example(prompt: list[dict[str, str]], reply: str, task_id: str) -> dict[str, Any]:
    """One SFT record: the user's prompt and its reply, the earlier user messages (the prompt's assistant turns)
    marked `not_trained`."""
    record = {"messages": [*prompt, {"role": "assistant", "content": reply}], "task_id": task_id}
    context = [k for k, m in enumerate(prompt) if m["role"] == "assistant"]
    if context:
        record["not_trained"] = context
    return record


def run_tasks(store: RunStore, opened) -> dict[str, Any]:
    """The tasks a stored run's episodes played, by id: the domain's task files, and the template instances its
    config draws again (eval.evaluate.tasks_of)."""
    from ..domain.task_templates import is_template_spec
    from ..eval.evaluate import tasks_of

    cfg = store.info()["config"]
    by_id = {t.task.id: t for t in opened.tasks}
    if is_template_spec(cfg.get("tasks")):
        keys = ("tasks", "n", "seed", "db", "split", "contrast")  # a synth --contrast run's partners are its tasks too
        by_id.update({t.task.id: t for t in tasks_of(SimpleNamespace(**{k: cfg.get(k) for k in keys}), opened)})
    return by_id


def stored_messages(store: RunStore, episode_id: int) -> list[dict[str, Any]]:
    """An episode's messages as the engine wrote them (the greeting's `fixed` mark included)."""
    return [{"role": m["role"], "content": m["content"], "tool_calls": m["tool_calls"], "name": m["name"],
             "tool_call_id": m["tool_call_id"], **json.loads(m["meta"] or "{}")} for m in store.messages(episode_id)]


def has_user_side_calls(task, compiled) -> bool:
    """Dual control: a trained user cannot make the gold path's user-side calls (HFUser calls no tools)."""
    from ..spec.models import call_parts

    return any(getattr(compiled.tools.get(call_parts(c)[0]), "side", None) == "user" for c in task.task.expect.actions)


def faithful_episodes(sources: list[str], opened) -> tuple[list[tuple[Any, list, str]], dict[str, int]]:
    """(task, messages, termination) of every episode of the runs `sources` whose user was faithful and ended the
    episode itself, with counts of what was left out and why."""
    from ..errors import UsageError
    from ..episode.types import EXCLUDED

    kept, counts = [], {"episodes": 0, "kept": 0, "unfaithful": 0, "not_played": 0, "other_task": 0}
    for ref in sources:
        store = RunStore.open(str(ref))
        domain = store.info().get("domain")
        if domain != opened.spec.domain.name:
            raise UsageError(f"user_sft.runs: run {store.id} is on domain {domain}, not {opened.spec.domain.name}")
        tasks = run_tasks(store, opened)
        for e in store.episodes():
            counts["episodes"] += 1
            task = tasks.get(e["task_id"])
            if task is None or task.task.solo or has_user_side_calls(task, opened.compiled):
                counts["other_task"] += 1
                continue
            if e["termination"] in (*EXCLUDED, "agent_error", "too_many_errors"):
                counts["not_played"] += 1
                continue
            messages = stored_messages(store, e["id"])
            checks = user_fidelity(task, SimpleNamespace(messages=messages, termination=e["termination"]),
                                   opened.compiled)
            if not faithful(checks) or not checks["right_stop"]:
                counts["unfaithful"] += 1
                continue
            kept.append((task, messages, e["termination"]))
    counts["kept"] = len(kept)
    return kept, counts


def write_examples(episodes, spec, path: Path, consent_pairs: bool = False) -> dict[str, Any]:
    """The episodes' user messages as SFT records in `path`; how many (consent pairs among them), and how varied
    the messages are."""
    records = [r for task, messages, term in episodes
               for r in user_examples(spec, task, messages, term, consent_pairs)]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return {"examples": len(records), "consent_pairs": sum(bool(r.get("consent_pair")) for r in records),
            **{f"data_{k}": v for k, v in variation([m for _, m, _ in episodes]).items()
                                         if k in ("distinct_2", "openings_per_100")}}


def run_train_user(cfg, store: RunStore, log: Callable[[str], None] = print) -> dict[str, Any]:
    """The stages of the module docstring in `store`'s folder; a finished stage is skipped on --resume."""
    from ..domain.open import open_domain
    from ..errors import UsageError
    from .pipeline import release
    from .sft import run_sft

    state = stages_state(store)
    opened = open_domain(cfg.domain, trust=cfg.trust)
    if "data" not in state:
        sources = [str(r) for r in cfg.user_sft.runs] or [synth_user_data(cfg, store, log)]
        episodes, counts = faithful_episodes(sources, opened)
        log(f"user data: {counts['kept']} faithful episodes of {counts['episodes']} ({counts['unfaithful']} unfaithful, "
            f"{counts['not_played']} cut short, {counts['other_task']} solo, dual-control or unknown tasks left out)")
        if not episodes:
            raise UsageError("no episode with a faithful user to train on; name runs in user_sft.runs=[RUN_ID,...] "
                             "whose users passed the fidelity checks (muactl runs show RUN_ID)")
        path = store.path / "user-sft.jsonl"
        state["data"] = {"path": str(path), "sources": sources, **counts,
                         **write_examples(episodes, opened.spec, path, cfg.user_sft.consent_pairs)}
        log(f"user data: {state['data']['examples']} examples (one per user message, and "
            f"{state['data']['consent_pairs']} consent pairs) -> {path}")
        save_stages(store, state)
    if "sft" not in state:
        from ..models.folder import mark_card

        final, stats = run_sft(cfg, store, Path(state["data"]["path"]), log=log)
        # a trained user writes its opening message too, and draws a sampled reply again as the card says (HFUser)
        mark_card(final, plays="user", draws=cfg.user_sft.draws)
        state["sft"] = {"checkpoint": str(final), **stats}
        save_stages(store, state)
    drop_resumable(store.path / "sft", cfg.keep_checkpoints, log, "sft")  # once recorded: until then a crash resumes from them
    if "eval" not in state:
        release()  # SFT's memory goes back before the evaluation loads the trained user, as between a recipe's stages
        state["eval"] = evaluate_user(cfg, store, state["sft"]["checkpoint"], log)
        save_stages(store, state)
    return state


def synth_user_data(cfg, store: RunStore, log) -> str:
    """A synth run in the run folder (runs/<id>/user-synth/): user_sft.agent against user_sft.user."""
    from ..eval.evaluate import run_eval
    from .pipeline import split_or_ids, substore, took
    from .synth_config import SynthConfig

    u = cfg.user_sft
    split, ids = split_or_ids(u.tasks)
    scfg = SynthConfig(domain=str(cfg.domain), agent=str(u.agent), user=str(u.user), split=split, tasks=ids, n=u.n,
                       trials=u.trials, seed=cfg.seed, max_turns=u.max_turns, trust=cfg.trust)
    path = substore(store, "user-synth", cfg, asdict_cfg=scfg)
    log(f"== user data: {u.agent} against {u.user} on {u.tasks}, {u.trials} trials")
    t0 = time.perf_counter()
    run_eval(scfg, resume=path, kind="synth")
    log(f"user data: synth done ({took(t0)})")
    return path


def evaluate_user(cfg, store: RunStore, checkpoint: str, log) -> dict[str, Any]:
    """The oracle against the trained user, then against the scripted user, on the held-out set."""
    from ..eval.config import EvalConfig
    from ..eval.evaluate import run_eval
    from ..runs.stats import bootstrap
    from ..runs.summary import per_task_success, user_model_verdict, verdict_line
    from .pipeline import figure, split_or_ids, substore, took

    u = cfg.user_sft
    split, ids = split_or_ids(u.eval_tasks)
    out: dict[str, Any] = {}
    for label, user in (("trained", f"hf:{checkpoint}"), ("scripted", "scripted")):
        ecfg = EvalConfig(domain=str(cfg.domain), agent="oracle", user=user, split=split or "test", tasks=ids,
                          n=u.eval_n, trials=u.eval_trials, seed=cfg.seed, max_turns=u.max_turns,
                          user_temperature=u.temperature, trust=cfg.trust)
        log(f"== eval: the oracle against the {label} user ({user}) on {u.eval_tasks}")
        t0 = time.perf_counter()
        estore, summary = run_eval(ecfg, resume=substore(store, f"eval-{label}-user", cfg, asdict_cfg=ecfg))
        episodes = estore.episodes()
        conversations = [[m for m in estore.messages(e["id"])] for e in episodes]
        per_task = per_task_success(episodes)
        row = {"user": user, "pass^1": summary.get("pass^1"), "pass^1_interval": list(bootstrap({"0": per_task})[1:]),
               "per_task": per_task, "episodes": summary.get("episodes"),
               "fidelity": summary["user_fidelity"], "verdict": user_model_verdict(episodes),
               "variation": variation(conversations), "run": str(estore.path),
               "redrawn": int(sum(e["usage"].get("user_redrawn", 0) for e in episodes))}
        out[label] = row
        lo, hi = row["pass^1_interval"]
        drawn = f", {row['redrawn']} sampled replies drawn again" if row["redrawn"] else ""
        log(f"eval {label} user: pass^1 {figure(row['pass^1'])} [{figure(lo)}, {figure(hi)}], faithful {figure(row['fidelity'].get('faithful'))} over "
            f"{row['episodes']} episodes, distinct-2 {figure(row['variation']['distinct_2'])}{drawn} ({took(t0)})")
    out["pass^1_gap"] = pass_gap(out["trained"]["per_task"], out["scripted"]["per_task"])
    log(verdict_line(out["trained"]["verdict"], out["trained"]["fidelity"]))
    log(gap_line(out["pass^1_gap"]))
    return out


def pass_gap(trained: dict[str, float], scripted: dict[str, float]) -> dict[str, Any]:
    """The oracle's pass^1 against the trained user minus against the scripted user, paired over the instances both
    scored, with its 95% interval: a trained user that makes tasks easier or harder than they are shows here."""
    from ..episode.fidelity import PASS_GAP_AT
    from ..runs.stats import paired

    d, lo, hi = paired({"0": trained}, {"0": scripted})
    return {"difference": d, "interval": [lo, hi], "within": abs(d) <= PASS_GAP_AT, "threshold": PASS_GAP_AT,
            "tasks": len(set(trained) & set(scripted))}


def gap_line(gap: dict[str, Any]) -> str:
    lo, hi = gap["interval"]
    return (f"oracle pass^1, trained user - scripted user, paired over {gap['tasks']} instances: {gap['difference']:+.2f} "
            f"[{lo:+.2f}, {hi:+.2f}]: {'within' if gap['within'] else 'not within'} {gap['threshold']:.2f}")
