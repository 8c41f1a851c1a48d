"""Record τ²-bench's ground truth: run τ²'s own tools on every gold action of every task.

Writes tests/data/tau2/<domain>.json (digests only; see muactl/importers/tau2_truth.py), which
tests/test_tau2_import.py and benchmarks/tau2_verify.py compare muactl's import against, and
tests/data/tau2/seen/<domain>.json: digests of what τ²'s LLM agent and user are shown, as bytes: each
gold call's output text, each tool's `Tool.openai_schema` (in τ²'s order), the agent's system prompt
(τ²'s LLMAgent), the user simulator's system prompt per task (τ²'s UserSimulator) and the greeting
(τ²'s orchestrator). τ²'s LLM client is replaced by a stub that refuses to be called: building
prompts and schemas never calls it.

τ²'s package top level imports litellm; this script imports only its domain modules (a bare `tau2`
package object over the source folder), so it needs τ²'s few small dependencies and not muactl's:

    python -m venv /tmp/tau2venv && /tmp/tau2venv/bin/pip install pydantic docstring_parser loguru \
        addict toml pyyaml deepdiff python-dotenv numpy pandas
    /tmp/tau2venv/bin/python benchmarks/tau2_record.py PATH/TO/tau2-bench [--domain retail]

`--atm-images` writes only tests/data/tau2/banking_atm_images.json: banking_knowledge's
get_atm_deposit_images_8473 (on no gold path) run on invented transactions, one per branch of its code.

PATH is a τ²-bench checkout at commit a2c0247 (with airline's db.json and telecom's tasks.json of
37199f3, which some copies lack; see README "τ²-bench").
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from muactl.importers.tau2_truth import (ATM_DEPOSITS, ATM_PROBE_IDS, PROBE_EVERY, PROBES, changed_records, output_digest,  # noqa: E402
                                        schema_digest, tau2_hash, text_digest, without_titles)

DOMAINS = ("retail", "airline", "telecom", "mock", "banking_knowledge")
BANKING = "banking_knowledge"  # τ³: tools built per task (golden retrieval's prompt, the read-log allowlist)


def load_tau2(checkout: Path) -> None:
    pkg = types.ModuleType("tau2")  # skip tau2/__init__.py (it imports the litellm-based runner)
    pkg.__path__ = [str(checkout / "src" / "tau2")]
    sys.modules["tau2"] = pkg
    llm = types.ModuleType("tau2.utils.llm_utils")  # the prompts' modules import the LLM client: a stub

    def no_llm(*args, **kwargs):
        raise RuntimeError("tau2_record.py runs no LLM")

    llm.generate = llm.get_cost = no_llm
    sys.modules["tau2.utils.llm_utils"] = llm
    import os

    os.environ.setdefault("TAU2_DATA_DIR", str(checkout / "data"))


def dump(tools) -> dict | None:
    return None if tools is None else tools.db.model_dump()


def record(domain: str) -> dict:
    import importlib

    from tau2.data_model.message import ToolCall

    mod = importlib.import_module(f"tau2.domains.{domain}.environment")
    tasks = mod.get_tasks(task_split_name="base")
    out = {}

    def prepared(task):
        env = banking_env(mod, task) if domain == BANKING else mod.get_environment()
        init = task.initial_state
        env.set_state(init.initialization_data if init else None,
                      init.initialization_actions if init else None, (init.message_history or []) if init else [])
        return env

    def result(env, i, name, args, requestor) -> dict:
        msg = env.get_response(ToolCall(id=str(i), name=name, arguments=args, requestor=requestor))
        return {"name": name, "error": msg.content if msg.error else None,
                "output": None if msg.error else output_digest(msg.content), "text": text_digest(msg.content)}

    for n, task in enumerate(tasks):
        env = prepared(task)
        before, user_before = dump(env.tools), dump(env.user_tools)
        actions = []
        crit = task.evaluation_criteria
        for i, action in enumerate(crit.actions or [] if crit else []):
            actions.append(result(env, i, action.name, action.arguments, action.requestor))
        after, user_after = dump(env.tools), dump(env.user_tools)
        if domain == BANKING:  # one database, which the user's tools share
            user_after = None
        entry = {"db_hash": tau2_hash(after), "changed": changed_records(before, after), "actions": actions}
        if user_after is not None:
            entry["user_db_hash"] = tau2_hash(user_after)
            entry["user_changed"] = changed_records(user_before, user_after)
        if crit and crit.env_assertions:
            entry["assertions"] = [env.run_env_assertion(a, raise_assertion_error=False) for a in crit.env_assertions]
        if domain in PROBES and n % PROBE_EVERY == 0:
            env = prepared(task)
            entry["probes"] = [[r["error"], r["output"]] for r in
                               (result(env, i, name, args, req) for i, (req, name, args) in enumerate(PROBES[domain]))]
        out[task.id] = entry
    return out


def banking_env(mod, task, variant: str = "golden_retrieval"):
    """banking_knowledge's environment as τ²'s runner builds it for a task (runner/build.py): the read
    discoverable tools of the task's gold path are logged to agent_discoverable_tools when called. The
    golden_retrieval variant needs no retrieval index (the tools are the same in every variant but KB_search).
    The allowlist is derived as runner/build.py's _derive_read_log_allowlist does (that module imports τ²'s
    whole runner, rich and litellm included)."""
    crit = task.evaluation_criteria
    allow = {(a.arguments or {}).get("agent_tool_name") for a in (crit.actions or [] if crit else [])
             if a.name == "call_discoverable_agent_tool"} - {None}
    return mod.get_environment(retrieval_variant=variant, task=task, read_log_allowlist=allow)


def record_atm_images() -> dict:
    """τ²'s get_atm_deposit_images_8473 on ATM_DEPOSITS' ids (added to the first task's database), called
    through its call_discoverable_agent_tool: its unlock text's digest and each answer's, and the digest of
    the tool's openai_schema."""
    import importlib

    from tau2.data_model.message import ToolCall
    from tau2.environment.tool import as_tool

    mod = importlib.import_module(f"tau2.domains.{BANKING}.environment")
    task = mod.get_tasks()[0]
    env = banking_env(mod, task)
    init = task.initial_state
    env.set_state(init.initialization_data if init else None, init.initialization_actions if init else None, [])
    env.tools.db.bank_account_transaction_history.data.update(json.loads(json.dumps(ATM_DEPOSITS)))
    name = "get_atm_deposit_images_8473"

    def text(tool: str, args: dict) -> list:
        msg = env.get_response(ToolCall(id="atm", name=tool, arguments=args, requestor="assistant"))
        return [bool(msg.error), text_digest(msg.content)]

    unlock = text("unlock_discoverable_agent_tool", {"agent_tool_name": name})
    texts = {tid: text("call_discoverable_agent_tool", {"agent_tool_name": name,
                                                        "arguments": json.dumps({"transaction_id": tid})})
             for tid in ATM_PROBE_IDS}
    schema = as_tool(getattr(env.tools, name)).openai_schema
    # a discoverable tool's schema is never sent to τ²'s model (the unlock text describes it): its content is
    # compared, keys sorted
    return {"unlock": unlock, "texts": texts,
            "schema": text_digest(json.dumps(without_titles(schema), sort_keys=True))}


def record_seen_banking() -> dict:
    """banking_knowledge's: the bm25 variant's agent prompt and tools (KB_search; its index is not built, so
    rank_bm25 is not needed), the golden_retrieval variant's agent prompt per task, the user's prompt per task
    with the task's user tools."""
    import importlib

    from tau2.agent.llm_agent import LLMAgent
    from tau2.domains.banking_knowledge import retrieval
    from tau2.domains.banking_knowledge.retrieval_toolkits import KnowledgeToolsWithKBSearch
    from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE
    from tau2.user.user_simulator import UserSimulator

    mod = importlib.import_module("tau2.domains.banking_knowledge.environment")
    kb = mod.get_knowledge_base()
    tools = list(KnowledgeToolsWithKBSearch(mod.get_db(), None).get_tools().values())
    policy = retrieval.build_policy(retrieval.resolve_variant("bm25"), kb)
    agent = LLMAgent(tools=tools, domain_policy=policy, llm="none")
    users, golden = {}, {}
    for task in mod.get_tasks():
        env = banking_env(mod, task)
        golden[task.id] = text_digest(LLMAgent(tools=env.get_tools(), domain_policy=env.get_policy(),
                                               llm="none").system_prompt)
        user = UserSimulator(llm="none", instructions=str(task.user_scenario),
                             tools=env.get_user_tools(include=task.user_tools) or None)
        users[task.id] = text_digest(user.system_prompt)
    env = banking_env(mod, mod.get_tasks()[0])
    return {"agent_prompt": text_digest(agent.system_prompt), "greeting": text_digest(DEFAULT_FIRST_AGENT_MESSAGE.content),
            "agent_tools": [[t.name, schema_digest(t.openai_schema)] for t in tools],
            "user_tools": [[t.name, schema_digest(t.openai_schema)] for t in env.get_user_tools()],
            "user_prompts": users, "golden_agent_prompts": golden}


def record_seen(domain: str) -> dict:
    """Digests of what τ²'s LLM agent and user simulator are shown (the module docstring)."""
    import importlib

    from tau2.agent.llm_agent import LLMAgent
    from tau2.orchestrator.orchestrator import DEFAULT_FIRST_AGENT_MESSAGE
    from tau2.user.user_simulator import UserSimulator

    mod = importlib.import_module(f"tau2.domains.{domain}.environment")
    env = mod.get_environment()
    agent = LLMAgent(tools=env.get_tools(), domain_policy=env.get_policy(), llm="none")

    def user_tools(include=None):
        try:  # as τ²'s runner builds its user (runner/build.py)
            return env.get_user_tools(include=include) or None
        except ValueError:
            return None

    users = {}
    for task in mod.get_tasks(task_split_name="base"):
        user = UserSimulator(llm="none", instructions=str(task.user_scenario), tools=user_tools(task.user_tools))
        users[task.id] = text_digest(user.system_prompt)
    return {"agent_prompt": text_digest(agent.system_prompt), "greeting": text_digest(DEFAULT_FIRST_AGENT_MESSAGE.content),
            "agent_tools": [[t.name, schema_digest(t.openai_schema)] for t in env.get_tools()],
            "user_tools": [[t.name, schema_digest(t.openai_schema)] for t in user_tools() or []],
            "user_prompts": users}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkout", type=Path)
    ap.add_argument("--domain", choices=DOMAINS, action="append")
    ap.add_argument("--atm-images", action="store_true", help="only banking_knowledge's get_atm_deposit_images_8473 "
                    "(-> <out>/banking_atm_images.json)")
    ap.add_argument("-o", "--out", type=Path, default=ROOT / "tests" / "data" / "tau2")
    args = ap.parse_args()
    load_tau2(args.checkout.resolve())
    from loguru import logger

    logger.remove()  # τ² logs every failing gold action as a warning; the record keeps them
    args.out.mkdir(parents=True, exist_ok=True)
    if args.atm_images:
        path = args.out / "banking_atm_images.json"
        path.write_text(json.dumps({"domain": BANKING, "tau2_commit": "a2c0247", **record_atm_images()}, indent=1) + "\n")
        print(f"{BANKING}: get_atm_deposit_images_8473 on {len(ATM_PROBE_IDS)} ids -> {path}")
        return
    for domain in args.domain or DOMAINS:
        tasks = record(domain)
        outputs = {tid: [a.pop("text") for a in t["actions"]] for tid, t in tasks.items()}
        path = args.out / f"{domain}.json"
        path.write_text(json.dumps({"domain": domain, "tau2_commit": "a2c0247", "tasks": tasks}, indent=1) + "\n")
        seen = args.out / "seen" / f"{domain}.json"
        seen.parent.mkdir(exist_ok=True)
        seen_now = record_seen_banking() if domain == BANKING else record_seen(domain)
        seen.write_text(json.dumps({"domain": domain, "tau2_commit": "a2c0247", **seen_now,
                                    "outputs": outputs}, indent=1) + "\n")
        n_err = sum(a["error"] is not None for t in tasks.values() for a in t["actions"])
        print(f"{domain}: {len(tasks)} tasks, {sum(len(t['actions']) for t in tasks.values())} gold actions "
              f"({n_err} fail in τ²) -> {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


if __name__ == "__main__":
    main()
