"""Training configs: hydra groups in muactl/conf composed with the compose API (typer owns argv, so
@hydra.main cannot be used), plus an optional user YAML file and dotted overrides.

Bad input becomes a UsageError naming the key, never a hydra traceback.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError
from ..options import default_of, field_types, recipe_key

CONF_DIR = Path(__file__).parents[1] / "conf"
GROUPS = ("model", "user", "synth", "sft", "grpo", "eval")


# Structured schemas: compose output is merged onto these, so a typo or a wrong type is an error.
@dataclass
class ModelConf:
    name: str = "tiny"
    dtype: Optional[str] = None
    gradient_checkpointing: Optional[bool] = None
    max_new_tokens: int = 96
    temperature: float = 0.0
    thinking: bool = False  # enable_thinking of a template that has it (Qwen3); false: MUA-RL's non-thinking mode


@dataclass
class UserConf:
    kind: str = "scripted"
    model: Optional[str] = None
    api_base: Optional[str] = None
    temperature: float = 0.0


@dataclass
class SFTConf:
    epochs: float = 3
    max_steps: int = -1
    batch_size: Optional[int] = None  # null: what fits the model on this device (models.sft_batch)
    grad_accum: Optional[int] = None  # null: with batch_size null, 8 examples per optimizer step; else 1
    lr: float = 2e-4
    scheduler: str = "cosine"
    warmup_ratio: float = 0.05
    weight_decay: float = 0.0
    max_length: int = 4096
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    save_steps: int = 200
    logging_steps: int = 10
    resume: bool = True


@dataclass
class GRPOConf:
    steps: int = 50
    group_size: int = 8
    tasks_per_step: int = 2
    lr: float = 1e-5
    warmup_ratio: float = 0.1  # share of the steps over which the learning rate rises from 0 (then linear decay)
    beta: float = 0.04  # KL to the starting policy (0: no reference model)
    epsilon: float = 0.2
    temperature: float = 1.0
    loss_type: str = "grpo"  # grpo (per-sequence mean) | dr_grpo | dapo: how token losses add up (grpo.py)
    max_turns: int = 12
    max_new_tokens: int = 96
    reward: str = "binary"
    turn_credit: str = "equalized"
    gamma: float = 0.9
    trajectory_score: str = "mean"
    draw_rounds: int = 3  # dynamic sampling: groups without signal are re-drawn on other templates, up to this many rounds
    band_low: float = 0.1  # curriculum: draw templates whose pass rate in recent rollouts is in [band_low, band_high]
    band_high: float = 0.9
    band_retry: int = 0  # curriculum: a template out of the band is drawn again this many steps after it was last played (0: never)
    instance_per_rollout: bool = False  # template groups: every rollout on its own instance (baseline: the template's mean)
    sft_coef: float = 0.0  # SFT anchor: weight of sft_loss on the SFT data, added to every update (0: off; train/anchor.py)
    sft_rows: int = 2  # SFT anchor: conversations of the SFT data per micro-batch (per update unless grad_accum > 1)
    sft_loss: str = "nll"  # SFT anchor: nll (mean NLL of the rows) | drift (only where worse than the start; anchor.py)
    lora: bool = False
    grad_accum: int = 1
    save_steps: int = 10
    judge: Optional[str] = None  # litellm id or hf:<model> for expect.nl_assertions; None: not judged
    judge_api_base: Optional[str] = None
    eval_every: int = 0  # held-out pass^1 of the policy every K steps and at the end (0: off)
    eval_tasks: Any = "test"  # held-out set: split | [task ids] | template:<id>|all (test seed stream)
    eval_n: int = 200  # with template eval_tasks: how many instances


@dataclass
class UserSFTConf:
    """`muactl train user`: where the faithful episodes come from, and the held-out set the trained user is scored on."""
    runs: list = field(default_factory=list)  # run ids or folders (synth, eval with an API user, chat); empty: synth here
    agent: str = "oracle:varied"  # the synth that makes the data when `runs` is empty: this agent ...
    user: str = "scripted:varied"  # ... against this user
    tasks: Any = "train"  # ... on these tasks (a split, [task ids] or template:<id>|all: the train seed stream)
    n: int = 100  # with template tasks: how many instances
    trials: int = 2
    eval_tasks: Any = "test"  # held out: a split, [task ids] or template:<id>|all (the test seed stream)
    eval_n: int = 100
    eval_trials: int = 1
    max_turns: int = 16
    temperature: float = 0.0  # the trained user's sampling temperature in its evaluation
    draws: int = 4  # written on the card: a sampled reply that breaks the user's instructions is drawn again, up to this in all
    consent_pairs: bool = False  # each answer to "shall I proceed?" also taught with the task's consent the other way


def recipe_group(cls, group: str) -> type:
    """The hydra schema of a recipe group (eval, synth, api, episode), made from the command dataclass that
    declares its settings: one field per `cls` field whose recipe key is `group.<name>`, with its type and
    default. A key two fields share (synth.tasks: a split, or task ids) and a list take any value; the
    group's YAML in muactl/conf may set other defaults (tests/test_options.py checks the keys agree)."""
    types = field_types(cls)
    keys = [recipe_key(f) for f in fields(cls)]
    specs, seen = [], set()
    for f in fields(cls):
        key = recipe_key(f)
        if not key or not key.startswith(group + "."):
            continue
        name = key.split(".", 1)[1]
        if name in seen:
            continue
        seen.add(name)
        t = types[f.name]
        default = default_of(f)
        if keys.count(key) > 1 or typing.get_origin(t) is list:
            t, default = Any, (None if isinstance(default, list) else default)
        specs.append((name, t, field(default=default)))
    return make_dataclass(f"{group.title()}Conf", specs)


def _stage_groups():
    from ..eval.config import EvalConfig
    from .synth_config import SynthConfig

    return {"eval": recipe_group(EvalConfig, "eval"), "synth": recipe_group(SynthConfig, "synth"),
            "api": recipe_group(EvalConfig, "api"), "episode": recipe_group(EvalConfig, "episode")}


EvalConf, SynthConf, APIConf, EpisodeConf = _stage_groups().values()


@dataclass
class DomainEntry:
    """One domain of a run over several (`domains:` in a recipe): what it trains on, and how much of it. Every
    field but `name` defaults to the run's own setting, so `domains: [bank, retail]` mixes two domains evenly."""

    name: str = "???"  # required (omegaconf's MISSING); built-in, ./domains/NAME, or a folder holding domain.yaml
    weight: float = 1.0  # its share of the mix: weight / the sum of the weights (GRPO's groups, the SFT rows)
    tasks: Any = None  # split | [task ids] | template:<id>|all, for synth and grpo; null: synth.tasks and tasks
    db: Optional[str] = None  # fixed | random; null: the run's db
    user: Optional[str] = None  # scripted | a litellm model id (with user.api_base, user.temperature); null: the run's


@dataclass
class TrainConf:
    model: ModelConf = field(default_factory=ModelConf)
    user: UserConf = field(default_factory=UserConf)
    synth: SynthConf = field(default_factory=SynthConf)
    sft: SFTConf = field(default_factory=SFTConf)
    grpo: GRPOConf = field(default_factory=GRPOConf)
    user_sft: UserSFTConf = field(default_factory=UserSFTConf)
    eval: EvalConf = field(default_factory=EvalConf)
    api: APIConf = field(default_factory=APIConf)
    episode: EpisodeConf = field(default_factory=EpisodeConf)
    domain: Optional[str] = "bank"  # one domain; null when `domains` names several
    domains: list[DomainEntry] = field(default_factory=list)
    data: Optional[str] = None
    seed: int = 0
    trust: bool = False
    stages: list = field(default_factory=lambda: ["synth", "sft", "grpo", "eval"])
    run_id: Optional[str] = None
    tasks: Optional[str] = None  # template:<id>|all: GRPO draws a fresh task instance per group (train seed stream)
    db: str = "fixed"  # fixed | random: with template tasks, each instance on a fresh random database
    keep_checkpoints: bool = False  # keep a finished stage's resumable checkpoint-N folders (optimizer state and all)


def from_recipe(cls, cfg, **values: Any):
    """`cls` (EvalConfig, SynthConfig) with every field that has a recipe key read from the composed train
    config `cfg`; `values` (what a stage sets itself) win."""
    from omegaconf import OmegaConf

    read = {f.name: OmegaConf.select(cfg, recipe_key(f)) for f in fields(cls) if recipe_key(f) and f.name not in values}
    return cls(**read, **values)


def api_options(cfg) -> dict[str, Any]:
    """A composed config's `api` settings as make_user, make_agent and the tool players take them."""
    return {k: cfg.api[k] for k in ("max_tokens", "timeout_s", "retries", "backoff_s")}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _normalize(overrides: list[str]) -> list[str]:
    """`model=Qwen/Qwen3-8B` or `model=runs/x/checkpoint-final` is not a group option: make it
    `model=hf model.name=...`; likewise `user=openai/gpt-4o-mini` -> the litellm user."""
    out = []
    for o in overrides:
        key, sep, value = o.partition("=")
        if sep and key in ("model", "user") and value not in options(key):
            if key == "model":
                out += ["model=hf", f"model.name={value}"]
            else:
                out += ["user=litellm", f"user.model={value}"]
        else:
            out.append(o)
    return out


def compose(config_file: Path | None = None, overrides: list[str] | None = None):
    """Compose muactl/conf/train.yaml, then the user's file, then the overrides; validate against TrainConf."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    overrides = list(overrides or [])
    file_cfg = None
    if config_file is not None:
        if not config_file.is_file():
            raise UsageError(f"config file {config_file} not found")
        try:
            file_cfg = OmegaConf.load(config_file)
        except Exception as e:  # YAML errors from OmegaConf carry the position in their text
            raise UsageError(f"{config_file}: cannot read config: {e}") from None
        # group selections in the file become overrides, applied before the user's: either a hydra-style
        # `defaults: [{model: smollm2-135m}]` list (then `model:` below may set values), or `model: tiny`
        picks = []
        for item in file_cfg.pop("defaults", None) or []:
            if not hasattr(item, "items"):
                raise UsageError(f"{config_file}: defaults entries look like '- model: tiny'")
            picks += [f"{k}={v}" for k, v in item.items()]
        picks += [f"{g}={file_cfg[g]}" for g in GROUPS if isinstance(file_cfg.get(g), str)]
        for g in GROUPS:
            if isinstance(file_cfg.get(g), str):
                del file_cfg[g]
        overrides = picks + overrides
    overrides = _normalize(overrides)
    # the user's file sits between the composed defaults and the command-line overrides
    dotted = [o for o in overrides if "=" in o and o.split("=")[0] not in GROUPS]
    groups = [o for o in overrides if o not in dotted]
    entries = pop_domains(config_file, file_cfg, dotted)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None, job_name="muactl"):
            cfg = hydra_compose(config_name="train", overrides=groups)
        schema = OmegaConf.structured(TrainConf)
        merged = OmegaConf.merge(schema, cfg)
        if file_cfg is not None:
            merged = OmegaConf.merge(merged, file_cfg)
        if dotted:
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist([_plain_override(o) for o in dotted]))
        if entries is not None:
            merged = OmegaConf.merge(merged, {"domain": None, "domains": entries})
        OmegaConf.to_container(merged, throw_on_missing=True)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", "") or ""
        msg = str(e).splitlines()[0]
        raise UsageError(f"bad config value{f' for {key}' if key else ''}: {msg}{_did_you_mean(key, e)}") from None
    except Exception as e:  # hydra's composition and override-parsing errors
        msg = str(e).strip().splitlines()
        hint = ""
        if "Could not find" in str(e) or "options" in str(e):
            hint = " Groups and options: " + "; ".join(f"{g}: {', '.join(options(g))}" for g in GROUPS)
        raise UsageError(f"bad override: {msg[0] if msg else e}.{hint}") from None
    return merged


DB_MODES = ("fixed", "random")


def pop_domains(config_file: Path | None, file_cfg, dotted: list[str]) -> list[dict] | None:
    """`domains:` taken out of the user's file and the overrides (an override wins), each entry checked and
    made a mapping (a bare name is `{name: NAME}`); None when the run names one domain, `domain:` as it always
    meant. A run that names both is an error naming where each is set."""
    from omegaconf import OmegaConf

    one, raw, where = None, None, None  # where `domain:` is set; the entries and where they come from
    if file_cfg is not None:
        if file_cfg.get("domain") is not None:
            one = _in_file(config_file, ("domain",))
        if "domains" in file_cfg:
            value = OmegaConf.to_container(file_cfg.pop("domains"))
            if value:
                raw, where = value, lambda path: _in_file(config_file, path)
    for o in list(dotted):
        key, _, value = _plain_override(o).partition("=")
        if key == "domain" and value.strip() not in ("", "null"):
            one = f"the override {o}"
        elif key.startswith(("domains.", "domains[")):
            raise UsageError(f"the override {o}: set domains as a whole, e.g. domains=[bank,{{name: retail, weight: 2}}]")
        elif key == "domains":
            dotted.remove(o)
            value = OmegaConf.to_container(OmegaConf.from_dotlist([_plain_override(o)]))["domains"]
            raw, where = value, (lambda path, o=o: f"the override {o}")
    if not raw:
        return None
    if not isinstance(raw, list):
        raise UsageError(f"{where(('domains',))}: domains: a list of domains (names, or mappings with "
                         f"{', '.join(f.name for f in fields(DomainEntry))}), not {raw!r}")
    if one is not None:
        raise UsageError(f"{where(('domains',))}: domains: and {one} (domain:) both say what the run trains on; "
                         "give either domain: (one domain) or domains: (a list), not both")
    entries = [domain_entry(e, i, where) for i, e in enumerate(raw)]
    names = [e["name"] for e in entries]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise UsageError(f"{where(('domains', i, 'name'))}: domains[{i}].name: {name} is listed twice")
    return entries


def domain_entry(entry: Any, i: int, where) -> dict:
    """One entry of `domains:` as a mapping of DomainEntry's fields, or a UsageError at `where((path))`."""
    from ..errors import DomainNotFound
    from ..spec.library import find_domain

    keys = [f.name for f in fields(DomainEntry)]
    entry = {"name": entry} if isinstance(entry, str) else entry
    at = f"domains[{i}]"
    if not isinstance(entry, dict):
        raise UsageError(f"{where(('domains', i))}: {at}: a domain name or a mapping with {', '.join(keys)}, not {entry!r}")
    for key in entry:
        if key not in keys:
            raise UsageError(f"{where(('domains', i, key))}: {at}.{key}: unknown field; an entry has {', '.join(keys)}")

    def bad(key: str, message: str):
        return UsageError(f"{where(('domains', i, key))}: {at}.{key}: {message}")

    name, weight = entry.get("name"), entry.get("weight", 1.0)
    if not isinstance(name, str) or not name.strip():
        raise bad("name", "a domain name or folder is required")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < float("inf"):
        raise bad("weight", f"must be a number > 0, not {weight!r}")
    if entry.get("db") not in (None, *DB_MODES):
        raise bad("db", f"must be {' or '.join(DB_MODES)}, not {entry['db']!r}")
    if entry.get("user") is not None and not isinstance(entry["user"], str):
        raise bad("user", f"scripted or a litellm model id, not {entry['user']!r}")
    tasks = entry.get("tasks")
    if not (tasks is None or isinstance(tasks, str) or (isinstance(tasks, list) and all(isinstance(t, str) for t in tasks))):
        raise bad("tasks", f"a split, a list of task ids or template:<id>|all, not {tasks!r}")
    try:
        find_domain(name)
    except DomainNotFound as e:
        raise bad("name", str(e)) from None
    return {**entry, "weight": float(weight)}


def _in_file(config_file: Path, path: tuple) -> str:
    """`FILE:LINE` of a key path in the user's config file (the line of the deepest part of it found)."""
    from ..errors import MuactlError
    from ..spec.source import load_yaml

    try:
        line, _ = load_yaml(config_file).pos(path)
    except MuactlError:  # OmegaConf read the file; a position is a courtesy
        return str(config_file)
    return f"{config_file}:{line}"


def _did_you_mean(key: str, error: Exception) -> str:
    """For a key the schema lacks (`sft.epoch`): the keys beside it that are spelled like it."""
    import difflib

    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError

    if not key or not isinstance(error, ConfigKeyError):
        return ""
    parent, _, name = key.rpartition(".")
    node = OmegaConf.select(OmegaConf.structured(TrainConf), parent) if parent else OmegaConf.structured(TrainConf)
    if not hasattr(node, "keys"):
        return ""
    close = difflib.get_close_matches(name, [str(k) for k in node.keys()], n=3)
    return f"; did you mean {', '.join(f'{parent}.{c}' if parent else c for c in close)}?" if close else ""


def _plain_override(o: str) -> str:
    return o[1:] if o.startswith("+") else o


def to_yaml(cfg) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(cfg)
