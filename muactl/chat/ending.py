"""The end of a chat: reward, breakdown, a rating and a note, saved with the episode."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, Static

from .widgets import (
    RatingBar,
)

if TYPE_CHECKING:
    from ..episode.types import Episode
    from ..spec.tasks import TaskSpec


# ---------------------------------------------------------------- end of a chat


class EndScreen(ModalScreen):
    """Over the finished chat, which stays readable behind it."""

    BINDINGS = [Binding("ctrl+n", "new_chat", "new chat"), Binding("ctrl+s", "save", "save rating/note"),
                Binding("ctrl+q", "app.quit", "quit")]

    def __init__(self, episode: Episode, episode_id: int, task: TaskSpec):
        super().__init__()
        self.episode, self.episode_id, self.task_spec = episode, episode_id, task
        self.saved: tuple[int | None, str | None] = (None, None)

    AUTO_FOCUS = "#rating"  # digits rate at once; tab reaches the note

    def compose(self) -> ComposeResult:
        box = Vertical(id="end")
        box.border_title = "Chat ended"
        with box:
            yield Static(self._result(), id="result")
            yield RatingBar(id="rating")
            yield Input(placeholder="a note about this chat (enter saves)", id="note")
            yield Static(self._saved_line(), id="saved")
        yield Footer()

    def on_mount(self) -> None:
        self.app.sub_title = f"{self.app.opened.spec.domain.name} · {self.task_spec.task.id} · chat ended"

    def _result(self) -> Text:
        ep, b = self.episode, self.episode.breakdown
        out = Text()
        if ep.reward is None:
            out.append("Reward n/a", style="bold")
            out.append("  (free chat: no task, so nothing to check)\n")
        else:
            ok = ep.reward >= 1
            out.append(f"Reward {ep.reward:g}  ", style="bold")
            out.append("✓ task done" if ok else "✗ task not done", style="bold green" if ok else "bold red")
            out.append("\n")

        def mark(v: bool) -> tuple[str, str]:
            return ("✓", "green") if v else ("✗", "red")

        out.append(f"\ntermination   {ep.termination}")
        if ep.error:
            out.append(f"  ({ep.error})", style="italic")
        if "ended_normally" in b:
            out.append("\nended normally  ")
            out.append(*mark(b["ended_normally"]))
            out.append("\ndatabase equals the gold end state  ")
            out.append(*mark(b["db_match"]))
            for text, said in (b.get("outputs") or {}).items():
                out.append(f"\nsaid \"{text}\"  ")
                out.append(*mark(said))
            for call, made in (b.get("required_calls") or {}).items():
                out.append(f"\ncalled {call}  ")
                out.append(*mark(made))
            for a in b.get("assertions") or []:
                out.append(f"\nassert {' '.join(a['query'].split())}  ")
                out.append(*mark(a["ok"]))
                if a.get("why"):
                    out.append(f"  {a['why']}", style="italic")
        out.append(f"\n\nturns {ep.turns} · tool calls {ep.tool_calls} · tool errors {ep.tool_errors}")
        return out

    def _saved_line(self) -> Text:
        rid = self.app.chats.store.id if self.app.chats.store else "?"
        return Text.assemble(("Saved ", "bold"), f"run {rid}, episode {self.episode_id}. ",
                             "Rate it (1-5), tab to the note; ctrl+n starts a new chat, ctrl+q quits.")

    def save(self) -> None:
        rating = self.query_one(RatingBar).rating
        note = self.query_one("#note", Input).value.strip() or None
        if (rating, note) != self.saved:
            self.app.chats.annotate(self.episode_id, rating, note)
            self.saved = (rating, note)

    @on(Input.Submitted, "#note")
    def _note(self) -> None:
        self.save()
        self.notify("Note saved.")

    def on_rating_bar_changed(self, event: RatingBar.Changed) -> None:
        self.save()

    def action_save(self) -> None:
        self.save()
        self.notify("Rating and note saved.")

    def action_new_chat(self) -> None:
        self.save()
        self.app.pop_screen()
        self.app.show_picker()
