"""Episode limits and API-call settings (max_tokens, request timeout, retries, backoff, episode timeout,
max tool errors): declared once as EvalConfig fields, reaching `muactl eval`/`synth` options and the
train config's eval, synth and grpo stages (tests/test_options.py checks that every field reaches both).
API paths run against the real local OpenAI-compatible server (tests/fakes/openai_server.py); only the
model behind it is fake."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from muactl.cli import app
from muactl.eval.config import EvalConfig
from muactl.options import recipe_key
from muactl.train.recipes import compose
from tests.fakes.openai_server import FakeOpenAI, Reply

runner = CliRunner()
WIDE = {"COLUMNS": "250"}


@pytest.fixture(autouse=True)
def runs_root(in_tmp) -> Path:
    return in_tmp / "runs"  # conftest's in_tmp: a private cwd and runs folder


def test_every_eval_config_field_reaches_the_train_config():
    from muactl.train.pipeline import eval_config

    values = {"eval.split": "train", "eval.n": 7, "eval.db": "random", "eval.trials": 3, "eval.concurrency": 5,
              "seed": 11, "eval.max_turns": 9, "trust": True, "episode.max_tool_errors": 2, "episode.timeout_s": 77.0,
              "episode.opening": "user", "user.api_base": "http://127.0.0.1:9/v1", "model.temperature": 0.5,
              "user.temperature": 0.25, "model.max_new_tokens": 33, "synth.tool_model": "openai/x",
              "api.retries": 1, "api.timeout_s": 300.0, "api.backoff_s": 0.5, "api.max_tokens": 64, "domain": "retail"}
    cfg = compose(None, ["user=openai/gpt-x", "eval.tasks=[a,b]"] + [f"{k}={v}" for k, v in values.items()])
    ecfg = eval_config(cfg, "runs/x/checkpoint-final")
    for f in fields(EvalConfig):  # each field's recipe key (muactl/options.py) is where the stage reads it
        if recipe_key(f) in values:
            assert getattr(ecfg, f.name) == values[recipe_key(f)], (f.name, recipe_key(f))
    assert (ecfg.agent, ecfg.user, ecfg.tasks) == ("hf:runs/x/checkpoint-final", "openai/gpt-x", ["a", "b"])


def test_synth_and_grpo_stages_take_the_same_settings(tmp_path):
    from muactl.episode.user import LiteLLMUser
    from muactl.train.pipeline import synth_config
    from muactl.train.grpo import rollout_config, user_factory

    cfg = compose(None, ["user=openai/gpt-x", "api.timeout_s=300", "api.max_tokens=64", "api.retries=1",
                         "episode.max_tool_errors=2", "episode.timeout_s=900", "synth.api_base=http://127.0.0.1:9/v1"])
    s = synth_config(cfg, tmp_path / "sft.jsonl")
    assert (s.llm_timeout_s, s.max_tokens, s.retries, s.max_tool_errors, s.timeout_s, s.api_base) == \
        (300.0, 64, 1, 2, 900.0, "http://127.0.0.1:9/v1")
    r = rollout_config(cfg, seed=5)  # GRPO no longer runs on the engine's defaults
    assert (r.max_tool_errors, r.timeout_s, r.max_turns) == (2, 900.0, cfg.grpo.max_turns)
    user = user_factory(cfg)()
    assert isinstance(user, LiteLLMUser)
    assert (user.cfg.timeout_s, user.cfg.max_tokens, user.cfg.retries) == (300.0, 64, 1)


def _scripted_like_user(body):
    """A polite LLM user (fake model): states the goal, says yes, gives its facts, stops when told done."""
    system = body["messages"][0]["content"]
    goal = re.search(r"# Your goal\n(.*?)(\n\n#|\Z)", system, re.S).group(1)
    known = re.search(r"# What you know\n(.*?)(\n\n#|\Z)", system, re.S)
    history = body["messages"][1:]
    last = history[-1]["content"] if history else ""
    if not any(m["role"] == "assistant" for m in history):
        return Reply(content=goal.strip())
    if "complete" in last:
        return Reply(content="Thanks. ###STOP###")
    if "(yes/no)" in last:
        return Reply(content="Yes, go ahead.")
    return Reply(content=known.group(1).strip() if known else "I don't know.")


def test_cli_knobs_reach_the_api_calls(runs_root):
    with FakeOpenAI(_scripted_like_user) as server:
        r = runner.invoke(app, ["eval", "bank", "--task", "move-quin", "--user", "openai/fake-user", "--user-api-base",
                                server.base, "--max-tokens", "77", "--request-timeout", "30", "--retries", "0"], env=WIDE)
        assert r.exit_code == 0, r.output
        assert server.requests and {b["max_tokens"] for b in server.requests} == {77}
    [run] = list(runs_root.iterdir())
    saved = json.loads((run / "summary.json").read_text())
    assert saved["pass^1"] == 1.0


def test_a_slow_server_needs_the_request_timeout_and_the_retries_are_counted(runs_root):
    def slow(body):
        return Reply(content="Hello, I need help.", delay=1.5)

    with FakeOpenAI(slow) as server:
        r = runner.invoke(app, ["eval", "bank", "--task", "move-quin", "--user", "openai/slow", "--user-api-base",
                                server.base, "--request-timeout", "1", "--retries", "1", "--backoff", "0"], env=WIDE)
        assert r.exit_code == 4, r.output  # its only episode is an infra_error: nothing could be scored
        assert len(server.requests) == 2  # the first try and one retry, each cut after 1 s
    [run] = list(runs_root.iterdir())
    assert json.loads((run / "summary.json").read_text())["terminations"] == {"infra_error": 1}


def test_episode_timeout_and_max_tool_errors_from_the_cli(runs_root):
    def slow_user(body):
        return Reply(content="Hello, I need to move money.", delay=0.4)

    with FakeOpenAI(slow_user) as server:
        r = runner.invoke(app, ["eval", "bank", "--task", "move-quin", "--user", "openai/slow", "--user-api-base",
                                server.base, "--episode-timeout", "1"], env=WIDE)
    assert r.exit_code == 0, r.output
    runs = sorted(runs_root.iterdir())
    assert json.loads((runs[-1] / "summary.json").read_text())["terminations"] == {"timeout": 1}
    r = runner.invoke(app, ["eval", "bank", "--task", "move-quin", "--max-tool-errors", "0", "--episode-timeout", "30"],
                      env=WIDE)
    assert r.exit_code == 0, r.output
    config = yaml.safe_load((sorted(runs_root.iterdir())[-1] / "config.yaml").read_text())
    assert (config["max_tool_errors"], config["timeout_s"]) == (0, 30.0)
