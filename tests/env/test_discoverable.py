"""Discoverable tools (a tool's `discoverable: true`, `builtin: unlock`, `builtin: call_unlocked`): hidden from
the agent's tool list, unlocked by name, then called by name with JSON-text arguments, as τ²-bench
banking_knowledge's agent tools. Real SQLite, a real domain, the real oracle and eval."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muactl.domain.validate import validate_domain
from muactl.env.sandbox import new_env
from muactl.errors import SpecError

DOMAIN = """\
name: bank
description: A bank whose special tools are found in its documents.
policy: Unlock a tool before you call it.
database:
  tables:
    accounts:
      columns: {account_id: text, balance: real, frozen: boolean}
      primary_key: account_id
  seed:
    accounts:
      - {account_id: a1, balance: 10.0, frozen: false}
tools:
  get_account:
    description: One account.
    params:
      account_id: {type: string}
    query: SELECT * FROM accounts WHERE account_id = :account_id
    returns: row
  freeze_account_4821:
    description: Freeze an account.
    discoverable: true
    params:
      account_id: {type: string, description: The account to freeze.}
    checks:
      - query: SELECT count(*) = 1 FROM accounts WHERE account_id = :account_id
        error: Account {account_id} not found
    writes:
      - UPDATE accounts SET frozen = 1 WHERE account_id = :account_id
    message: Account {account_id} frozen.
  unlock_discoverable_agent_tool: {builtin: unlock}
  call_discoverable_agent_tool: {builtin: call_unlocked}
spec_version: 2
"""

TASKS = """\
- id: freeze
  user: {reason: freeze account a1}
  expect:
    actions:
      - unlock_discoverable_agent_tool: {agent_tool_name: freeze_account_4821}
      - call_discoverable_agent_tool: {agent_tool_name: freeze_account_4821, arguments: '{"account_id": "a1"}'}
"""


def write(root: Path, domain: str = DOMAIN) -> None:
    for sub, name, text in (("domains", "domain.yaml", domain), ("tasks", "test.yaml", TASKS)):
        (root / sub / "bank").mkdir(parents=True, exist_ok=True)
        (root / sub / "bank" / name).write_text(text)


@pytest.fixture
def opened(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path)
    return validate_domain("bank")  # the gold path replays: unlock, then the call by name


def test_a_discoverable_tool_is_not_listed_and_not_callable_by_its_own_name(opened):
    names = [t.name for t in opened.compiled.agent_tools()]
    assert names == ["get_account", "unlock_discoverable_agent_tool", "call_discoverable_agent_tool"]
    env = new_env(opened.compiled)
    try:
        r = env.call("freeze_account_4821", {"account_id": "a1"})
        assert r.error and "unknown tool" in r.content and "freeze_account_4821" not in r.content.split("Available")[1]
    finally:
        env.close()


def test_it_is_unlocked_then_called_by_name_with_its_own_argument_checks(opened):
    env = new_env(opened.compiled)
    call = 'call_discoverable_agent_tool'
    try:
        before = env.state_hash()
        r = env.call(call, {"agent_tool_name": "freeze_account_4821", "arguments": '{"account_id": "a1"}'})
        assert r.error and "has not been unlocked" in r.content
        r = env.call("unlock_discoverable_agent_tool", {"agent_tool_name": "freeze_account_4821"})
        assert not r.error and r.content.startswith("Tool unlocked: freeze_account_4821\nDescription: Freeze an account.")
        assert json.loads(r.content.split("Parameters: ", 1)[1])["properties"]["account_id"]["type"] == "string"
        assert env.state_hash() == before  # unlocking is the episode's, not the database's
        assert env.call(call, {"agent_tool_name": "freeze_account_4821", "arguments": "{"}).content.startswith(
            "Error: Invalid JSON in arguments")
        r = env.call(call, {"agent_tool_name": "freeze_account_4821", "arguments": '{"account": "a1"}'})
        assert r.error and "invalid arguments for freeze_account_4821" in r.content  # its own params
        assert env.call(call, {"agent_tool_name": "freeze_account_4821", "arguments": '{"account_id": "zz"}'}
                        ).content == "Error: Account zz not found"
        r = env.call(call, {"agent_tool_name": "freeze_account_4821", "arguments": '{"account_id": "a1"}'})
        assert r.content == "Account a1 frozen." and env.state_hash() != before
        fork = env.fork()  # a fork keeps what was unlocked; a fresh sandbox does not
        assert not fork.call(call, {"agent_tool_name": "freeze_account_4821", "arguments": '{"account_id": "a1"}'}).error
        fork.close()
        for name in ("get_account", "nothing"):  # only discoverable tools are unlocked
            assert env.call("unlock_discoverable_agent_tool", {"agent_tool_name": name}).content == (
                f"Error: Unknown agent tool '{name}'. This tool is not available.")
    finally:
        env.close()
    fresh = new_env(opened.compiled)
    try:
        assert "has not been unlocked" in fresh.call(call, {"agent_tool_name": "freeze_account_4821",
                                                            "arguments": '{"account_id": "a1"}'}).content
    finally:
        fresh.close()


def test_the_oracle_plays_the_gold_path_and_is_paid(opened):
    from muactl.eval.config import EvalConfig
    from muactl.eval.evaluate import run_eval

    _, summary = run_eval(EvalConfig(domain="bank", split="all"), opened=opened)
    assert summary["avg_reward"] == 1.0


@pytest.mark.parametrize("added, message", [
    ("    side: user\n", "only an agent tool can be discoverable"),
    ("  guess_rate:\n    description: A rate.\n    simulated: Make one up.\n    discoverable: true\n",
     "a simulated tool cannot be discoverable"),
])
def test_only_an_agent_database_tool_is_discoverable(tmp_path, monkeypatch, added, message):
    monkeypatch.chdir(tmp_path)
    if added.startswith("    side"):
        write(tmp_path, DOMAIN.replace("    discoverable: true\n", "    discoverable: true\n" + added))
    else:
        write(tmp_path, DOMAIN.replace("  unlock_discoverable_agent_tool:", added + "  unlock_discoverable_agent_tool:"))
    with pytest.raises(SpecError, match=message):
        validate_domain("bank")
