"""Pydantic model of a task template (tasks/<domain>/templates.yaml).

A template is a task with {placeholders}, plus where their values come from: `sample`, a SELECT over
the episode's database whose rows are the candidate bindings (one is drawn with the seed), and
`derive`, further values computed by SQL from those bindings or drawn from declared lists. Like
generators, templates are data: nothing in them runs as Python.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from .generators import GenOrValue
from .models import Expect, Strict, ToolCall, UserGoal


class Contrast(Strict):
    template: str = Field(description="Another template of the file: its instance is drawn beside each of this one's.")
    same: list[str] = Field(min_length=1, description="Bindings the two instances share: the partner's sample row "
                            "is drawn among those with this instance's values in these columns.")


class TaskTemplate(Strict):
    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Unique id among the domain's templates.")
    description: str | None = Field(None, description="What kind of task this makes; for humans.")
    sample: str = Field(
        description="SELECT over the database; each row is one candidate binding (its column names are the "
        "placeholder names). One row is drawn with the instance seed. JSON columns come back decoded, so "
        "{items.0.item_id} reaches inside them.")
    derive: dict[str, str | GenOrValue] = Field(
        default_factory=dict,
        description="More values, in order: a string is a SELECT returning one value, with the bindings so far "
        "as :params (e.g. SELECT :balance / 2); a mapping is a generator drawn with the seed (choice, int, "
        "pattern...).")
    persona: str | list[str] | None = Field(None, description="A persona name, or a pool of names to draw from.")
    user: UserGoal = Field(description="The user's goal, with {placeholders}.")
    setup: list[ToolCall] = Field(default_factory=list, description="Setup calls, with {placeholders}.")
    expect: Expect = Field(default_factory=Expect, description="Gold actions, outputs and assertions, with {placeholders}.")
    tags: list[str] = Field(default_factory=list, description="Copied to every generated task.")
    contrast: Contrast | None = Field(
        None, description="With synth --contrast, each instance comes with one of `template` on the same database "
        "and the same `same` bindings: a pair that differs only where the right action differs (an amount that "
        "fits against one that does not).")


TEMPLATE_ONLY = ("sample", "derive", "description", "persona", "contrast")


def placeholder_fields(data: dict[str, Any]) -> dict[str, Any]:
    """The parts of a template document that become the task (placeholders still in them)."""
    return {k: v for k, v in data.items() if k not in TEMPLATE_ONLY and k != "id"}
