"""`muactl import bfcl`: BFCL-V3 multi-turn (gorilla's berkeley-function-call-leaderboard) as a muactl domain.

The tools are muactl YAML shipped in this package (importers/bfcl_domains/bfcl.yaml), written against BFCL's
documented behaviour and checked against its own classes' recorded outputs and states (tests/data/bfcl,
benchmarks/bfcl_verify.py). From the checkout come only data, at import time: the entries and their gold
calls, the function docs (tool descriptions), each class's default state (its module's DEFAULT_STATE literal,
read with ast, never run), long_context.py's extension data (literals, read the same way) and the message
BFCL sends when functions are added (constants/default_prompts.py).

BFCL entry -> muactl task: question[k] -> turns[k].message (a turn whose functions were held out, miss_func,
gets BFCL's injected message and `tools:` the held-out functions); ground_truth[k] -> turns[k].actions;
initial_config over each class's defaults -> one side: env `load_<class>` setup call per involved class (with
long_context on in that category, as BFCL loads it); the involved classes' functions -> the task's `tools`.
BFCL's random.Random draws are CPython's own, drawn here for each seed the tasks use (the `draws` rows).
Scoring is BFCL's: the checks after each turn with gold calls (muactl's turns), compare_db off.

An entry that involves a class muactl has no tables for yet is not imported: it is listed, with why, in
tasks/bfcl/skipped.json and in the import's table, never silently dropped. An entry whose own gold calls a held-out
function before its turn (BFCL runs it: its executor calls any method of the class) shows that function from then
on: listed with why in tasks/bfcl/repaired.json and the table.
"""

from __future__ import annotations

import ast
import json
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CallUnreadable, ScaffoldExists, SpecError, UsageError
from ..limits import MAX_BFCL_CALLS, MAX_BFCL_JSON_BYTES, MAX_BFCL_SOURCE_BYTES
from .acebench import read_lines
from .bfcl_truth import CATEGORIES, CLASS_DOCS, parse_call
from .tau2_input import json_value, kind, read_python, read_text

HERE = Path(__file__).resolve().parent / "bfcl_domains"
DOMAIN = "bfcl"
LEADERBOARD = "berkeley-function-call-leaderboard"
SOURCES = "eval_checker/multi_turn_eval/func_source_code"
# the classes muactl has tools for: their load tool, source module and default-state literal (None, None for a
# class without state, MathAPI: its functions read and change nothing; a load tool and no literal where the
# default is an object, GorillaFileSystem's root Directory("/"): the YAML's load has it, the entry's config is passed as is)
IMPORTED = {"TradingBot": ("load_trading_bot", "trading_bot.py", "DEFAULT_STATE"),
            "MessageAPI": ("load_message_api", "message_api.py", "DEFAULT_STATE"),
            "TicketAPI": ("load_ticket_api", "ticket_api.py", "DEFAULT_STATE"),
            "TwitterAPI": ("load_twitter_api", "posting_api.py", "DEFAULT_STATE"),
            "VehicleControlAPI": ("load_vehicle_control_api", "vehicle_control.py", "DEFAULT_STATE"),
            "MathAPI": (None, "math_api.py", None),
            "GorillaFileSystem": ("load_gorilla_file_system", "gorilla_file_system.py", None),
            "TravelAPI": ("load_travel_api", "travel_booking.py", "DEFAULT_STATE")}
# where _load_scenario reads an attribute from initial_config under another name than DEFAULT_STATE's
CONFIG_NAMES = {"VehicleControlAPI": {"engine_state": "engineState", "_parkingBrakeForce": "parkingBrakeForce",
                                      "_slopeAngle": "slopeAngle"}}
# what each class draws from its random.Random: (kind, n) for randrange(n), the offset of its randint
DRAW_KINDS = {"TradingBot": ("timestamp", 86401), "MessageAPI": ("message_id", 90000),
              "VehicleControlAPI": ("random", None)}  # None: random() itself (uniform's)
# long_context.py's data the imported classes read
EXTENSIONS = ("MA_5_EXTENSION", "MA_20_EXTENSION", "ORDER_DETAIL_EXTENSION", "TECHNOLOGY_EXTENSION",
              "AUTOMOBILE_EXTENSION", "TRANSACTION_HISTORY_EXTENSION", "WATCH_LIST_EXTENSION",
              "CAR_STATUS_METADATA_EXTENSION", "INTERMEDIARY_CITIES", "LONG_WEATHER_EXTENSION", "PARKING_BRAKE_INSTRUCTION",
              "FILE_CONTENT_EXTENSION", "POPULATE_FILE_EXTENSION", "FILES_TAIL_USED", "CREDIT_CARD_EXTENSION",
              "BOOKING_RECORD_EXTENSION")
# TravelAPI.get_flight_cost's route table: a literal dict local to the method, (from, to) -> base cost
FLIGHT_COSTS = ("TravelAPI", "get_flight_cost", "base_costs")
# kept as the text str() prints for their items: WATCH_LIST_EXTENSION ends in Python's Ellipsis, no JSON value
PRINTED = ("WATCH_LIST_EXTENSION",)
DRAWS = 200  # draws kept per random seed: more than any entry's gold path or a 20-step turn can use
ADDED_FUNCTIONS = "DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC"


# ---------------------------------------------------------------- reading the checkout


def eval_root(checkout: Path) -> Path:
    """bfcl_eval/ in a gorilla checkout, or in its berkeley-function-call-leaderboard folder."""
    for folder in (checkout / LEADERBOARD / "bfcl_eval", checkout / "bfcl_eval"):
        if (folder / "data").is_dir():
            return folder
    raise UsageError(f"{checkout} is not a gorilla (BFCL) checkout: no {LEADERBOARD}/bfcl_eval/data or "
                     "bfcl_eval/data in it (clone ShishirPatil/gorilla)")


def data_files(ev: Path) -> dict[str, tuple[Path, Path]]:
    """category -> (entries file, answers file)."""
    names = {c: f"BFCL_v4_multi_turn_{c}.json" for c in CATEGORIES}
    out = {c: (ev / "data" / n, ev / "data" / "possible_answer" / n) for c, n in names.items()}
    missing = [p for pair in out.values() for p in pair if not (p.exists() or p.is_symlink())]
    if missing:
        raise UsageError(f"not a BFCL multi-turn checkout: missing {', '.join(map(str, missing))}")
    return out


def read_docs(root: Path, ev: Path) -> dict[str, list[dict]]:
    """Each class's function docs, in BFCL's order: name, description, parameters (JSON lines)."""
    out = {}
    for cls, stem in CLASS_DOCS.items():
        path = ev / "data" / "multi_turn_func_doc" / f"{stem}.json"
        docs = []
        for n, line in enumerate(read_text(root, path, MAX_BFCL_JSON_BYTES, "MAX_BFCL_JSON_BYTES").splitlines(), 1):
            if not line.strip():
                continue
            doc = json_value(path, line)
            props = (doc.get("parameters") or {}).get("properties") if isinstance(doc, dict) else None
            if not isinstance(doc.get("name") if isinstance(doc, dict) else None, str) or not isinstance(props, dict):
                raise SpecError.single(path, f"expected a function doc with a name and parameters.properties, found "
                                             f"{kind(doc)}", n, 1)
            docs.append(doc)
        out[cls] = docs
    return out


def python_tree(root: Path, path: Path) -> ast.Module:
    """A BFCL module as a syntax tree (parsed, never run), within BFCL's source limit."""
    return read_python(root, path, MAX_BFCL_SOURCE_BYTES, "MAX_BFCL_SOURCE_BYTES")


def module_literals(root: Path, path: Path, names: tuple[str, ...]) -> dict[str, Any]:
    """The literal values a module assigns to the top-level `names` (read from the syntax tree, never run)."""
    found: dict[str, Any] = {}
    for node in python_tree(root, path).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        for t in targets:
            if isinstance(t, ast.Name) and t.id in names and node.value is not None:
                try:
                    found[t.id] = ast.literal_eval(node.value)
                except (ValueError, SyntaxError, RecursionError, MemoryError):
                    raise SpecError.single(path, f"{t.id} is not a literal; muactl reads only literal data",
                                           node.lineno) from None
    missing = [n for n in names if n not in found]
    if missing:
        raise SpecError.single(path, f"no literal {', '.join(missing)} at the top of this module (is the checkout "
                                     "gorilla's of 2026, with BFCL v4's multi-turn data?)")
    return found


# ---------------------------------------------------------------- entries


@dataclass
class Converted:
    """One BFCL entry: the muactl task, or why it is not imported (skipped)."""

    id: str
    category: str
    task: dict | None = None
    skipped: str | None = None
    classes: list[str] = field(default_factory=list)
    repaired: str | None = None  # how the task differs from the entry, where BFCL's own data disagrees


def class_state(config: dict, defaults: dict, names: dict[str, str] | None = None) -> dict:
    """The attributes _load_scenario sets, by the names it reads from initial_config (`names`: attribute ->
    that name, where they differ): each from the entry's initial_config, else the class default (its random
    seed included); a set (MessageAPI's generated_ids) as a sorted list."""
    names = names or {}
    state = {names.get(k, k): config.get(names.get(k, k), v) for k, v in defaults.items()}
    return {k: sorted(v) if isinstance(v, (set, frozenset)) else v for k, v in state.items()}


def method_literal(root: Path, path: Path, where: tuple[str, str, str]) -> Any:
    """The literal a class's method assigns to a local name (`where`: class, method, name), read from the syntax tree."""
    cls, method, name = where
    for node in ast.walk(python_tree(root, path)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == method:
                    for st in ast.walk(fn):
                        target = st.target if isinstance(st, ast.AnnAssign) else st.targets[0] if isinstance(st, ast.Assign) \
                            and len(st.targets) == 1 else None
                        if isinstance(target, ast.Name) and target.id == name and st.value is not None:
                            try:
                                return ast.literal_eval(st.value)
                            except (ValueError, SyntaxError, RecursionError, MemoryError):
                                raise SpecError.single(path, f"{cls}.{method}'s {name} is not a literal; muactl reads only "
                                                             "literal data", st.lineno) from None
    raise SpecError.single(path, f"no literal {name} in {cls}.{method} (is the checkout gorilla's of 2026?)")


def flight_costs(root: Path, sources: Path) -> list[dict]:
    """get_flight_cost's routes, in the dict's order: the flight_cost rows."""
    path = sources / IMPORTED["TravelAPI"][1]
    costs = method_literal(root, path, FLIGHT_COSTS)
    rows = []
    if not isinstance(costs, dict):
        raise SpecError.single(path, f"{FLIGHT_COSTS[2]} is not a dict")
    for pos, (pair, base) in enumerate(costs.items()):
        if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(x, str) for x in pair)
                and type(base) is int):
            raise SpecError.single(path, f"{FLIGHT_COSTS[2]}: expected (from, to): cost, found {pair!r}: {base!r}")
        rows.append({"pos": pos, "src": pair[0], "dst": pair[1], "base": base})
    return rows


def default_seed(root: Path, path: Path, cls: str) -> int | None:
    """The seed `cls._load_scenario` falls back on, where it writes it as a literal
    (scenario.get("random_seed", 200191)); None where it takes it from DEFAULT_STATE, or draws nothing."""
    for node in ast.walk(python_tree(root, path)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "get" \
                        and len(call.args) == 2 and isinstance(call.args[0], ast.Constant) \
                        and call.args[0].value == "random_seed":
                    arg = call.args[1]
                    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, int) else None
    if cls in DRAW_KINDS:
        raise SpecError.single(path, f"class {cls} reads no random_seed in _load_scenario (is the checkout gorilla's "
                                     "of 2026?)")
    return None


def gold_turns(entry: dict, answer: dict, params: dict[str, list[str]], path: Path) -> list[list[dict]]:
    """ground_truth's call strings per turn as muactl calls (parse_call); an unreadable one names the entry."""
    turns = answer.get("ground_truth")
    if not isinstance(turns, list) or len(turns) != len(entry["question"]):
        raise SpecError.single(path, f"entry {entry['id']!r}: ground_truth must list one turn per question turn")
    out = []
    for k, texts in enumerate(turns):
        calls = []
        for text in texts if isinstance(texts, list) else [texts]:
            name = text.split("(", 1)[0].strip() if isinstance(text, str) else ""
            try:
                if name not in params:
                    raise CallUnreadable(f"no function {name!r} in the involved classes' docs")
                fn, args = parse_call(text, params[name])
            except CallUnreadable as e:
                raise SpecError.single(path, f"entry {entry['id']!r} turn {k}: gold call {str(text)[:120]!r}: {e}") from None
            calls.append({fn: args})
        out.append(calls)
    return out


def convert(entry: dict, answer: dict, category: str, docs: dict, defaults: dict, added: str,
            path: Path) -> Converted:
    classes = entry.get("involved_classes")
    if not isinstance(classes, list) or not classes or not all(isinstance(c, str) for c in classes):
        raise SpecError.single(path, f"entry {entry['id']!r} has no involved_classes list")
    unknown = [c for c in classes if c not in CLASS_DOCS]
    if unknown:
        raise SpecError.single(path, f"entry {entry['id']!r} involves {', '.join(unknown)}, not one of BFCL's eight "
                                     "multi-turn classes")
    missing = [c for c in classes if c not in IMPORTED]
    if missing:
        return Converted(entry["id"], category, skipped=f"involves {', '.join(missing)}, whose tools muactl does not "
                                                         "import yet", classes=classes)
    question = entry.get("question")
    if not isinstance(question, list) or not question:
        raise SpecError.single(path, f"entry {entry['id']!r}: 'question' must be a list of turns")
    config = entry.get("initial_config") or {}
    long_context = category == "long_context"
    setup = [{IMPORTED[c][0]: {"state": class_state(config.get(c) or {}, defaults[c], CONFIG_NAMES.get(c))
                               if c in defaults else dict(config.get(c) or {}), "long_context": long_context}}
             for c in classes if IMPORTED[c][0]]
    tools = [d["name"] for c in classes for d in docs[c]]
    params = {d["name"]: list(d["parameters"]["properties"]) for c in classes for d in docs[c]}
    held = entry.get("missed_function") or {}
    gold = gold_turns(entry, answer, params, path)
    appears, repaired = appearing_turns(held, gold, tools)
    turns = []
    for k, (messages, actions) in enumerate(zip(question, gold)):
        texts = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
        if [n for n in held.get(str(k), []) if n in tools]:  # BFCL sends its own message when it adds them
            texts = [added]
        if len(texts) != 1 or not isinstance(texts[0], str):
            raise SpecError.single(path, f"entry {entry['id']!r} turn {k}: expected one user message")
        shown = [n for n, turn in appears.items() if turn == k]
        turns.append({"message": texts[0], "actions": actions, **({"tools": shown} if shown else {})})
    task = {"id": entry["id"], "split": "test", "user": {"reason": turns[0]["message"]}, "setup": setup,
            "tools": tools, "turns": turns, "expect": {"compare_db": False},
            "tags": ["bfcl", category, *classes]}
    return Converted(entry["id"], category, task, classes=classes, repaired=repaired)


def appearing_turns(held: dict, gold: list[list[dict]], tools: list[str]) -> tuple[dict[str, int], str | None]:
    """The turn each held-out function appears at (missed_function's), and the repair where the entry's own gold
    calls one before that turn: BFCL's executor runs any method of the class, listed or not, so its check passes
    that gold, while muactl refuses a tool before it appears; such a function appears at the turn its gold first
    calls it (the later turn keeps BFCL's message)."""
    appears = {n: int(k) for k, names in held.items() for n in names if n in tools}
    early = {}
    for n, k in appears.items():
        first = next((j for j, calls in enumerate(gold[:k]) if any(n in c for c in calls)), None)
        if first is not None:
            early[n] = first
    if not early:
        return appears, None
    why = "; ".join(f"gold calls {n} at turn {j}, held out until turn {appears[n]}: shown from turn {j}"
                    for n, j in early.items())
    return appears | early, why


# ---------------------------------------------------------------- the domain


def seed_rows(defaults: dict, extensions: dict, converted: list[Converted], costs: list[dict]) -> dict[str, list[dict]]:
    """The static rows: the scratch outcome row, long_context's data, TravelAPI's routes and each class's seeds'
    draws (CPython's random.Random, as BFCL's classes draw them; TravelAPI's, from several ranges, are py_randint's)."""
    loads = {load: cls for cls, (load, _, _) in IMPORTED.items()}
    seeds = {cls: {defaults[cls]["random_seed"]} for cls in DRAW_KINDS}
    for c in converted:
        for call in (c.task or {}).get("setup", []):
            (load, args), = call.items()
            if loads[load] in seeds:
                seeds[loads[load]].add(args["state"]["random_seed"])
    draws = []
    for cls, (draw, span) in DRAW_KINDS.items():
        for seed in sorted(seeds[cls]):
            rng = random.Random(seed)
            draws += [{"seed": seed, "kind": draw, "n": n, **({"r": rng.random()} if span is None else
                                                               {"value": rng.randrange(span)})} for n in range(DRAWS)]
    return {"outcome": [{"id": 1, "ok": False, "text": None, "n": None}], "draws": draws, "flight_cost": costs,
            "extension": [{"name": k, "value": ", ".join(map(repr, v)) if k in PRINTED else v}
                          for k, v in extensions.items()]}


def stage_domain(d: Path, docs: dict, rows: dict[str, list[dict]]):
    """domains/bfcl/ written into `d` and compiled: the shipped YAML with BFCL's tool descriptions."""
    from ..compile import compile_domain
    from ..domain.checks import check_domain
    from ..spec.load import load_domain
    from .acebench import use_descriptions, write_seeds

    (d / "data").mkdir(parents=True)
    shutil.copyfile(HERE / "bfcl.yaml", d / "domain.yaml")
    (d / "policy.md").write_text(
        "You act for the user with the tools below, which work on their accounts and files. Each user message is "
        "one request: carry it out with tool calls, working each step out from the results; when it is done, or "
        "cannot be done with the tools and details you have, say so in a message without a tool call.\n")
    described = {doc["name"]: (str(doc.get("description") or ""),
                               {k: str(v.get("description") or "") for k, v in doc["parameters"]["properties"].items()
                                if isinstance(v, dict)})
                 for cls in IMPORTED for doc in docs[cls]}
    use_descriptions(d / "domain.yaml", described, {})
    spec = load_domain(d)
    write_seeds(d / "data", rows, spec.domain.database.tables, d / "domain.yaml")
    spec = load_domain(d)
    problems = check_domain(spec)
    if problems:
        raise SpecError(problems)
    return compile_domain(spec)


def stage_tasks(tdir: Path, converted: list[Converted], checkout: Path) -> None:
    """<category>.yaml per category (the imported entries), skipped.json (the others, with why) and repaired.json
    (the tasks that differ from their entry, with how), each task validated as a muactl task first."""
    from .staging import write_imported_tasks

    tdir.mkdir(parents=True)
    header = (f"Imported from BFCL multi-turn ({checkout.name}) by muactl import bfcl; re-import to refresh. Entries "
              "involving classes not imported yet are listed in skipped.json.")
    for category in CATEGORIES:
        chosen = [(c.id, c.task) for c in converted if c.category == category and c.task is not None]
        write_imported_tasks(tdir / f"{category}.yaml", chosen, checkout, header, noun="entry")
    skipped = [{"id": c.id, "category": c.category, "classes": c.classes, "why": c.skipped}
               for c in converted if c.skipped]
    (tdir / "skipped.json").write_text(json.dumps(skipped, indent=1) + "\n")
    repaired = [{"id": c.id, "category": c.category, "why": c.repaired} for c in converted if c.repaired]
    (tdir / "repaired.json").write_text(json.dumps(repaired, indent=1) + "\n")


@dataclass
class Imported:
    domain: Path
    tasks: Path
    converted: list[Converted]


def import_bfcl(checkout: Path, project: Path, force: bool = False) -> Imported:
    """Write domains/bfcl/ and tasks/bfcl/ under `project`. Every file is read and checked first; nothing is
    left half-written: the domain and its tasks are built aside, then moved."""
    from ..spec.library import refuse_builtin_write

    root = checkout.resolve()
    ev = eval_root(checkout)
    files = data_files(ev)
    dest = (project / "domains" / DOMAIN, project / "tasks" / DOMAIN)
    for path in dest:
        refuse_builtin_write(path)
    existing = [p for p in dest if p.exists()]
    if existing and not force:
        raise ScaffoldExists(f"{existing[0]} exists; pass --force to replace it")
    docs = read_docs(root, ev)
    sources = ev / SOURCES
    defaults = {}
    for cls, (_, module, name) in IMPORTED.items():
        if name is None:
            continue
        state = module_literals(root, sources / module, (name,))[name]
        seed = default_seed(root, sources / module, cls)
        defaults[cls] = state | ({"random_seed": seed} if seed is not None else {})
        if cls in DRAW_KINDS and "random_seed" not in defaults[cls]:
            raise SpecError.single(sources / module, f"{cls} has no default random_seed muactl can read")
    extensions = module_literals(root, sources / "long_context.py", EXTENSIONS)
    added = module_literals(root, ev / "constants" / "default_prompts.py", (ADDED_FUNCTIONS,))[ADDED_FUNCTIONS]
    converted = []
    for category, (entries_file, answers_file) in files.items():
        answers = {a["id"]: a for a in read_lines(root, answers_file)}
        for entry in read_lines(root, entries_file):
            answer = answers.get(entry["id"])
            if answer is None:
                raise SpecError.single(answers_file, f"entry {entry['id']!r} has no answer here")
            converted.append(convert(entry, answer, category, docs, defaults, added, entries_file))
    calls = sum(len(a) for c in converted if c.task for t in c.task["turns"] for a in [t["actions"]])
    if calls > MAX_BFCL_CALLS:
        raise SpecError.single(checkout, f"the entries' gold paths make {calls:,} calls, over {MAX_BFCL_CALLS:,} "
                                         "(MAX_BFCL_CALLS)")
    project.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=project) as tmp:
        stage = Path(tmp)
        stage_domain(stage / "domain", docs, seed_rows(defaults, extensions, converted, flight_costs(root, sources)))
        stage_tasks(stage / "tasks", converted, checkout)
        for path in dest:
            if path.exists():
                shutil.rmtree(path)
            path.parent.mkdir(parents=True, exist_ok=True)
        (stage / "domain").rename(dest[0])
        (stage / "tasks").rename(dest[1])
    return Imported(dest[0], dest[1], converted)


def table_rows(imported: Imported) -> list[dict[str, Any]]:
    """Per category: entries, imported, skipped, and the classes that kept the skipped ones out."""
    rows = []
    for category in CATEGORIES:
        cs = [c for c in imported.converted if c.category == category]
        missing: dict[str, int] = {}
        for c in cs:
            for cls in c.classes if c.skipped else ():
                if cls not in IMPORTED:
                    missing[cls] = missing.get(cls, 0) + 1
        rows.append({"category": category, "entries": len(cs), "imported": sum(c.task is not None for c in cs),
                     "repaired": [c.id for c in cs if c.repaired],
                     "skipped": sum(bool(c.skipped) for c in cs), "missing_classes": missing})
    return rows


# ---------------------------------------------------------------- verification against BFCL's own classes


def verify(opened, truth: dict) -> dict[str, dict[str, Any]]:
    """Replay every imported entry's gold calls on muactl's tools, turn by turn, and compare with BFCL's recorded
    run of the same calls (tests/data/bfcl/truth.json): each call's output bytes and the involved classes' state
    after every turn. Per category: entries, calls and turns compared, how many are the same, BFCL's own verdict
    on the gold, and the first mismatches."""
    from ..env.sandbox import new_env
    from ..spec.models import call_parts
    from .bfcl_truth import digest, state_digest

    rows: dict[str, dict[str, Any]] = {}
    for spec in opened.tasks:
        task = spec.task
        rec = truth["entries"].get(task.id)
        if rec is None:
            continue
        row = rows.setdefault(rec["category"], {"compared": 0, "calls": 0, "same_output": 0, "turns": 0,
                                                "same_state": 0, "same_entries": 0, "bfcl_passes": 0, "mismatches": []})
        row["compared"] += 1
        row["bfcl_passes"] += rec["passes"]
        before = len(row["mismatches"])
        env = new_env(opened.compiled)
        try:
            env.replay(task.setup)
            for k, (turn, want) in enumerate(zip(task.turns, rec["turns"])):
                got = [call_parts(c) for c in turn.actions]
                if [n for n, _ in got] != want["calls"]:
                    row["mismatches"].append(f"{task.id} turn {k}: calls {[n for n, _ in got]} are not BFCL's {want['calls']}")
                for i, ((name, args), d) in enumerate(zip(got, want["outputs"])):
                    content = env.call(name, args).content
                    row["calls"] += 1
                    if digest(content) == d:
                        row["same_output"] += 1
                    else:
                        row["mismatches"].append(f"{task.id} turn {k} call {i} {name}: {content[:200]!r} differs from BFCL's")
                state = json.loads(env.call("bfcl_state", {"classes": list(rec["classes"])}).content)
                row["turns"] += 1
                if state_digest(state) == want["state"]:
                    row["same_state"] += 1
                else:
                    row["mismatches"].append(f"{task.id} turn {k}: state differs from BFCL's: {json.dumps(state)[:300]}")
        finally:
            env.close()
        row["same_entries"] += len(row["mismatches"]) == before
    return rows
