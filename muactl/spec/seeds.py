"""A domain's seed rows: read from its .jsonl and .csv files, each row kept with its line for messages."""

from __future__ import annotations

import csv
import difflib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import Problem, SpecError
from ..limits import MAX_CSV_FIELD_BYTES, MAX_JSON_DEPTH, MAX_JSONL_LINE_BYTES, SQLITE_INT_MAX, SQLITE_INT_MIN, quote
from . import models as m
from .source import Located, inside_folder, read_text


@dataclass
class SeedSource:
    """Where a table's seed rows came from, so bad rows can be reported at their line."""

    table: str
    file: Path
    lines: list[int]  # one 1-based line per row
    rows: list[dict[str, Any]]
    key_prefix: tuple = ()


def load_seeds(root: Path, domain: m.Domain, doc: Located, problems: list[Problem], files: list[Path]) -> dict[str, SeedSource]:
    seed = domain.database.seed
    tables = domain.database.tables
    out: dict[str, SeedSource] = {}
    if seed is None:
        return out
    if isinstance(seed, str):
        folder = inside_folder(root, seed, doc, ("database", "seed"), problems)
        if folder is None:
            return out
        if not folder.is_dir():
            problems.append(doc.problem(("database", "seed"), f"folder '{seed}' not found beside domain.yaml"))
            return out
        for file in sorted(folder.iterdir()):
            if file.suffix not in (".jsonl", ".csv") or file.name.startswith("."):
                continue
            if inside_folder(root, str(file.relative_to(root)), doc, ("database", "seed"), problems) is None:
                continue  # a link inside the seed folder that points out of the domain
            if file.stem not in tables:
                close = difflib.get_close_matches(file.stem, list(tables), n=1)
                hint = f"; did you mean '{close[0]}'?" if close else f"; declared tables: {', '.join(tables)}"
                problems.append(Problem(str(file), 1, 1, "", f"seed file for undeclared table '{file.stem}'{hint}"))
                continue
            if file.stem in out:  # patients.csv and patients.jsonl: one would silently replace the other
                problems.append(Problem(str(file), 1, 1, "", f"table '{file.stem}' already has seed file "
                                        f"{out[file.stem].file.name}; keep one file per table"))
                continue
            src = _read_seed_file(file, file.stem, problems)
            if src:
                files.append(file)
                out[file.stem] = src
        return out
    for table, value in seed.items():
        key = ("database", "seed", table)
        if table not in tables:
            close = difflib.get_close_matches(table, list(tables), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            problems.append(doc.problem(key, f"seed rows for undeclared table '{table}'{hint}"))
            continue
        if isinstance(value, str):
            file = inside_folder(root, value, doc, key, problems)
            if file is None:
                continue
            if not file.is_file():
                problems.append(doc.problem(key, f"seed file '{value}' not found beside domain.yaml"))
                continue
            if file.suffix not in (".jsonl", ".csv"):  # anything else would be misread as CSV
                problems.append(doc.problem(key, f"seed file '{value}' must be .jsonl or .csv"))
                continue
            src = _read_seed_file(file, table, problems)
            if src:
                files.append(file)
                out[table] = src
        else:
            lines = [doc.pos(key + (i,))[0] for i in range(len(value))]
            out[table] = SeedSource(table, doc.file, lines, value, key)
    return out


def _read_seed_file(file: Path, table: str, problems: list[Problem]) -> SeedSource | None:
    try:
        text = read_text(file)
    except SpecError as e:
        problems.extend(e.problems)
        return None
    rows, lines = [], []
    if file.suffix == ".jsonl":
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            if len(line) > MAX_JSONL_LINE_BYTES // 4 and len(line.encode()) > MAX_JSONL_LINE_BYTES:
                problems.append(Problem(str(file), n, 1, "", f"line is over the {MAX_JSONL_LINE_BYTES:,}-byte limit "
                                        "for one row (MAX_JSONL_LINE_BYTES)"))
                continue
            try:
                row = parse_json(line)
            except json.JSONDecodeError as e:
                problems.append(Problem(str(file), n, e.colno, "", f"invalid JSON: {e.msg}"))
                continue
            except ValueError as e:
                problems.append(Problem(str(file), n, 1, "", str(e)))
                continue
            if not isinstance(row, dict):
                problems.append(Problem(str(file), n, 1, "", "each line must be a JSON object (one row)"))
                continue
            rows.append(row)
            lines.append(n)
        return SeedSource(table, file, lines, rows)
    csv.field_size_limit(MAX_CSV_FIELD_BYTES)  # Python's default, stated here so the message below stays true
    reader = csv.reader(io.StringIO(text), strict=True)  # strict: a stray or unterminated quote is an error
    header: list[str] | None = None
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            why = str(e)
            if "field larger" in why:
                why = f"a field is over the {MAX_CSV_FIELD_BYTES:,}-byte limit (MAX_CSV_FIELD_BYTES)"
            elif "unexpected end of data" in why:
                why = "a quoted field starting on this line is never closed (unterminated \")"
            problems.append(Problem(str(file), start, 1, "", f"CSV error: {why}"))
            break  # the reader cannot resync after a quoting error: later lines would be misread
        if header is None:
            header = fields
        elif fields:  # csv yields [] for a blank line
            if len(fields) != len(header):
                more = "more" if len(fields) > len(header) else "fewer"
                problems.append(Problem(str(file), start, 1, "", f"row has {more} fields than the header "
                                        f"({len(fields)}, the header has {len(header)})"))
                continue
            rows.append(dict(zip(header, fields)))
            lines.append(start)
    return SeedSource(table, file, lines, rows)


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > 19 or not SQLITE_INT_MIN <= int(text) <= SQLITE_INT_MAX:
        raise ValueError(f"integer {text[:30]}{'...' if len(text) > 30 else ''} is out of range "
                         f"(SQLite integers lie between {SQLITE_INT_MIN} and {SQLITE_INT_MAX})")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:30]} is out of range for a real")
    return value


def _json_constant(name: str):
    raise ValueError(f"{name} is not JSON; write null or a number")


def _json_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of two equal keys: a row would silently lose the first value
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {quote(key)} in one JSON object; each key may appear once: "
                             "remove or rename one of them")
        out[key] = value
    return out


def parse_json(text: str) -> Any:
    """json.loads within the seed limits (MAX_JSON_DEPTH nesting, SQLite's integer range, finite numbers,
    no key twice in one object). Raises json.JSONDecodeError for syntax errors and ValueError, with a short
    message, for broken limits."""
    too_deep = f"JSON nested deeper than {MAX_JSON_DEPTH} levels (MAX_JSON_DEPTH)"
    try:
        value = json.loads(text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant,
                           object_pairs_hook=_json_object)
    except RecursionError:
        raise ValueError(too_deep) from None
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(too_deep)
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return value
