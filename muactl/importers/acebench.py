"""`muactl import acebench`: ACEBench Agent's worlds and tasks as muactl domains and task sets.

The tools are muactl YAML shipped in this package (importers/acebench_domains/<world>-<language>.yaml),
written against ACEBench's documented behaviour and checked against its own classes' recorded outputs
(tests/data/acebench, benchmarks/acebench_verify.py). From the checkout come only data, at import time:
the classes' initial data (their __init__ literals, read with ast, never run), the tool descriptions
(its tasks' function lists), the agent rules for the policy, and the tasks.

ACEBench task -> muactl task: question -> user.reason; a multi-step task is `solo` (no user after the
goal), a multi-turn one has an LLM user playing the question as its instruction; involved_classes and
the BaseApi config -> a `load_scenario` setup call; mile_stone -> expect.milestones (the process score)
and, flattened, expect.actions (the oracle's path); ground_truth -> an `acebench_check` assertion,
ACEBench's end-to-end rule (optionally strict), which is the reward (compare_db: false).

ACEBench's milestones do not always reach its own ground truth. Each task's milestones are replayed on
muactl's tools at import: where a milestone fails ACEBench's parser and mending it is unambiguous
(acebench_truth.repaired_text), or a device action is refused for want of a login the milestones omit,
the repair is made and listed; a task whose (repaired) milestones still miss its ground truth is
flagged: left out of the task files and written, with why, to tasks/<domain>/flagged.json.
"""

from __future__ import annotations

import ast
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..env.sandbox import new_env
from ..errors import CallUnreadable, ScaffoldExists, SpecError, UsageError
from ..limits import MAX_ACEBENCH_CALLS, MAX_ACEBENCH_JSON_BYTES, MAX_ACEBENCH_TASKS
from .acebench_truth import (LOGIN, acebench_verdict, ground_truth_list, is_login_refusal, milestone_paths,
                             misspelt_classes, parse_calls, repaired_text, strict_verdict)
from .tau2_input import json_value, kind, read_python, read_text

HERE = Path(__file__).resolve().parent / "acebench_domains"
LANGUAGES = ("en", "zh")
CATEGORIES = ("multi_step", "multi_turn")
WORLDS = {"phone": ("BaseApi", "MessageApi", "ReminderApi", "FoodPlatform"), "travel": ("Travel",)}
# each class's module under model_inference/<category>/scenarios<language>/, and the __init__ attributes
# muactl seeds its tables from
CLASS_FILES = {"BaseApi": "phone_platform/base_api.py", "MessageApi": "phone_platform/message.py",
               "ReminderApi": "phone_platform/reminder.py", "FoodPlatform": "phone_platform/food_services.py",
               "Travel": "travel.py"}
SEEDED = {"MessageApi": ("user_list", "inbox", "message_id_counter"), "ReminderApi": ("reminder_list", "reminder_id_counter"),
          "FoodPlatform": ("users", "merchant_list"), "Travel": ("users", "flights", "reservations")}
# the agent rules ACEBench adds to its multi-turn agent's prompt, per world (model_inference/prompt_<language>.py),
# and its multi-turn user's prompt (model_inference/multi_turn/APIModel_user.py)
RULES = {"phone": "BASE_PROMPT", "travel": "TRAVEL_PROMPT"}
USER_PROMPTS = {"phone": "SYSTEM_PROMPT_BASE", "travel": "SYSTEM_PROMPT_TRAVEL"}
USER_FILE = "model_inference/multi_turn/APIModel_user.py"


def domain_name(world: str, language: str) -> str:
    return f"acebench-{world}-{language}"


def shipped_yaml(world: str, language: str) -> Path | None:
    path = HERE / f"{world}-{language}.yaml"
    return path if path.is_file() else None


# ---------------------------------------------------------------- reading the checkout


def data_files(checkout: Path, language: str) -> dict[str, tuple[Path, Path]]:
    """category -> (tasks file, answers file); a clear error when the checkout is not ACEBench's."""
    folder = checkout / "data_all" / f"data_{language}"
    out = {c: (folder / f"data_agent_{c}.json", folder / "possible_answer" / f"data_agent_{c}.json") for c in CATEGORIES}
    missing = [p for pair in out.values() for p in pair if not (p.exists() or p.is_symlink())]
    if missing:
        raise UsageError(f"{checkout} is not an ACEBench checkout: missing {', '.join(map(str, missing))} "
                         "(clone ACEBench/ACEBench)")
    return out


def read_lines(root: Path, path: Path) -> list[dict]:
    """An ACEBench data file: one JSON object per line, each checked, at most MAX_ACEBENCH_TASKS."""
    text = read_text(root, path, MAX_ACEBENCH_JSON_BYTES, "MAX_ACEBENCH_JSON_BYTES")
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json_value(path, line)
        except SpecError as e:  # json_value counts lines within the one it was given
            p = e.problems[0]
            raise SpecError.single(path, p.message, n, p.column) from None
        if not isinstance(item, dict) or not isinstance(item.get("id"), str):
            raise SpecError.single(path, f"expected an object with an 'id' string, found {kind(item)}", n, 1)
        out.append(item | {"_line": n})
        if len(out) > MAX_ACEBENCH_TASKS:
            raise SpecError.single(path, f"holds over {MAX_ACEBENCH_TASKS:,} tasks (MAX_ACEBENCH_TASKS)", n, 1)
    return out


def class_literals(root: Path, path: Path, cls: str, names: tuple[str, ...]) -> dict[str, Any]:
    """The literal values `cls.__init__` assigns to self.<name> (read from the syntax tree, never run)."""
    tree = read_python(root, path)
    found: dict[str, Any] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and node.name == cls):
            continue
        for fn in node.body:
            if not (isinstance(fn, ast.FunctionDef) and fn.name == "__init__"):
                continue
            for st in ast.walk(fn):
                target = st.targets[0] if isinstance(st, ast.Assign) and len(st.targets) == 1 else \
                    st.target if isinstance(st, ast.AnnAssign) else None
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and \
                        target.value.id == "self" and target.attr in names and st.value is not None:
                    try:
                        found[target.attr] = ast.literal_eval(st.value)
                    except (ValueError, SyntaxError, RecursionError, MemoryError):
                        raise SpecError.single(path, f"{cls}.__init__ sets self.{target.attr} to something other "
                                                     "than a literal; muactl reads only literal data",
                                               getattr(st, "lineno", 1)) from None
    missing = [n for n in names if n not in found]
    if missing:
        raise SpecError.single(path, f"class {cls} sets no literal self.{', self.'.join(missing)} in __init__ "
                                     "(is the checkout at ACEBench commit e6db74b?)")
    return found


def prompt_constant(root: Path, path: Path, name: str) -> str:
    """A string constant of ACEBench's prompt module (read from the syntax tree, never run)."""
    for node in read_python(root, path).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets) \
                and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node.value.value
    raise SpecError.single(path, f"no string constant {name} (is the checkout at ACEBench commit e6db74b?)")


# ---------------------------------------------------------------- seed rows


def seed_tables(world: str, data: dict[str, dict[str, Any]], where: dict[str, Path]) -> dict[str, list[dict]]:
    """The world's tables' first rows, from the classes' initial data (class -> attribute -> value)."""
    if world == "travel":
        t = data["Travel"]
        return {"travel_users": [{"user_id": k, **v, "pos": i} for i, (k, v) in enumerate(t["users"].items())],
                "flights": [{"pos": i, **f} for i, f in enumerate(t["flights"])],
                "reservations": [{"pos": i, **r} for i, r in enumerate(t["reservations"])],
                "outcome": [{"id": 1, "text": "", "ok": False}], "involved": [],
                "scenario": [{"id": 1, "category": "multi_step"}]}
    msg, rem, food = data["MessageApi"], data["ReminderApi"], data["FoodPlatform"]
    return {
        "device": [{"id": 1, "wifi": False, "logged_in": True}], "involved": [],
        "scenario": [{"id": 1, "category": "multi_step"}],
        "counters": [{"name": "message_id_counter", "value": msg["message_id_counter"]},
                     {"name": "reminder_id_counter", "value": rem["reminder_id_counter"]}],
        "outcome": [{"id": 1, "text": "", "ok": False}],
        "contacts": [{"name": k, **v, "pos": i} for i, (k, v) in enumerate(msg["user_list"].items())],
        "inbox": [{"message_id": k, "time": None, **v} for k, v in msg["inbox"].items()],
        "reminders": [{"slot": k, **v} for k, v in rem["reminder_list"].items()],
        "food_users": [{"name": k, **v, "pos": i} for i, (k, v) in enumerate(food["users"].items())],
        "merchants": [{"name": k, **v, "pos": i} for i, (k, v) in enumerate(food["merchant_list"].items())],
        "food_logins": [], "orders": []}


def write_seeds(folder: Path, tables: dict[str, list[dict]], declared: dict, origin: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for table, rows in tables.items():
        columns = declared[table].columns
        with open(folder / f"{table}.jsonl", "w") as f:
            for row in rows:
                extra = set(row) - set(columns)
                if extra:
                    raise SpecError.single(origin, f"{table}: fields muactl's ACEBench tables do not have: "
                                                   f"{', '.join(sorted(extra))}")
                f.write(json.dumps({c: row.get(c) for c in columns}, ensure_ascii=False) + "\n")


# ---------------------------------------------------------------- tasks


@dataclass
class Converted:
    """One ACEBench task after the replay on muactl's tools: the muactl task, or why it is flagged."""

    id: str
    category: str
    task: dict
    gold_passes: bool  # its milestones as given reach ground_truth (ACEBench's rule, on muactl's tools)
    repairs: list[str] = field(default_factory=list)
    flagged: list[str] = field(default_factory=list)  # why the (repaired) milestones miss ground_truth
    misspelt: list[str] = field(default_factory=list)


def scenario_call(entry: dict, category: str) -> dict:
    """ACEBench's _load_scenario: every class reads the BaseApi config (wifi off, logged in by default)."""
    base = (entry.get("initial_config") or {}).get("BaseApi") or {}
    classes = list(entry["involved_classes"])
    if "Travel" in classes:  # Travel has no device, and its _load_scenario reads nothing
        return {"load_scenario": {"category": category, "classes": classes}}
    return {"load_scenario": {"category": category, "classes": classes,
                              "wifi": bool(base.get("wifi", False)), "logged_in": bool(base.get("logged_in", True))}}


def as_calls(pairs: list[tuple[str, dict]]) -> list[dict]:
    return [{name: args} for name, args in pairs]


def read_path(texts: list[str]) -> tuple[list[list[tuple[str, dict]] | None], list[str]]:
    """Each milestone string read (None where unreadable even mended) and the mendings made."""
    steps, repairs = [], []
    for i, text in enumerate(texts):
        try:
            steps.append(parse_calls(text))
            continue
        except CallUnreadable:
            pass
        try:
            steps.append(parse_calls(repaired_text(text)))
            repairs.append(f"milestone {i}: call string mended for ACEBench's parser")
        except CallUnreadable as e:
            steps.append(None)
            repairs.append(f"milestone {i}: unreadable even mended ({e}); left out")
    return steps, repairs


def replay(compiled, setup: dict, steps: list[list[tuple[str, dict]]], language: str) -> tuple[list[str], str, int | None]:
    """The milestones' calls on a fresh sandbox: their outputs, the final state (acebench_state) and the
    first step refused for want of a device login (None: none)."""
    env = new_env(compiled)
    try:
        env.replay([setup])
        outputs, refused = [], None
        for i, step in enumerate(steps):
            for name, args in step:
                if name not in compiled.tools:
                    outputs.append(f"Error: unknown tool '{name}'.")
                    continue
                out = env.call(name, args).content
                outputs.append(out)
                if refused is None and is_login_refusal(out, language):
                    refused = i
        return outputs, env.call("acebench_state", {}).content, refused
    finally:
        env.close()


def oracle_path(compiled, entry: dict, texts: list[str], category: str, language: str):
    """A milestone path read and repaired as acebench_truth's recorder repairs it: (steps, repairs, state)."""
    steps, repairs = read_path(texts)
    readable = [s for s in steps if s is not None]
    setup = scenario_call(entry, category)
    _, state, refused = replay(compiled, setup, readable, language)
    if refused is not None and not any(s == [("login_device", {})] for s in readable[:refused]):
        readable = readable[:refused] + [parse_calls(LOGIN)] + readable[refused:]
        repairs.append(f"milestone {refused}: login_device() added before it (refused: device not logged in)")
        _, state, _ = replay(compiled, setup, readable, language)
    return readable, repairs, json.loads(state)


def convert(compiled, entry: dict, answer: dict, category: str, language: str, strict: bool) -> Converted:
    """One task: its milestones replayed as given (an unreadable string is a call that never runs, as in
    ACEBench), and, where they miss ground_truth, replayed again repaired (oracle_path)."""
    gt = ground_truth_list(answer.get("ground_truth"))
    paths = milestone_paths(answer.get("mile_stone") or [])
    setup = scenario_call(entry, category)
    as_given = [[parse_calls(t) for t in texts if reads(t)] for texts in paths]
    given = [acebench_verdict(json.loads(replay(compiled, setup, steps, language)[1]), gt)[0] for steps in as_given]
    chosen = next((i for i, ok in enumerate(given) if ok), 0)
    # the oracle follows the milestones, mended where they need it (a read ACEBench never ran included),
    # unless the mending would miss ground_truth where the milestones as given reach it
    steps, repairs, state = oracle_path(compiled, entry, paths[chosen], category, language)
    ok, why = acebench_verdict(state, gt)
    if not repairs or (not ok and given[chosen]):
        steps, repairs, why = as_given[chosen], [], [] if given[chosen] else why
        state = json.loads(replay(compiled, setup, steps, language)[1])
    if strict and not why:  # the reward is whole-state equality: the oracle must reach that too
        why = strict_verdict(state, gt)[1]
    milestones = [[as_calls(s) for s in read_path(p)[0] if s is not None] for p in paths]
    task = {"id": entry["id"], "split": "test", "user": {"reason": entry["question"]},
            "solo": category == "multi_step", "setup": [setup],
            "expect": {"actions": [c for s in steps for c in as_calls(s)], "milestones": milestones,
                       "assert": [{"call": {"acebench_check": {"ground_truth": gt, "strict": strict}}, "equals": True}],
                       "compare_db": False},
            "tags": ["acebench", category] + (["repaired"] if repairs else [])}
    return Converted(entry["id"], category, task, any(given), repairs, why,
                     misspelt_classes(gt, list(entry["involved_classes"])))


def reads(text: str) -> bool:
    """Whether ACEBench's parser reads the call string as it is."""
    try:
        parse_calls(text)
        return True
    except CallUnreadable:
        return False


# ---------------------------------------------------------------- import


@dataclass
class Imported:
    domain: Path
    tasks: Path
    converted: list[Converted]


def import_acebench(checkout: Path, project: Path, languages: tuple[str, ...] = LANGUAGES, strict: bool = False,
                    force: bool = False) -> list[Imported]:
    """Write domains/acebench-<world>-<language>/ and tasks/acebench-<world>-<language>/ under `project`
    for each world muactl ships tools for. Every file is read and checked first; nothing is left
    half-written: each domain and its tasks are built aside, then moved."""
    from ..spec.library import refuse_builtin_write

    root = checkout.resolve()
    plans = []
    for language in languages:
        if language not in LANGUAGES:
            raise UsageError(f"unknown ACEBench language '{language}'; choose one of {', '.join(LANGUAGES)}")
        files = data_files(checkout, language)
        entries = {c: (read_lines(root, t), {a["id"]: a for a in read_lines(root, a)}) for c, (t, a) in files.items()}
        for world in WORLDS:
            if shipped_yaml(world, language) is None or not any(
                    ("Travel" in (e.get("involved_classes") or [])) == (world == "travel")
                    for tasks, _ in entries.values() for e in tasks):  # no tools for it yet, or no task in it
                continue
            name = domain_name(world, language)
            dest = (project / "domains" / name, project / "tasks" / name)
            refuse_builtin_write(dest[0])
            existing = [p for p in dest if p.exists()]
            if existing and not force:
                raise ScaffoldExists(f"{existing[0]} exists; pass --force to replace it")
            plans.append((language, world, entries, dest))
    calls = sum(len(a.get("mile_stone") or []) for _, _, entries, _ in plans for _, (_, ans) in entries.items()
                for a in ans.values())
    if calls > MAX_ACEBENCH_CALLS:
        raise SpecError.single(checkout, f"the tasks' milestones make {calls:,} calls, over {MAX_ACEBENCH_CALLS:,} "
                                         "(MAX_ACEBENCH_CALLS)")
    out = []
    project.mkdir(parents=True, exist_ok=True)  # --dir may name a folder still to make
    for language, world, entries, dest in plans:
        with tempfile.TemporaryDirectory(dir=project) as tmp:
            stage = Path(tmp)
            compiled = stage_domain(stage / "domain", root, checkout, world, language, entries)
            converted = convert_world(compiled, entries, world, language, strict, checkout)
            stage_tasks(stage / "tasks", converted, checkout, world, language)
            for path in dest:
                if path.exists():
                    shutil.rmtree(path)
                path.parent.mkdir(parents=True, exist_ok=True)
            (stage / "domain").rename(dest[0])
            (stage / "tasks").rename(dest[1])
        out.append(Imported(dest[0], dest[1], converted))
    return out


def scenario_folder(checkout: Path, category: str, language: str) -> Path:
    return checkout / "model_inference" / category / f"scenarios{language}"


def stage_domain(d: Path, root: Path, checkout: Path, world: str, language: str, entries: dict):
    """domains/acebench-<world>-<language>/ written into `d` and compiled: the shipped YAML with ACEBench's
    tool descriptions, a policy with ACEBench's agent rules, the classes' initial data as seed rows."""
    from ..compile import compile_domain
    from ..domain.checks import check_domain
    from ..spec.load import load_domain

    (d / "data").mkdir(parents=True)
    shutil.copyfile(shipped_yaml(world, language), d / "domain.yaml")
    folder = scenario_folder(checkout, "multi_step" if world == "phone" else "multi_turn", language)
    data, where = {}, {}
    for cls in WORLDS[world]:
        if cls in SEEDED:
            where[cls] = folder / CLASS_FILES[cls]
            data[cls] = class_literals(root, where[cls], cls, SEEDED[cls])
    prompts = checkout / "model_inference" / f"prompt_{language}.py"
    rules = prompt_constant(root, prompts, f"{RULES[world]}_{language.upper()}")
    (d / "policy.md").write_text(policy_text(world, language, rules))
    user = prompt_constant(root, checkout / USER_FILE, f"{USER_PROMPTS[world]}_{language.upper()}")
    greeting = user_opening(root, checkout / USER_FILE, language)
    use_descriptions(d / "domain.yaml", tool_descriptions(entries, world), {"user_prompt": user, "greeting": greeting})
    spec = load_domain(d)
    write_seeds(d / "data", seed_tables(world, data, where), spec.domain.database.tables, folder)
    spec = load_domain(d)
    problems = check_domain(spec)
    if problems:
        raise SpecError(problems)
    return compile_domain(spec)


def policy_text(world: str, language: str, rules: str) -> str:
    intro = {"en": "You act for the user on their behalf with the tools below. Work out each step from the results "
                   "you get; when the task is done, say so in a message without a tool call.",
             "zh": "你通过下面的工具替用户完成任务。根据每一步的结果决定下一步；任务完成后，用一条不调用工具的消息说明。"}[language]
    return f"{intro}\n\n{rules.strip()}\n"


def tool_descriptions(entries: dict, world: str) -> dict[str, tuple[str, dict[str, str]]]:
    """ACEBench's descriptions of each tool, from the first task of the world that lists it."""
    out: dict[str, tuple[str, dict[str, str]]] = {}
    for tasks, _ in entries.values():
        for entry in tasks:
            if ("Travel" in entry.get("involved_classes", [])) != (world == "travel"):
                continue
            for f in entry.get("function") or []:
                if isinstance(f, dict) and isinstance(f.get("name"), str) and f["name"] not in out:
                    props = ((f.get("parameters") or {}).get("properties") or {})
                    out[f["name"]] = (str(f.get("description") or ""),
                                      {k: str(v.get("description") or "") for k, v in props.items() if isinstance(v, dict)})
    return out


def user_opening(root: Path, path: Path, language: str) -> str:
    """The line ACEBench's user model is shown first, as the agent's (get_init_prompt's "user" message): the
    ASCII one for English, the other for Chinese."""
    for node in ast.walk(read_python(root, path)):
        if isinstance(node, ast.FunctionDef) and node.name == "get_init_prompt":
            found = [v.value for d in ast.walk(node) if isinstance(d, ast.Dict)
                     for k, v in zip(d.keys, d.values) if isinstance(k, ast.Constant) and k.value == "content"
                     and isinstance(v, ast.Constant) and isinstance(v.value, str)]
            for text in found:
                if text.isascii() == (language == "en"):
                    return text
    raise SpecError.single(path, "no opening line in get_init_prompt (is the checkout at ACEBench commit e6db74b?)")


def use_descriptions(domain_yaml: Path, docs: dict, top: dict[str, str]) -> None:
    """ACEBench's tool descriptions, and its user prompt and opening line, into the staged domain.yaml."""
    from ruamel.yaml import YAML
    from ruamel.yaml.scalarstring import LiteralScalarString

    yaml = YAML()
    yaml.width = 4096
    data = yaml.load(domain_yaml.read_text())
    for key, value in top.items():
        data[key] = LiteralScalarString(value) if "\n" in value else value
    for name, tool in data["tools"].items():
        if name in docs and docs[name][0]:
            text, args = docs[name]
            tool["description"] = text
            for pname, param in (tool.get("params") or {}).items():
                if args.get(pname):
                    param["description"] = args[pname]
    with open(domain_yaml, "w") as f:
        yaml.dump(data, f)


def convert_world(compiled, entries: dict, world: str, language: str, strict: bool, checkout: Path) -> list[Converted]:
    out = []
    for category, (tasks, answers) in entries.items():
        for entry in tasks:
            classes = entry.get("involved_classes")
            if not isinstance(classes, list) or not classes:
                raise SpecError.single(checkout, f"task {entry['id']!r} has no involved_classes list")
            if ("Travel" in classes) != (world == "travel"):
                continue
            unknown = [c for c in classes if c not in WORLDS[world]]
            if unknown:
                raise SpecError.single(checkout, f"task {entry['id']!r} involves {', '.join(unknown)}, which muactl's "
                                                 f"{domain_name(world, language)} has no tables for")
            if not isinstance(entry.get("question"), str):
                raise SpecError.single(checkout, f"task {entry['id']!r}: 'question' must be a string")
            answer = answers.get(entry["id"])
            if answer is None:
                raise SpecError.single(checkout, f"task {entry['id']!r} has no answer in possible_answer/")
            out.append(convert(compiled, entry, answer, category, language, strict))
    return out


def stage_tasks(tdir: Path, converted: list[Converted], checkout: Path, world: str, language: str) -> None:
    """<category>.yaml per category (the tasks whose oracle reaches ground_truth) and flagged.json (the others,
    with why), each task validated as a muactl task first."""
    from .staging import write_imported_tasks

    tdir.mkdir(parents=True)
    header = (f"Imported from ACEBench ({checkout.name}, {language}) by muactl import acebench; re-import to refresh. "
              "Repaired tasks carry the tag 'repaired'; flagged ones are in flagged.json.")
    for category in CATEGORIES:
        chosen = [(c.id, c.task) for c in converted if c.category == category and not c.flagged]
        write_imported_tasks(tdir / f"{category}.yaml", chosen, checkout, header)
    flagged = [{"id": c.id, "category": c.category, "why": c.flagged, "repairs": c.repairs, "task": c.task}
               for c in converted if c.flagged]
    (tdir / "flagged.json").write_text(json.dumps(flagged, indent=1, ensure_ascii=False) + "\n")


def table_rows(imported: list[Imported]) -> list[dict[str, Any]]:
    """Per domain and category: tasks, ACEBench's own milestones passing as given, oracle passes after the
    repairs, tasks repaired, tasks flagged, and ground_truth classes ACEBench's checker skips unnamed."""
    rows = []
    for imp in imported:
        for category in CATEGORIES:
            cs = [c for c in imp.converted if c.category == category]
            if cs:
                rows.append({"domain": imp.domain.name, "category": category, "tasks": len(cs),
                             "gold_passes": sum(c.gold_passes for c in cs), "oracle_passes": sum(not c.flagged for c in cs),
                             "repaired": sum(bool(c.repairs) and not c.flagged for c in cs),
                             "flagged": sum(bool(c.flagged) for c in cs),
                             "misspelt": sum(bool(c.misspelt) for c in cs)})
    return rows


# ---------------------------------------------------------------- verification against ACEBench's own classes


def imported_tasks(opened) -> dict[str, Any]:
    """The domain's tasks and its flagged ones (flagged.json), by id, as muactl tasks."""
    from ..spec import models as m

    out: dict[str, Any] = {t.task.id: t.task for t in opened.tasks}
    flagged = opened.ref.tasks_dir / "flagged.json" if opened.ref.tasks_dir else None
    if flagged is not None and flagged.is_file():
        for item in json.loads(flagged.read_text()):
            out[item["id"]] = m.Task.model_validate(item["task"])
    return out


def verify(opened, truth: dict) -> dict[str, Any]:
    """Replay every task's oracle path on muactl's import and compare with ACEBench's recorded run of the
    same path (tests/data/acebench/<language>.json): each call's output bytes, the final state's bytes, and
    ACEBench's verdict (passes, repaired, flagged). Returns counts and the first mismatches, for the table."""
    from ..spec.models import call_parts
    from .acebench_truth import digest

    tasks = imported_tasks(opened)
    n = calls = same_output = same_state = same_verdict = probes = probe_same = 0
    mismatches: list[str] = []
    for tid, rec in truth["tasks"].items():
        task = tasks.get(tid)
        if task is None:
            continue
        n += 1
        env = new_env(opened.compiled)
        try:
            env.replay(task.setup)
            want = [(name, out) for step in rec["steps"] if not step.get("unparsed")
                    for name, out in zip(step["calls"], step["outputs"])]
            got = [call_parts(c) for c in task.expect.actions]
            if [w[0] for w in want] != [g[0] for g in got]:
                mismatches.append(f"{tid}: oracle path {[g[0] for g in got]} is not ACEBench's {[w[0] for w in want]}")
            for i, ((name, args), (_, digest_want)) in enumerate(zip(got, want)):
                content = env.call(name, args).content
                calls += 1
                if digest(content) == digest_want:
                    same_output += 1
                else:
                    mismatches.append(f"{tid} call {i} {name}: output {content[:160]!r} differs from ACEBench's")
            state = env.call("acebench_state", {}).content
            if digest(state) == rec["state"]:
                same_state += 1
            else:
                mismatches.append(f"{tid}: final state differs from ACEBench's: {state[:200]}")
            check = task.expect.assert_[0].call
            passes = json.loads(env.call("acebench_check", call_parts(check)[1]).content) is True
            flagged = not passes
            if passes == rec["oracle_passes"] and ("repaired" in task.tags) == bool(rec["repairs"]) \
                    and flagged == (not rec["oracle_passes"]):
                same_verdict += 1
            else:
                mismatches.append(f"{tid}: muactl's check says passes={passes}, repaired={'repaired' in task.tags}; "
                                  f"ACEBench's: passes={rec['oracle_passes']}, repairs={rec['repairs']}")
        finally:
            env.close()
        if "probes" in rec:
            p, same = probe(opened.compiled, task, rec["probes"], tid, mismatches, truth["language"])
            probes, probe_same = probes + p, probe_same + same
    return {"tasks": n, "calls": calls, "same_output": same_output, "same_state": same_state,
            "same_verdict": same_verdict, "probes": probes, "probe_same": probe_same, "mismatches": mismatches}


def probe(compiled, task, digests: list[str], tid: str, mismatches: list[str], language: str) -> tuple[int, int]:
    """The calls off the gold paths (acebench_truth.PROBES) after the task's setup, against ACEBench's outputs."""
    from .acebench_truth import digest, probes

    world = "travel" if "Travel" in task.setup[0]["load_scenario"]["classes"] else "phone"
    calls = [c for text in probes(world, language) for c in parse_calls(text)]
    env = new_env(compiled)
    n = same = 0
    try:
        env.replay(task.setup)
        for (name, args), want in zip(calls, digests):
            content = env.call(name, args).content
            n += 1
            if digest(content) == want:
                same += 1
            else:
                mismatches.append(f"{tid} probe {name}({args}): {content[:160]!r} differs from ACEBench's")
    finally:
        env.close()
    return n, same
