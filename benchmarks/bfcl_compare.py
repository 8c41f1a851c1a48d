"""Random calls, beyond the gold paths: BFCL's own MathAPI, GorillaFileSystem and TravelAPI (its code, run offline)
against muactl's tools, call by call on the entries' own initial states. Each sequence starts from an entry's
state and makes random calls (names in the current directory and made-up ones, right and wrong tokens, valid and
invalid dates, classes and routes); after each call the output bytes and the class's public attributes (as
benchmarks/bfcl_record.py writes them) must be the same. A sequence stops at its first difference, which is
printed. Needs the checkout (its code is imported) and muactl:

    .venv/bin/python benchmarks/bfcl_compare.py PATH/TO/gorilla [--sequences 40] [--steps 40] [--seed 0]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def printed(result) -> str:
    """A call's result as BFCL's executor prints it (execute_multi_turn_func_call)."""
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except TypeError:
            return str(result)
    return str(result)


def math_calls(rng: random.Random, _instance):
    def num():
        return rng.choice([rng.randint(-50, 1000), round(rng.uniform(-100, 1000), rng.randint(0, 4)), 0, 1, 2.5, 1e-9,
                           rng.uniform(-1e4, 1e4)])
    nums = [num() for _ in range(rng.randint(0, 6))]
    units = ["km", "m", "cm", "mm", "um", "nm", "x"]
    imperial = ["cm", "in", "m", "ft", "yd", "km", "miles", "kg", "lb", "celsius", "fahrenheit"]
    return rng.choice([
        ("logarithm", {"value": abs(num()), "base": rng.choice([2, 10, 6.0, 1, 0.5]), "precision": rng.randint(-2, 40)}),
        ("mean", {"numbers": nums}), ("standard_deviation", {"numbers": nums}), ("min_value", {"numbers": nums}),
        ("max_value", {"numbers": nums}), ("sum_values", {"numbers": nums}),
        ("si_unit_conversion", {"value": num(), "unit_in": rng.choice(units), "unit_out": rng.choice(units)}),
        ("imperial_si_conversion", {"value": num(), "unit_in": rng.choice(imperial), "unit_out": rng.choice(imperial)}),
        ("add", {"a": num(), "b": num()}), ("subtract", {"a": num(), "b": num()}), ("multiply", {"a": num(), "b": num()}),
        ("divide", {"a": num(), "b": num()}),
        ("power", {"base": rng.choice([num(), rng.randint(-5, 5)]), "exponent": rng.choice([rng.randint(-3, 30), 0.5])}),
        ("square_root", {"number": num(), "precision": rng.randint(-1, 40)}), ("absolute_value", {"number": num()}),
        ("round_number", {"number": num(), "decimal_places": rng.randint(-3, 5)}),
        ("percentage", {"part": num(), "whole": num()})])


def file_calls(rng: random.Random, fs):
    names = list(fs._current_dir.contents) + ["new", "x.txt", "..", ".", "/", "a|b", "", "nope"]
    name = lambda: rng.choice(names)  # noqa: E731
    fn = rng.choice(["cd", "cd", "ls", "pwd", "mkdir", "touch", "echo", "cat", "find", "wc", "sort", "grep", "du", "tail",
                     "diff", "mv", "mv", "cp", "cp", "rm", "rmdir"])
    return fn, {
        "cd": lambda: {"folder": rng.choice([name(), name() + "/", "../", "a/b"])}, "ls": lambda: {"a": rng.random() < .5},
        "pwd": lambda: {}, "mkdir": lambda: {"dir_name": name()}, "touch": lambda: {"file_name": name()},
        "echo": lambda: {"content": rng.choice(["hi\nthere", "b a\n\nc", ""]),
                         **({"file_name": name()} if rng.random() < .8 else {})},
        "cat": lambda: {"file_name": name()},
        "find": lambda: {"path": rng.choice([".", "/", name(), "./" + name(), "/" + name(), name() + "/"]),
                         **({"name": rng.choice(["a", ".", "txt", ""])} if rng.random() < .6 else {})},
        "wc": lambda: {"file_name": name(), "mode": rng.choice(["l", "w", "c", "x"])}, "sort": lambda: {"file_name": name()},
        "grep": lambda: {"file_name": name(), "pattern": rng.choice(["a", "e", "line", ""])},
        "du": lambda: {"human_readable": rng.random() < .5},
        "tail": lambda: {"file_name": name(), "lines": rng.choice([1, 2, 0, -1, 100])},
        "diff": lambda: {"file_name1": name(), "file_name2": name()},
        "mv": lambda: {"source": name(), "destination": name()}, "cp": lambda: {"source": name(), "destination": name()},
        "rm": lambda: {"file_name": name()}, "rmdir": lambda: {"dir_name": name()}}[fn]()


def travel_calls(rng: random.Random, api):
    token = lambda: rng.choice([api.access_token or "x", "bad"])  # noqa: E731
    card = lambda: rng.choice(list(api.credit_card_list) + ["nope"])  # noqa: E731
    booking = lambda: rng.choice(list(api.booking_record) + ["nope"])  # noqa: E731
    airport = lambda: rng.choice(["SFO", "LAX", "JFK", "ORD", "BOS", "RMS", "HND", "CDG", "XXX"])  # noqa: E731
    date = lambda: rng.choice(["2024-11-15", "2024-02-30", "2024-1-5", "15/11/2024", "2025-03-02"])  # noqa: E731
    # the valid classes only: BFCL names them as a set, whose order changes from process to process
    klass = lambda: rng.choice(["economy", "business", "first"])  # noqa: E731
    return rng.choice([
        ("authenticate_travel", {"client_id": "c", "client_secret": "s", "refresh_token": "r", "grant_type": "read_write",
                                 "user_first_name": "Ana", "user_last_name": "Li"}),
        ("travel_get_login_status", {}), ("get_budget_fiscal_year", {}),
        ("register_credit_card", {"access_token": token(), "card_number": rng.choice(["4111", card()]),
                                  "expiration_date": "12/30", "cardholder_name": "Ana Li", "card_verification_number": 1}),
        ("get_flight_cost", {"travel_from": airport(), "travel_to": airport(), "travel_date": date(),
                             "travel_class": rng.choice(["economy", "first", "coach"])}),
        ("get_credit_card_balance", {"access_token": token(), "card_id": card()}),
        ("book_flight", {"access_token": token(), "card_id": card(), "travel_date": date(), "travel_from": airport(),
                         "travel_to": airport(), "travel_class": klass()}),
        ("book_flight", {"access_token": token(), "card_id": card(), "travel_date": "2024-11-15", "travel_from": "SFO",
                         "travel_to": rng.choice(["LAX", "JFK"]), "travel_class": "economy"}),
        ("retrieve_invoice", {"access_token": token(), "booking_id": booking()}),
        ("get_booking_history", {"access_token": token()}), ("list_all_airports", {}),
        ("cancel_booking", {"access_token": token(), "booking_id": booking()}),
        ("compute_exchange_rate", {"base_currency": rng.choice(["USD", "EUR", "RMB", "XXX"]),
                                   "target_currency": rng.choice(["USD", "JPY", "GBP"]), "value": rng.choice([100, 12.5])}),
        ("verify_traveler_information", {"first_name": rng.choice(["Ana", api.user_first_name or "Bo"]), "last_name": "Li",
                                         "date_of_birth": rng.choice(["1990-05-05", "2015-01-01", "1990/05/05"]),
                                         "passport_number": rng.choice(["US123", "UK1"])}),
        ("set_budget_limit", {"access_token": token(), "budget_limit": rng.choice([100, 5000.5])}),
        ("get_nearest_airport_by_city", {"location": rng.choice(["Rivermist", "Tokyo", "Nowhere"])}),
        ("purchase_insurance", {"access_token": token(), "insurance_type": "full", "booking_id": booking(),
                                "insurance_cost": rng.choice([50, 20000.0]), "card_id": card()}),
        ("contact_customer_support", {"booking_id": booking(), "message": "hi"}), ("get_all_credit_cards", {})])


CLASSES = {"MathAPI": (None, math_calls), "GorillaFileSystem": ("load_gorilla_file_system", file_calls),
           "TravelAPI": ("load_travel_api", travel_calls)}


def compare(checkout: Path, sequences: int, steps: int, seed: int) -> dict[str, dict]:
    board = checkout / "berkeley-function-call-leaderboard"
    sys.path.insert(0, str(board if board.is_dir() else checkout))
    import importlib

    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    from benchmarks.bfcl_record import public_state
    from muactl.domain.validate import open_domain
    from muactl.env.sandbox import new_env
    from muactl.importers.bfcl import import_bfcl
    from muactl.importers.bfcl_truth import state_digest

    extensions = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.func_source_code.long_context")
    pristine = {k: copy.deepcopy(v) for k, v in vars(extensions).items() if k.isupper()}
    rng = random.Random(seed)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        old = os.getcwd()
        os.chdir(tmp)
        try:
            import_bfcl(checkout, Path(tmp))
            opened = open_domain("bfcl")
            for cls, (load, calls) in CLASSES.items():
                module = importlib.import_module(CLASS_FILE_PATH_MAPPING[cls])
                row = rows[cls] = {"sequences": 0, "calls": 0, "differ": 0, "first": []}
                tasks = [t.task for t in opened.tasks if cls in t.task.tags]
                for task in rng.sample(tasks, min(sequences, len(tasks))):
                    setup = [c for c in task.setup if load in c]
                    for k, v in pristine.items():  # BFCL's classes add these objects as they are, and change them
                        setattr(extensions, k, copy.deepcopy(v))
                        if hasattr(module, k):
                            setattr(module, k, getattr(extensions, k))
                    instance = getattr(module, cls)()
                    if setup:
                        instance._load_scenario(copy.deepcopy(setup[0][load]["state"]),
                                                long_context=setup[0][load]["long_context"])
                    env = new_env(opened.compiled)
                    env.replay(setup)
                    row["sequences"] += 1
                    try:
                        for _ in range(steps):
                            fn, args = calls(rng, instance)
                            try:
                                want = printed(getattr(instance, fn)(**copy.deepcopy(args)))
                                want_state = state_digest(public_state({cls: instance}))
                            except RecursionError:  # a directory inside itself: BFCL's find and du recurse forever
                                break
                            except Exception as e:  # noqa: BLE001 - BFCL's executor prints any exception so
                                want, want_state = f"Error during execution: {e}", state_digest(public_state({cls: instance}))
                            got = env.call(fn, args).content
                            state = json.loads(env.call("bfcl_state", {"classes": [cls]}).content)
                            row["calls"] += 1
                            if got != want or state_digest(state) != want_state:
                                row["differ"] += 1
                                row["first"].append(f"{task.id}: {fn}({args}) -> {got[:160]!r}, BFCL {want[:160]!r}"
                                                    f"{'' if got != want else ' (state differs)'}")
                                break
                    finally:
                        env.close()
        finally:
            os.chdir(old)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--sequences", type=int, default=40, help="sequences per class, each from one entry's state")
    ap.add_argument("--steps", type=int, default=40, help="random calls per sequence")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    os.environ["TZ"] = "UTC"  # verify_traveler_information's today: muactl reckons it in UTC
    time.tzset()
    print(f"{'class':18} {'sequences':>9} {'calls':>6} {'differ':>6}")
    for cls, r in compare(args.checkout.resolve(), args.sequences, args.steps, args.seed).items():
        print(f"{cls:18} {r['sequences']:9} {r['calls']:6} {r['differ']:6}")
        for line in r["first"][:10]:
            print("   ", line)


if __name__ == "__main__":
    main()
