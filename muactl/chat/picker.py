"""The first screen of `muactl chat`: pick a task (search by id, split, tags or goal text) or a free chat."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, OptionList, Static
from textual.widgets.option_list import Option

from .session import (
    free_task,
)

if TYPE_CHECKING:
    from ..spec.tasks import TaskSpec


def task_text(task: TaskSpec) -> str:
    u = task.task.user
    return " ".join(" ".join(x.split()) for x in (u.reason, u.known or "", u.unknown or "") if x)


def matches(task: TaskSpec, query: str) -> bool:
    """Every word of the query appears in the task's id or its goal text (case-insensitive)."""
    hay = f"{task.task.id} {task.split} {' '.join(task.task.tags)} {task_text(task)}".lower()
    return all(word in hay for word in query.lower().split())


# ---------------------------------------------------------------- task picker


class PickerScreen(Screen):
    BINDINGS = [Binding("down", "move(1)", show=False), Binding("up", "move(-1)", show=False),
                Binding("escape", "app.quit", "quit")]

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="picker"):
            yield Static("Pick a task to play its user, or chat freely. Type to search by id or text; "
                         "up/down to move, enter to start.", id="picker-help")
            yield Input(placeholder="search tasks", id="search")
            yield OptionList(id="tasks")
        yield Footer()

    def on_mount(self) -> None:
        self.app.sub_title = f"{self.app.opened.spec.domain.name} · pick a task · agent {self.app.cfg.agent}"
        self.refill("")

    def refill(self, query: str) -> None:
        tasks = [t for t in self.app.opened.tasks if matches(t, query)]
        options: list[Option] = []
        if not query.strip() or matches(free_task(), query):
            options.append(Option(Text.assemble(("free chat", "bold"), "  no task; reward not computed"), id="__free__"))
        for t in tasks:
            options.append(Option(Text.assemble((t.task.id, "bold"), f"  [{t.split}]  ", (task_text(t), "italic")),
                                  id=t.task.id))
        ol = self.query_one("#tasks", OptionList)
        ol.clear_options()
        ol.add_options(options)
        if options:
            ol.highlighted = 0
        ol.border_title = f"{len(tasks)} of {len(self.app.opened.tasks)} tasks"

    @on(Input.Changed, "#search")
    def _search(self, event: Input.Changed) -> None:
        self.refill(event.value)

    def action_move(self, step: int) -> None:
        ol = self.query_one("#tasks", OptionList)
        if ol.option_count:
            ol.highlighted = max(0, min(ol.option_count - 1, (ol.highlighted or 0) + step))

    @on(Input.Submitted, "#search")
    def _submit(self) -> None:
        ol = self.query_one("#tasks", OptionList)
        if ol.highlighted is not None and ol.option_count:
            self._start(ol.get_option_at_index(ol.highlighted).id)
        else:
            self.notify("No task matches; clear the search to see them all.", severity="warning")

    @on(OptionList.OptionSelected, "#tasks")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        self._start(event.option.id)

    def _start(self, option_id: str | None) -> None:
        task = free_task() if option_id == "__free__" else self.app.opened.task(option_id)
        self.app.start_chat(task)
