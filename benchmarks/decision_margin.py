"""How close a decision is: where two arms of an rl_gain sweep act differently on the same held-out instance, how
much more likely each model finds one arm's turn than the other's. Prints tables; asserts nothing.

For each seed, the greedy evaluations of two arms (default: SFT only, and SFT then GRPO) played the same held-out
instances with the same deterministic user. On each instance, the first assistant turn at which the two act
differently (a reply against a tool call, other tools called, or a last turn against one the conversation goes on
after, as a refusal the user accepts against a question before a write) is the decision. A's turn and B's turn there are
scored after A's conversation up to that turn, under each arm's checkpoint:

    margin = log p(A's turn | A's conversation so far) - log p(B's turn | the same)     (nats, whole turn)

A positive margin under a model means it prefers A's turn. Under A's own checkpoint the margin says how far that
decision was from going the other way; the same figure under B's checkpoint says how far training moved it. Printed
per seed and template: the instances where the arms act differently, how many of them had the same conversation
token for token before the decision (the others differ in wording earlier, and B's turn is scored after A's words),
the median margin, the mean with a 95% bootstrap interval over those instances, the smallest, and how many prefer
A's turn; then what the two turns did and whether each arm passed.

Reads --out as rl_gain.py leaves it: results.json names each arm's evaluation run, the checkpoints are in runs/.

    .venv/bin/python benchmarks/decision_margin.py --out out/sweep26act --seeds 1 2
    .venv/bin/python benchmarks/decision_margin.py --out out/sweep26act --seeds 1 --templates refuse-overdraft,refuse-close-nonempty
    .venv/bin/python benchmarks/decision_margin.py --out out/sweep26act --seeds 1 --score topup=out/topup/runs/topup-{seed}/sft/checkpoint-final
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from collections import Counter
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from muactl.models.folder import load_tokenizer  # noqa: E402
from muactl.runs.stats import bootstrap  # noqa: E402  (the intervals every other table uses)
from rl_gain import SCORED, checkpoint, template_of  # noqa: E402  (rl_gain's own definitions of these)

Trace = tuple[list[int], list[int]]  # the token ids of an episode and its mask (1: the policy wrote the token)


def traces(run: Path) -> dict[str, Trace]:
    """task id -> the token trace of its scored episode (infra and user errors are not scored)."""
    with sqlite3.connect(run / "runs.sqlite") as db:
        rows = db.execute("SELECT e.task_id, t.ids, t.mask FROM episodes e JOIN traces t ON t.episode_id = e.id "
                          f"WHERE {SCORED}").fetchall()
    return {task: (json.loads(ids), json.loads(mask)) for task, ids, mask in rows}


SAME = "the same actions"  # why an instance is not scored
OUTCOME = {1: "pass", 0: "fail", None: "not recorded"}


def turns(mask: list[int]) -> list[tuple[int, int]]:
    """(start, end) of every assistant turn in a trace: the runs of tokens the policy wrote."""
    spans, start = [], None
    for i, written in enumerate([*mask, 0]):
        if written and start is None:
            start = i
        elif not written and start is not None:
            spans.append((start, i))
            start = None
    return spans


def decision(a: Trace, b: Trace, act) -> dict | str:
    """The first assistant turn at which two conversations of one instance act differently (`act` says what a turn
    does), or where one of them ends and the other goes on: A's conversation before it, A's turn and B's turn there,
    and whether the conversations were the same token for token before it (else B's turn is scored after A's
    conversation, which differs in wording). SAME where they never act differently."""
    (a_ids, a_mask), (b_ids, b_mask) = a, b
    a_turns, b_turns = turns(a_mask), turns(b_mask)
    for k, ((a_start, a_end), (b_start, b_end)) in enumerate(zip(a_turns, b_turns)):
        a_turn, b_turn = a_ids[a_start:a_end], b_ids[b_start:b_end]
        ends = (k == len(a_turns) - 1, k == len(b_turns) - 1)
        if act(a_turn) != act(b_turn) or ends[0] != ends[1]:
            acts = tuple(act(t) + (" (last)" if last else "") for t, last in zip((a_turn, b_turn), ends))
            return {"prefix": a_ids[:a_start], "turns": (a_turn, b_turn), "acts": acts,
                    "exact": a_ids[:a_start] == b_ids[:b_start]}
    return SAME


def turn_logprob(lm, prefix: list[int], turn: list[int]) -> float:
    """log p(turn | prefix) under a loaded muactl model (muactl.models.generation.LocalLM): the sum over the turn's
    tokens, each given everything before it, computed as the model computes when it decodes."""
    import torch

    with lm._no_grad():  # and bf16 autocast where the model decodes with it, so the figures are what greedy saw
        ids = torch.tensor([prefix + turn], device=lm.device)
        logits = lm.model(ids).logits[0, len(prefix) - 1:-1].float().log_softmax(-1)
        return logits.gather(1, ids[0, len(prefix):, None]).sum().item()


def action(tokenizer, turn: list[int]) -> str:
    """What an assistant turn does, in a word: the tools it calls, `reply`, or `malformed` (a call that does not parse)."""
    parsed = tokenizer.muactl_format.parse(tokenizer.decode(turn))
    return "+".join(c["name"] for c in parsed.tool_calls) or ("malformed" if parsed.error else "reply")


def decisions(out: Path, seed: int, arms: tuple[str, str], templates: set[str] | None, tokenizer) -> tuple[list[dict], Counter]:
    """The instances of one seed where the two arms' greedy conversations act differently at some turn (see
    `decision`), with whether each arm passed; and how many of the others were not scored, by reason."""
    results = json.loads((out / "results.json").read_text())
    keys = [f"{arm}:{seed}" for arm in arms]
    missing = [k for k in keys if not results.get(k, {}).get("heldout_run")]
    if missing:
        raise SystemExit(f"{out / 'results.json'}: no evaluation run recorded for {', '.join(missing)}")
    a, b = (traces(out / "runs" / results[k]["heldout_run"]) for k in keys)
    found, skipped = [], Counter()
    if set(a) ^ set(b):
        skipped["scored in one arm only"] = len(set(a) ^ set(b))
    for task in sorted(set(a) & set(b)):
        if templates and template_of(task) not in templates:
            continue
        d = decision(a[task], b[task], partial(action, tokenizer))
        if isinstance(d, str):
            skipped[d] += 1
            continue
        found.append({**d, "task": task, "template": template_of(task),
                      "passed": tuple(results[k]["heldout"].get(task) for k in keys)})
    return found, skipped


def score(found: list[dict], models: dict[str, Path]) -> None:
    """Adds each model's margin (log p of A's turn - log p of B's turn, after A's conversation) to every decision."""
    from muactl.models.generation import LocalLM

    for name, path in models.items():
        lm = LocalLM(path, prefix_cache=False)
        for d in found:
            a_turn, b_turn = d["turns"]
            d.setdefault("margin", {})[name] = turn_logprob(lm, d["prefix"], a_turn) - turn_logprob(lm, d["prefix"], b_turn)
        del lm


def row(label: str, model: str, group: list[dict]) -> str:
    margins = {d["task"]: d["margin"][model] for d in group}
    values = sorted(margins.values())
    mean, low, high = bootstrap({"m": margins})
    exact, prefer = sum(d["exact"] for d in group), sum(v > 0 for v in values)
    return (f"| {label} | {model} | {len(values)} | {exact} | {statistics.median(values):+.2f} | {mean:+.2f} [{low:+.2f}, {high:+.2f}] "
            f"| {values[0]:+.2f} | {prefer}/{len(values)} |")


def report(by_seed: dict[int, list[dict]], skipped: dict[int, Counter], arms: tuple[str, str], models: list[str]) -> str:
    a, b = arms
    lines = [f"margin = log p({a}'s turn) - log p({b}'s turn) at the first turn where the two act differently, after "
             f"{a}'s conversation, in nats; > 0: the model prefers {a}'s turn", "",
             f"| seed, template | model | instances | same before | median | mean [95%] | smallest | prefers {a} |",
             "|---|---|---|---|---|---|---|---|"]
    for seed, found in by_seed.items():
        groups = {"all": found, **{t: [d for d in found if d["template"] == t] for t in sorted({d["template"] for d in found})}}
        for label, group in groups.items():
            for model in models:
                if group:
                    lines.append(row(f"{seed}, {label}", model, group))
    lines.append("")
    for seed, found in by_seed.items():
        moves = Counter((d["template"], *d["acts"], *(OUTCOME[p] for p in d["passed"])) for d in found)
        lines.append(f"seed {seed}, what the turns did ({a} -> {b}; {a} passed, {b} passed): " +
                     "; ".join(f"{t}: {x} -> {y} ({pa}, {pb}) x{n}" for (t, x, y, pa, pb), n in sorted(moves.items())))
        if skipped[seed]:
            lines.append(f"seed {seed}, not scored: " + ", ".join(f"{why} {n}" for why, n in sorted(skipped[seed].items())))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="an rl_gain.py --out folder")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--arms", nargs=2, default=["sft", "sft+grpo"], choices=["sft", "sft+grpo", "grpo"], metavar=("A", "B"),
                    help="the two arms compared: sft, sft+grpo or grpo (default: sft sft+grpo)")
    ap.add_argument("--score", action="append", default=[], metavar="NAME=PATH",
                    help="another checkpoint to score on the same decisions (a {seed} in PATH is replaced by the seed)")
    ap.add_argument("--templates", help="comma-separated templates to score (default: every one where the arms act differently)")
    args = ap.parse_args()
    out, arms = Path(args.out), tuple(args.arms)
    if not (out / "results.json").is_file():
        ap.error(f"{out}: no results.json here; --out takes a folder benchmarks/rl_gain.py wrote")
    templates = set(args.templates.split(",")) if args.templates else None
    if any("=" not in spec for spec in args.score):
        ap.error("--score takes NAME=PATH")
    extra = dict(spec.split("=", 1) for spec in args.score)
    if set(extra) & set(arms):
        ap.error(f"--score names a checkpoint like an arm ({', '.join(sorted(set(extra) & set(arms)))}); give it another name")
    by_seed, skipped = {}, {}
    for seed in args.seeds:
        models = {**{arm: checkpoint(out, arm, seed) for arm in arms},
                  **{name: Path(path.replace("{seed}", str(seed))) for name, path in extra.items()}}
        gone = [str(p) for p in models.values() if not p.is_dir()]
        if gone:
            raise SystemExit(f"seed {seed}: no checkpoint at {', '.join(gone)} (the margin needs the models, not only results.json)")
        found, skipped[seed] = decisions(out, seed, arms, templates, load_tokenizer(models[arms[0]]))
        score(found, models)
        by_seed[seed] = found
    print(report(by_seed, skipped, arms, [*arms, *extra]))


if __name__ == "__main__":
    main()
