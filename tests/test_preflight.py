"""Fail fast: what would fail every episode the same way is a user error (exit 2) before any episode runs
and before a run folder is made. The server for --api-base is a real local HTTP server (the model is fake)."""

from __future__ import annotations

import socket

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from tests.fakes.openai_server import FakeOpenAI, Reply

runner = CliRunner()


@pytest.fixture(autouse=True)
def no_keys(tmp_path, monkeypatch):
    for key in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "HOSTED_VLLM_API_BASE"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def _eval(*args: str):
    return runner.invoke(app, ["eval", "bank", "--task", "move-quin", *args])


def _no_run_written(tmp_path) -> bool:
    return not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_missing_api_key_names_the_variable(no_keys):
    r = _eval("--agent", "openai/gpt-4o-mini")
    assert r.exit_code == 2 and "--agent openai/gpt-4o-mini: OPENAI_API_KEY is not set" in r.output, r.output
    r = _eval("--user", "anthropic/claude-3-5-haiku-latest")
    assert r.exit_code == 2 and "--user anthropic/claude-3-5-haiku-latest: ANTHROPIC_API_KEY" in r.output, r.output
    assert _no_run_written(no_keys)


def test_api_base_that_does_not_answer(no_keys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = _eval("--agent", "hosted_vllm/my-ckpt", "--api-base", f"http://127.0.0.1:{port}/v1")
    assert r.exit_code == 2 and f"nothing answers at --api-base http://127.0.0.1:{port}/v1" in r.output, r.output
    r = _eval("--agent", "hosted_vllm/my-ckpt")
    assert r.exit_code == 2 and "needs the server's address: pass --api-base" in r.output
    assert _no_run_written(no_keys)


def test_api_base_that_answers_runs_episodes_without_a_key(no_keys):
    with FakeOpenAI(lambda body: Reply(content="Goodbye. ###STOP###")) as server:
        r = _eval("--agent", "hosted_vllm/fake", "--api-base", server.base, "--max-turns", "2")
    assert r.exit_code == 0, r.output
    assert not _no_run_written(no_keys)


def test_local_model_path_that_does_not_exist(no_keys):
    r = _eval("--agent", "hf:/nonexistent")
    assert r.exit_code == 2 and "--agent hf:/nonexistent" in r.output and "unknown model '/nonexistent'" in r.output, r.output
    r = _eval("--agent", "hf:runs/none/checkpoint-final")
    assert r.exit_code == 2 and "checkpoint-final" in r.output
    (no_keys / "empty").mkdir()
    r = _eval("--agent", f"hf:{no_keys / 'empty'}")
    assert r.exit_code == 2 and "no config.json" in r.output
    (no_keys / "empty" / "config.json").write_text("{}")
    r = _eval("--agent", f"hf:{no_keys / 'empty'}")
    assert r.exit_code == 2 and "is not a complete model checkpoint (no weights and no tokenizer file)" in r.output, r.output
    assert _no_run_written(no_keys)


def test_synth_checks_its_teacher_too(no_keys):
    r = runner.invoke(app, ["synth", "bank", "--agent", "openai/gpt-4o", "--tasks", "move-quin", "-o", "d.jsonl"])
    assert r.exit_code == 2 and "OPENAI_API_KEY" in r.output
    assert not (no_keys / "d.jsonl").exists()


def test_training_with_an_llm_user_checks_it_before_the_run_folder(no_keys):
    r = runner.invoke(app, ["train", "grpo", "domain=bank", "user=openai/gpt-4o-mini", "grpo.steps=1"])
    assert r.exit_code == 2 and "user.model openai/gpt-4o-mini: OPENAI_API_KEY is not set" in r.output, r.output
    cfg = no_keys / "exp.yaml"
    cfg.write_text("domain: bank\nstages: [synth]\nsynth: {agent: anthropic/claude-3-5-haiku-latest}\n")
    r = runner.invoke(app, ["train", str(cfg)])
    assert r.exit_code == 2 and "synth.agent anthropic/claude-3-5-haiku-latest: ANTHROPIC_API_KEY" in r.output, r.output
    assert _no_run_written(no_keys)


def test_an_adversary_agent_runs_from_the_cli_without_a_provider(no_keys):
    """`muactl eval bank --agent adversary:do-nothing` (README) is built in, like the oracle: no litellm
    provider check; it plays every test task and is paid for none (the reward audit's bound)."""
    import json

    r = runner.invoke(app, ["eval", "bank", "--agent", "adversary:do-nothing"])
    assert r.exit_code == 0, r.output
    assert "litellm" not in r.output
    run, = (no_keys / "runs").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["episodes"] == summary["counted"] == 20 and summary["pass^1"] == 0.0, summary
    table = runner.invoke(app, ["runs", "show", run.name], env={"COLUMNS": "250"}).output
    n = next(cells[1] for line in table.splitlines()
             if len(cells := [c.strip() for c in line.split("│")]) > 3 and cells[2] == "refuse-overdraft-ned"
             and cells[1].isdigit())  # the episodes table: #, task, trial, ...
    shown = runner.invoke(app, ["runs", "show", run.name, "--episode", n], env={"COLUMNS": "250"})
    assert shown.exit_code == 0 and "refuse-overdraft-ned" in shown.output, shown.output
    assert "required_calls={'find_customer(name=Ned)': False, 'list_accounts(customer_id=c52)': False}" in shown.output
    r = _eval("--agent", "adversary:sleeper")
    assert r.exit_code == 2 and "unknown adversary 'sleeper' (one of: do-nothing" in r.output, r.output
    assert len(list((no_keys / "runs").iterdir())) == 1  # the bad name wrote no run folder
