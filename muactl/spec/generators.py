"""Pydantic models of randomized seed data (`database.generate:` in domain.yaml).

A generator is data, never code: an untrusted domain pack can declare how its rows are drawn, and
muactl draws them with one seeded random.Random, offline. The engine is muactl/compile/randomdb.py.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from ..limits import MAX_GENERATED_ROWS, quote


def _row_count(value: Any) -> Any:
    """`rows`: whole numbers, 0 or more (a negative count drew nothing, silently; too many rows, all tables
    together, is randomdb's check)."""
    for n in value if isinstance(value, list) else [value]:
        if isinstance(n, bool) or not isinstance(n, int):
            raise ValueError(f"`rows` is a whole number of rows, or [min, max], not {quote(value)}")
        if n < 0:
            raise ValueError(f"`rows` cannot be negative ({n}): give 0 or more")
    return value

GEN_KINDS = ("value", "choice", "pattern", "int", "real", "date", "ref", "parent", "one_of", "json")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _shorthand(v: Any) -> Any:
    # `kind: checking` reads better than `kind: {value: checking}`; a mapping is always a generator
    return v if isinstance(v, dict) else {"value": v}


class Gen(_Strict):
    """How one value is drawn. Give exactly one of the kinds; `unique` and `weight` modify it."""

    value: Any = Field(None, description="A constant.")
    choice: list[Any] | None = Field(None, description="Pick one of these (uniformly, or by `weights`).")
    weights: list[float] | None = Field(None, description="Relative weights for `choice`, one per option.")
    pattern: str | None = Field(
        None, description="Text with slots: {nn} a number with that many digits (no leading zero), {dd} any "
        "digits, {LL} upper-case letters, {ll} lower-case letters, {column} another column of the same row.")
    int_: list[int] | None = Field(None, alias="int", min_length=2, max_length=2,
                                   description="[low, high] inclusive; with `step`, only low + k*step.")
    step: int = Field(1, ge=1, description="Spacing of `int` values.")
    real: list[float] | None = Field(None, min_length=2, max_length=2, description="[low, high] uniform.")
    decimals: int = Field(2, ge=0, le=9, description="Rounding of `real` values.")
    date: list[str] | None = Field(None, min_length=2, max_length=2,
                                   description="[first, last] ISO dates (YYYY-MM-DD); a day between them.")
    ref: str | None = Field(None, description="'table.column': a value of a row generated earlier.")
    parent: str | None = Field(None, description="With `per:`, a column of the parent row (e.g. customer_id).")
    one_of: list[GenOrValue] | None = Field(
        None, description="Weighted choice between generators: each may carry `weight` (default 1).")
    json_: Any = Field(None, alias="json", description="A JSON value whose mappings with a generator key are drawn.")
    unique: bool = Field(False, description="Never repeat a value within this column (redraws; fails if it cannot).")
    weight: float = Field(1.0, ge=0, description="Weight of this option inside `one_of`.")

    @model_validator(mode="after")
    def _one_kind(self) -> Gen:
        given = [k for k in GEN_KINDS if (k + "_" if k in ("int", "json") else k) in self.model_fields_set]
        if len(given) != 1:
            what = f"got {', '.join(given)}" if given else "got none"
            raise ValueError(f"a generator needs exactly one of: {', '.join(GEN_KINDS)} ({what})")
        if self.weights is not None and (self.choice is None or len(self.weights) != len(self.choice)):
            raise ValueError("`weights` needs a `choice` with as many options")
        if self.choice is not None and not self.choice:
            raise ValueError("`choice` needs at least one option")
        return self

    @property
    def kind(self) -> str:
        return next(k for k in GEN_KINDS if (k + "_" if k in ("int", "json") else k) in self.model_fields_set)


GenOrValue = Annotated[Gen, BeforeValidator(_shorthand)]
Gen.model_rebuild()


class Variant(_Strict):
    chance: float = Field(1.0, ge=0, le=1, description="Probability that a parent row gets this row.")
    columns: dict[str, GenOrValue] = Field(default_factory=dict, description="Column -> generator, over the table's.")


class TableGen(_Strict):
    """How a table's rows are drawn: a number of rows, or rows per row of a parent table."""

    rows: Annotated[int | list[int] | None, BeforeValidator(_row_count)] = Field(
        None, description=f"How many rows: N, or [min, max], each 0 or more; all tables together draw at most "
        f"{MAX_GENERATED_ROWS:,} (MAX_GENERATED_ROWS).")
    per: str | None = Field(None, description="Parent table: rows are made for each of its rows (see variants).")
    variants: list[Variant] = Field(
        default_factory=list, description="With `per`: candidate rows per parent row, each kept with its chance. "
        "Default: exactly one row per parent row.")
    columns: dict[str, GenOrValue] = Field(description="Column -> generator; columns are drawn in this order.")

    @model_validator(mode="after")
    def _rows_or_per(self) -> TableGen:
        if (self.rows is None) == (self.per is None):
            raise ValueError("give either `rows` (how many) or `per` (a parent table), not both or neither")
        if isinstance(self.rows, list) and (len(self.rows) != 2 or self.rows[0] > self.rows[1]):
            raise ValueError("`rows` as a list is [min, max] with min <= max")
        if self.variants and self.per is None:
            raise ValueError("`variants` need `per`")
        return self
