"""`muactl chat`: a person plays the user against a checkpoint, in the terminal.

Screens: a task picker (or free chat), the chat (conversation, tool calls, database diff, goal), and the
end of a chat (reward, breakdown, rating, note). The episode runs in a Textual worker through the same
engine, sandbox and reward as eval; the model is built and loaded in a worker too, so the screen keeps
answering keys while a model loads or generates.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Callable

from textual.app import App
from textual.binding import Binding

from .conversation import ChatScreen
from .ending import EndScreen
from .picker import PickerScreen
from .session import ChatConfig, ChatStore

if TYPE_CHECKING:
    from ..domain.open import Opened
    from ..episode.agents.base import Agent
    from ..episode.types import Episode
    from ..episode.user import UserSimulator
    from ..spec.tasks import TaskSpec


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

    def start_chat(self, task: TaskSpec) -> None:
        """The picker's choice: a chat on that task replaces the picker."""
        self.switch_screen(ChatScreen(task))

    def show_end(self, episode: Episode, episode_id: int, task: TaskSpec) -> None:
        self.push_screen(EndScreen(episode, episode_id, task))

    def show_picker(self) -> None:
        """After a chat's end screen: back to choosing a task."""
        self.switch_screen(PickerScreen())

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
                                    max_new_tokens=cfg.max_new_tokens, max_tokens=cfg.max_tokens, thinking=cfg.thinking,
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
