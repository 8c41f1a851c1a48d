"""Pydantic models of `domain.yaml` and task files. Field descriptions here are the format's docs:
`muactl schema` turns them into a JSON Schema for editors.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from ..limits import (
    DEFAULT_MAX_ITEMS,
    DEFAULT_MAX_STRING,
    DEFAULT_SQL_STEPS,
    IDENTIFIER,
    MAX_ITEMS,
    MAX_SQL_STEPS,
    MAX_STRING,
    RESERVED_PREFIX,
    quote,
)
from .generators import TableGen

# What each version of the domain format means, where a later one changed the meaning of a file that an
# earlier one also read. A domain says which it was written for (`spec_version`); one that does not was
# written before versions were checked and keeps version 1's meaning. A release that changes a meaning
# adds a version here and keeps the old meaning for files that declare the old one (compile/tools.py).
SPEC_VERSIONS = {
    1: "every tool result value that is text holding a JSON array or object comes back decoded, whichever "
       "column it came from; booleans come back as 0/1",
    2: "tool results are typed by column: json columns (a table's, or a computed one named in `types:`) come "
       "back decoded, booleans as true/false, and other text is never parsed",
}
GUESSED_TYPE = "guessed"  # version 1: the type of every result column the author did not type (`types:`)
SPEC_VERSION = max(SPEC_VERSIONS)  # the version this muactl writes (built-ins, `muactl init`)
OLDEST_SPEC_VERSION = min(SPEC_VERSIONS)  # what a file without `spec_version` means

Side = Literal["agent", "user", "env"]
ColumnType = Literal["text", "integer", "real", "boolean", "json"]
ParamType = Literal["string", "integer", "number", "boolean", "array", "object"]
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"  # matched whole (re.fullmatch: '$' would let a trailing newline in)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


# YAML 1.1 readers (PyYAML, many editors and linters) read these plain words as booleans; muactl reads
# YAML 1.2, where yes/no/on/off are text, so such a name would mean one thing here and another to the next
# tool (true/false are booleans in both and already refused as names; y and n only in the 1.1 spec's
# letter, not in PyYAML, and common as column names, so they stay allowed)
YAML11_BOOLEANS = {"yes", "no", "on", "off", "true", "false"}


def not_yaml11_scalar(name: str, what: str) -> str:
    if name.lower() in YAML11_BOOLEANS:
        raise ValueError(f"{what} name {quote(name)} is not allowed: YAML 1.1 readers (PyYAML, many editors) read "
                         "it as a boolean, so the file would mean something else to them; pick another name")
    return name


def _sql_name(name: str) -> str:
    """Table and column names go into SQL (quoted) and into every state hash: keep them plain."""
    if not re.fullmatch(IDENTIFIER, name):
        raise ValueError(f"name {quote(name)} is not allowed: use letters, digits and underscores, starting with a "
                         "letter or underscore, at most 64 characters")
    if name.lower().startswith(RESERVED_PREFIX):
        raise ValueError(f"name {quote(name)} is reserved: SQLite owns names starting with '{RESERVED_PREFIX}'")
    return not_yaml11_scalar(name, "a table or column")


def _spec_version(value: Any) -> int:
    known = f"{OLDEST_SPEC_VERSION} to {SPEC_VERSION}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"spec_version is the number of the domain format the file was written for ({known}), "
                         f"not {quote(value)}")
    if value > SPEC_VERSION:
        raise ValueError(f"spec_version {quote(value)} is newer than this muactl reads ({known}): the domain was "
                         "written for a later muactl; upgrade muactl (pip install -U muactl)")
    if value < OLDEST_SPEC_VERSION:
        raise ValueError(f"spec_version {quote(value)} is not a version of the domain format ({known})")
    return value


SqlName = Annotated[str, AfterValidator(_sql_name)]


# ---------------------------------------------------------------- database


class Table(Strict):
    description: str | None = Field(None, description="What one row is; shown to nobody but humans.")
    columns: dict[SqlName, ColumnType] = Field(
        description="Column name -> type (text, integer, real, boolean, json). json columns hold any "
        "JSON value and come back decoded in tool results."
    )
    primary_key: str | list[str] | None = Field(None, description="Column (or list of columns) that identifies a row.")
    foreign_keys: dict[str, str] = Field(
        default_factory=dict, description="Column -> 'other_table.column' it references."
    )
    state: bool = Field(True, description="false: the table is scratch space, not part of the state hash (the "
                        "answer a write computed before it changed anything, a private counter such as a random "
                        "stream's position): end states and per-turn states compare without it, as BFCL's state "
                        "check skips a class's private attributes.")

    def pk_columns(self) -> list[str]:
        if self.primary_key is None:
            return []
        return [self.primary_key] if isinstance(self.primary_key, str) else list(self.primary_key)


class SearchIndex(Strict):
    """A full-text index (SQLite FTS5) over some text columns of a table, queried like a table with FTS5's MATCH
    and ranked by its bm25() (README, "τ²-bench": banking_knowledge's document search)."""

    table: SqlName = Field(description="The declared table whose rows are indexed; the index's rowid is the row's "
                           "rowid, so a query joins back with `JOIN table t ON t.rowid = index.rowid`.")
    columns: list[SqlName] = Field(min_length=1, description="The table's text columns indexed, in bm25() weight "
                                   "order (bm25(index, w1, w2, ...) weighs them; no weights: 1 each).")
    tokenize: Literal["unicode61", "porter unicode61", "ascii", "trigram"] = Field(
        "unicode61", description="FTS5's tokenizer: unicode61 (words, case and accents folded), porter unicode61 "
        "(the same, English stems), ascii, or trigram (substrings).")


class Database(Strict):
    tables: dict[SqlName, Table] = Field(description="Table name -> table definition (letters, digits, underscores).")
    seed: str | dict[str, str | list[dict[str, Any]]] | None = Field(
        None,
        description="Initial rows: a folder beside domain.yaml holding <table>.jsonl or <table>.csv files, "
        "or a mapping table -> list of rows inline, or table -> file name.",
    )
    views: dict[str, str] = Field(
        default_factory=dict,
        description="Named reusable SQL: view name -> SELECT. Views live in the template database; any tool, "
        "check or assertion may read them like tables (they are never written, and not part of the state hash).",
    )
    fragments: dict[str, str] = Field(
        default_factory=dict,
        description="Named reusable SQL with parameters: name -> SQL text, pasted (in parentheses) where a tool's "
        "statement says {{name}}. A fragment may use the tool's :params and other fragments.",
    )
    after_write: list[str] = Field(
        default_factory=list,
        description="Write statements run after every tool call that wrote (an agent's, the user's or a task's setup "
        "call), once its result is read, in the same transaction: keeps derived state in step, e.g. the user's "
        "phone with the network's records (tau2 telecom's sync). They take no parameters.")
    search: dict[SqlName, SearchIndex] = Field(
        default_factory=dict,
        description="Full-text indexes: name -> the table and text columns it indexes (SQLite FTS5). A query reads "
        "it as `SELECT t.* FROM kb JOIN docs t ON t.rowid = kb.rowid WHERE kb MATCH fts_any(:query) ORDER BY "
        "bm25(kb), kb.rowid LIMIT :k`; fts_any(text) makes any free text a safe MATCH (its words, OR-ed). The "
        "index holds the seed rows: it does not follow writes, so index a table no tool writes. Not part of the "
        "state hash.")
    generate: dict[str, TableGen] | None = Field(
        None,
        description="Randomized instances (db=random): table -> how its rows are drawn from a seed. Tables are "
        "drawn in this order, so a `ref` points at a table listed above it. The `seed` rows stay the fixed database.",
    )

    @model_validator(mode="after")
    def _search_indexes_name_text_columns(self) -> "Database":
        for name, index in self.search.items():
            if name in self.tables or name in self.views:
                raise ValueError(f"search index {name!r} has the name of a table or view")
            table = self.tables.get(index.table)
            if table is None:
                raise ValueError(f"search index {name!r} indexes {index.table!r}, which is not a declared table")
            wrong = [c for c in index.columns if table.columns.get(c) != "text"]
            if wrong:
                raise ValueError(f"search index {name!r}: {wrong[0]!r} is not a text column of {index.table!r}")
        return self


# ---------------------------------------------------------------- tools


class Param(Strict):
    """A tool parameter: the subset of JSON Schema that LLM tool calling uses."""

    type: ParamType | list[ParamType] = Field(
        description="JSON type of the argument; a list allows any of them (JSON Schema's type list), e.g. [integer, string].")
    description: str | None = Field(None, description="Shown to the model in the tool schema.")
    enum: list[Any] | None = Field(None, description="The only allowed values.")
    pattern: str | None = Field(None, description="Regular expression a string argument must match somewhere "
                                "(JSON Schema's ECMA-262 meaning: \\d is 0-9 only, $ is the very end; anchor with ^...$).")
    minimum: float | None = Field(None, description="Smallest allowed number.")
    maximum: float | None = Field(None, description="Largest allowed number.")
    items: Param | None = Field(None, description="Schema of each element, for arrays.")
    properties: dict[str, Param] | None = Field(None, description="Fields of an object argument.")
    min_items: int | None = Field(None, alias="minItems", description="Fewest array elements.")
    max_items: int | None = Field(None, alias="maxItems", ge=0, le=MAX_ITEMS, description=(
        f"Most array elements; default {DEFAULT_MAX_ITEMS:,} (arguments come from a model), at most {MAX_ITEMS:,}."))
    max_length: int | None = Field(None, alias="maxLength", ge=0, le=MAX_STRING, description=(
        f"Longest string, in characters; default {DEFAULT_MAX_STRING:,}, at most {MAX_STRING:,}."))
    default: Any = Field(None, description="Value used when the argument is omitted; makes the param optional.")
    required: bool | None = Field(
        None, description="Whether the model must pass it. Default: true, unless a default is given."
    )
    nullable: bool = Field(False, description="null is a value too (an Optional argument of a ported Python tool, "
                           "which a model may pass as null).")

    def is_required(self) -> bool:
        if self.required is not None:
            return self.required
        return "default" not in self.model_fields_set

    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": [self.type, "null"] if self.nullable else self.type}
        for key in ("description", "enum", "pattern", "minimum", "maximum"):
            value = getattr(self, key)
            if value is not None:
                out[key] = int(value) if key in ("minimum", "maximum") and float(value).is_integer() else value
        for key in ("min_items", "max_items", "max_length"):
            if getattr(self, key) is not None:
                out[type(self).model_fields[key].alias] = getattr(self, key)
        if self.items is not None:
            out["items"] = self.items.json_schema()
        if self.properties is not None:
            out["properties"] = {k: p.json_schema() for k, p in self.properties.items()}
            out["required"] = [k for k, p in self.properties.items() if p.is_required()]
            out["additionalProperties"] = False
        if "default" in self.model_fields_set:
            out["default"] = self.default
        return out


class Check(Strict):
    query: str = Field(
        description="SELECT returning one row; the check holds when its first column is true (non-zero, non-empty). "
        "Further named columns are values the error text may use, e.g. `SELECT n = 0, item_id FROM ...`.")
    error: str = Field(
        description="Text the agent gets when the check fails; may use {param} placeholders, {name} of a column the "
        "query computed, and the names bound by `each`.")
    each: dict[str, str] | None = Field(
        None,
        description="Run the check once per element of array params: name -> array param, e.g. {item_id: item_ids}. "
        "Each name is bound (:item_id) to the element; several arrays are walked in step. The first failing "
        "element's error is the tool's error.")


SHOWN_SCHEMA = Field(
    None, alias="schema",
    description="The parameters' JSON Schema exactly as the model is shown it, in place of the one muactl "
    "builds from `params` (`muactl import tau2` writes τ²-bench's, with its $defs, anyOf and titles). It names "
    "the same parameters as `params`; arguments are still checked against `params`.")


def _shown_schema(schema: dict[str, Any] | None, names: list[str] | None) -> None:
    if schema is None:
        return
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise ValueError(f"schema is not a valid JSON Schema: {e.message}") from None
    props = schema.get("properties", {})
    if schema.get("type") != "object" or not isinstance(props, dict):
        raise ValueError("schema must be an object schema (type: object) whose properties are the parameters")
    if names is not None and list(props) != names:
        raise ValueError(f"schema's properties ({', '.join(props) or 'none'}) must be the params "
                         f"({', '.join(names) or 'none'}), in the same order")


class ToolBase(Strict):
    description: str = Field(description="What the tool does; becomes the LLM schema's description and the docs.")
    params: dict[str, Param] = Field(default_factory=dict, description="Parameter name -> JSON-schema-like spec.")
    side: Side = Field(
        "agent", description="Who may call it: the agent, the user simulator (dual control, as in tau2 telecom), or "
        "env: neither, only a task's setup and `assert: [{call: ...}]` (e.g. putting the user's phone in a state)."
    )
    shown_schema: dict[str, Any] | None = SHOWN_SCHEMA
    discoverable: bool = Field(
        False, description="Left out of the agent's tool list: the agent unlocks it by name with the domain's "
        "`builtin: unlock` tool (its name is found in the documents, say) and then calls it with `builtin: "
        "call_unlocked` (tool name, arguments as a JSON text), as τ²-bench banking_knowledge's discoverable agent "
        "tools. An agent tool only.")
    hands_over: bool = Field(
        False, description="A call of it hands the user over to a human without ending the episode, as τ²-bench "
        "banking_knowledge's transfer_to_human_agents (the conversation goes on; a `builtin: transfer` ends it). "
        "In a task whose correct ending is the agent's transfer (expect.transfer), the user's ###TRANSFER### after "
        "a call of it that ran without an error is that ending. An agent tool only.")

    @model_validator(mode="after")
    def _schema_names_params(self):
        _shown_schema(self.shown_schema, list(self.params))
        if self.discoverable and self.side != "agent":
            raise ValueError("only an agent tool can be discoverable (side: agent)")
        if self.hands_over and self.side != "agent":
            raise ValueError("only an agent tool can hand the user over (side: agent)")
        if self.discoverable and self.kind == "simulated":  # call_unlocked runs database tools only
            raise ValueError("a simulated tool cannot be discoverable (an sql or python tool can)")
        return self


class SqlTool(ToolBase):
    """A tool compiled to declared SQL statements with bound parameters; nothing else can run."""

    checks: list[Check] = Field(default_factory=list, description="Preconditions; each must hold or nothing changes.")
    writes: list[str] = Field(default_factory=list, description="INSERT/UPDATE/DELETE statements run in one transaction.")
    query: str | None = Field(
        None, description="SELECT whose result is returned to the agent (after the writes). Any statement may use "
        "muactl's deterministic functions py_round(x, n), py_number(x), py_sum(x), calc(text), py_json(json[, indent]), "
        "py_str(json), py_equal(json, json), py_format(x, spec), py_sha256(x) (hashlib's hex digest: deterministic "
        "ids, e.g. 'txn_' || substr(py_sha256('transaction|' || :user_id), 1, 12)), py_pow(a, b), py_mp_log(x, base, "
        "digits), py_decimal_sqrt(x, digits) (reprs of Python's a ** b, mpmath's log ratio, decimal's sqrt), "
        "py_splitlines(text), py_split(text), py_randint(seed, ranges) and py_strptime(text, format); "
        "fts_any(text) makes free text a "
        "safe FTS5 query for a search index (README).")
    returns: Literal["value", "row", "rows"] = Field(
        "rows", description="Shape of the result: a single value, one row as an object, or a list of rows."
    )
    if_empty: str | None = Field(
        None, description="Error text when the query returns nothing; may use {param} placeholders."
    )
    message: str | None = Field(None, description="Result text when there is no query; may use {param} placeholders.")
    types: dict[str, ColumnType] = Field(
        default_factory=dict,
        description="Result column -> type, for columns the query computes (json_object(...) AS x: json). A column "
        "read straight from a table takes that column's type. json values come back decoded, booleans as "
        "true/false; other text is never parsed.")


# each builtin's parameters (compile/tools.py describes them)
BUILTIN_PARAM_NAMES = {"transfer": ("summary",), "think": ("thought",), "unlock": ("agent_tool_name",),
                       "call_unlocked": ("agent_tool_name", "arguments"), "merge": ("table", "records")}


class BuiltinTool(Strict):
    builtin: Literal["transfer", "think", "unlock", "call_unlocked", "merge"] = Field(
        description="transfer: hand the user to a human (ends the episode); think: a scratchpad, no effect; unlock: "
        "makes a discoverable tool callable for the rest of the episode (agent_tool_name), answering with its "
        "description and parameters; call_unlocked: calls an unlocked tool (agent_tool_name, arguments: a JSON "
        "object as text), whose arguments are checked as its own; merge: a task's data patch (τ²'s "
        "initialization_data), usually `side: env` and called in a task's setup: records (column -> value) merged "
        "into a declared table by primary key, the given columns of an existing row replaced, a new key inserted."
    )
    description: str | None = Field(None, description="Overrides the built-in description.")
    message: str | None = Field(None, description="Overrides the result text (transfer: 'Transfer successful.'; "
                                "unlock: may use {name}, {description} and {parameters}, the tool's JSON Schema).")
    side: Side = "agent"
    shown_schema: dict[str, Any] | None = SHOWN_SCHEMA

    @model_validator(mode="after")
    def _schema_is_an_object(self):
        _shown_schema(self.shown_schema, list(BUILTIN_PARAM_NAMES[self.builtin]))
        return self


class PythonTool(ToolBase):
    python: str = Field(
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="'package.module:function' called as function(db, **args); runs only with --trust.",
    )
    timeout: float = Field(5.0, gt=0, description="Seconds before the call is stopped and reported as an error.")


class SimulatedTool(ToolBase):
    simulated: str = Field(description="What the tool does, for an LLM to play it (no database access).")
    returns_json: bool = Field(False, description="Whether the simulated result must be valid JSON.")


class McpRef(Strict):
    command: list[str] = Field(min_length=1, description="Command that starts the MCP server (stdio).")
    tool: str = Field(description="Name of the tool on that server.")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for the server.")


class McpTool(Strict):
    mcp: McpRef
    description: str | None = Field(None, description="Overrides the server's description.")
    side: Side = "agent"


TOOL_KINDS = ("builtin", "python", "simulated", "mcp")


def tool_kind(value: Any) -> str:
    if isinstance(value, dict):
        for kind in TOOL_KINDS:
            if kind in value:
                return kind
        return "sql"
    return getattr(value, "kind", "sql")


Tool = Annotated[
    Union[
        Annotated[SqlTool, Tag("sql")],
        Annotated[BuiltinTool, Tag("builtin")],
        Annotated[PythonTool, Tag("python")],
        Annotated[SimulatedTool, Tag("simulated")],
        Annotated[McpTool, Tag("mcp")],
    ],
    Discriminator(tool_kind),
]
for _model, _kind in ((SqlTool, "sql"), (BuiltinTool, "builtin"), (PythonTool, "python"),
                      (SimulatedTool, "simulated"), (McpTool, "mcp")):
    _model.kind = _kind  # type: ignore[attr-defined]


# ---------------------------------------------------------------- domain


class Limits(Strict):
    """The bounds a domain may set on its own work (muactl/limits.py lists the fixed ones)."""

    sql_steps: int = Field(
        DEFAULT_SQL_STEPS, ge=1, le=MAX_SQL_STEPS,
        description=f"SQLite steps one tool call, assertion or template sample/derive may take before it is "
        f"stopped (an error, never a hang). Default {DEFAULT_SQL_STEPS:,} (well under a second); at most "
        f"{MAX_SQL_STEPS:,}.",
    )


class JudgePrompt(Strict):
    system: str = Field(description="The judge's system prompt.")
    user: str = Field(description="The judge's request: {trajectory_str} is replaced by the conversation ('role: "
                      "content' per message), {nl_assertions} by the list of assertions.")


class Domain(Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$", description="Short lowercase name; the folder's name.")
    version: str = Field("0.1.0", description="Version of this domain pack.")
    spec_version: Annotated[int, BeforeValidator(_spec_version)] = Field(
        OLDEST_SPEC_VERSION,
        description="The version of the muactl domain format the file was written for; it fixes what the file "
        f"means. Without it a file means version {OLDEST_SPEC_VERSION}, as before versions were checked. "
        + " ".join(f"{v}: {meaning}." for v, meaning in SPEC_VERSIONS.items())
        + f" This muactl reads {OLDEST_SPEC_VERSION} to {SPEC_VERSION} and writes {SPEC_VERSION}; `muactl validate` "
        "names the tools whose results an older version changes.")
    description: str = Field(description="One paragraph on what the service is; given to simulators.")
    policy: str = Field(
        description="Rules the agent must follow: a file name beside domain.yaml (.md/.txt) or inline text."
    )
    database: Database
    tools: dict[str, Tool] = Field(description="Tool name -> tool. Kinds: sql (default), builtin, python, simulated, mcp.")
    personas: dict[Annotated[str, AfterValidator(lambda n: not_yaml11_scalar(n, "a persona"))], str] = Field(
        default_factory=dict, description="Persona name -> how that user behaves.")
    user_guidelines: str | None = Field(
        None, description="Replaces muactl's default instructions for the user simulator (file name or text)."
    )
    agent_prompt: str | None = Field(
        None, description="The agent's whole system prompt, in place of muactl's (its conventions, the description "
        "and the policy): a file name beside domain.yaml (.md/.txt) or inline text, in which `{policy}` stands for "
        "the policy. `muactl import tau2` writes τ²-bench's, so the agent reads what τ²'s LLM agent reads.")
    user_prompt: str | None = Field(
        None, description="The user simulator's whole system prompt, in place of user_guidelines and muactl's goal "
        "sections: a file name or inline text, in which `{scenario}` stands for the task's `user.scenario` (a task "
        "without one: its goal's sections) and `{instruction}` for the goal as one line each (reason, known, unknown, "
        "instructions). `muactl import tau2` and `import acebench` write their benchmark's. Scripted users ignore it.")
    user_prompt_no_tools: str | None = Field(
        None, description="The user simulator's prompt in a task whose user has no tools (`user_tools: []`), as "
        "user_prompt (`muactl import tau2` writes τ²'s, whose guidelines then leave out its tool rules); default: "
        "user_prompt.")
    user_stop: list[str] = Field(
        default_factory=list, description="Phrases that end the conversation as ###STOP### does when an LLM user's "
        "message contains them (ACEBench's 'finish conversation'); removed from the message the agent sees.")
    greeting: str | None = Field(
        "Hi! How can I help you today?",
        description="The agent's fixed first message; null lets the user open the conversation.",
    )
    limits: Limits = Field(default_factory=Limits, description="Bounds on the domain's own work (SQL steps).")
    judge_prompt: JudgePrompt | None = Field(
        None, description="scoring: tau2: the NL-assertion judge's prompt as τ²'s evaluator writes it (`muactl import "
        "tau2` reads it from the checkout).")
    scoring: Literal["muactl", "tau2"] = Field(
        "muactl", description="How `muactl eval` scores episodes by default: muactl's reward (README, \"Episodes and "
        "rewards\"; what training uses), or tau2: τ²-bench's evaluator by each task's expect.reward_basis (set by "
        "`muactl import tau2`). `muactl eval --scoring` overrides it.")

    @field_validator("tools")
    @classmethod
    def _tool_names(cls, tools: dict) -> dict:
        for name in tools:
            if not re.fullmatch(IDENT, name):
                raise ValueError(f"tool name {name!r} must be an identifier (letters, digits, underscores)")
            not_yaml11_scalar(name, "a tool")
        return tools


# ---------------------------------------------------------------- tasks


class UserGoal(Strict):
    reason: str = Field(description="Why the user is calling: what they want done, in their words.")
    known: str | None = Field(None, description="Facts the user knows and gives when asked.")
    unknown: str | None = Field(None, description="Facts the user does not know.")
    instructions: str | None = Field(None, description="Extra behaviour for this task (e.g. change mind after X).")
    scenario: str | None = Field(None, description="The whole goal as one text, worded as the benchmark the task "
                                 "came from words it for its user simulator; the domain's `user_prompt` puts it "
                                 "where it says {scenario} (`muactl import tau2` writes τ²'s).")
    consent: bool = Field(True, description="Whether the user says yes when the agent asks to confirm a change. "
                          "false: the user declines, so the gold path's writes are proposals that must not happen "
                          "(the right end state is the one after its reads only).")


def _one_call(call: dict) -> dict:
    error = call.get("error")
    if error is not None and not isinstance(error, str):
        raise ValueError("'error' is the text the call is expected to fail with: a string")
    tools = [k for k in call if k != "error"]
    if len(tools) != 1:
        raise ValueError("each call is a mapping with exactly one key, the tool name: {tool: {arg: value}} "
                         "(plus `error: TEXT` for a call expected to fail)")
    if not isinstance(call[tools[0]], (dict, type(None))):
        raise ValueError(f"the arguments of {tools[0]} must be a mapping {{arg: value}}")
    return call


# {tool_name: {arg: value}}, exactly one tool key, optionally `error: "text"` (the call must fail with that
# text when replayed); checked per item so a problem points at the call, not the list
ToolCall = Annotated[dict[str, dict[str, Any] | str | None], AfterValidator(_one_call)]


class Assertion(Strict):
    query: str | None = Field(None, description="SELECT over the final database state returning one value.")
    call: ToolCall | None = Field(
        None, description="Instead of a query: a read-only tool call {tool: {arg: value}} on the final state (often a "
        "side: env tool); its result, parsed as JSON when it is JSON, is the value compared.")
    equals: Any = Field(None, description="Expected value; when omitted the value must be true.")
    holds_after_gold: bool = Field(
        True, description="false: the task's gold actions leave it false (τ² data whose own gold path fails an env "
        "assertion, as in mock); validate checks that they do, muactl's reward leaves it out and only scoring: tau2 "
        "counts it, as τ²'s evaluator does.")

    @model_validator(mode="after")
    def _one_form(self) -> "Assertion":
        if (self.query is None) == (self.call is None):
            raise ValueError("an assertion has either a 'query' (SQL) or a 'call' (a read-only tool call), not both")
        return self


# τ²-bench's reward basis of a task that names none (τ²'s EvaluationCriteria default, from the original τ-bench)
TAU2_DEFAULT_BASIS = ("DB", "COMMUNICATE")


class Expect(Strict):
    """How success is checked. An episode pays 1 only if all hold: it ended with the user's stop (or, with
    transfer, the agent's transfer); the final database equals the one the gold actions make
    (unless compare_db is false);
    every output was shown to the user; every SQL assertion holds; every NL assertion holds when a judge
    is given. Else 0."""

    actions: list[ToolCall] = Field(
        default_factory=list, description="One gold path of tool calls; success compares end states, not paths. "
        "A call may carry `error: TEXT`: it is expected to fail with that text (validate checks it does).")
    outputs: list[str] = Field(
        default_factory=list, description="What the agent must tell the user. Each counts when it appears as whole "
        "tokens, in order, in one agent text message the user saw (not a turn carrying tool calls): case, spacing, "
        "punctuation and underscores are ignored; numbers compare as numbers with nothing alphanumeric attached "
        "(12 is not in 112 or a12, $50 is not in $500, 1,000 = 1000 = 1000.00); a JSON list or object counts when "
        "each of its values does.")
    assert_: list[Assertion] = Field(default_factory=list, alias="assert", description="SQL checks on the final state.")
    compare_db: bool = Field(True, description="Whether the final database must equal the gold path's. false: "
                             "only the assertions (and outputs, ending) decide, as τ² telecom rewards by its "
                             "env assertions; the breakdown still reports db_match.")
    transfer: bool = Field(False, description="Whether the correct ending is the agent's transfer: its `builtin: "
                           "transfer` tool call, or the user's ###TRANSFER### after a call of a `hands_over` tool (the "
                           "user's ###TRANSFER### otherwise earns nothing).")
    nl_assertions: list[str] = Field(
        default_factory=list, description="Statements about the conversation an LLM judge checks (--judge MODEL); "
        "they join the reward only when a judge is given, else they are reported as not judged.")
    milestones: list[list[list[ToolCall]]] = Field(
        default_factory=list, description="The process score's expected call sequence (ACEBench's mile_stone): one or "
        "more alternative paths, each a list of steps, each step the calls of one agent turn, e.g. "
        "[[[{login: {}}], [{send: {to: Frank}}]]]. The score (breakdown.partial.process, `process` in eval and "
        "runs show) is the best path's share of steps found, in order, among the agent's turns (a turn matches a "
        "step when its calls are the step's, arguments equal as values). Not part of the reward.")
    required_calls: list[ToolCall] = Field(
        default_factory=list, description="Calls the agent itself must make: evidence of the work where the right "
        "outcome changes nothing (the look-ups a policy asks for before a refusal, an answer or a transfer). Each is "
        "met when the agent made a call of that tool that did not fail, with every argument given here equal "
        "(numbers by value, text ignoring case and surrounding spaces); arguments left out may be anything. Each "
        "must be one of the gold actions.")
    reward_basis: list[Literal["DB", "ENV_ASSERTION", "ACTION", "COMMUNICATE", "NL_ASSERTION"]] | None = Field(
        None, description="τ²-bench's reward basis of the task (scoring: tau2 only): the components whose product is "
        "the reward; the other checks are reported, not counted. None: τ²'s default, [DB, COMMUNICATE].")
    compare_args: dict[int, list[str]] = Field(
        default_factory=dict, description="scoring: tau2 only: gold action index -> the arguments τ² compares when it "
        "looks for that action in the trajectory ([]: the name alone). An action not listed compares the arguments "
        "the agent's call carries.")
    env_unchecked: bool = Field(
        False, description="scoring: tau2 only: the τ² task has neither gold actions nor env assertions, so τ²'s "
        "environment check is skipped: DB and ENV_ASSERTION pay 1 and are not in the breakdown.")
    refusal: str | None = Field(
        None, description="Where the right outcome is to refuse: why, as the agent tells the user (the rule or the "
        "value that blocks the request). The oracle says it after its look-ups; the reward does not read it: the "
        "values it must carry go in `outputs`, and it contains each of them.")

    @model_validator(mode="after")
    def _evidence_is_reachable(self) -> "Expect":
        gold = [call_parts(c) for c in self.actions]
        for call in self.required_calls:
            name, args = call_parts(call)
            if not any(g == name and all(ga.get(k) == v for k, v in args.items()) for g, ga in gold):
                raise ValueError(f"required call {name} {args} is not one of the gold actions (the oracle makes "
                                 "only those)")
        stray = [i for i in self.compare_args if not 0 <= i < len(self.actions)]
        if stray:
            raise ValueError(f"compare_args names gold action {stray[0]}, but the task has {len(self.actions)}")
        missing = [o for o in self.outputs if self.refusal is not None and o.lower() not in self.refusal.lower()]
        if missing:
            raise ValueError(f"the refusal does not say the output {missing[0]!r}; it must carry every output")
        return self


class TaskOrigin(Strict):
    template: str = Field(description="Id of the template in tasks/<domain>/templates.yaml.")
    bindings: dict[str, Any] = Field(default_factory=dict, description="The values the template was filled with.")
    seed: int = Field(description="Seed that drew the bindings.")
    db_seed: int | None = Field(None, description="Seed of the random database instance; null: the fixed one.")


class UserTurn(Strict):
    """One fixed user turn of a task with `turns` (BFCL's multi-turn questions)."""

    message: str = Field(description="The user's message that opens the turn, sent as written (no simulator).")
    actions: list[ToolCall] = Field(
        default_factory=list, description="The turn's gold calls. After a turn whose actions are not empty, the "
        "episode is checked as BFCL checks it: the state equals the one the gold calls of this and every earlier "
        "turn make (after the task's setup), the results of this turn's gold calls are among the results the agent "
        "got so far (as a multiset of texts), and the agent made a call in this turn. A turn without actions is not "
        "checked (one where the right move is to ask, or to say it cannot be done).")
    tools: list[str] = Field(
        default_factory=list, description="Tools the agent is given from this turn on: they are hidden (not shown, "
        "and a call to one is an unknown tool) in every earlier turn (BFCL's miss_func, whose turn message says "
        "new functions were added).")


class Task(Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$", description="Unique id within the domain.")
    split: Literal["train", "test"] | None = Field(None, description="Defaults to the file's name (train.yaml, test.yaml).")
    persona: str | None = Field(None, description="A persona name declared in domain.yaml.")
    user: UserGoal
    solo: bool = Field(
        False, description="No user after the goal: user.reason is sent as the one user message, as written, and "
        "the agent works alone; the episode ends normally (termination agent_done) when the agent replies without "
        "a tool call. No simulator runs (ACEBench's multi-step tasks).")
    setup: list[ToolCall] = Field(default_factory=list, description="Tool calls applied before the episode starts: "
                                  "a task's own initial state (e.g. a side: env tool that loads BFCL's initial_config).")
    turns: list[UserTurn] = Field(
        default_factory=list, description="Fixed user turns in place of a simulator: the first turn's message opens; "
        "a turn ends when the agent replies without a (well-formed) tool call, and the next turn's message is sent; "
        "the episode ends normally (agent_done) when the last turn ends. A turn whose agent steps with calls exceed "
        "`turn_steps` ends the episode (max_turns, BFCL's forced quit); the run's max agent turns and max tool errors do "
        "not apply. "
        "Each turn with actions is checked when it ends (see actions), and the reward needs every check to pass. "
        "expect.actions is the turns' actions in order (filled in when left out). user.reason is unused.")
    tools: list[str] | None = Field(
        None, description="The agent's tools in this task, in place of all the domain's agent tools (BFCL's involved "
        "classes' functions, less its excluded ones): the others are not shown, and a call to one is an unknown tool.")
    user_tools: list[str] | None = Field(
        None, description="The user's tools in this task, in place of all the domain's user tools (τ²-bench's task "
        "user_tools): the simulator is given only these; [] gives it none (and the domain's user_prompt_no_tools).")
    agent_context: str | None = Field(
        None, description="Text put where the domain's policy says {context}, for this task only (τ²-bench "
        "banking_knowledge's golden retrieval, `import tau2 --retrieval golden`: the task's required documents); "
        "null: the policy as written.")
    turn_steps: int = Field(20, ge=1, le=1000, description="Most agent steps with tool calls in one turn "
                            "(BFCL's MAXIMUM_STEP_LIMIT); only with turns.")
    expect: Expect = Field(default_factory=Expect)
    tags: list[str] = Field(default_factory=list, description="Free labels (write, info, refuse...) for filtering.")
    origin: TaskOrigin | None = Field(
        None, description="Set on tasks made from a template (muactl tasks generate); db_seed names the random "
        "database the task runs on (null: the domain's seed database).")

    @model_validator(mode="after")
    def _turns_are_the_gold_path(self) -> "Task":
        if not self.turns:
            return self
        if self.solo:
            raise ValueError("a task has either fixed turns or solo: true, not both")
        flat = [c for t in self.turns for c in t.actions]
        if not self.expect.actions:
            self.expect.actions = flat
        elif self.expect.actions != flat:
            raise ValueError("expect.actions must be the turns' actions in order (or be left out)")
        shown = [n for t in self.turns for n in t.tools]
        if len(shown) != len(set(shown)):
            raise ValueError("a tool appears in at most one turn's `tools`")
        return self


def call_parts(call: ToolCall) -> tuple[str, dict[str, Any]]:
    (name, args), = ((k, v) for k, v in call.items() if k != "error")
    return name, dict(args or {})


def expected_error(call: ToolCall) -> str | None:
    """The error text a gold call is expected to fail with (None: it must succeed)."""
    return call.get("error")
