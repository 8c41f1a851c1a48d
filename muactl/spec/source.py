"""Read YAML while keeping where every key and value came from, so errors can name file:line:column.

ruamel's round-trip loader records positions on every mapping and sequence; we convert the tree to
plain Python (pydantic and sqlite want plain types) and keep a Locator that answers
"where is key path (tools, cancel, params, 0)?" for error messages.

Files are untrusted (packs come from other people), so the loader works within muactl/limits.py: at most
MAX_YAML_BYTES of text; while composing, nesting past MAX_YAML_DEPTH, more than MAX_YAML_VALUES values
once aliases are expanded ("billion laughs"), a tag other than YAML's plain ones (`!!python/...`) or an
absurdly long integer stops the load at that node's line and column, with a message naming the limit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq, TaggedScalar
from ruamel.yaml.composer import Composer
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import AliasEvent
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.scanner import RoundTripScanner

from ..errors import Problem, SpecError
from ..limits import MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_INT_DIGITS, MAX_YAML_VALUES

Pos = tuple[int, int]  # 1-based line, column


@dataclass
class Located:
    """A loaded YAML document: plain data plus a position for every key path."""

    file: Path
    data: Any
    positions: dict[tuple, Pos] = field(default_factory=dict)

    def pos(self, path: tuple) -> Pos:
        """Position of the deepest existing prefix of `path` (a missing key points at its parent)."""
        path = tuple(path)
        while path:
            if path in self.positions:
                return self.positions[path]
            path = path[:-1]
        return self.positions.get((), (1, 1))

    def problem(self, path: tuple, message: str, prefix: tuple = (), word: str | None = None) -> Problem:
        """A problem at `path`; with `word`, at the line of the key's value (a multi-line SQL query, say)
        where that word first stands, when the file shows it there."""
        line, col = self.pos(prefix + tuple(path))
        if word:
            line, col = self._word_in_value(line, col, word) or (line, col)
        return Problem(str(self.file), line, col, keypath(prefix + tuple(path)), message)

    def _word_in_value(self, line: int, col: int, word: str) -> Pos | None:
        """(line, column) of `word` in the text of the value whose key is at (line, col): the rest of the
        key's line, then the lines indented deeper than it (a block or folded scalar's lines)."""
        try:
            lines = self.file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):
            return None
        if not 0 < line <= len(lines):
            return None
        own = len(lines[line - 1]) - len(lines[line - 1].lstrip(" "))
        pattern = re.compile(rf"\b{re.escape(word)}\b", re.I)
        for n in range(line - 1, len(lines)):
            text = lines[n]
            if n > line - 1 and text.strip() and len(text) - len(text.lstrip(" ")) <= own:
                return None  # past the value
            found = pattern.search(text, col - 1 if n == line - 1 else 0)
            if found:
                return n + 1, found.start() + 1
        return None


def keypath(path: tuple) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


def _plain(node: Any, path: tuple, positions: dict, refused: list) -> Any:
    """`node` as plain Python; a key that is a list or a mapping (`? [a, b]`) is left out and noted in
    `refused` as (line, column, key path, message): no muactl key is one, and turning it into text would
    give the author a name they never wrote."""
    if isinstance(node, CommentedMap):
        out = {}
        for k, v in node.items():
            line, col = node.lc.key(k)
            if isinstance(k, (tuple, list, Mapping)):
                what = "mapping" if isinstance(k, Mapping) else "list"
                refused.append((line + 1, col + 1, keypath(path), f"a key here is a {what} ({_flow(k)}); keys are plain "
                                "text: write the name itself (`? ` starts a complex key in YAML)"))
                continue
            positions[path + (k,)] = (line + 1, col + 1)
            out[k if isinstance(k, (str, int, float, bool)) or k is None else str(k)] = _plain(v, path + (k,), positions,
                                                                                              refused)
        return out
    if isinstance(node, CommentedSeq):
        out = []
        for i, v in enumerate(node):
            line, col = node.lc.item(i)
            positions[path + (i,)] = (line + 1, col + 1)
            out.append(_plain(v, path + (i,), positions, refused))
        return out
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, (str, TaggedScalar)):  # an explicit !!str: the composer refuses every other tag
        return str(node.value if isinstance(node, TaggedScalar) else node)
    return node  # dates and other scalars stay as ruamel made them


def _flow(key: Any) -> str:
    """A complex key, shortly, as YAML flow text."""
    if isinstance(key, Mapping):
        text = "{" + ", ".join(f"{k}: {v}" for k, v in key.items()) + "}"
    else:
        text = "[" + ", ".join(str(k) for k in key) + "]"
    return text if len(text) <= 60 else text[:57] + "..."


def read_text(path: Path, max_bytes: int | None = None, limit_name: str = "") -> str:
    """Read a text file, reporting empty, binary, undecodable or (past max_bytes) oversized files as spec problems."""
    try:
        size = path.stat().st_size
        if max_bytes is not None and size > max_bytes:
            raise SpecError.single(path, f"file is {size:,} bytes, over the {max_bytes:,}-byte limit ({limit_name}); "
                                   "split it into smaller files")
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SpecError.single(path, "file not found") from None
    except OSError as e:
        raise SpecError.single(path, f"cannot read file: {e.strerror}") from None
    if b"\x00" in raw[:8192]:
        raise SpecError.single(path, "this is a binary file; expected UTF-8 text (YAML, CSV, JSONL or Markdown)")
    try:
        # utf-8-sig: spreadsheet programs start CSV files with a BOM, which would glue onto the first column name
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SpecError.single(path, f"not valid UTF-8 (byte {e.start}); save the file as UTF-8", line=line) from None


_PLAIN_TAGS = {"!", *(f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq"))}
_INT_TAG = "tag:yaml.org,2002:int"


class _YamlLimit(MarkedYAMLError):
    """The document breaks one of muactl's YAML limits at problem_mark."""


class _BoundedComposer(Composer):
    """ruamel's composer, checking the limits as each node is read: nothing past a limit is built."""

    def __init__(self, loader: Any = None) -> None:
        super().__init__(loader)
        self.values = 0  # values composed so far, an alias counting all its anchor holds
        self.sizes: dict[Any, int] = {}  # anchor -> values it holds

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.parser.peek_event()
        if isinstance(event, AliasEvent):
            self._add(self.sizes.get(event.anchor, 1), event)
            return super().compose_node(parent, index)
        if self.depth >= MAX_YAML_DEPTH:
            self._refuse(f"nesting deeper than {MAX_YAML_DEPTH} levels (MAX_YAML_DEPTH)", event)
        tag = getattr(event, "ctag", None)
        if tag is not None and str(tag) not in _PLAIN_TAGS:
            self._refuse(f"tag {str(tag).replace('tag:yaml.org,2002:', '!!')!r} is not allowed; muactl reads plain "
                         "YAML only (text, numbers, booleans, null, lists, mappings): remove the tag", event)
        before = self.values
        self._add(1, event)
        node = super().compose_node(parent, index)
        if event.anchor is not None:
            self.sizes[event.anchor] = self.values - before
        if isinstance(node, ScalarNode) and str(node.tag) == _INT_TAG and len(node.value) > MAX_YAML_INT_DIGITS:
            self._refuse(f"an integer of {len(node.value)} characters, over {MAX_YAML_INT_DIGITS} "
                         "(MAX_YAML_INT_DIGITS); quote it if it is text", event)
        return node

    def _add(self, n: int, event: Any) -> None:
        self.values += n
        if self.values > MAX_YAML_VALUES:
            self._refuse(f"the document holds more than {MAX_YAML_VALUES:,} values once aliases are expanded "
                         "(MAX_YAML_VALUES); an alias (*name) counts everything its anchor (&name) holds", event)

    @staticmethod
    def _refuse(message: str, event: Any) -> None:
        raise _YamlLimit(None, None, message, event.start_mark)


class _BoundedScanner(RoundTripScanner):
    """Flow nesting ('[[[[...') is bounded while scanning: the scanner looks up to 1,024 characters ahead for a
    possible key and checks every open level each time, so a long run of '[' would cost seconds before the
    composer saw the first node."""

    def fetch_flow_collection_start(self, TokenClass: Any, to_push: Any) -> None:
        if self.flow_level >= MAX_YAML_DEPTH:
            raise _YamlLimit(None, None, f"nesting deeper than {MAX_YAML_DEPTH} levels (MAX_YAML_DEPTH)",
                                 self.reader.get_mark())
        super().fetch_flow_collection_start(TokenClass, to_push)


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.Scanner = _BoundedScanner
    yaml.Composer = _BoundedComposer
    return yaml


def syntax_message(e, text: str) -> str:
    """A YAML parser error in plain words: most are indentation (the parser says "expected <block end>" or
    "mapping values are not allowed here"), so say so, with the line as written and the indents around it."""
    what = (e.problem or e.context or "invalid YAML").strip()
    mark = e.problem_mark
    lines = text.splitlines()
    if mark is None or mark.line >= len(lines):
        return f"YAML syntax error: {what}"
    row = lines[mark.line]
    shown = f"; the line reads {row.rstrip()!r}"
    indent = len(row) - len(row.lstrip(" "))
    above = [ln for ln in lines[:mark.line] if ln.strip() and not ln.lstrip().startswith("#")]
    if "\t" in what or "\\t" in what:
        return f"YAML indentation error: a tab; YAML indents with spaces only{shown}"
    if what.startswith("expected <block end>"):
        depths = sorted({len(ln) - len(ln.lstrip(" ")) for ln in above})
        return (f"YAML indentation error: this line is indented {indent} space{'s' if indent != 1 else ''}, out of line with the entries "
                f"above it (indented {', '.join(map(str, depths[:8]))}); line it up with its siblings{shown}")
    if what.startswith("mapping values are not allowed"):
        prev = above[-1] if above else ""
        deeper = indent > len(prev) - len(prev.lstrip(" ")) and not prev.rstrip().endswith((":", "|", ">", "|-", ">-"))
        if deeper:
            return (f"YAML indentation error: this line is indented more than the one above it ({prev.strip()!r}), "
                    f"which holds a value, not a mapping; line it up with its siblings{shown}")
        return f"YAML syntax error: a second ': ' on one line; quote a value that contains ': '{shown}"
    return f"YAML syntax error: {what}{shown}"


def load_yaml(path: Path, text: str | None = None) -> Located:
    """Load one YAML file with positions. Raises SpecError on empty files, syntax errors and broken limits."""
    text = read_text(path, MAX_YAML_BYTES, "MAX_YAML_BYTES") if text is None else text
    if len(text) > MAX_YAML_BYTES:
        raise SpecError.single(path, f"YAML text is over the {MAX_YAML_BYTES:,}-byte limit (MAX_YAML_BYTES); split it")
    if not text.strip():
        raise SpecError.single(path, "file is empty; see `muactl init` for a working example")
    yaml = _yaml()
    try:
        node = yaml.load(text)
    except _YamlLimit as e:
        mark = e.problem_mark
        raise SpecError.single(path, f"YAML limit exceeded: {e.problem}", mark.line + 1, mark.column + 1) from None
    except DuplicateKeyError as e:
        raise SpecError([_duplicate_key(path, text, e)]) from None
    except MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise SpecError.single(path, syntax_message(e, text), line, col) from None
    except Exception as e:  # ruamel raises a few unmarked errors (duplicate keys, bad tags)
        raise SpecError.single(path, f"YAML error: {e}") from None
    if node is None:
        raise SpecError.single(path, "file holds no data (only comments?)")
    positions: dict[tuple, Pos] = {(): (1, 1)}
    refused: list[tuple[int, int, str, str]] = []
    data = _plain(node, (), positions, refused)
    if refused:
        raise SpecError([Problem(str(path), line, col, key, message) for line, col, key, message in refused])
    return Located(path, data, positions)


def _duplicate_key(path: Path, text: str, e: DuplicateKeyError) -> Problem:
    """ruamel's message quotes both whole values (a whole tool, say); name the key path and both lines instead."""
    line, col = e.problem_mark.line, e.problem_mark.column
    try:
        yaml = _yaml()
        yaml.allow_duplicate_keys = True  # keeps the first value; enough to find where the mapping sits
        found = _mapping_at(yaml.load(text), (e.context_mark.line, e.context_mark.column), ())
    except YAMLError:
        found = None
    if found is not None:
        node, at = found
        rest = text.splitlines()[line][col:].lstrip("\"'")
        for k in sorted(node, key=lambda k: -len(str(k))):
            if rest.startswith(str(k)):
                first = node.lc.key(k)[0] + 1
                return Problem(str(path), line + 1, col + 1, keypath(at + (k,)),
                               f"duplicate key '{k}' (first defined at line {first}); "
                               f"each key may appear once: rename or merge one of them")
    return Problem(str(path), line + 1, col + 1, "", f"YAML error: {e.problem}")


def _mapping_at(node: Any, mark: Pos, path: tuple) -> tuple[CommentedMap, tuple] | None:
    """The mapping that starts at `mark` (0-based line, column) and its key path."""
    if isinstance(node, CommentedMap):
        if (node.lc.line, node.lc.col) == mark:
            return node, path
        children = node.items()
    elif isinstance(node, CommentedSeq):
        children = enumerate(node)
    else:
        return None
    for k, v in children:
        found = _mapping_at(v, mark, path + (k,))
        if found is not None:
            return found
    return None


def inside_folder(root: Path, value: str, doc: Located, key: tuple, problems: list[Problem]) -> Path | None:
    """`root / value` when it stays inside the domain's folder (after `..` and symbolic links are
    followed), else a problem naming the key: a domain, and above all a pack from someone else, must
    never read local files into prompts or databases (an absolute path, `../..`, a link out)."""
    path = root / value
    try:
        inside = path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a symlink loop
        inside = False
    if not inside:
        problems.append(doc.problem(key, f"'{value}' is outside the domain's folder; every file a domain uses "
                                         f"must be inside {root} (copy the file in)"))
        return None
    return path
