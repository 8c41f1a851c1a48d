"""Record ACEBench Agent's ground truth: run ACEBench's own classes and checker (its code, offline) on every
task's milestones.

Writes tests/data/acebench/<language>.json (digests only; muactl/importers/acebench_truth.py), which
tests/test_acebench_import.py and benchmarks/acebench_verify.py compare muactl's import against. Per task:
ACEBench's verdict on its own milestones; where a milestone string fails ACEBench's parser or a device
action is refused for a missing login, the repairs muactl makes (acebench_truth) and ACEBench's verdict
on the repaired path; on the path muactl's oracle follows, every call's name and output digest, and the
digest of the final state ACEBench scores. Each run uses fresh instances (ACEBench caches them in
module globals under the model name and task id; every run here gets its own name).

Needs only the checkout (Python 3.11, the standard library; its report modules' pandas and openpyxl
imports are stubbed, they are not used here):

    python benchmarks/acebench_record.py PATH/TO/ACEBench [--language en]
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import os
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from muactl.importers.acebench_truth import (LOGIN, SAVED, CallUnreadable, acebench_verdict, digest,  # noqa: E402
                                              ground_truth_list, is_login_refusal, milestone_paths,
                                              misspelt_classes, parse_calls, probes, repaired_text, state_text)

CATEGORIES = ("multi_step", "multi_turn")
RUNS = itertools.count()


def load_acebench(checkout: Path) -> None:
    for name in ("pandas", "openpyxl", "openpyxl.styles", "openpyxl.utils", "wcwidth"):  # report-only imports
        if name not in sys.modules:
            mod = types.ModuleType(name)
            mod.__getattr__ = lambda attr: (lambda *a, **k: None)  # type: ignore[method-assign]
            sys.modules[name] = mod
    sys.path.insert(0, str(checkout))


def execute(texts: list[str], entry: dict, language: str, category: str) -> dict:
    """ACEBench's execution of each call string in order (as its execution role runs an agent's message);
    per message the calls' names and raw output strings (or ACEBench's parse failure), and the state."""
    import importlib

    utils = importlib.import_module(f"model_inference.{category}.{category}_utils")
    run_name = f"muactl_record_{next(RUNS)}"
    involved = entry["involved_classes"]
    instances: dict = {}
    steps = []
    role = importlib.import_module(f"model_inference.{category}.execution_role{'_step' if category == 'multi_step' else ''}")
    decoder = (role.EXECUTION_STEP if category == "multi_step" else role.EXECUTION)(run_name, {}, involved, entry["id"], language)
    for text in texts:
        try:
            strings = decoder.decode_function_list(text)  # ACEBench's own parser
        except Exception:
            strings = None
        try:
            calls = parse_calls(text)
        except CallUnreadable:
            calls = None
        assert (strings is None) == (calls is None), (entry["id"], text, "parse_calls and ACEBench's parser disagree")
        if calls is None:
            steps.append({"text": text, "parsed": False})
            continue
        outputs, found = utils.execute_agent_func_call(
            func_call_list=strings, initial_config=copy.deepcopy(entry["initial_config"]), involved_classes=involved,
            model_name=run_name, test_entry_id=entry["id"], language=language)
        if isinstance(found, dict):
            instances = found
        if isinstance(outputs, str):  # multi-turn: a call that raises answers the whole message with one text
            outputs = [outputs] * len(calls)
        steps.append({"text": text, "parsed": True, "calls": [n for n, _ in calls], "outputs": outputs})
    result_list = []
    for name, instance in instances.items():  # as multi_*_inference collects the saved attributes
        result_list.append({name: {k: v for k, v in instance.__dict__.items() if k in SAVED[name]}})
    return {"steps": steps, "state": json.loads(json.dumps(result_list))}


def acebench_score(result_list: list, ground_truth: list, language: str, category: str) -> bool:
    """ACEBench's own agent_eval on one result (it writes its score files under the current folder)."""
    import eval_main

    eval_main.language = language
    with tempfile.TemporaryDirectory() as tmp:
        old = os.getcwd()
        os.chdir(tmp)
        try:
            eval_main.OUTPUT_PATH = tmp
            os.makedirs(f"score_all/score_{language}/muactl", exist_ok=True)
            os.makedirs(f"{tmp}/muactl", exist_ok=True)
            accuracy, _ = eval_main.agent_eval([{"result": result_list, "process": []}], [{}],
                                               [{"ground_truth": ground_truth, "mile_stone": ["x"]}],
                                               f"agent_{category}", "muactl")
        finally:
            os.chdir(old)
    return accuracy == 1.0


def repaired(texts: list[str], entry: dict, language: str, category: str) -> tuple[list[str], list[str]]:
    """The milestone path with muactl's unambiguous repairs (acebench_truth) and the list of them."""
    out, repairs = [], []
    for i, text in enumerate(texts):
        try:
            parse_calls(text)
            out.append(text)
        except CallUnreadable:
            fixed = repaired_text(text)
            try:
                parse_calls(fixed)
            except CallUnreadable:
                out.append(text)
                continue
            repairs.append(f"milestone {i}: call string mended for ACEBench's parser")
            out.append(fixed)
    run = execute(out, entry, language, category)
    for i, step in enumerate(run["steps"]):
        if step["parsed"] and any(is_login_refusal(o, language) for o in step["outputs"]) and LOGIN not in out[:i]:
            repairs.append(f"milestone {i}: login_device() added before it (refused: device not logged in)")
            return repaired(out[:i] + [LOGIN] + out[i:], entry, language, category)[0], repairs
    return out, repairs


def record(checkout: Path, language: str) -> dict:
    out = {}
    for category in CATEGORIES:
        folder = checkout / "data_all" / f"data_{language}"
        entries = [json.loads(line) for line in (folder / f"data_agent_{category}.json").read_text().splitlines() if line.strip()]
        answers = {a["id"]: a for a in (json.loads(line) for line in
                   (folder / "possible_answer" / f"data_agent_{category}.json").read_text().splitlines() if line.strip())}
        for entry in entries:
            answer = answers[entry["id"]]
            gt = ground_truth_list(answer["ground_truth"])
            paths = milestone_paths(answer["mile_stone"])
            original = [execute(p, entry, language, category) for p in paths]
            passes = [acebench_score(r["state"], gt, language, category) for r in original]
            for r, ok in zip(original, passes):
                assert acebench_verdict(r["state"], gt)[0] == ok, (entry["id"], "acebench_verdict disagrees with ACEBench")
            chosen = next((i for i, ok in enumerate(passes) if ok), 0)
            path, repairs = repaired(paths[chosen], entry, language, category)  # as muactl's import chooses
            run = execute(path, entry, language, category)
            ok = acebench_score(run["state"], gt, language, category)
            if not repairs or (not ok and passes[chosen]):
                path, repairs, run, ok = paths[chosen], [], original[chosen], passes[chosen]
            out[entry["id"]] = {
                "category": category, "path": chosen, "gold_passes": any(passes), "repairs": repairs, "oracle_passes": ok,
                "misspelt_classes": misspelt_classes(gt, entry["involved_classes"]),
                "why": [] if ok else acebench_verdict(run["state"], gt)[1],
                "steps": [{"calls": s["calls"], "outputs": [digest(o) for o in s["outputs"]]} if s["parsed"]
                          else {"unparsed": True} for s in run["steps"]],
                "state": digest(state_text(run["state"]))}
            world = "travel" if "Travel" in entry["involved_classes"] else "phone"
            if world in ("phone", "travel"):
                probed = execute(probes(world, language), entry, language, category)
                out[entry["id"]]["probes"] = [digest(o) for s in probed["steps"] for o in s["outputs"]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--language", choices=["en", "zh"], action="append")
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "tests" / "data" / "acebench")
    args = ap.parse_args()
    checkout = args.checkout.resolve()
    load_acebench(checkout)
    args.out.mkdir(parents=True, exist_ok=True)
    import contextlib
    import io

    for language in args.language or ["en", "zh"]:
        with contextlib.redirect_stdout(io.StringIO()):  # ACEBench prints from its refund and balance code
            tasks = record(checkout, language)
        path = args.out / f"{language}.json"
        path.write_text(json.dumps({"language": language, "acebench_commit": "e6db74b", "tasks": tasks}, indent=1,
                                   ensure_ascii=False) + "\n")
        n = len(tasks)
        print(f"{language}: {n} tasks; ACEBench's own gold passes {sum(t['gold_passes'] for t in tasks.values())}; "
              f"repaired {sum(bool(t['repairs']) and t['oracle_passes'] for t in tasks.values())}; "
              f"flagged {sum(not t['oracle_passes'] for t in tasks.values())} -> {path}")


if __name__ == "__main__":
    main()
