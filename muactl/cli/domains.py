"""Commands on domains: init, validate, import tau2, acebench and bfcl, domains, tools, call, schema."""

from __future__ import annotations

import json
import re
from pathlib import Path

import typer

from ..errors import UsageError
from .output import command_console
from .app import app, command


@command()
def init(
    name: str = typer.Argument(..., help="Name of the new domain (lowercase letters, digits, - and _)."),
    directory: Path = typer.Option(Path("."), "--dir", help="Project folder to write domains/ and tasks/ into."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing files."),
) -> None:
    """Scaffold a small working domain: 2 tables, 3 tools, 2 personas, 4 tasks.

    [bold]init clinic[/bold] writes the README's clinic front desk; any other name a neutral starter
    (a small help desk) under that name, to edit into your own domain.
    Example: [bold]muactl init clinic && muactl validate clinic[/bold]
    """
    if not re.match(r"^[a-z][a-z0-9_-]*$", name):
        raise UsageError(f"'{name}' is not a valid domain name: use lowercase letters, digits, '-' and '_', starting with a letter")
    from ..scaffold import scaffold

    written = scaffold(name, directory, force)
    for path in written:
        typer.echo(f"wrote {path}")
    from ..spec.library import hidden_by_project

    for other in hidden_by_project(name):
        origin = "built-in" if other.origin == "builtin" else other.origin
        typer.echo(f"note: this {name} shadows the {origin} domain '{name}' ({other.root}): in this project "
                   f"`muactl ... {name}` now means the new one, with its tasks; the {origin} one stays reachable by "
                   f"its path. Run `muactl init` with another name to keep both.")
    typer.echo(f"\nNext: muactl validate {name}")


@command()
def validate(
    domain: str = typer.Argument(..., help="Domain name (./domains, installed, built-in) or a folder holding domain.yaml."),
    trust: bool = typer.Option(False, "--trust", help="Run the domain's Python tools when replaying gold paths."),
    verify_hash: bool = typer.Option(False, "--verify-hash", help="Also check the incremental state hash against a "
                                     "full recompute from every row after each gold path (a check of muactl itself)."),
) -> None:
    """Check a domain and its tasks: schema, SQL, references, seed rows, and every task's gold path.

    Problems are printed as file:line:column: key: message, all at once; exit code 2 if any.
    Example: [bold]muactl validate retail[/bold]
    """
    from ..domain.validate import domain_warnings, validate_domain

    opened = validate_domain(domain, trust=trust, verify_hash=verify_hash)
    for warning in domain_warnings(opened):
        typer.echo(f"warning: {warning}", err=True)
    d = opened.spec.domain
    splits: dict[str, int] = {}
    for t in opened.tasks:
        splits[t.split] = splits.get(t.split, 0) + 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(splits.items())) or "no tasks"
    typer.echo(f"ok: {d.name} {d.version} ({opened.ref.origin}, {opened.ref.root}): "
               f"{len(d.database.tables)} tables, {len(d.tools)} tools, {len(opened.tasks)} tasks ({counts}); "
               f"every gold path replayed" + (", state hashes verified" if verify_hash else "")
               + (f"; {len(opened.templates)} templates checked (sample instances replayed)" if opened.templates else ""))


import_app = typer.Typer(help="Import another benchmark's worlds as muactl domains and task sets.", no_args_is_help=True)
app.add_typer(import_app, name="import")


@command("tau2", group=import_app)
def import_tau2_cmd(
    checkout: Path = typer.Argument(..., help="A τ²-bench checkout (sierra-research/tau2-bench)."),
    domain: str = typer.Option(..., "--domain", help="retail | airline | telecom | mock | banking_knowledge."),
    directory: Path = typer.Option(Path("."), "--dir", help="Project folder to write domains/ and tasks/ into."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier import."),
    retrieval: str = typer.Option("bm25", "--retrieval", help="banking_knowledge's retrieval configuration: bm25 "
                                  "(KB_search over its documents, τ²'s bm25 prompt; domain tau2-banking_knowledge) or "
                                  "golden (no search: each task's required documents in its system prompt, τ²'s "
                                  "golden_retrieval; domain tau2-banking_knowledge-golden)."),
) -> None:
    """Import a τ²-bench domain: writes domains/tau2-DOMAIN/ (muactl's YAML tools, τ²'s data and policy)
    and tasks/tau2-DOMAIN/ (τ²'s tasks, split as in its split_tasks.json). The domain gets `scoring: tau2`:
    eval scores it by τ²'s evaluator (each task's reward_basis, τ²'s judge prompt), training by muactl's
    reward. The checkout is read as untrusted
    input: no file outside it (links included), each within a size limit, nothing of it run (README "Limits").

    Example: [bold]muactl import tau2 ../tau2-bench --domain retail && muactl validate tau2-retail[/bold]
    """
    from ..importers.tau2 import import_tau2

    d, t, counts, notes = import_tau2(checkout, domain, directory, force, retrieval)
    shown = ", ".join(f"{n} {s}" for s, n in counts.items())
    for note in notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"wrote {d} and {t} ({shown})\nNext: muactl validate {d.name}")


@command("bfcl", group=import_app)
def import_bfcl_cmd(
    checkout: Path = typer.Argument(..., help="A gorilla checkout (ShishirPatil/gorilla), or its "
                                    "berkeley-function-call-leaderboard folder."),
    directory: Path = typer.Option(Path("."), "--dir", help="Project folder to write domains/ and tasks/ into."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier import."),
) -> None:
    """Import BFCL-V3 multi-turn: writes domains/bfcl/ (muactl's YAML tools, BFCL's function docs and
    long_context data) and tasks/bfcl/ (one file per category: base, miss_func, miss_param, long_context; fixed
    user turns, scored by BFCL's checks after each turn). Entries that involve a class muactl has no tools for
    yet are not imported: the table counts them and tasks/bfcl/skipped.json lists each with why. An entry whose
    gold calls a held-out function before its turn shows it from then on (tasks/bfcl/repaired.json).

    Example: [bold]muactl import bfcl ../gorilla && muactl validate bfcl[/bold]
    """
    from ..importers.bfcl import IMPORTED, import_bfcl, table_rows

    imported = import_bfcl(checkout, directory, force)
    typer.echo(f"{'category':13} {'entries':>7} {'imported':>8} {'skipped':>7}  skipped for")
    for r in table_rows(imported):
        why = ", ".join(f"{c} {n}" for c, n in sorted(r["missing_classes"].items()))
        typer.echo(f"{r['category']:13} {r['entries']:7} {r['imported']:8} {r['skipped']:7}  {why}")
    typer.echo(f"classes imported: {', '.join(IMPORTED)}; an entry is imported when every class it involves is")
    repaired = [i for r in table_rows(imported) for i in r["repaired"]]
    if repaired:
        typer.echo(f"repaired (its gold calls a held-out function before it is shown; tasks/bfcl/repaired.json): "
                   f"{', '.join(repaired)}")
    typer.echo(f"wrote {imported.domain} and {imported.tasks}")
    typer.echo(f"Next: muactl validate {imported.domain.name}")


@command("acebench", group=import_app)
def import_acebench_cmd(
    checkout: Path = typer.Argument(..., help="An ACEBench checkout (ACEBench/ACEBench)."),
    language: list[str] = typer.Option(["en", "zh"], "--language", help="en | zh (repeat for both; default both)."),
    strict: bool = typer.Option(False, "--strict", help="Reward a final state only when it equals ground_truth whole "
                                "(every class named right, every attribute equal), not by ACEBench's looser rule."),
    directory: Path = typer.Option(Path("."), "--dir", help="Project folder to write domains/ and tasks/ into."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier import."),
) -> None:
    """Import ACEBench Agent: writes domains/acebench-WORLD-LANG/ (muactl's YAML tools, ACEBench's initial data
    and tool descriptions) and tasks/acebench-WORLD-LANG/ (its multi-step tasks, solo, and multi-turn tasks,
    with an LLM user). Each task's milestones are replayed: the table says how many pass ACEBench's check as
    given, how many the oracle passes, how many needed a repair (tag 'repaired') and how many are flagged
    (milestones that miss ground_truth; listed with why in flagged.json, not in the task files).

    Example: [bold]muactl import acebench ../ACEBench --language en && muactl validate acebench-phone-en[/bold]
    """
    from ..importers.acebench import import_acebench, table_rows

    imported = import_acebench(checkout, directory, tuple(language), strict, force)
    typer.echo(f"{'domain':22} {'category':10} {'tasks':>5} {'gold as given':>13} {'oracle passes':>13} "
               f"{'repaired':>8} {'flagged':>7}")
    for r in table_rows(imported):
        typer.echo(f"{r['domain']:22} {r['category']:10} {r['tasks']:5} {r['gold_passes']:13} {r['oracle_passes']:13} "
                   f"{r['repaired']:8} {r['flagged']:7}")
    for imp in imported:
        for c in imp.converted:
            for line in c.repairs:
                typer.echo(f"  repaired {c.id}: {line}")
            if c.flagged:
                typer.echo(f"  flagged  {c.id}: {'; '.join(c.flagged[:3])}")
        typer.echo(f"wrote {imp.domain} and {imp.tasks}")
    typer.echo("Next: muactl validate " + " && muactl validate ".join(i.domain.name for i in imported))


@command("domains")
def domains_cmd(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List built-in, installed and local domains with version, tables, tools and task counts.

    Example: [bold]muactl domains[/bold]
    """
    from ..share.catalog import domain_summaries

    rows = domain_summaries()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    from rich.table import Table

    table = Table("name", "version", "origin", "tables", "tools", "tasks (train/test)", "path")
    for r in rows:
        name = r["name"] + (" (shadowed)" if r["shadowed"] else "")
        origin = r["origin"] + (f" ({r['pack']['source_name']})" if r.get("pack") else "")
        if r.get("error"):
            table.add_row(name, "?", origin, "-", "-", "-", f"{r['path']}  [red]{r['error']}[/red]")
            continue
        table.add_row(name, r["version"], origin, str(r["tables"]), str(r["tools"]),
                      f"{r['tasks']} ({r['train']}/{r['test']})", r["path"])
    command_console().print(table)


@command()
def tools(
    domain: str = typer.Argument(..., help="Domain name or folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the OpenAI function schemas as one JSON list."),
) -> None:
    """Print each tool's OpenAI function schema: what the model sees.

    Example: [bold]muactl tools retail --json[/bold]
    """
    from ..domain.open import open_domain

    from ..domain.validate import untrusted_mcp_tools

    opened = open_domain(domain, with_tasks=False)
    held = untrusted_mcp_tools(opened)
    if held:  # their schemas come from servers that did not start: say why they look empty
        typer.echo(f"note: mcp tools {', '.join(held)} are shown without their parameters: "
                   f"{opened.ref.trust_hint()}", err=True)
    schemas = [t.openai_schema() | ({"x-muactl-side": "user"} if t.side == "user" else {})
               for t in opened.compiled.tools.values()]
    if as_json:
        typer.echo(json.dumps(schemas, indent=2, ensure_ascii=False))
        return
    for tool, schema in zip(opened.compiled.tools.values(), schemas):
        typer.secho(f"{tool.name}  [{tool.kind}{', user side' if tool.side == 'user' else ''}]", bold=True)
        typer.echo(f"  {tool.description}")
        params = schema["function"]["parameters"]
        for pname, p in params["properties"].items():
            req = "" if pname in params["required"] else " (optional)"
            extra = {k: v for k, v in p.items() if k not in ("type", "description")}
            kind = p.get("type", "schema")  # a shown schema (`schema:`) may give anyOf or $ref instead of a type
            typer.echo(f"    {pname}: {kind}{req}  {p.get('description', '')}" + (f"  {json.dumps(extra)}" if extra else ""))
        typer.echo("")


TOOL_REFUSED = 3  # `muactl call`: the tool answered with an error (README, "Errors")


@command()
def call(
    domain: str = typer.Argument(..., help="Domain name or folder."),
    tool: str = typer.Argument(..., help="Tool name (see `muactl tools DOMAIN`)."),
    arguments: str = typer.Argument("{}", help="Arguments as a JSON object."),
    trust: bool = typer.Option(False, "--trust", help="Allow tools that run the domain's Python code."),
    show_hash: bool = typer.Option(False, "--hash", help="Also print the sandbox's state hash after the call."),
) -> None:
    """Run one tool on a fresh sandbox of the domain's database and print the result.

    Nothing is saved: every call starts from the seed data.
    Example: [bold]muactl call retail find_user_id_by_email '{"email": "maya.novak34@example.com"}'[/bold]
    """
    from ..errors import ToolNotFound
    from ..domain.open import open_domain

    try:
        args = json.loads(arguments)
    except json.JSONDecodeError as e:
        raise UsageError(f"arguments are not valid JSON ({e.msg} at column {e.colno}); example: '{{\"email\": \"a@b.c\"}}'") from None
    opened = open_domain(domain, with_tasks=False, trust=trust)
    if tool not in opened.compiled.tools:
        import difflib

        close = difflib.get_close_matches(tool, list(opened.compiled.tools), n=1)
        raise ToolNotFound(f"domain {opened.spec.domain.name} has no tool '{tool}'" + (f"; did you mean '{close[0]}'?" if close else "")
                           + f". Tools: {', '.join(opened.compiled.tools)}")
    errors = opened.compiled.tools[tool].argument_errors(args)
    if errors:  # the invocation is wrong, not the tool's answer: bad input
        raise UsageError(f"arguments break {tool}'s schema: {'; '.join(errors)} (`muactl tools {domain}` lists its params)")
    from ..env.sandbox import new_env

    env = new_env(opened.compiled)
    result = env.call(tool, args)
    out = result.content
    try:
        out = json.dumps(json.loads(out), indent=2, ensure_ascii=False)
    except ValueError:
        pass
    typer.echo(out)
    if show_hash:
        typer.echo(f"state hash: {env.state_hash()}", err=True)
    if result.error:  # the tool refused (a check failed, nothing found): its answer, with its own exit code
        raise typer.Exit(TOOL_REFUSED)


@command()
def schema() -> None:
    """Print the JSON Schema of domain.yaml and task files, for editors (YAML language servers).

    Example: [bold]muactl schema > muactl-domain.schema.json[/bold]
    """
    from .. import limits
    from ..spec.models import Domain, Task

    out = Domain.model_json_schema(by_alias=True)
    out["$defs"]["Task"] = Task.model_json_schema(by_alias=True, ref_template="#/$defs/{model}")
    for name, d in out["$defs"]["Task"].pop("$defs", {}).items():
        out["$defs"].setdefault(name, d)
    out["title"] = "muactl domain.yaml"
    out["$comment"] = limits.summary()
    typer.echo(json.dumps(out, indent=2))
