"""The chat screen's parts: conversation, status line, tool-call panel, database diff, goal, rating."""

from __future__ import annotations

import json
import time
from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message as _Message
from textual.reactive import reactive
from textual.widgets import Static

from .session import TableDiff


def _short(value: Any, limit: int = 240) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Message(Static):
    """One turn of the conversation as the person sees it (tool traffic goes to the tool panel)."""


class ConversationView(VerticalScroll):
    can_focus = False

    def on_mount(self) -> None:
        # anchored: stays at the newest turn as turns arrive (a scroll_end right after mount races the
        # layout of the new widget, so the view could end up one turn short under load)
        self.anchor()

    def add(self, role: str, text: str, note: str | None = None) -> Message:
        who = {"user": "you", "assistant": "agent", "sim": "simulated user", "system": "·",
               "thinking": "agent (thinking, not shown to the user)"}.get(role, role)
        body = Text()
        if role not in ("note", "system"):
            body.append(f"{who}\n", style="bold")
        body.append(text)
        if note:
            body.append(f"\n{note}", style="italic")
        widget = Message(body, classes=f"msg {role}")
        self.mount(widget)
        self.scroll_end(animate=False)
        return widget


class StatusLine(Static):
    """Whose turn it is; while the agent works, a ticking "thinking" line so a slow model is visibly alive."""

    def __init__(self, **kw):
        super().__init__("", **kw)
        self._since: float | None = None
        self._label = ""

    def on_mount(self) -> None:
        self.set_interval(0.5, self._tick)

    def set(self, label: str, kind: str = "idle", timed: bool = False) -> None:
        self._label = label
        self._since = time.monotonic() if timed else None
        self.set_classes(f"status-{kind}")
        self._tick()

    def elapsed(self) -> float:
        return 0.0 if self._since is None else time.monotonic() - self._since

    def _tick(self) -> None:
        if self._since is None:
            self.update(self._label)
        else:
            dots = "." * (1 + int(self.elapsed() * 2) % 3)
            self.update(f"{self._label}{dots:<3} {self.elapsed():.0f}s")


class ToolPanel(VerticalScroll):
    """Every tool call the agent made, its arguments and result; errors and malformed replies marked."""

    can_focus = False

    def __init__(self, **kw):
        super().__init__(**kw)
        self.count = 0
        self.errors = 0

    def on_mount(self) -> None:
        self.anchor()
        self.border_title = "Tool calls"
        self.mount(Static("No tool calls yet.", classes="empty"))

    def _add(self, text: Text, classes: str) -> None:
        for empty in self.query(".empty"):
            empty.remove()
        self.mount(Static(text, classes=f"entry {classes}"))
        self.scroll_end(animate=False)

    def add_call(self, call: dict[str, Any]) -> None:
        self.count += 1
        self.border_title = f"Tool calls ({self.count})"
        self._add(Text.assemble(("→ ", "bold"), (call["name"], "bold"), " ", _short(call.get("arguments", {}))), "call")

    def add_result(self, msg: dict[str, Any]) -> None:
        if msg.get("error"):
            self.errors += 1
            self._add(Text.assemble(("✗ ", "bold"), _short(msg.get("content") or "")), "result error")
        else:
            self._add(Text.assemble("← ", _short(msg.get("content") or "")), "result ok")

    def add_malformed(self, error: str, content: str) -> None:
        self.errors += 1
        text = Text.assemble(("⚠ malformed tool call: ", "bold"), error)
        if content:
            text.append(f"\n  text: {_short(content, 160)}", style="italic")
        self._add(text, "malformed error")


class DiffPanel(Static):
    """The sandbox database against its start: rows added (+), changed (~) and removed (-) per table."""

    def on_mount(self) -> None:
        self.border_title = "Database changes"
        self.show({})

    def show(self, diff: dict[str, TableDiff], keys: dict[str, list[str]] | None = None) -> None:
        self.diff = diff
        if not diff:
            self.update(Text("No changes.", style="italic"))
            return
        keys = keys or {}
        out = Text()
        for table, d in diff.items():
            out.append(f"{table}", style="bold")
            out.append(f"  +{len(d.added)} ~{len(d.changed)} -{len(d.removed)}\n")
            pk = keys.get(table) or []
            for row in d.added:
                out.append("  + ", style="bold green")
                out.append(_row_label(row, pk, full=True) + "\n")
            for before, after in d.changed:
                out.append("  ~ ", style="bold yellow")
                out.append(_row_label(after, pk) + "  ")
                out.append(", ".join(f"{c} {_short(before[c], 40)} → {_short(after[c], 40)}"
                                     for c in after if before.get(c) != after[c]) + "\n")
            for row in d.removed:
                out.append("  - ", style="bold red")
                out.append(_row_label(row, pk, full=True) + "\n")
        out.rstrip()
        self.update(out)


def _row_label(row: dict[str, Any], pk: list[str], full: bool = False) -> str:
    key = "/".join(str(row[c]) for c in pk) if pk else ""
    if not full:
        return key or _short(row, 60)
    rest = {k: v for k, v in row.items() if k not in pk}
    return f"{key} {_short(rest, 100)}".strip()


class GoalPanel(Static):
    """The task's user goal, for a person playing the user (--show-goal)."""

    def on_mount(self) -> None:
        self.border_title = "Goal"

    def show_task(self, task) -> None:
        goal = task.task.user
        text = Text()
        text.append(task.task.id, style="bold")
        if task.task.persona:
            text.append(f"  ({task.task.persona})", style="italic")
        text.append(f"\n{' '.join(goal.reason.split())}")
        for label, value in (("Known", goal.known), ("Unknown", goal.unknown), ("Also", goal.instructions)):
            if value:
                text.append(f"\n{label}: ", style="bold")
                text.append(" ".join(value.split()))
        self.update(text)


class RatingBar(Static, can_focus=True):
    """1-5 stars; keys 1-5 or left/right (g and b for a quick good or bad)."""

    BINDINGS = [Binding(str(n), f"rate({n})", f"rate {n}", show=n in (1, 5)) for n in range(1, 6)] + [
        Binding("left", "nudge(-1)", show=False), Binding("right", "nudge(1)", show=False),
        Binding("g", "rate(5)", "good", show=False), Binding("b", "rate(1)", "bad", show=False)]

    rating: reactive[int | None] = reactive(None)

    class Changed(_Message):
        def __init__(self, rating: int | None):
            super().__init__()
            self.rating = rating

    def watch_rating(self, rating: int | None) -> None:
        self.post_message(self.Changed(rating))

    def render(self) -> Text:
        n = self.rating or 0
        text = Text("Rating ", style="bold")
        text.append("★" * n, style="bold yellow")
        text.append("☆" * (5 - n))
        text.append(f"  {n}/5" if n else "  not rated (press 1-5)", style="italic")
        return text

    def action_rate(self, n: int) -> None:
        self.rating = n

    def action_nudge(self, step: int) -> None:
        self.rating = min(5, max(1, (self.rating or 0) + step))
