"""`muactl chat`: a person plays the user against a checkpoint, in the terminal.

Screens: a task picker (or free chat), the chat (conversation, tool calls, database diff, goal), and the
end of a chat (reward, breakdown, rating, note). The episode runs in a Textual worker through the same
engine, sandbox and reward as eval; the model is built and loaded in a worker too, so the screen keeps
answering keys while a model loads or generates.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Header, Input, OptionList, Static
from textual.widgets.option_list import Option

from .session import (
    ChatConfig,
    ChatStore,
    GuardedAgent,
    HumanUser,
    Seat,
    db_diff,
    free_task,
    is_free,
    snapshot,
)
from .widgets import (
    ConversationView,
    DiffPanel,
    GoalPanel,
    RatingBar,
    StatusLine,
    ToolPanel,
)
from ..env.sandbox import new_env

if TYPE_CHECKING:
    from ..episode.agents.base import Agent
    from ..episode.user import UserSimulator
    from ..episode.types import Episode
    from ..spec.tasks import TaskSpec
    from ..domain.validate import Opened


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
        self.app.switch_screen(ChatScreen(task))


# ---------------------------------------------------------------- the chat


ENDING = "Ending the chat: the agent finishes its turn first"


class ChatScreen(Screen):
    BINDINGS = [
        # priority: the Input keeps focus and would take ctrl+e (end of line) for itself
        Binding("ctrl+e", "end", "end chat", priority=True),
        Binding("ctrl+r", "retry", "retry agent", priority=True),
        Binding("ctrl+t", "seat", "take over / give back", priority=True),
        Binding("ctrl+g", "toggle_goal", "goal", priority=True),
    ]

    def __init__(self, task: TaskSpec):
        super().__init__()
        self.task_spec = task
        self.free = is_free(task)
        self.human = HumanUser(on_turn=self._your_turn)
        self.seat: Seat | None = None
        self.guard: GuardedAgent | None = None
        self.transcript: list[dict[str, Any]] = []
        self.env = None
        self.baseline: dict | None = None
        self.episode: Episode | None = None
        self.trial = 0
        self._slow_timer = None
        self._ending = False

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="main"):
            with Vertical(id="left"):
                yield ConversationView(id="conversation")
                yield StatusLine(id="status")
                yield Input(placeholder="write as the user; enter sends; ###STOP### or ctrl+e ends", id="say")
            with VerticalScroll(id="side"):
                yield GoalPanel(id="goal")
                yield ToolPanel(id="tools")
                yield DiffPanel(id="diff")
        yield Footer()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        # keys that do nothing in this chat are left out of the footer
        if action == "seat" and not self.app.cfg.watch:
            return False
        if action == "toggle_goal" and self.free:
            return False
        return True

    def on_mount(self) -> None:
        cfg = self.app.cfg
        mode = " · watch" if cfg.watch else ""
        self.app.sub_title = f"{self.app.opened.spec.domain.name} · {self.task_spec.task.id} · agent {cfg.agent}{mode}"
        goal = self.query_one(GoalPanel)
        goal.display = cfg.show_goal and not self.free
        if not self.free:
            goal.show_task(self.task_spec)
        if self.free:
            self.query_one(ConversationView).add("system", "Free chat: there is no task, so no reward is computed.")
        self.query_one("#say", Input).focus()
        self.status("starting…", "busy", timed=True)
        self.play()

    # ------------------------------------------------------------ episode

    @work(exclusive=True, group="episode", exit_on_error=False)
    async def play(self) -> None:
        try:
            await self._play()
        except Exception as e:  # a broken simulator or sandbox: say so, keep the terminal usable
            self.status(f"The chat could not run: {type(e).__name__}: {e}", "error")
            self.notify(f"{type(e).__name__}: {e}", title="Chat failed", severity="error", timeout=30)

    async def _play(self) -> None:
        from ..episode.rollout import RolloutConfig, run_episode

        app: ChatApp = self.app
        cfg, domain = app.cfg, app.opened.compiled
        agent = await app.ensure_agent(self.status)
        self.guard = GuardedAgent(agent, on_busy=self._busy, on_failure=self._failed)
        user: UserSimulator = self.human
        if cfg.watch:
            if self.free:
                self.notify("A free chat has no goal for a simulator to pursue: you have the user's seat.")
            else:
                self.seat = Seat(app.make_simulator(), self.human, cfg.pace_s, on_sim_turn=self._sim_turn)
                user = self.seat
        base = new_env(domain)
        base.replay(self.task_spec.task.setup)
        self.baseline = snapshot(base)
        base.close()
        self.env = new_env(domain)
        self.trial = app.chats.next_trial(self.task_spec.task.id)
        rcfg = RolloutConfig(max_turns=cfg.max_turns, timeout_s=cfg.timeout_s, seed=0)
        ep = await run_episode(self.task_spec, domain, self.guard, user, rcfg, trial=self.trial, env=self.env,
                               on_message=self._show_message)
        self._finish(ep)

    def _finish(self, ep: Episode) -> None:
        if self.free:
            # no goal, no gold path: a reward would only say "the DB did not change"
            ep.reward = None
            ep.breakdown = {"free_chat": True, "termination": ep.termination, "success": None}
        self.episode = ep
        episode_id = self.app.chats.save(ep)
        self.status("chat ended", "idle")
        self.query_one("#say", Input).disabled = True
        self.app.push_screen(EndScreen(ep, episode_id, self.task_spec))

    def _show_message(self, msg: dict[str, Any]) -> None:
        self.transcript.append(msg)
        try:
            self._render_message(msg)
        except NoMatches:  # the screen is closing; the engine must not mistake that for an agent error
            pass

    def _render_message(self, msg: dict[str, Any]) -> None:
        conv, tools = self.query_one(ConversationView), self.query_one(ToolPanel)
        role = msg["role"]
        if role == "user":
            who = "sim" if self.seat is not None and self.seat.last == "sim" else "user"
            if msg.get("content"):
                conv.add(who, msg["content"])
        elif role == "assistant":
            if (msg.get("content") or "").strip():
                conv.add("assistant", msg["content"])
            elif not msg.get("tool_calls") and not msg.get("malformed"):
                conv.add("assistant", "(empty reply)")
            for call in msg.get("tool_calls") or []:
                tools.add_call(call)
            names = ", ".join(c["name"] for c in msg.get("tool_calls") or [])
            if names and not (msg.get("content") or "").strip():
                conv.add("note", f"agent called {names}  (see Tool calls)")
            if msg.get("malformed"):
                tools.add_malformed(msg["malformed"], msg.get("content") or "")
                conv.add("note", "agent wrote a malformed tool call  (see Tool calls)")
        elif role == "tool":
            if msg.get("tool_call_id"):
                tools.add_result(msg)
            self.refresh_diff()

    def refresh_diff(self) -> None:
        if self.env is None or self.baseline is None:
            return
        domain = self.app.opened.compiled
        diff = db_diff(domain, self.baseline, snapshot(self.env))
        self.query_one(DiffPanel).show(diff, {t: s.pk_columns() for t, s in domain.tables.items()})

    # ------------------------------------------------------------ state callbacks

    def status(self, label: str, kind: str = "idle", timed: bool = False) -> None:
        self.query_one(StatusLine).set(label, kind, timed)

    def _your_turn(self) -> None:
        extra = "  (ctrl+t gives the seat back)" if self.seat is not None else ""
        self.status(f"Your turn: write as the user.{extra}", "you")

    def _sim_turn(self) -> None:
        self.status(f"The simulated user ({self.seat.sim.name}) is answering; ctrl+t takes over", "sim", timed=True)

    def _busy(self, on: bool) -> None:
        if self._slow_timer is not None:
            self._slow_timer.stop()
            self._slow_timer = None
        if on:
            self.status(ENDING if self._ending else "The agent is thinking", "busy", timed=True)
            self._slow_timer = self.set_timer(self.app.cfg.slow_s, self._slow)

    def _slow(self) -> None:
        self._slow_timer = None
        self.notify(f"The agent has been working for {self.app.cfg.slow_s:.0f}s. ctrl+r abandons this turn and asks "
                    "again; ctrl+e ends the chat after it.", title="Slow agent", severity="warning", timeout=10)

    def _failed(self, error: Exception) -> None:
        # the reason stays in the transcript: a toast fades, and "failed" alone does not say what to fix
        reason = f"{type(error).__name__}: {error}"
        self.query_one(ConversationView).add("note", f"the agent failed: {reason}")
        self.status(f"The agent failed ({reason[:160]}): ctrl+r retries this turn, ctrl+e ends the chat", "error")
        self.notify(f"{type(error).__name__}: {error}\nctrl+r retries the turn; ctrl+e ends the chat.",
                    title="Agent failed", severity="error", timeout=15)

    # ------------------------------------------------------------ actions

    @on(Input.Submitted, "#say")
    def _say(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text:
            return
        if not self.human.waiting:
            if self.seat is not None and not self.seat.human_has_it:
                self.notify("The simulated user has the seat: ctrl+t takes it over.", severity="warning")
            else:
                self.notify("Wait for the agent's reply before writing.", severity="warning")
            return
        event.input.value = ""
        self.status("sent", "busy")
        self.human.send(text)

    def action_end(self) -> None:
        if self.episode is not None:
            return
        if self._ending:  # a second press: say again what is happening rather than nothing
            self.notify(ENDING + ".")
            return
        self._ending = True
        if self.guard is not None and self.guard.give_up():
            self.status("Ending the chat", "busy")
            return
        if self.seat is not None and not self.seat.human_has_it:
            self.seat.take()
        self.human.stop()
        if not self.human.waiting:  # acknowledged at once; the reward comes when the agent's turn ends
            self.status(ENDING, "busy", timed=True)
            self.notify(ENDING + ".")

    def action_retry(self) -> None:
        if self.guard is not None and self.guard.retry():
            self.notify("Asking the agent again.")
        elif self.app.retry_load():
            self.notify("Loading the agent again.")
        else:
            self.notify("Nothing to retry: the agent is not working on a turn.")

    def action_seat(self) -> None:
        if self.seat is None:
            self.notify("Taking over needs --watch (agent vs a simulated user).", severity="warning")
            return
        if self.seat.human_has_it:
            self.seat.give_back()
            self.notify("The simulator has the user's seat again.")
        else:
            self.seat.take()
            self.query_one("#say", Input).focus()
            self.notify("You have the user's seat; the simulator is paused.")

    def action_toggle_goal(self) -> None:
        if self.free:
            self.notify("A free chat has no goal.")
            return
        goal = self.query_one(GoalPanel)
        goal.display = not goal.display

    async def close_chat(self) -> None:
        """Save what there is before the app exits: end the chat properly if the person holds the turn,
        else keep the partial conversation as an infra_error episode (it says nothing about the agent)."""
        if self.episode is not None:
            return
        if self.human.waiting:
            self._ending = True
            self.human.stop()
            for _ in range(100):
                await asyncio.sleep(0.02)
                if self.episode is not None:
                    return
        self.workers.cancel_group(self, "episode")
        if self.episode is not None or not self.transcript:
            return
        from ..episode.rollout import episode_seed
        from ..episode.types import Episode

        messages = [{"role": "system", "content": self.app.opened.compiled.system_prompt}, *self.transcript]
        ep = Episode(self.task_spec.task.id, self.trial, episode_seed(0, self.task_spec.task.id, self.trial), messages,
                     "infra_error", reward=None if self.free else 0.0,
                     breakdown={"termination": "infra_error", "success": False},
                     error="the chat was closed while the agent or simulator was working")
        self.episode = ep
        self.app.chats.save(ep)


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
        self.app.switch_screen(PickerScreen())


# ---------------------------------------------------------------- the app


class ChatApp(App):
    CSS_PATH = "chat.tcss"
    TITLE = "muactl chat"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [Binding("ctrl+q", "quit", "quit", priority=True),
                # Ctrl-C quits too (Textual's default only explains ctrl+q); the driver restores the terminal
                Binding("ctrl+c", "quit", "quit", show=False, priority=True)]

    def __init__(self, cfg: ChatConfig, opened: Opened, agent: Agent | None = None,
                 simulator: Callable[[], UserSimulator] | None = None, run_id: str | None = None):
        super().__init__()
        self.cfg, self.opened = cfg, opened
        self.agent = agent
        self._simulator = simulator
        self.chats = ChatStore(cfg, opened.compiled, run_id)
        self._loaded = False
        self._load_error: Exception | None = None
        self._load_retry: asyncio.Event | None = None

    def on_mount(self) -> None:
        if self.cfg.task:
            self.push_screen(ChatScreen(self.opened.task(self.cfg.task)))
        else:
            self.push_screen(PickerScreen())

    def make_simulator(self) -> UserSimulator:
        if self._simulator is not None:
            return self._simulator()
        from ..episode.user import make_user

        cfg = self.cfg
        return make_user(cfg.user, api_base=cfg.user_api_base, max_tokens=cfg.max_tokens, timeout_s=cfg.llm_timeout_s,
                         retries=cfg.retries)

    async def ensure_agent(self, status: Callable[..., None]) -> Agent:
        """Build and load the agent off the event loop; on failure, wait for the person to retry."""
        while self.agent is None or not getattr(self, "_loaded", False):
            status(f"Loading agent {self.cfg.agent}", "busy", timed=True)
            try:
                await asyncio.to_thread(self._build_agent)
                # local models load lazily on their first turn; loading here shows it as loading, not as a slow reply
                await self.agent.prepare(self.opened.compiled)
                self._loaded = True
            except Exception as e:
                self._load_error = e
                self._load_retry = asyncio.Event()
                status("Loading the agent failed: ctrl+r retries, ctrl+q quits", "error")
                self.notify(f"{type(e).__name__}: {e}", title="Agent failed to load", severity="error", timeout=20)
                await self._load_retry.wait()
                self._load_error = self._load_retry = None
        return self.agent

    def _build_agent(self) -> None:
        if self.agent is None:
            from ..episode.agents import make_agent

            cfg = self.cfg
            self.agent = make_agent(cfg.agent, api_base=cfg.api_base, temperature=cfg.temperature,
                                    max_new_tokens=cfg.max_new_tokens, max_tokens=cfg.max_tokens,
                                    timeout_s=cfg.llm_timeout_s, retries=cfg.retries)

    def retry_load(self) -> bool:
        if self._load_retry is not None:
            self._load_retry.set()
            return True
        return False

    async def action_quit(self) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, ChatScreen):
                await screen.close_chat()
        if isinstance(self.screen, EndScreen):
            self.screen.save()
        if self.agent is not None:
            try:
                await self.agent.close()
            except Exception:  # closing must never keep the terminal from being restored
                pass
        self.exit()


def run_chat(cfg: ChatConfig, opened: Opened) -> ChatStore:
    """Run the app in the terminal until the person quits; returns where the chats went."""
    app = ChatApp(cfg, opened)
    # not asyncio.run: it waits for the default executor, so quitting during a local model's generate
    # would hold the screen until the generation ended; this way the terminal is restored at once
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(app.run_async())
    finally:
        pending = asyncio.all_tasks(loop)
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()
    return app.chats
