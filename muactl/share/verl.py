"""`muactl export verl DOMAIN -o DIR`: everything verl (0.8+) needs to train on a muactl domain on a Ray cluster.

verl 0.8 removed `verl/interactions`; multi-turn RL runs through agent loops: an `AgentLoopBase`
subclass registered by `actor_rollout_ref.rollout.agent.agent_loop_config_path`, chosen per dataset row
by its `agent_name`. The export writes:

    DIR/train.parquet, DIR/test.parquet   one row per task (prompt, agent_name, the task's data)
    DIR/muactl_agent_loop.py               the agent loop: muactl's episode engine inside verl's rollout
    DIR/agent_loop.yaml                    its registration (name, _target_, the loop's settings)
    DIR/tools.json                         the agent's tool schemas (what the model sees; for reference)
    DIR/domain/                            a copy of the domain and its tasks (the loop opens this one)
    DIR/launch.sh                          `ray job submit` of verl's GRPO trainer, settings from muactl's grpo config
    DIR/README.md                          how to run it

The loop needs muactl installed on every Ray worker (`pip install muactl`); verl itself comes from the
`verl` extra on the cluster. Tested API: verl 0.9.1 (AgentLoopBase in verl.experimental.agent_loop.agent_loop).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..options import option
from .verl_runtime import EXCLUDED_REPLAYS

VERL_TESTED = "0.9.1"
MODULE = "muactl_agent_loop"
CLASS = "MuactlAgentLoop"


@dataclass
class VerlExport:
    """The settings of `muactl export verl` (its options are built from these fields). The GRPO settings come
    from muactl's train recipe (grpo_defaults), the episode limits from its api/episode groups."""

    domain: str = option(help="Domain name or folder.")
    output: Path = option(MISSING, "-o", "--output", help="Folder to write (parquet, agent loop, config, launch script).")
    model: str = option("Qwen/Qwen3-8B", "--model", help="Default policy in the launch script (MODEL=... overrides).")
    # the user simulator inside the rollout: scripted, a local model (a trained user: hf:PATH), or a litellm model id
    user: str = option("scripted", "--user", help="User simulator in the rollout: scripted | scripted:varied | hf:<model> "
                       "(a folder is written as its absolute path) | a litellm model id.")
    user_api_base: str | None = option(None, "--user-api-base", help="OpenAI-compatible server for the user.")
    user_temperature: float = 0.7
    nnodes: int = option(1, "--nnodes", min=1, help="Nodes in the launch script (NNODES=... overrides).")
    gpus_per_node: int = option(8, "--gpus-per-node", min=1, help="GPUs per node (GPUS_PER_NODE=... overrides).")
    max_prompt_length: int = option(4096, "--max-prompt-length", help="verl data.max_prompt_length.")
    max_response_length: int = option(8192, "--max-response-length", help="verl data.max_response_length (whole episode).")
    # "key=value": grpo settings replacing muactl's defaults
    overrides: list[str] = option(None, "--grpo", default_factory=list,
                                  help="Override a muactl grpo setting, e.g. --grpo group_size=16 (repeatable).")
    force: bool = option(False, "--force", help="Write into a folder that is not empty.")


def grpo_defaults(overrides: list[str] | None = None) -> dict[str, Any]:
    """muactl's GRPO config (muactl/conf/grpo) with `key=value` overrides, checked like `muactl train`'s:
    the source of the launch script's settings."""
    from omegaconf import OmegaConf

    from ..train.recipes import compose

    bad = [o for o in overrides or [] if "=" not in o]
    if bad:
        raise UsageError(f"--grpo wants KEY=VALUE, got {bad[0]!r}")
    known = OmegaConf.to_container(compose(None, []).grpo)
    unknown = sorted({o.split("=", 1)[0] for o in overrides or []} - set(known))
    if unknown:
        raise UsageError(f"unknown grpo setting(s): {', '.join(unknown)} (known: {', '.join(known)})")
    return OmegaConf.to_container(compose(None, [f"grpo.{o}" for o in overrides or []]).grpo)


def episode_settings() -> dict[str, Any]:
    """The agent loop's episode limits and LLM-user call settings, from muactl's train config."""
    from ..train.recipes import compose

    cfg = compose(None, [])
    return {"max_tool_errors": int(cfg.episode.max_tool_errors), "timeout_s": float(cfg.episode.timeout_s),
            "max_tokens": int(cfg.api.max_tokens), "request_timeout_s": float(cfg.api.timeout_s),
            "retries": int(cfg.api.retries)}


def rows(opened, split: str, agent_name: str) -> list[dict[str, Any]]:
    compiled = opened.compiled
    greeting = compiled.spec.domain.greeting
    out = []
    for i, t in enumerate(x for x in opened.tasks if x.split == split):
        prompt = [{"role": "system", "content": compiled.system_prompt_for(t.task)}]
        if greeting:
            prompt.append({"role": "assistant", "content": greeting})
        task = t.task.model_dump(mode="json", by_alias=True, exclude_none=True)
        out.append({
            "data_source": f"muactl/{compiled.name}",
            "agent_name": agent_name,
            "prompt": prompt,  # what the agent sees first; the loop renders the conversation itself
            "ability": "tool-use",
            "reward_model": {"style": "muactl", "ground_truth": t.task.id},
            "extra_info": {"index": i, "split": split, "task_id": t.task.id, "domain": compiled.name,
                           "task": json.dumps(task, ensure_ascii=False)},
        })
    return out


def write_parquet(path: Path, data: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(data), path)


def exported_user(user: str) -> str:
    """The rollout's user as the agent loop is given it: a local model folder (hf:PATH, e.g. a `muactl train user`
    checkpoint) is checked now and named by its absolute path, since ray runs the loop from the export's folder."""
    if not user.startswith("hf:"):
        return user
    from ..eval.preflight import check_local_model

    ref = user[3:]
    check_local_model(ref, f"--user {user}")
    path = Path(ref).expanduser()
    return f"hf:{path.resolve()}" if path.exists() else user


def export_verl(cfg: VerlExport) -> dict[str, Any]:
    """Write the export folder; returns a summary (paths, row counts, the GRPO settings used)."""
    from .packs import collect_files
    from ..domain.validate import validate_domain

    from ..outputs import prepare_output

    out = prepare_output(cfg.output)
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out} is a file; give a folder to write the export into")
    if out.exists() and any(out.iterdir()) and not cfg.force:
        raise UsageError(f"{out} exists and is not empty; pass --force to overwrite, or pick another -o")
    grpo = grpo_defaults(cfg.overrides)  # the cheap checks first: validating the domain replays every task
    if grpo.get("reward") != "binary":
        raise UsageError("the verl export trains on muactl's binary task reward (grpo.reward=binary); "
                         "turn-level credit (userrl) runs only in `muactl train grpo`")
    user = exported_user(cfg.user)
    opened = validate_domain(cfg.domain)
    name = opened.spec.domain.name
    if not any(t.split == "train" for t in opened.tasks):
        raise UsageError(f"domain {name} has no train tasks to train on")
    agent_name = f"muactl_{name.replace('-', '_')}"
    out.mkdir(parents=True, exist_ok=True)
    # the domain travels with the job (ray's working_dir), laid out like an installed pack
    dom = out / "domain"
    if dom.exists():
        shutil.rmtree(dom)
    ref = opened.ref
    inner = ref.root / "tasks"
    for arc, src in collect_files(ref.root, "d", skip=inner if inner.is_dir() else None):
        dst = dom / arc[2:]
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    if ref.untrusted:  # the copy stays someone else's code: its MCP commands still need trust to run
        from ..spec.library import INSTALLED_MANIFEST

        record = ref.root / INSTALLED_MANIFEST
        (dom / INSTALLED_MANIFEST).write_text(record.read_text() if record.is_file() else "{}")
    if ref.tasks_dir and ref.tasks_dir.is_dir():
        for arc, src in collect_files(ref.tasks_dir, "t"):
            dst = dom / "tasks" / arc[2:]
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    counts = {}
    for split in ("train", "test"):
        data = rows(opened, split, agent_name)
        counts[split] = len(data)
        write_parquet(out / f"{split}.parquet", data)
    if not counts["test"]:  # verl wants validation files: validate on the train tasks rather than fail
        shutil.copyfile(out / "train.parquet", out / "test.parquet")
    (out / f"{MODULE}.py").write_text(MODULE_TEMPLATE.format(domain=name, verl=VERL_TESTED))
    loop_cfg = {"name": agent_name, "_target_": f"{MODULE}.{CLASS}", "domain_dir": "domain", "user": user,
                "user_api_base": cfg.user_api_base, "user_temperature": cfg.user_temperature,
                "max_turns": int(grpo["max_turns"]), "max_new_tokens": int(grpo["max_new_tokens"]),
                # muactl train's `episode` and `api` settings (their defaults): limits and an LLM user's calls
                **episode_settings()}
    (out / "agent_loop.yaml").write_text(AGENT_LOOP_YAML.format(body=_yaml([loop_cfg])))
    (out / "tools.json").write_text(json.dumps([t.openai_schema() for t in opened.compiled.agent_tools()], indent=2))
    script = out / "launch.sh"
    script.write_text(launch_script(name, cfg, grpo))
    script.chmod(0o755)
    (out / "README.md").write_text(README.format(domain=name, agent_name=agent_name, verl=VERL_TESTED, module=MODULE,
                                                 cls=CLASS, train=counts["train"], test=counts["test"], model=cfg.model,
                                                 user=user, replays=EXCLUDED_REPLAYS,
                                                 **{k: grpo[k] for k in ("group_size", "tasks_per_step", "steps")}))
    return {"output": str(out), "agent_name": agent_name, "rows": counts, "grpo": grpo}


def _yaml(data) -> str:
    import io

    from ruamel.yaml import YAML

    y = YAML()
    y.default_flow_style = False
    buf = io.StringIO()
    y.dump(data, buf)
    return buf.getvalue()


# grpo.loss_type -> verl's loss_agg_mode, the same aggregation of token losses: per-sequence mean, Dr. GRPO's sum
# over a constant, DAPO's mean over every policy token of the batch
VERL_LOSS_AGG = {"grpo": "seq-mean-token-mean", "dr_grpo": "seq-mean-token-sum-norm", "dapo": "token-mean"}


def verl_overrides(name: str, cfg: VerlExport, grpo: dict[str, Any]) -> list[str]:
    """verl trainer overrides equivalent to muactl's GRPO settings (see the README's table)."""
    beta = float(grpo["beta"])
    eps = float(grpo["epsilon"])
    batch = int(grpo["tasks_per_step"])
    lines = [
        "algorithm.adv_estimator=grpo",
        "algorithm.norm_adv_by_std_in_grpo=true",
        "algorithm.use_kl_in_reward=false",
        "data.train_files=train.parquet",
        "data.val_files=test.parquet",
        "data.return_raw_chat=true",
        f"data.train_batch_size={batch}",
        f"data.max_prompt_length={cfg.max_prompt_length}",
        f"data.max_response_length={cfg.max_response_length}",
        "data.filter_overlong_prompts=false",
        "data.truncation=left",
        'actor_rollout_ref.model.path="$MODEL"',
        f"actor_rollout_ref.model.lora_rank={64 if grpo.get('lora') else 0}",
        "actor_rollout_ref.model.use_remove_padding=true",
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
        f"actor_rollout_ref.actor.optim.lr={grpo['lr']}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        f"actor_rollout_ref.actor.clip_ratio={eps}",
        f"actor_rollout_ref.actor.clip_ratio_low={eps}",
        f"actor_rollout_ref.actor.clip_ratio_high={eps}",
        f"actor_rollout_ref.actor.use_kl_loss={'true' if beta > 0 else 'false'}",
        f"actor_rollout_ref.actor.kl_loss_coef={beta}",
        "actor_rollout_ref.actor.entropy_coeff=0",
        f"actor_rollout_ref.actor.loss_agg_mode={VERL_LOSS_AGG[grpo.get('loss_type', 'grpo')]}",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.mode=async",
        f"actor_rollout_ref.rollout.n={int(grpo['group_size'])}",
        f"actor_rollout_ref.rollout.temperature={grpo['temperature']}",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        'actor_rollout_ref.rollout.tensor_model_parallel_size="$TP"',
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
        "actor_rollout_ref.rollout.calculate_log_probs=true",
        "actor_rollout_ref.rollout.agent.agent_loop_config_path=agent_loop.yaml",
        f"actor_rollout_ref.rollout.agent.default_agent_loop=muactl_{name.replace('-', '_')}",
        f"trainer.total_training_steps={int(grpo['steps'])}",
        f"trainer.save_freq={int(grpo['save_steps'])}",
        "trainer.test_freq=10",
        "trainer.val_before_train=true",
        'trainer.nnodes="$NNODES"',
        'trainer.n_gpus_per_node="$GPUS_PER_NODE"',
        "trainer.project_name=muactl",
        f"trainer.experiment_name={name}-grpo",
        "trainer.logger=[console,tensorboard]",
        "trainer.critic_warmup=0",
    ]
    return lines


def launch_script(name: str, cfg: VerlExport, grpo: dict[str, Any]) -> str:
    overrides = " \\\n    ".join(verl_overrides(name, cfg, grpo))
    return LAUNCH.format(domain=name, model=cfg.model, nnodes=cfg.nnodes, gpus=cfg.gpus_per_node, overrides=overrides,
                         group=grpo["group_size"], tasks=grpo["tasks_per_step"], verl=VERL_TESTED)


AGENT_LOOP_YAML = """\
# verl agent loop registry (actor_rollout_ref.rollout.agent.agent_loop_config_path). Written by
# `muactl export verl`. Each entry: the name dataset rows use in `agent_name`, the class (`_target_`,
# importable from the job's working dir) and keyword arguments verl passes when it builds the loop.
# user: scripted (deterministic, driven by the task file; for smoke runs) or a litellm model id, e.g.
# openai/gpt-4o-mini, or hosted_vllm/<model> with user_api_base: http://HOST:PORT/v1 for a local server.
# max_tool_errors and timeout_s end an episode; max_tokens, request_timeout_s and retries are an LLM user's
# API calls (raise request_timeout_s for a slow server).
{body}"""

MODULE_TEMPLATE = '''\
"""verl agent loop for the muactl domain `{domain}` (written by `muactl export verl`; tested with verl {verl}).

Each rollout sample plays one task: muactl's episode engine runs the simulated user, the sandboxed
tools and the reward inside verl's rollout worker, and asks verl's server manager for the policy's
tokens. response_mask is 1 on the tokens the policy sampled and 0 on user and tool tokens; the reward
(1 only when the task is really done) goes back as reward_score, so verl's reward function is not used.
Needs `pip install muactl` (and `muactl[mcp]` for domains with MCP tools) on every Ray worker.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from muactl.share.verl_runtime import EpisodeRunner, fit_prompt

HERE = Path(__file__).resolve().parent


class MuactlAgentLoop(AgentLoopBase):
    def __init__(self, *args, domain_dir: str = "domain", user: str = "scripted", user_api_base: str | None = None,
                 user_temperature: float = 0.7, max_turns: int = 12, max_new_tokens: int = 512,
                 max_tool_errors: int = 4, timeout_s: float = 600.0, max_tokens: int = 1024,
                 request_timeout_s: float = 60.0, retries: int = 4, **kwargs):
        super().__init__(*args, **kwargs)
        folder = Path(domain_dir) if Path(domain_dir).is_absolute() else HERE / domain_dir
        self.runner = EpisodeRunner.shared(folder, user=user, user_api_base=user_api_base,
                                           user_temperature=float(user_temperature), max_turns=int(max_turns),
                                           max_new_tokens=int(max_new_tokens), max_tool_errors=int(max_tool_errors),
                                           timeout_s=float(timeout_s), max_tokens=int(max_tokens),
                                           request_timeout_s=float(request_timeout_s), retries=int(retries))

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        info = kwargs.get("extra_info") or {{}}
        task_id = info.get("task_id") or (kwargs.get("reward_model") or {{}}).get("ground_truth")
        # verl does not tell a loop which rollout of its group it plays, and `index` is the same for all of
        # them: each rollout draws its own seed (kept in extra_fields), so the group's users differ
        seed = secrets.randbits(32)
        result = await self.runner.run(
            task_id, self.server_manager, self.tokenizer, dict(sampling_params),
            response_length=int(self.rollout_config.response_length), seed=seed)
        return AgentLoopOutput(
            prompt_ids=fit_prompt(result.prompt_ids, int(self.rollout_config.prompt_length)),
            response_ids=result.response_ids,
            response_mask=result.response_mask,
            response_logprobs=result.response_logprobs,
            reward_score=result.reward,
            num_turns=result.num_turns,
            metrics=AgentLoopMetrics(**result.metrics),
            extra_fields={{"muactl_termination": result.termination, "muactl_success": bool(result.reward > 0),
                          "muactl_excluded": result.excluded, "muactl_seed": seed}},
        )
'''

LAUNCH = """\
#!/usr/bin/env bash
# GRPO on the muactl domain `{domain}` with verl (tested API: verl {verl}) on a Ray cluster.
# Written by `muactl export verl`; settings mirror `muactl train grpo` (muactl/conf/grpo/default.yaml):
# {tasks} tasks per step x {group} rollouts per task. Extra arguments are passed on to verl as overrides:
#   ./launch.sh trainer.total_training_steps=200 actor_rollout_ref.rollout.n=16
# Environment: RAY_ADDRESS (dashboard, default http://127.0.0.1:8265), MODEL, NNODES, GPUS_PER_NODE, TP,
# RUNTIME_ENV (a JSON runtime env for the job: put API keys for an LLM user here, not in this file).
set -euo pipefail
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
RAY_ADDRESS="${{RAY_ADDRESS:-http://127.0.0.1:8265}}"
MODEL="${{MODEL:-{model}}}"
NNODES="${{NNODES:-{nnodes}}}"
GPUS_PER_NODE="${{GPUS_PER_NODE:-{gpus}}}"
TP="${{TP:-2}}"
DEFAULT_ENV='{{"env_vars": {{"LITELLM_LOCAL_MODEL_COST_MAP": "True", "TOKENIZERS_PARALLELISM": "false"}}}}'
RUNTIME_ENV="${{RUNTIME_ENV:-$DEFAULT_ENV}}"

# the working dir (parquet files, agent loop module and config, domain copy) is shipped to every worker
ray job submit --address="$RAY_ADDRESS" --working-dir "$HERE" --runtime-env-json="$RUNTIME_ENV" -- \\
  python3 -m verl.trainer.main_ppo \\
    {overrides} \\
    "$@"
"""

README = """\
# verl export of the muactl domain `{domain}`

Written by `muactl export verl {domain}`. Train a tool-using agent on this domain with verl's GRPO on a
Ray cluster, with muactl's simulated user, sandboxed tools and task reward inside verl's rollout.
Tested API: verl {verl} (verl 0.8 removed `verl/interactions`; multi-turn runs go through agent loops).

| file | what it is |
|---|---|
| `train.parquet`, `test.parquet` | one row per task ({train} train, {test} test): `prompt` (system prompt and greeting), `agent_name` = `{agent_name}`, `extra_info.task_id` and the task's data as JSON |
| `{module}.py` | `{cls}`, an `AgentLoopBase` subclass: plays one task per sample with muactl's episode engine, asking verl's server manager for the policy's tokens |
| `agent_loop.yaml` | registers the loop (`actor_rollout_ref.rollout.agent.agent_loop_config_path`) with its settings: the user simulator, max turns, tokens per turn |
| `tools.json` | the tool schemas the model sees (for reference; the tools run inside muactl's sandbox) |
| `domain/` | a copy of the domain and its tasks; the loop opens this copy |
| `launch.sh` | `ray job submit` of `verl.trainer.main_ppo` with GRPO settings from `muactl train grpo` |

## Run it

1. On every node of the cluster: `pip install 'muactl[verl]'` (verl, vLLM and a CUDA torch per verl's
   install guide; muactl must be importable by the Ray workers).
2. Start Ray (`ray start --head` on one node, `ray start --address=HEAD:6379` on the others).
3. From this folder: `MODEL=Qwen/Qwen3-8B NNODES=2 GPUS_PER_NODE=8 ./launch.sh`
   (default model here: `{model}`). Extra `key=value` arguments go to verl as overrides.

The user simulator is `{user}` (see `agent_loop.yaml`). `scripted` is deterministic and needs no LLM:
good for a smoke run, not for learning. For MUA-RL-style training point it at an LLM: set
`user: openai/gpt-4o-mini` (and pass the API key in `RUNTIME_ENV`), or serve a model with vLLM and
set `user: hosted_vllm/<model>` with `user_api_base: http://HOST:PORT/v1`.

## How the loop maps onto verl

- Tokens: the loop renders turns in the model's chat format, as `muactl train` does (muactl's ChatML for
  its own models, else the model's own template and tool-call format), and appends the ids the server
  returns as they are; nothing generated is re-tokenized.
- `response_mask`: 1 on tokens the policy sampled (with its end-of-turn token), 0 on user and tool tokens.
  The episode is cut (reward 0) when it would exceed `data.max_response_length`.
- Reward: muactl's task reward (1 only if the final database equals the gold end state, required
  outputs were said and assertions hold) is returned as `reward_score`; verl's reward function is unused.
- Excluded episodes (`infra_error`, `user_error`: the user's API or the simulator broke, not the policy)
  are played again with a fresh seed, up to {replays} more times; one still excluded comes back with a
  `response_mask` of zeros (`extra_fields.muactl_excluded`), so none of its tokens is trained on. Its
  reward (0) still enters its group's mean and spread in verl's GRPO: watch the share of excluded samples.
- GRPO settings from muactl's config: {tasks_per_step} tasks per step (`data.train_batch_size`,
  `ppo_mini_batch_size`), {group_size} rollouts per task (`rollout.n`), {steps} steps, learning rate,
  clip epsilon, KL beta (`use_kl_loss`/`kl_loss_coef`), loss aggregation (`grpo.loss_type` as
  `loss_agg_mode`), sampling temperature, save interval; max turns
  and tokens per turn are in `agent_loop.yaml`. muactl's turn-level credit (`grpo.reward=userrl`) has no
  verl equivalent here.
"""
