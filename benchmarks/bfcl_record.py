"""Record BFCL multi-turn's ground truth: run BFCL's own classes and checker (its code, offline) on every entry's
gold calls, turn by turn.

Writes tests/data/bfcl/truth.json (digests only; muactl/importers/bfcl_truth.py), which tests/test_bfcl_import.py
and benchmarks/bfcl_verify.py compare muactl's import against. Per entry and turn: the digest of each gold
call's output as BFCL's executor prints it (execute_multi_turn_func_call), and of the involved classes' public
attributes after the turn (what its state check compares); per entry, BFCL's multi_turn_checker verdict with the
gold calls as the model's. Each entry gets fresh instances (BFCL caches them in module globals under the model
name and entry id; every run here gets its own name). TZ is UTC: TradingBot's timestamps go through
datetime.fromtimestamp, in local time.

Needs only the checkout (Python 3.10+, the standard library):

    python benchmarks/bfcl_record.py PATH/TO/gorilla
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from muactl.importers.bfcl_truth import CATEGORIES, CLASS_DOCS, digest, state_digest  # noqa: E402

RUNS = itertools.count()


def plain(value, path: tuple = ()):
    """An attribute as JSON can hold it: objects (GorillaFileSystem's directories) as their public attributes, sets
    as sorted lists, a reference back to an object being written (a directory's parent) as the text "<parent>"."""
    if id(value) in path:
        return "<parent>"
    inner = path + (id(value),)
    if isinstance(value, dict):
        return {k if isinstance(k, (str, int, float, bool)) else str(k): plain(v, inner) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v, inner) for v in value]
    if isinstance(value, (set, frozenset)):  # MessageAPI.generated_ids: compared as a set, written sorted
        return sorted(plain(v, inner) for v in value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "__dict__"):
        return {k: plain(v, inner) for k, v in vars(value).items() if not k.startswith("_")}
    return repr(value)


def public_state(instances: dict) -> dict:
    return {cls: {k: plain(v) for k, v in vars(inst).items() if not k.startswith("_")} for cls, inst in instances.items()}


def fresh_defaults() -> None:
    """Put back the default arguments of BFCL's methods before each entry: TwitterAPI.post_tweet's `mentions=[]`
    is one list, which mention() extends, so in one process an entry's mentions would show up in later entries'
    tweets (a leak between entries, not BFCL's rule for one)."""
    import copy

    for cls, saved in DEFAULTS.items():
        for name, values in saved.items():
            getattr(cls, name).__defaults__ = copy.deepcopy(values)


DEFAULTS: dict = {}


def save_defaults() -> None:
    import copy
    import importlib

    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    for cls_name in CLASS_DOCS:  # the eight multi-turn classes (the mapping also names web search and memory)
        module = CLASS_FILE_PATH_MAPPING[cls_name]
        cls = getattr(importlib.import_module(module), cls_name)
        DEFAULTS[cls] = {n: copy.deepcopy(f.__defaults__) for n, f in vars(cls).items()
                         if callable(f) and getattr(f, "__defaults__", None)}


def record_entry(entry: dict, answer: dict, category: str) -> dict:
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

    fresh_defaults()
    name = f"muactl_record_{next(RUNS)}"
    long_context = "long_context" in category
    turns = []
    for calls in answer["ground_truth"]:
        outputs, instances = execute_multi_turn_func_call(calls, entry["initial_config"], entry["involved_classes"],
                                                          name, entry["id"], long_context=long_context)
        turns.append({"calls": [c.split("(", 1)[0].strip() for c in calls], "outputs": [digest(o) for o in outputs],
                      "state": state_digest(public_state(instances))})
    fresh_defaults()
    verdict = multi_turn_checker([[calls] if calls else [] for calls in answer["ground_truth"]], answer["ground_truth"],
                                 entry, f"multi_turn_{category}", f"muactl_check_{next(RUNS)}")
    return {"category": category, "classes": entry["involved_classes"], "turns": turns, "passes": verdict["valid"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path, help="a gorilla checkout (ShishirPatil/gorilla)")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "bfcl" / "truth.json")
    args = ap.parse_args()
    os.environ["TZ"] = "UTC"
    time.tzset()
    board = args.checkout / "berkeley-function-call-leaderboard"
    sys.path.insert(0, str(board if board.is_dir() else args.checkout))
    data = (board if board.is_dir() else args.checkout) / "bfcl_eval" / "data"
    save_defaults()
    entries = {}
    for category in CATEGORIES:
        name = f"BFCL_v4_multi_turn_{category}.json"
        answers = {a["id"]: a for a in map(json.loads, (data / "possible_answer" / name).read_text().splitlines())}
        for entry in map(json.loads, (data / name).read_text().splitlines()):
            entries[entry["id"]] = record_entry(entry, answers[entry["id"]], category)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"source": "ShishirPatil/gorilla berkeley-function-call-leaderboard, BFCL v4 "
                                              "multi-turn data", "entries": entries}, indent=0) + "\n")
    passes = sum(e["passes"] for e in entries.values())
    print(f"wrote {args.out}: {len(entries)} entries, {passes} pass BFCL's own check on their gold calls")


if __name__ == "__main__":
    main()
