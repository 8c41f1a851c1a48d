"""Typer options built from a command's config dataclass (muactl/options.py): each field's flags, help and
bounds are declared once, on the field, and become the command's options in field order."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from dataclasses import MISSING

import typer

from ..options import SAME, cli_of, default_of, field_types


def typer_param(f: dataclasses.Field, annotation) -> inspect.Parameter:
    c = cli_of(f)
    default = default_of(f) if c.default is SAME else c.default
    default = ... if default is MISSING else default
    if c.flags:
        info = typer.Option(default, *c.flags, help=c.help or None, min=c.min, max=c.max)
    else:
        info = typer.Argument(default, help=c.help or None)
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=c.type or annotation)


def config_options(cls, own: dict[str, tuple[str, ...]] | None = None):
    """Decorate `fn(values, ...)`: its command-line signature becomes `cls`'s fields as options (in field
    order), and it is called with `values`, a dict of those fields' values. A field marked `own` is set by
    the command's own parameters, named for it in `own` (they take its place in the order); the command's
    other parameters follow the fields."""
    own = own or {}

    def wrap(fn):
        mine = list(inspect.signature(fn).parameters.values())[1:]  # after `values`
        hints = typing.get_type_hints(fn)
        mine = {p.name: p.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=hints.get(p.name, p.annotation))
                for p in mine}
        types = field_types(cls)
        params, names, used = [], [], set()
        for f in dataclasses.fields(cls):
            c = cli_of(f)
            if c is None:
                continue
            if c.own:
                for name in own.get(f.name, ()):
                    params.append(mine[name])
                    used.add(name)
                continue
            params.append(typer_param(f, types[f.name]))
            names.append(f.name)
        params += [p for name, p in mine.items() if name not in used]

        @functools.wraps(fn)
        def inner(**kw):
            values = {name: kw.pop(name) for name in names}
            return fn(values, **kw)

        inner.__signature__ = inspect.Signature(params)
        inner.__annotations__ = {p.name: p.annotation for p in params}
        return inner

    return wrap


def field_option(cls, name: str):
    """One field's typer option, for a command that takes it without the rest of `cls` (chat takes the API-call
    settings of eval)."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return typer_param(f, field_types(cls)[name]).default
