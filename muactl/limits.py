"""Every limit that bounds the work an untrusted domain, pack, task file or agent can cause.

Domains, task files and packs come from other people, and tool arguments come from a model: none of
them may decide how long muactl works or how much memory it takes. Each limit below is checked where
the input is read and, when exceeded, reported with the file, line and column (or as a tool error the
agent sees) and the limit's name, so the message says what to change. Only `sql_steps` can be raised,
by a domain (`limits: {sql_steps: N}` in domain.yaml), and never past MAX_SQL_STEPS.
"""

from __future__ import annotations

# ---------------------------------------------------------------- YAML (domain, task and template files)

# ruamel's round-trip loader takes ~4 CPU-seconds and ~100 MB for 1 MiB or 100,000 values (measured on
# the dev box); split bigger task sets over several files in tasks/<domain>/
MAX_YAML_BYTES = 1024 * 1024
# values in one document once aliases are expanded (an alias counts everything its anchor holds); a 1 MiB
# task file holds ~65,000, so this stops "billion laughs" and files of a million tiny values
MAX_YAML_VALUES = 100_000
MAX_YAML_DEPTH = 64  # nested mappings/lists; real domains nest under 15
MAX_POLICY_BYTES = 1024 * 1024  # a policy or user-guidelines file: it goes into every prompt
MAX_YAML_INT_DIGITS = 64  # longer integers are typos or attacks (and Python refuses past 4,300)

# ---------------------------------------------------------------- seed files (CSV, JSONL)

MAX_CSV_FIELD_BYTES = 128 * 1024  # Python's csv default, made an explicit, reported limit
MAX_JSONL_LINE_BYTES = 1024 * 1024  # one row of a .jsonl seed file
MAX_JSON_DEPTH = 64  # nesting of a JSON value in a seed row or json column
SQLITE_INT_MIN, SQLITE_INT_MAX = -(2**63), 2**63 - 1  # what an SQLite INTEGER holds

# random databases (database.generate): one instance, all tables together
MAX_GENERATED_ROWS = 100_000
MAX_PATTERN_SLOT = 64  # characters of one {nnnn} / {LLL} slot in a pattern generator

# ---------------------------------------------------------------- names

# table and column names go into SQL as quoted identifiers; a strict pattern keeps them inert there,
# and `sqlite_*` names belong to SQLite itself
IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]{0,63}"  # matched whole (re.fullmatch)
RESERVED_PREFIX = "sqlite_"

# ---------------------------------------------------------------- SQL

# SQLite virtual-machine steps one tool call (its checks, writes and query together), one assertion or one
# template sample/derive may take; the built-in domains' heaviest call takes under 4,000 and SQLite runs
# roughly 20-50 million a second. A domain may raise its own budget up to MAX_SQL_STEPS.
DEFAULT_SQL_STEPS = 10_000_000
MAX_SQL_STEPS = 200_000_000
SQL_CHECK_EVERY = 1_000  # steps between two looks at the budget (the progress handler's period)
# a budget's wall time: its steps at a slow machine's pace (the dev box runs ~25 million a second with two
# cores shared by several jobs), so only statements whose steps are heavy (megabyte strings built per row)
# reach it; the default budget gets 2 seconds, the biggest 40
SLOW_SQL_STEPS_PER_SECOND = 5_000_000
MIN_SQL_SECONDS = 1.0  # however few steps a domain allows: a thread preempted for a moment is no runaway
SQL_REINTERRUPT_SECONDS = 0.05  # a budget past its deadline is interrupted again this often until it closes
# any text or blob SQLite makes or reads (SQLITE_LIMIT_LENGTH): as big as a whole tool result or a seed row
# may be. It bounds one step too: the slowest built-in functions (replace, instr) compare a needle at every
# offset of a haystack, ~9 s for 1 MiB on the dev box; the 16 MiB this was before allowed hours
MAX_SQL_VALUE_BYTES = 1024 * 1024
# connection limits every sandbox sets (sqlite3 SQLITE_LIMIT_* names); ATTACH is refused by the authorizer too
SQL_LIMITS = {"SQLITE_LIMIT_LENGTH": MAX_SQL_VALUE_BYTES, "SQLITE_LIMIT_ATTACHED": 0}


def sql_seconds(steps: int) -> float:
    """Wall time a budget of `steps` SQLite steps may take."""
    return max(MIN_SQL_SECONDS, steps / SLOW_SQL_STEPS_PER_SECOND)

# ---------------------------------------------------------------- counts a command asks for

# a count typed on a command line (or set in a recipe) decides how long muactl works: 100000000 instances
# is a typo that would stall for days. Drawing one instance replays its gold path (milliseconds each).
MAX_INSTANCES = 100_000  # task instances one draw makes: eval/synth --n (also growing a run), tasks generate --n
MAX_TRIALS = 1_000  # trials per task: eval/synth --trials
MAX_CONCURRENCY = 1_024  # episodes in flight at once, each holding its own sandbox in memory

# ---------------------------------------------------------------- tool arguments and results

# a param may set its own maxLength / maxItems (up to the MAX_ values); these apply where it does not
DEFAULT_MAX_STRING = 10_000
DEFAULT_MAX_ITEMS = 1_000
MAX_STRING = 1_000_000
MAX_ITEMS = 100_000
MAX_ARGUMENT_BYTES = 1024 * 1024  # arguments sent as JSON text
QUOTE_CHARS = 60  # an error quotes at most this much of a value
PATTERN_SECONDS = 0.5  # one `pattern` match (a legitimate one takes microseconds; a backtracking one, forever)

MAX_RESULT_ROWS = 10_000  # rows a tool's query may return
MAX_RESULT_BYTES = 1024 * 1024  # a tool result's text
MAX_SAMPLE_ROWS = 100_000  # rows a template's sample query may offer

# ---------------------------------------------------------------- τ²-bench checkouts (muactl import tau2)

# A checkout is someone else's folder: each file is refused past its limit before it is parsed. τ²'s own
# files at commit a2c0247, for scale: airline db.json 7.0 MB, telecom tasks.json 2,285 tasks (~10 MB),
# tools.py at most 48 KB, db.toml 10 KB.
MAX_TAU2_JSON_BYTES = 32 * 1024 * 1024  # db.json, tasks.json, split_tasks.json
# JSON values per file, counted as its commas and brackets before parsing (an over-count): 40 bytes of
# `[[],[],...]` become ~1 KB of Python objects, so bytes alone do not bound memory. airline db.json: 163,000
MAX_TAU2_JSON_VALUES = 2_000_000
MAX_TAU2_TOML_BYTES = 1024 * 1024  # telecom's db.toml and user_db.toml (Python's TOML parser: ~1 s per MiB)
# tools.py / user_tools.py, read with `ast` (never run) for their docstrings: a worst-case file of tiny
# statements (`a;a;a;...`) becomes ~900 bytes of syntax tree per byte, ~230 MB at this limit (banking_knowledge's
# tools.py, both its toolkits, is 189 KB)
MAX_TAU2_SOURCE_BYTES = 256 * 1024
MAX_TAU2_RECORDS = 100_000  # database records, all tables together (airline: 2,800)
MAX_TAU2_TASKS = 10_000  # tasks in tasks.json
MAX_TAU2_CALLS = 20_000  # setup and gold calls of the imported tasks, all together (each is replayed once)

# ---------------------------------------------------------------- ACEBench checkouts (muactl import acebench)

# ACEBench's own files at commit e6db74b, for scale: its agent task files are JSON lines of at most 150 KB
# (50 tasks per language), its environment classes at most 23 KB of Python (read with `ast`, within
# MAX_TAU2_SOURCE_BYTES like τ²'s tools.py)
MAX_ACEBENCH_JSON_BYTES = 4 * 1024 * 1024  # one task or answer file
MAX_ACEBENCH_TASKS = 1_000  # tasks in one file
MAX_ACEBENCH_CALLS = 20_000  # milestone calls of all imported tasks (each is replayed a few times)

# ---------------------------------------------------------------- BFCL checkouts (muactl import bfcl)

# gorilla's berkeley-function-call-leaderboard, for scale: its multi-turn data files are JSON lines of about
# 400 KB (200 entries each), its environment classes at most 40 KB of Python and long_context.py 190 KB
MAX_BFCL_JSON_BYTES = 8 * 1024 * 1024  # one data, answer or function-doc file
MAX_BFCL_SOURCE_BYTES = 1024 * 1024  # one Python file, read with ast
MAX_BFCL_ENTRIES = 2_000  # entries in one file
MAX_BFCL_CALLS = 50_000  # gold calls of all imported entries (each is replayed a few times)

# ---------------------------------------------------------------- API replies

# characters of one chat-completion reply (its text and tool-call arguments together); with max_tokens set a
# real reply is a few KiB, so a bigger one is a broken or hostile server, not a turn worth storing
MAX_REPLY_CHARS = 1024 * 1024


def quote(value: object, limit: int = QUOTE_CHARS) -> str:
    """repr(value) cut to a short prefix: an error message never echoes a whole hostile value."""
    if isinstance(value, list) and len(value) > 8:  # repr of a million items costs seconds: show four
        text = "[" + ", ".join(quote(v, limit) for v in value[:4]) + ", ...]"
    elif isinstance(value, dict) and len(value) > 8:
        text = "{" + ", ".join(f"{k!r}: {quote(v, limit)}" for k, v in list(value.items())[:4]) + ", ...}"
    elif isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        text = f"<an integer of {value.bit_length()} bits>"  # Python refuses to print past 4,300 digits
    else:
        text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def summary() -> str:
    """The fixed limits in a few sentences (for `muactl schema`)."""
    return (f"muactl reads untrusted files within fixed limits: YAML files up to {MAX_YAML_BYTES:,} bytes, "
            f"{MAX_YAML_VALUES:,} values once aliases are expanded, {MAX_YAML_DEPTH} levels of nesting, plain tags "
            f"only; CSV seed fields up to {MAX_CSV_FIELD_BYTES:,} bytes; JSONL rows up to {MAX_JSONL_LINE_BYTES:,} "
            f"bytes, JSON nested at most {MAX_JSON_DEPTH} deep. Every SQL statement runs under limits.sql_steps "
            f"(default {DEFAULT_SQL_STEPS:,}, at most {MAX_SQL_STEPS:,}) and the wall time of those steps at "
            f"{SLOW_SQL_STEPS_PER_SECOND:,} a second; no SQL value is over {MAX_SQL_VALUE_BYTES:,} bytes. Tool arguments: strings up to "
            f"{DEFAULT_MAX_STRING:,} characters and arrays up to {DEFAULT_MAX_ITEMS:,} items unless a param sets "
            f"maxLength/maxItems; patterns have JSON Schema's (ECMA-262) meaning. Tool results: at most "
            f"{MAX_RESULT_ROWS:,} rows and {MAX_RESULT_BYTES:,} bytes, no BLOBs.")
