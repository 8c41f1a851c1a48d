"""τ²-bench's tool schemas, as its `Tool.openai_schema` gives them to its LLM agent and user, rebuilt from
its source without running any of it.

τ² makes a tool's schema from the method's signature and docstring: docstring_parser's reading of the
docstring (the first line, a blank line, the rest: `short + "\\n\\n" + long`), one pydantic field per
parameter (its annotation, its default, the docstring's text for it), and pydantic's JSON schema of that
model (`$defs` for its data models and enums, `anyOf` for unions, titles). Here the same three steps run
on τ²'s tools.py and data models parsed with `ast`: the annotations and defaults are read as data (names
of a fixed set of types, literals, `Field(default, description=...)`), the models are rebuilt with
pydantic's `create_model`, and pydantic writes the schema. A construct outside that set leaves the tool
to muactl's own schema (`Tau2Unsupported`), which benchmarks/tau2_verify.py then counts as different.

τ²'s tool order is the order its toolkit class defines the `@is_tool` methods in.
"""

from __future__ import annotations

import ast
import enum
import typing
from pathlib import Path
from typing import Any

from ..errors import Tau2Unsupported
from .tau2_input import read_python

BUILTIN_TYPES = {"str": str, "int": int, "float": float, "bool": bool, "dict": dict, "list": list, "Any": Any,
                 "Dict": dict, "List": list, "None": type(None)}
GENERICS = {"List": list, "list": list, "Dict": dict, "dict": dict, "Tuple": tuple, "tuple": tuple}
NO_EXTRA = "BaseModelNoExtra"  # τ²'s pydantic base with extra="forbid" (tau2/utils/pydantic_utils.py)


# where a domain's tools are: (side, file of the domain folder, class; None: every class of the file)
TOOL_SOURCES = (("agent", "tools.py", None), ("user", "user_tools.py", None))


def tau2_tool_schemas(root: Path, code: Path, sources=TOOL_SOURCES) -> dict[str, list[dict]]:
    """'agent' and 'user' -> τ²'s OpenAI function schemas, in τ²'s order, from tools.py and user_tools.py
    of the domain folder `code` (or the given sources); a tool this reader cannot rebuild is left out (the
    caller keeps muactl's)."""
    names = Namespace(root, code)
    out: dict[str, list[dict]] = {"agent": [], "user": []}
    for side, file, cls in sources:
        if not (code / file).is_file():
            continue
        for node in tool_methods(read_python(root, code / file), cls):
            try:
                out[side].append(function_schema(node, names))
            except Tau2Unsupported:
                out[side].append({"type": "function", "function": {"name": node.name}})  # the order still counts
    return out


def tool_methods(tree: ast.Module, only: str | None = None) -> list[ast.FunctionDef]:
    """The `@is_tool(...)` methods of the module's classes (or of the class `only`), in definition order."""
    out = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and only in (None, n.name)):
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and any(is_tool_decorator(d) for d in node.decorator_list):
                out.append(node)
    return out


def is_tool_decorator(node: ast.expr) -> bool:
    target = node.func if isinstance(node, ast.Call) else node
    return isinstance(target, ast.Name) and target.id == "is_tool"


def function_schema(node: ast.FunctionDef, names: Namespace) -> dict:
    """τ²'s Tool(func).openai_schema for one method (tau2/environment/tool.py)."""
    from docstring_parser import parse
    from pydantic import Field, create_model

    doc = parse(ast.get_docstring(node, clean=False) or "")
    described = {p.arg_name: p.description for p in doc.params}
    args = node.args
    if args.vararg or args.kwarg or args.kwonlyargs or args.posonlyargs:
        raise Tau2Unsupported(f"{node.name}: *args, **kwargs or keyword-only parameters")
    params = args.args[1:]  # self
    defaults = [None] * (len(params) - len(args.defaults)) + list(args.defaults)
    fields = {}
    for param, default in zip(params, defaults):
        value = ... if default is None else names.value(default)
        if param.arg in described:
            value = Field(value, description=described[param.arg])
        fields[param.arg] = (names.type(param.annotation) if param.annotation is not None else Any, value)
    model = create_model("parameters", **fields)
    short, long = doc.short_description or "", doc.long_description or ""
    description = (short + "\n\n" + long if long else short) or node.name
    return {"type": "function", "function": {"name": node.name, "description": description,
                                             "parameters": model.model_json_schema()}}


class Namespace:
    """The names τ²'s tool signatures use: a fixed set of typing constructs, and the classes and aliases
    defined in the domain's modules (tools.py, user_tools.py, data_model.py, user_data_model.py), each
    rebuilt once, on first use."""

    def __init__(self, root: Path, code: Path):
        self.defs: dict[str, ast.stmt] = {}
        for file in ("data_model.py", "user_data_model.py", "tools.py", "user_tools.py"):
            if (code / file).is_file():
                for node in read_python(root, code / file).body:
                    if isinstance(node, ast.ClassDef):
                        self.defs.setdefault(node.name, node)
                    elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                        self.defs.setdefault(node.targets[0].id, node)
                    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                        self.defs.setdefault(node.target.id, node)
        self.built: dict[str, Any] = {}
        self.building: set[str] = set()

    # ------------------------------------------------------------ types

    def type(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            if node.value is None:
                return type(None)
            if isinstance(node.value, str):  # a forward reference
                return self.named(node.value)
            raise Tau2Unsupported(f"annotation {ast.dump(node)}")
        if isinstance(node, ast.Name):
            return self.named(node.id)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "typing":
            return self.named(node.attr)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return typing.Union[self.type(node.left), self.type(node.right)]
        if isinstance(node, ast.Subscript):
            return self.subscripted(node)
        raise Tau2Unsupported(f"annotation {ast.dump(node)}")

    def subscripted(self, node: ast.Subscript) -> Any:
        head = node.value.id if isinstance(node.value, ast.Name) else None
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "Literal":
            if not all(isinstance(x, ast.Constant) for x in items):
                raise Tau2Unsupported("Literal of something other than constants")
            return typing.Literal[tuple(x.value for x in items)]
        if head == "Optional":
            return typing.Optional[self.type(items[0])]
        if head == "Union":
            return typing.Union[tuple(self.type(x) for x in items)]
        if head in GENERICS:
            args = tuple(self.type(x) for x in items)
            return GENERICS[head][args if len(args) > 1 else args[0]]
        raise Tau2Unsupported(f"annotation {head or ast.dump(node.value)}[...]")

    def named(self, name: str) -> Any:
        if name in self.built:
            return self.built[name]
        if name in BUILTIN_TYPES:
            return BUILTIN_TYPES[name]
        node = self.defs.get(name)
        if node is None or name in self.building:
            raise Tau2Unsupported(f"type {name}")
        self.building.add(name)
        try:
            if isinstance(node, ast.ClassDef):
                built = self.enum(node) if self.is_enum(node) else self.model(node)
            else:
                built = self.type(node.value)
        finally:
            self.building.discard(name)
        self.built[name] = built
        return built

    @staticmethod
    def base_names(node: ast.ClassDef) -> list[str]:
        return [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases]

    def is_enum(self, node: ast.ClassDef) -> bool:
        return any(b in ("Enum", "StrEnum") for b in self.base_names(node))

    def enum(self, node: ast.ClassDef) -> Any:
        members = {}
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.targets[0], ast.Name) and isinstance(stmt.value, ast.Constant):
                members[stmt.targets[0].id] = stmt.value.value
        mixin = str if "str" in self.base_names(node) or "StrEnum" in self.base_names(node) else None
        built = enum.Enum(node.name, members, type=mixin) if mixin else enum.Enum(node.name, members)
        built.__doc__ = ast.get_docstring(node, clean=True)  # pydantic writes an enum's own docstring only
        return built

    def model(self, node: ast.ClassDef) -> Any:
        from pydantic import BaseModel, ConfigDict, create_model

        bases = self.base_names(node)
        parent = None
        fields: dict[str, Any] = {}
        for b in bases:
            if b in ("BaseModel", NO_EXTRA, "DB"):
                continue
            parent = self.named(b)  # a model of the domain: its fields come first, as in pydantic
            if not (isinstance(parent, type) and issubclass(parent, BaseModel)):
                raise Tau2Unsupported(f"class {node.name} derives from {b}")
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                fields[stmt.target.id] = (self.type(stmt.annotation),
                                          ... if stmt.value is None else self.field(stmt.value))
            elif isinstance(stmt, (ast.Assign, ast.AugAssign)) and not self.is_private(stmt):
                raise Tau2Unsupported(f"class {node.name}: an assignment in the class body")
        config = ConfigDict(extra="forbid") if NO_EXTRA in bases else None
        kwargs: dict[str, Any] = {"__doc__": ast.get_docstring(node, clean=True)}
        if parent is not None:
            kwargs["__base__"] = parent
        elif config is not None:
            kwargs["__config__"] = config
        return create_model(node.name, **kwargs, **fields)

    @staticmethod
    def is_private(stmt: ast.stmt) -> bool:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        return all(isinstance(t, ast.Name) and t.id.startswith("_") for t in targets)

    # ------------------------------------------------------------ values

    def field(self, node: ast.expr) -> Any:
        """A class field's default: a value, or Field(default, description=..., default_factory=dict|list)."""
        from pydantic import Field

        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Field"):
            return self.value(node)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg == "description":
                kwargs["description"] = self.value(kw.value)
            elif kw.arg == "default":
                kwargs["default"] = self.value(kw.value)
            elif kw.arg == "default_factory" and isinstance(kw.value, ast.Name) and kw.value.id in ("dict", "list"):
                kwargs["default_factory"] = {"dict": dict, "list": list}[kw.value.id]
            else:
                raise Tau2Unsupported(f"Field({kw.arg}=...)")
        if len(node.args) > 1:
            raise Tau2Unsupported("Field with more than one positional argument")
        if node.args:
            return Field(self.value(node.args[0]), **kwargs)
        return Field(**kwargs)

    def value(self, node: ast.expr) -> Any:
        """A default value: a literal, `...`, or a member of one of the domain's enums."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            cls = self.named(node.value.id)
            if isinstance(cls, type) and issubclass(cls, enum.Enum) and node.attr in cls.__members__:
                return cls[node.attr]
            raise Tau2Unsupported(f"default {node.value.id}.{node.attr}")
        try:
            return ast.literal_eval(node)
        except ValueError:
            raise Tau2Unsupported(f"default {ast.dump(node)[:80]}") from None
