"""`muactl export verl`: the files it writes, and the agent loop driven through one episode with a fake
server manager at the model boundary (real domain, real scripted user, real tiny tokenizer). With verl
installed (tested: 0.9.1), the generated module is built the way verl's AgentLoopWorker builds it."""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from muactl.models.chatml import GENERATION_PROMPT, render
from muactl.episode.agents.oracle import OracleAgent
from muactl.cli import app
from muactl.share.verl import grpo_defaults
from muactl.share.verl_runtime import EpisodeRunner

runner = CliRunner()


def _verl_base():
    try:
        from verl.experimental.agent_loop.agent_loop import AgentLoopBase
    except Exception as e:  # ImportError, or a missing heavy dependency of verl's module
        pytest.skip(f"verl's agent loop module is not importable here ({type(e).__name__}: {e}); "
                    "install the extra: pip install 'muactl[verl]'")
    return AgentLoopBase


@pytest.fixture
def exported(project):
    out = project / "out" / "verl-clinic"
    result = runner.invoke(app, ["export", "verl", "clinic", "-o", str(out), "--grpo", "group_size=4"])
    assert result.exit_code == 0, result.output
    return out


def test_export_writes_datasets_loop_config_script_and_readme(exported, clinic):
    import pyarrow.parquet as pq

    assert {p.name for p in exported.iterdir()} >= {"train.parquet", "test.parquet", "muactl_agent_loop.py",
                                                   "agent_loop.yaml", "launch.sh", "README.md", "tools.json", "domain"}
    for split in ("train", "test"):
        rows = pq.read_table(exported / f"{split}.parquet").to_pylist()
        want = [t for t in clinic.tasks if t.split == split]
        assert [r["extra_info"]["task_id"] for r in rows] == [t.task.id for t in want]
        for r, t in zip(rows, want):
            assert r["agent_name"] == "muactl_clinic"
            assert r["prompt"][0] == {"role": "system", "content": clinic.compiled.system_prompt}
            assert json.loads(r["extra_info"]["task"])["user"]["reason"] == t.task.user.reason
    (entry,) = yaml.safe_load((exported / "agent_loop.yaml").read_text())
    assert entry["name"] == "muactl_clinic" and entry["_target_"] == "muactl_agent_loop.MuactlAgentLoop"
    grpo = grpo_defaults()
    assert (entry["max_turns"], entry["max_new_tokens"]) == (grpo["max_turns"], grpo["max_new_tokens"])
    assert (entry["max_tool_errors"], entry["timeout_s"], entry["request_timeout_s"]) == (4, 600.0, 60.0)
    script = (exported / "launch.sh").read_text()
    subprocess.run(["bash", "-n", str(exported / "launch.sh")], check=True)
    for line in ["ray job submit", "verl.trainer.main_ppo", "algorithm.adv_estimator=grpo",
                 "actor_rollout_ref.rollout.n=4",  # the --grpo override
                 f"data.train_batch_size={grpo['tasks_per_step']}", f"actor_rollout_ref.actor.optim.lr={grpo['lr']}",
                 f"actor_rollout_ref.actor.clip_ratio={grpo['epsilon']}",
                 f"actor_rollout_ref.actor.use_kl_loss={'true' if grpo['beta'] > 0 else 'false'}",
                 f"actor_rollout_ref.actor.kl_loss_coef={grpo['beta']}",
                 "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",  # grpo.loss_type=grpo
                 f"trainer.total_training_steps={grpo['steps']}",
                 "actor_rollout_ref.rollout.agent.agent_loop_config_path=agent_loop.yaml"]:
        assert line in script, line
    assert (exported / "domain" / "domain.yaml").is_file() and (exported / "domain" / "tasks" / "train.yaml").is_file()
    assert "response_mask" in (exported / "README.md").read_text()


def test_export_refuses_what_it_cannot_mirror(project, exported):
    again = runner.invoke(app, ["export", "verl", "clinic", "-o", str(exported)])
    assert again.exit_code == 2 and "--force" in again.output
    userrl = runner.invoke(app, ["export", "verl", "clinic", "-o", str(project / "x"), "--grpo", "reward=userrl"])
    assert userrl.exit_code == 2 and "binary" in userrl.output
    unknown = runner.invoke(app, ["export", "verl", "clinic", "-o", str(project / "y"), "--grpo", "groupsize=3"])
    assert unknown.exit_code == 2 and "unknown grpo setting" in unknown.output
    typed = runner.invoke(app, ["export", "verl", "clinic", "-o", str(project / "z"), "--grpo", "group_size=abc"])
    assert typed.exit_code == 2 and "grpo.group_size" in typed.output and "Traceback" not in typed.output


# ---------------------------------------------------------------- one episode through the loop


class FakeServerManager:
    """verl's server manager at the model boundary: answers each generate call with the oracle's next
    turn, as token ids of the real tokenizer, with made-up logprobs."""

    def __init__(self, tok, turns: list[str]):
        self.tok, self.turns, self.calls = tok, list(turns), []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append({"request_id": request_id, "prompt_ids": list(prompt_ids), "sampling_params": dict(sampling_params)})
        ids = self.tok.encode(self.turns.pop(0), add_special_tokens=False)
        return SimpleNamespace(token_ids=ids, log_probs=[-0.5] * len(ids), num_preempted=None, extra_fields={},
                               routed_experts=None, stop_reason="completed")


def oracle_turns(task, compiled) -> list[str]:
    # the user said yes to every proposed change
    agent, ctx = OracleAgent(), SimpleNamespace(state={}, task=task, domain=compiled,
                                                messages=[{"role": "user", "content": "Yes, go ahead."}])
    out = []
    for _ in range(len(task.task.expect.actions) * 2 + 3):
        reply = asyncio.run(agent.act(ctx))
        msg = {"role": "assistant", "content": reply.content, "tool_calls": reply.tool_calls}
        out.append(render([msg])[len(GENERATION_PROMPT):-1])  # the turn's body with its <|im_end|>
    return out


@pytest.fixture
def tok(clinic):
    from muactl.models.folder import load_tokenizer
    from muactl.models.tiny import tiny_path

    return load_tokenizer(tiny_path(clinic.compiled))


def _check(result, fake, tok, turns_used: int):
    assert result.reward == 1.0 and result.termination == "user_stop"
    mask, ids = result.response_mask, result.response_ids
    assert len(mask) == len(ids) == len(result.response_logprobs)
    sampled = [i for i, m in zip(ids, mask) if m == 1]
    generated = [t for c in range(turns_used) for t in tok.encode(fake.script[c], add_special_tokens=False)]
    assert sampled == generated  # mask 1 exactly on what the server returned, never re-tokenized
    hidden = tok.decode([i for i, m in zip(ids, mask) if m == 0])
    assert "<tool_response>" in hidden and "5550101" in hidden  # tool results and the user's words: mask 0
    assert all(lp == -0.5 for lp, m in zip(result.response_logprobs, mask) if m == 1)
    # each generate call's prompt is the trajectory so far: the conversation grows by appending ids
    full = result.prompt_ids + ids
    for call in fake.calls:
        assert full[: len(call["prompt_ids"])] == call["prompt_ids"]
    assert len({c["request_id"] for c in fake.calls}) == 1


def _fake(tok, task, compiled):
    turns = oracle_turns(task, compiled)
    fake = FakeServerManager(tok, turns)
    fake.script = list(turns)
    return fake


def test_runtime_plays_one_episode_with_masks_and_reward(project, clinic, tok):
    task = clinic.task("cancel-next-appointment")
    fake = _fake(tok, task, clinic.compiled)
    er = EpisodeRunner(project / "domains" / "clinic", max_new_tokens=200)
    result = asyncio.run(er.run(task.task.id, fake, tok, {"temperature": 1.0, "top_p": 1.0, "logprobs": True},
                                response_length=4096))
    _check(result, fake, tok, len(fake.calls))
    assert all(c["sampling_params"]["max_tokens"] <= 200 for c in fake.calls)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert all(eos in c["sampling_params"]["stop_token_ids"] for c in fake.calls)


def test_runtime_cuts_an_episode_past_the_response_budget(project, clinic, tok):
    task = clinic.task("cancel-next-appointment")
    fake = _fake(tok, task, clinic.compiled)
    er = EpisodeRunner(project / "domains" / "clinic", max_new_tokens=200)
    result = asyncio.run(er.run(task.task.id, fake, tok, {"temperature": 1.0}, response_length=120))
    assert result.termination == "agent_error" and result.reward == 0.0
    assert len(result.response_ids) <= 120


def test_runtime_masks_an_episode_still_excluded_after_its_replays(project, clinic, tok):
    """The LLM user (a real HTTP server on 127.0.0.1; only the model is fake) answers the opening, then
    fails with 503 in every play: infra_error, played again, then sent back with an all-zero mask."""
    from muactl.share.verl_runtime import EXCLUDED_REPLAYS
    from tests.fakes.openai_server import FakeOpenAI, Reply

    def flaky_user(body):
        said = [m for m in body["messages"][1:] if m["role"] == "assistant"]
        return Reply(content="I want to cancel my next appointment.") if not said else Reply(status=503)

    task = clinic.task("cancel-next-appointment")
    fake = FakeServerManager(tok, oracle_turns(task, clinic.compiled) * (EXCLUDED_REPLAYS + 1))
    with FakeOpenAI(flaky_user) as server:
        er = EpisodeRunner(project / "domains" / "clinic", user="openai/fake", user_api_base=server.base,
                           max_new_tokens=200, retries=0)
        result = asyncio.run(er.run(task.task.id, fake, tok, {"temperature": 1.0}, response_length=4096))
        user_requests = len(server.requests)
    assert result.termination == "infra_error" and result.excluded and result.reward == 0.0
    assert user_requests == 2 * (EXCLUDED_REPLAYS + 1)  # each play: the opening, then the failing turn
    assert len({c["request_id"] for c in fake.calls}) == EXCLUDED_REPLAYS + 1  # a fresh episode each time
    assert result.response_ids and len(result.response_mask) == len(result.response_ids)
    assert set(result.response_mask) == {0}  # nothing of it reaches verl's policy loss


def test_generated_module_subclasses_verl_base_and_runs_one_episode(exported, clinic, tok, monkeypatch):
    base = _verl_base()
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopOutput,
        DictConfigWrap,
        ToolListWrap,
    )

    monkeypatch.syspath_prepend(str(exported))
    sys.modules.pop("muactl_agent_loop", None)
    module = importlib.import_module("muactl_agent_loop")
    assert issubclass(module.MuactlAgentLoop, base)
    (entry,) = OmegaConf.load(exported / "agent_loop.yaml")
    task = clinic.task("cancel-next-appointment")
    fake = _fake(tok, task, clinic.compiled)
    trainer = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 4096}}})
    loop = hydra.utils.instantiate(entry, trainer_config=DictConfigWrap(trainer), server_manager=fake, tokenizer=tok,
                                   processor=None, hf_model_type=None, dataset_cls=None,
                                   data_config=DictConfigWrap(OmegaConf.create({})), tools=ToolListWrap([]))
    assert isinstance(loop, module.MuactlAgentLoop)
    kwargs = {"raw_prompt": [{"role": "system", "content": "x"}], "extra_info": {"task_id": task.task.id, "index": 0},
              "agent_name": "muactl_clinic", "index": 0, "tools_kwargs": {}}
    out = asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}, **kwargs))
    assert isinstance(out, AgentLoopOutput) and out.reward_score == 1.0
    assert out.extra_fields["muactl_termination"] == "user_stop"
    assert len(out.response_mask) == len(out.response_ids) and 0 in out.response_mask and 1 in out.response_mask
    tensors = out.as_dict()  # what verl's worker turns it into
    assert tensors["rm_scores"][-1] == 1.0 and tensors["response_mask"].sum() == sum(out.response_mask)


# ---------------------------------------------------------------- the oldest verl the README names (0.8.0)


def _verl_080(monkeypatch):
    """verl is not installed here (it needs CUDA's stack): a stand-in for verl 0.8.0's agent_loop module
    with exactly what its AgentLoopBase gives a subclass (read from the 0.8.0 wheel): config,
    rollout_config, server_manager, tokenizer, processor, dataset_cls, data_config; no
    _cap_text_prompt_length, which came later. The output models carry 0.8.0's fields."""
    import types

    from pydantic import BaseModel, ConfigDict

    class AgentLoopMetrics(BaseModel):
        model_config = ConfigDict(extra="forbid")
        generate_sequences: float = 0.0
        tool_calls: float = 0.0
        compute_score: float = 0.0
        num_preempted: int = -1

    class AgentLoopOutput(BaseModel):
        model_config = ConfigDict(extra="forbid")
        prompt_ids: list[int]
        response_ids: list[int]
        response_mask: list[int]
        response_logprobs: list[float] | None = None
        routed_experts: object = None
        multi_modal_data: dict | None = None
        reward_score: float | None = None
        num_turns: int = 0
        metrics: AgentLoopMetrics
        extra_fields: dict = {}

    class DictConfigWrap:
        def __init__(self, config):
            self.config = config

    class AgentLoopBase:
        def __init__(self, trainer_config, server_manager, tokenizer, processor, dataset_cls, data_config, **kwargs):
            self.config = trainer_config.config
            self.rollout_config = self.config.actor_rollout_ref.rollout
            self.server_manager, self.tokenizer, self.processor = server_manager, tokenizer, processor
            self.dataset_cls, self.data_config = dataset_cls, data_config.config

    mod = types.ModuleType("verl.experimental.agent_loop.agent_loop")
    mod.AgentLoopBase, mod.AgentLoopOutput, mod.AgentLoopMetrics, mod.DictConfigWrap = \
        AgentLoopBase, AgentLoopOutput, AgentLoopMetrics, DictConfigWrap
    for name in ("verl", "verl.experimental", "verl.experimental.agent_loop"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    return mod


def test_generated_module_runs_on_verl_080_with_its_own_seed_per_rollout(exported, clinic, tok, monkeypatch):
    import hydra
    from omegaconf import OmegaConf

    verl = _verl_080(monkeypatch)
    monkeypatch.syspath_prepend(str(exported))
    sys.modules.pop("muactl_agent_loop", None)
    module = importlib.import_module("muactl_agent_loop")
    assert issubclass(module.MuactlAgentLoop, verl.AgentLoopBase)
    (entry,) = OmegaConf.load(exported / "agent_loop.yaml")
    task = clinic.task("cancel-next-appointment")
    kwargs = {"raw_prompt": [], "extra_info": {"task_id": task.task.id, "index": 0}, "agent_name": "muactl_clinic",
              "index": 0}
    outs = []
    for prompt_length in (4096, 4096, 16):  # the last prompt does not fit: cut from the left, as verl does
        fake = _fake(tok, task, clinic.compiled)
        trainer = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": prompt_length,
                                                                      "response_length": 4096}}})
        loop = hydra.utils.instantiate(entry, trainer_config=verl.DictConfigWrap(trainer), server_manager=fake,
                                       tokenizer=tok, processor=None, dataset_cls=None,
                                       data_config=verl.DictConfigWrap(OmegaConf.create({})))
        out = asyncio.run(loop.run({"temperature": 1.0, "logprobs": True}, **kwargs))
        assert isinstance(out, verl.AgentLoopOutput) and out.reward_score == 1.0
        assert (loop.runner.max_tool_errors, loop.runner.timeout_s, loop.runner.llm["timeout_s"]) == (4, 600.0, 60.0)
        outs.append((out, fake))
    full, _ = outs[0]
    assert full.prompt_ids == outs[1][0].prompt_ids and len(full.prompt_ids) > 16
    assert outs[2][0].prompt_ids == full.prompt_ids[-16:]
    # the rows of a group share extra_info.index; every rollout still gets its own seed
    seeds = [o.extra_fields["muactl_seed"] for o, _ in outs]
    assert len(set(seeds)) == len(seeds)


def test_verl_extra_names_what_verls_agent_loop_imports_undeclared():
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    names = {Requirement(r).name for r in project["optional-dependencies"]["verl"]}
    # verl 0.8.0 and 0.9.1: verl.workers.rollout.llm_server imports cachetools, rollout.utils fastapi;
    # verl's own requirements list neither
    assert {"verl", "ray", "tensordict", "cachetools", "fastapi"} <= names


def test_export_names_a_local_user_model_by_its_absolute_path(project):
    """Issue 30: a trained user (`--user hf:runs/<id>/checkpoint-final`) in the rollout. ray runs the loop from the
    export's folder, so a relative path would name nothing there; before the fix it was written as given, and a
    missing folder was only found by the first rollout on the cluster."""
    import shutil

    from muactl.domain.open import open_domain
    from muactl.models.registry import resolve

    ckpt = project / "runs" / "u" / "checkpoint-final"
    shutil.copytree(resolve("tiny", open_domain("clinic", with_tasks=False).compiled), ckpt)
    out = project / "out" / "v"
    r = runner.invoke(app, ["export", "verl", "clinic", "-o", str(out), "--user", "hf:runs/u/checkpoint-final"])
    assert r.exit_code == 0, r.output
    (entry,) = yaml.safe_load((out / "agent_loop.yaml").read_text())
    assert entry["user"] == f"hf:{ckpt.resolve()}"
    r = runner.invoke(app, ["export", "verl", "clinic", "-o", str(project / "out" / "w"), "--user", "hf:runs/none/checkpoint-final"])
    assert r.exit_code == 2 and "--user hf:runs/none/checkpoint-final" in r.output, r.output
    assert not (project / "out" / "w").exists()
