"""Options declared once. A command's settings are one dataclass (EvalConfig, SynthConfig, VerlExport); each
field says, in its metadata, how a person sets it on the command line (`option`: flags, help, bounds) and,
for the settings a train recipe also sets, its key in the recipe (`recipe=`: "eval.n", "api.retries").
cli/options.py builds the typer options from it, train/recipes.py the hydra schema of the recipe's groups,
and tests/test_options.py checks that every field reaches both."""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import MISSING, dataclass, field
from typing import Any, Optional, Union


SAME = object()  # a command-line default that is the field's own


@dataclass(frozen=True)
class Cli:
    """How a field is set on the command line."""

    flags: tuple[str, ...] = ()  # empty: a positional argument
    help: str = ""
    min: float | None = None
    max: float | None = None
    default: Any = SAME  # the command line's default when it differs from the field's (a required domain: None)
    type: Any = None  # the command line's type when it differs (a Path for a str field)
    own: bool = False  # the command declares these flags itself (one field set by two flags, or by another's)


def option(default: Any = MISSING, *flags: str, help: str = "", min: float | None = None, max: float | None = None,
           default_factory: Any = MISSING, cli_default: Any = SAME, cli_type: Any = None, own: bool = False,
           recipe: str | None = None, not_in_recipe: str | None = None) -> Any:
    """A dataclass field with its command-line option, and where a train recipe sets it (`recipe`) or why
    a recipe does not (`not_in_recipe`)."""
    meta = {"cli": Cli(tuple(flags), help, min, max, cli_default, cli_type, own)}
    if recipe is not None:
        meta["recipe"] = recipe
    if not_in_recipe is not None:
        meta["not_in_recipe"] = not_in_recipe
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def cli_of(f: dataclasses.Field) -> Cli | None:
    return f.metadata.get("cli")


def recipe_key(f: dataclasses.Field) -> str | None:
    return f.metadata.get("recipe")


def field_types(cls) -> dict[str, Any]:
    """Each field's type, resolved, with `X | None` spelled Optional[X] (what typer and OmegaConf read)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        args = typing.get_args(t)
        if typing.get_origin(t) in (Union, types.UnionType) and type(None) in args:
            rest = [a for a in args if a is not type(None)]
            t = Optional[rest[0]] if len(rest) == 1 else Any
        out[f.name] = t
    return out


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING
