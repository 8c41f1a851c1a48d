"""The chat screen: the conversation, tool calls, the database diff and the goal; the episode runs in a
Textual worker through the same engine, sandbox and reward as eval."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Footer, Header, Input

from .session import (
    GuardedAgent,
    HumanUser,
    Seat,
    db_diff,
    is_free,
    snapshot,
)
from .widgets import (
    ConversationView,
    DiffPanel,
    GoalPanel,
    StatusLine,
    ToolPanel,
)
from ..env.sandbox import new_env

if TYPE_CHECKING:
    from ..episode.user import UserSimulator
    from ..episode.types import Episode
    from ..spec.tasks import TaskSpec


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

        app = self.app
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
        self.app.show_end(ep, episode_id, self.task_spec)

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
            if msg.get("reasoning"):  # shown to the person, as the episode keeps it; the simulated user never sees it
                conv.add("thinking", msg["reasoning"])
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
