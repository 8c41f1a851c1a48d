"""`muactl chat`: pilot-driven tests of every screen and flow, with the oracle as the agent (it follows the
gold path, asking for details and confirmations, so a person giving the task's facts and "yes" completes
it) or a fake Agent at the model boundary; SVG snapshots of the main screens (tests/__snapshots__/)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from muactl.episode.agents.base import Agent, AgentReply
from muactl.chat import ChatApp, ChatConfig
from muactl.chat.conversation import ChatScreen
from muactl.chat.ending import EndScreen
from muactl.chat.picker import PickerScreen
from muactl.chat.session import GuardedAgent, db_diff
from muactl.chat.widgets import DiffPanel, RatingBar, StatusLine, ToolPanel
from muactl.runs.store import RunStore
from muactl.env.sandbox import new_env

SIZE = (160, 45)
MIA = ["I want to move 150 from my checking to my holiday account.", "My name is Mia.", "yes"]


@pytest.fixture(autouse=True)
def _runs(tmp_path, monkeypatch):
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))



def make_app(bank, agent=None, run_id=None, **cfg) -> ChatApp:
    if isinstance(agent, str):
        return ChatApp(ChatConfig(domain="bank", agent=agent, **cfg), bank, run_id=run_id)
    return ChatApp(ChatConfig(domain="bank", **cfg), bank, agent=agent, run_id=run_id)


async def until(pilot, predicate, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for the app")
        await pilot.pause(0.02)


def your_turn(app) -> bool:
    return isinstance(app.screen, ChatScreen) and app.screen.human.waiting


async def say(pilot, text: str) -> None:
    app = pilot.app
    await until(pilot, lambda: your_turn(app))
    chat = app.screen
    sent = sum(m["role"] == "user" for m in chat.transcript)
    chat.query_one("#say").value = text
    await pilot.press("enter")
    await until(pilot, lambda: chat.episode is not None or sum(m["role"] == "user" for m in chat.transcript) > sent)


def texts(screen, selector: str) -> list[str]:
    return [str(w.render()) for w in screen.query(selector)]


def notifications(app) -> list[str]:
    return [f"{n.title}: {n.message}" for n in app._notifications]


async def play_mia(pilot) -> None:
    for text in MIA:
        await say(pilot, text)
    await until(pilot, lambda: your_turn(pilot.app))


# ---------------------------------------------------------------- screens and flows


async def test_picker_searches_and_starts_a_task(bank):
    app = make_app(bank)
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.screen, PickerScreen)
        tasks = app.screen.query_one("#tasks")
        assert tasks.option_count == len(bank.tasks) + 1  # and the free chat
        await pilot.press(*"noor savings")
        assert [tasks.get_option_at_index(i).id for i in range(tasks.option_count)] == ["move-noor"]
        await pilot.press("enter")
        await until(pilot, lambda: your_turn(app))
        assert app.screen.task_spec.task.id == "move-noor"
        goal = app.screen.query_one("#goal")
        assert not goal.display  # no --show-goal
        await pilot.press("ctrl+g")
        assert goal.display and "Noor" in str(goal.render())


async def test_chat_with_oracle_tool_calls_diff_reward_rating_note(bank):
    app = make_app(bank, task="move-mia", show_goal=True)
    async with app.run_test(size=SIZE) as pilot:
        chat = app.screen
        assert "Mia" in str(chat.query_one("#goal").render())
        await play_mia(pilot)
        tools = chat.query_one(ToolPanel)
        entries = texts(chat, "#tools .entry")
        assert tools.count == 3 and tools.errors == 0
        assert entries[0].startswith("→ find_customer") and '"Mia"' in entries[0]
        assert entries[1] == "← c84"
        assert any(e.startswith("→ transfer_funds") and '"amount": 150' in e for e in entries)
        diff = chat.query_one(DiffPanel)
        assert list(diff.diff) == ["accounts"] and len(diff.diff["accounts"].changed) == 2
        shown = str(diff.render())
        assert "accounts  +0 ~2 -0" in shown and "a778  balance 520 → 370" in shown
        assert "agent\nYour request is complete." in texts(chat, ".msg.assistant")
        await pilot.press("ctrl+e")
        await until(pilot, lambda: isinstance(app.screen, EndScreen))
        end = app.screen
        result = str(end.query_one("#result").render())
        assert "Reward 1" in result and "task done" in result and "termination   user_stop" in result
        await pilot.press("4")
        await pilot.press("tab", *"asked before moving money", "enter")
        await pilot.pause()
        store = RunStore.open(app.chats.store.id)
        [row] = store.episodes()
        assert (row["human"], row["reward"], row["rating"], row["note"]) == (1, 1.0, 4, "asked before moving money")
        assert store.info()["kind"] == "chat" and store.info()["summary"]["avg_rating"] == 4
        roles = [m["role"] for m in store.messages(row["id"])]
        assert roles.count("tool") == 3 and roles[0] == "system"
        await pilot.press("ctrl+n")
        await until(pilot, lambda: isinstance(app.screen, PickerScreen))


async def test_typing_the_stop_token_ends_the_chat(bank):
    app = make_app(bank, task="move-mia")
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "Hello, I would like to move some money.")
        await say(pilot, "Never mind. ###STOP###")
        await until(pilot, lambda: isinstance(app.screen, EndScreen))
        ep = app.screen.episode
        assert ep.termination == "user_stop" and ep.reward == 0.0 and not ep.breakdown["db_match"]
        assert app.screen.episode.messages[-1] == {"role": "user", "content": "Never mind."}


async def test_free_chat_has_no_reward(bank):
    app = make_app(bank)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"free", "enter")
        await until(pilot, lambda: your_turn(app))
        assert app.screen.free and not app.screen.query_one("#goal").display
        await say(pilot, "Hi, just looking around.")
        await until(pilot, lambda: your_turn(app))
        await pilot.press("ctrl+e")
        await until(pilot, lambda: isinstance(app.screen, EndScreen))
        assert "Reward n/a" in str(app.screen.query_one("#result").render())
        [row] = app.chats.store.episodes()
        assert row["task_id"] == "free-chat" and row["reward"] is None and row["human"] == 1


async def test_watch_take_over_and_give_back(bank):
    app = make_app(bank, task="move-mia", watch=True, pace_s=0.3)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, ChatScreen) and app.screen.seat is not None)
        chat = app.screen
        await pilot.press("ctrl+t")  # before the simulator's first message
        assert chat.seat.human_has_it
        await say(pilot, "Hi, please move 150 from checking to holiday.")
        await until(pilot, lambda: your_turn(app))  # the agent asked for details: the seat is still ours
        await pilot.press("ctrl+t")
        assert not chat.seat.human_has_it
        await until(pilot, lambda: isinstance(app.screen, EndScreen))
        ep = app.screen.episode
        assert ep.reward == 1.0 and ep.termination == "user_stop"
        users = [m["content"] for m in ep.messages if m["role"] == "user"]
        assert users[0] == "Hi, please move 150 from checking to holiday." and users[1] == "My name is Mia."
        assert len(texts(chat, ".msg.user")) == 1 and len(texts(chat, ".msg.sim")) >= 2


class FlakyAgent(Agent):
    """A model that crashes once, then writes a malformed call, then a call with bad arguments, then text."""

    name = "flaky"

    def __init__(self, hang_first: bool = False):
        self.calls = 0
        self.hang_first = hang_first

    async def act(self, ctx) -> AgentReply:
        self.calls += 1
        step = self.calls
        if self.hang_first and step == 1:
            await asyncio.sleep(3600)
        if step == 1:
            raise RuntimeError("CUDA out of memory")
        if step == 2:
            return AgentReply("let me check", error="the tool call is not valid JSON (Expecting value)")
        if step == 3:
            return AgentReply("", [{"name": "transfer_funds", "arguments": {"from_account": "a778"}}])
        return AgentReply("Sorry, I could not do that.")


async def test_failing_agent_notifies_and_retries_malformed_and_errors_marked(bank):
    app = make_app(bank, agent=FlakyAgent(), task="move-mia")
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "Move 150 please.")
        await until(pilot, lambda: app.screen.guard is not None and app.screen.guard.failed is not None)
        assert any("Agent failed" in n and "CUDA out of memory" in n for n in notifications(app))
        status = str(app.screen.query_one(StatusLine).render())
        assert "ctrl+r" in status and "RuntimeError: CUDA out of memory" in status  # the reason, not just "failed"
        assert any("the agent failed: RuntimeError: CUDA out of memory" in t for t in texts(app.screen, ".msg.note"))
        await pilot.press("ctrl+r")
        await until(pilot, lambda: your_turn(app))
        chat = app.screen
        entries = texts(chat, "#tools .entry")
        assert entries[0].startswith("⚠ malformed tool call: the tool call is not valid JSON")
        assert entries[1].startswith("→ transfer_funds")
        assert entries[2].startswith("✗ Error: invalid arguments for transfer_funds")
        assert [len(chat.query(".entry.error"))] == [2]
        assert any("malformed" in t for t in texts(chat, ".msg.note"))
        await pilot.press("ctrl+e")
        await until(pilot, lambda: isinstance(app.screen, EndScreen))
        assert app.screen.episode.tool_errors == 2


async def test_slow_agent_turn_can_be_abandoned_and_retried(bank):
    agent = FlakyAgent(hang_first=True)
    agent.calls = 0
    app = make_app(bank, agent=agent, task="move-mia", slow_s=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "Move 150 please.")
        await until(pilot, lambda: any("Slow agent" in n for n in notifications(app)))
        assert "thinking" in str(app.screen.query_one(StatusLine).render())
        await pilot.press("ctrl+r")  # abandons the hung turn; the next call is the malformed one
        await until(pilot, lambda: your_turn(app))
        assert agent.calls == 4


async def test_ending_while_the_agent_thinks_is_acknowledged_at_once(bank):
    agent = FlakyAgent(hang_first=True)
    app = make_app(bank, agent=agent, task="move-mia", slow_s=60)
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "Move 150 please.")
        await until(pilot, lambda: "thinking" in str(app.screen.query_one(StatusLine).render()))
        await pilot.press("ctrl+e")
        await pilot.pause(0.05)
        assert "Ending the chat" in str(app.screen.query_one(StatusLine).render())
        assert any("Ending the chat" in n for n in notifications(app))
        await pilot.press("ctrl+r")  # abandon the hung turn; when the next one ends, so does the chat
        await until(pilot, lambda: isinstance(app.screen, EndScreen))
        assert app.screen.episode.termination == "user_stop"


class ThinkingAgent(Agent):
    """A model that thinks before it replies (its reply parsed as a local model's is: reasoning apart)."""

    name = "thinker"

    async def act(self, ctx) -> AgentReply:
        return AgentReply("Which account should the money come from?", reasoning="The user wants a transfer; ask first.")


async def test_the_transcript_shows_the_agents_reasoning_and_the_chat_keeps_it(bank):
    app = make_app(bank, agent=ThinkingAgent(), task="move-mia")
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "Move 150 please.")
        await until(pilot, lambda: your_turn(app))
        chat = app.screen
        [thought] = texts(chat, ".msg.thinking")
        assert "not shown to the user" in thought and "ask first" in thought
        assert any("Which account" in t for t in texts(chat, ".msg.assistant"))
        await pilot.press("ctrl+e")
        await until(pilot, lambda: isinstance(app.screen, EndScreen))
    [row] = app.chats.store.episodes()
    agent = [m for m in app.chats.store.messages(row["id"]) if m["role"] == "assistant" and m["reasoning"]]
    assert [m["reasoning"] for m in agent] == ["The user wants a transfer; ask first."]


async def test_failed_turn_then_end_saves_agent_error(bank):
    app = make_app(bank, agent=FlakyAgent(), task="move-mia")
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "Move 150 please.")
        await until(pilot, lambda: app.screen.guard is not None and app.screen.guard.failed is not None)
        await pilot.press("ctrl+e")
        await until(pilot, lambda: isinstance(app.screen, EndScreen))
        assert app.screen.episode.termination == "agent_error"
        assert "CUDA out of memory" in app.screen.episode.error


async def test_agent_that_fails_to_load_can_be_retried(bank):
    app = make_app(bank, agent="hf:/no/such/checkpoint", task="move-mia")
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app._load_retry is not None)
        assert any("Agent failed to load" in n and "/no/such/checkpoint" in n for n in notifications(app))
        assert "Loading the agent failed" in str(app.screen.query_one(StatusLine).render())
        app.clear_notifications()
        await pilot.press("ctrl+r")
        await until(pilot, lambda: any("Agent failed to load" in n for n in notifications(app)))
        await pilot.press("ctrl+q")
    assert app.chats.store is None  # nothing was said: nothing saved


async def test_quitting_mid_chat_saves_it(bank):
    app = make_app(bank, task="move-mia")
    async with app.run_test(size=SIZE) as pilot:
        await say(pilot, "I want to move 150 from checking to holiday.")
        await until(pilot, lambda: your_turn(app))
        await pilot.press("ctrl+c")
        await until(pilot, lambda: app.chats.store is not None)
    [row] = app.chats.store.episodes()
    assert row["termination"] == "user_stop" and row["human"] == 1


async def test_guarded_agent_keeps_the_token_trace_clean_on_retry(bank):
    from muactl.episode.types import TokenTrace

    class Local(Agent):
        keeps_tokens = True

        def __init__(self):
            self.n = 0

        async def act(self, ctx):
            self.n += 1
            ctx.trace.add([7, 8, 9], sampled=False)  # the prompt part, then the model crashes once
            if self.n == 1:
                raise RuntimeError("boom")
            ctx.trace.add([1], sampled=True)
            return AgentReply("ok")

    ctx = type("Ctx", (), {"trace": TokenTrace(ids=[5], mask=[0], logprobs=[0.0])})()
    guard = GuardedAgent(Local(), on_failure=lambda e: asyncio.get_running_loop().call_soon(guard.retry))
    reply = await guard.act(ctx)
    assert reply.content == "ok" and ctx.trace.ids == [5, 7, 8, 9, 1] and ctx.trace.mask == [0, 0, 0, 0, 1]


def test_db_diff_added_changed_removed(bank):
    domain = bank.compiled
    env = new_env(domain)
    from muactl.chat.session import snapshot

    before = snapshot(env)
    env.call("transfer_funds", {"from_account": "a778", "to_account": "a295", "amount": 150})
    acc = next(r for r in env.rows("accounts") if r["balance"] == 0 and r["account_id"] != "a295")
    env.call("close_account", {"account_id": acc["account_id"]})
    diff = db_diff(domain, before, snapshot(env))
    assert list(diff) == ["accounts"]
    d = diff["accounts"]
    assert d.removed == [acc] and not d.added
    assert sorted((b["account_id"], b["balance"], a["balance"]) for b, a in d.changed) == [("a295", 0, 150), ("a778", 520, 370)]
    after = snapshot(env)
    after["accounts"] = after["accounts"] + [dict(acc, account_id="a999")]
    assert db_diff(domain, before, after)["accounts"].added == [dict(acc, account_id="a999")]
    env.close()


# ---------------------------------------------------------------- CLI and export


async def test_synth_from_chats_exports_good_chats(bank, tmp_path):
    from typer.testing import CliRunner

    from muactl.cli import app as cli

    app = make_app(bank, task="move-mia", run_id="chats-1")
    async with app.run_test(size=SIZE) as pilot:
        await play_mia(pilot)  # reward 1, left unrated: kept
        await pilot.press("ctrl+e")
        await until(pilot, lambda: isinstance(app.screen, EndScreen))
        await pilot.press("ctrl+n")
        await until(pilot, lambda: isinstance(app.screen, PickerScreen))
        await pilot.press(*"move-mia", "enter")
        await until(pilot, lambda: your_turn(app))
        await say(pilot, "###STOP###")  # reward 0, rated 2: dropped
        await until(pilot, lambda: isinstance(app.screen, EndScreen))
        await pilot.press("2")
        await pilot.pause()
    rows = app.chats.store.episodes()
    assert [(r["trial"], r["reward"], r["rating"]) for r in rows] == [(0, 1.0, None), (1, 0.0, 2)]
    out = tmp_path / "chats.jsonl"
    res = CliRunner().invoke(cli, ["synth", "--from-chats", "chats-1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "kept 1 of 2 chats" in res.output
    [record] = [json.loads(line) for line in out.read_text().splitlines()]
    assert record["task_id"] == "move-mia" and record["reward"] == 1.0
    assert {t["function"]["name"] for t in record["tools"]} >= {"find_customer", "transfer_funds"}
    calls = [c for m in record["messages"] for c in m.get("tool_calls", [])]
    assert calls[0] == {"type": "function", "id": calls[0]["id"],
                        "function": {"name": "find_customer", "arguments": {"name": "Mia"}}}
    answers = [m for m in record["messages"] if m["role"] == "tool"]
    assert answers[0]["tool_call_id"] == calls[0]["id"]
    res = CliRunner().invoke(cli, ["synth", "--from-chats", "chats-1", "--min-rating", "2", "-o", str(out)])
    assert "kept 2 of 2 chats" in res.output
    res = CliRunner().invoke(cli, ["synth", "--from-chats", "nope", "-o", str(out)])
    assert res.exit_code == 2 and "no run 'nope'" in res.output


def test_chat_command_errors_are_clean():
    from typer.testing import CliRunner

    from muactl.cli import app as cli

    res = CliRunner().invoke(cli, ["chat", "bank", "--task", "move-mai"])
    assert res.exit_code == 2 and "did you mean move-mia" in res.output
    res = CliRunner().invoke(cli, ["chat", "bank", "--task", "move-mia"])  # CliRunner is not a terminal
    assert res.exit_code == 2 and "interactive terminal" in res.output
    res = CliRunner().invoke(cli, ["chat", "bank", "--agent", "hf:/nonexistent"])  # before the screen opens
    assert res.exit_code == 2 and "--agent hf:/nonexistent: unknown model" in res.output


# ---------------------------------------------------------------- snapshots


async def _steady(pilot) -> None:
    """Freeze what moves on its own (cursor blink, toasts) and let pending refreshes land."""
    app = pilot.app
    for widget in app.screen.query("Input"):
        widget.cursor_blink = False
    app.clear_notifications()
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


def test_snapshot_picker(bank, snap_compare):
    async def before(pilot):
        await pilot.press(*"move")
        await pilot.pause()
        await _steady(pilot)

    assert snap_compare(make_app(bank), terminal_size=SIZE, run_before=before)


def test_snapshot_chat_with_tools_and_diff(bank, snap_compare):
    async def before(pilot):
        await play_mia(pilot)
        await _steady(pilot)
        await pilot.pause()

    assert snap_compare(make_app(bank, task="move-mia", show_goal=True), terminal_size=SIZE, run_before=before)


def test_snapshot_end_screen(bank, snap_compare):
    async def before(pilot):
        await play_mia(pilot)
        await pilot.press("ctrl+e")
        await until(pilot, lambda: isinstance(pilot.app.screen, EndScreen))
        await pilot.press("5")
        await _steady(pilot)
        await pilot.pause()
        assert pilot.app.screen.query_one(RatingBar).rating == 5

    app = make_app(bank, task="move-mia", show_goal=True, run_id="chat-snapshot")
    assert snap_compare(app, terminal_size=SIZE, run_before=before)
