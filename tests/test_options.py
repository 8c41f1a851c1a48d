"""Options declared once (muactl/options.py): every field of eval's, synth's and export's settings reaches its
command's --help, and every field a train recipe sets reaches the composed hydra config; the recipe groups'
YAML in muactl/conf agrees with the schema built from those fields; sft's and grpo's settings reach
`muactl train ... --cfg`."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf
from typer.testing import CliRunner

from muactl.cli import app
from muactl.eval.config import EvalConfig
from muactl.options import cli_of, default_of, recipe_key
from muactl.share.verl import VerlExport
from muactl.train.recipes import CONF_DIR, GRPOConf, SFTConf, TrainConf, compose
from muactl.train.synth_config import SynthConfig

runner = CliRunner()
WIDE = {"COLUMNS": "250"}
COMMANDS = {EvalConfig: ["eval"], SynthConfig: ["synth"], VerlExport: ["export", "verl"]}
# fields that are not command-line options, and why
NOT_ON_CLI = {(VerlExport, "user_temperature"): "the rollout user's temperature, fixed by the export"}


@pytest.mark.parametrize("cls", list(COMMANDS), ids=lambda c: c.__name__)
def test_every_field_is_an_option_of_its_command(cls):
    text = runner.invoke(app, [*COMMANDS[cls], "--help"], env=WIDE).output
    for f in fields(cls):
        c = cli_of(f)
        if c is None:
            assert (cls, f.name) in NOT_ON_CLI, f"{cls.__name__}.{f.name} declares no command-line option"
            continue
        for flag in c.flags:
            assert flag in text, f"{cls.__name__}.{f.name}: {flag} is not in `muactl {' '.join(COMMANDS[cls])} --help`"
        if not c.flags:  # the positional argument
            assert f.name.upper() in text or f.name in text


@pytest.mark.parametrize("cls", [EvalConfig, SynthConfig], ids=lambda c: c.__name__)
def test_every_field_reaches_the_train_recipe_or_says_why_not(cls):
    cfg = compose(None, [])
    for f in fields(cls):
        key = recipe_key(f)
        if key is None:
            assert f.metadata.get("not_in_recipe"), f"{cls.__name__}.{f.name}: give a recipe key or not_in_recipe"
            continue
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        assert leaf in node, f"{cls.__name__}.{f.name}: {key} is not in the composed train config"


def test_a_field_without_a_recipe_key_is_caught():
    from dataclasses import dataclass

    from muactl.options import option

    @dataclass
    class Loose:
        x: int = option(1, "--x")

    assert [f.name for f in fields(Loose) if recipe_key(f) is None and not f.metadata.get("not_in_recipe")] == ["x"]


def group_schema(group: str) -> type:
    """The dataclass of a train recipe group (TrainConf's field of that name)."""
    return next(f for f in fields(TrainConf) if f.name == group).default_factory


@pytest.mark.parametrize("group", ["eval", "synth", "sft", "grpo"])
def test_the_groups_yaml_has_exactly_the_schemas_keys(group):
    data = yaml.safe_load((CONF_DIR / group / "default.yaml").read_text())
    schema = {f.name for f in fields(group_schema(group))}
    assert set(data) == schema, f"conf/{group}/default.yaml: missing {schema - set(data)}, unknown {set(data) - schema}"


@pytest.mark.parametrize("cls,group", [(SFTConf, "sft"), (GRPOConf, "grpo")])
def test_sft_and_grpo_yaml_repeat_the_declared_defaults(cls, group):
    data = yaml.safe_load((CONF_DIR / group / "default.yaml").read_text())
    for f in fields(cls):
        assert data[f.name] == default_of(f), f"conf/{group}/default.yaml {f.name}: {data[f.name]} != {default_of(f)}"


@pytest.mark.parametrize("cls,stage", [(SFTConf, "sft"), (GRPOConf, "grpo")])
def test_sft_and_grpo_settings_reach_the_train_command(cls, stage, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = runner.invoke(app, ["train", stage, "--cfg"], env=WIDE)
    assert out.exit_code == 0, out.output
    printed = yaml.safe_load(out.output)[stage]
    assert set(printed) == {f.name for f in fields(cls)}
    changed = fields(cls)[0]
    out = runner.invoke(app, ["train", stage, "--cfg", f"{stage}.{changed.name}=7"], env=WIDE)
    assert yaml.safe_load(out.output)[stage][changed.name] == 7


def test_model_and_user_options_only_set_declared_keys():
    schema = {g: {f.name for f in fields(group_schema(g))} for g in ("model", "user")}
    for group, keys in schema.items():
        for path in Path(CONF_DIR / group).glob("*.yaml"):
            assert set(yaml.safe_load(path.read_text())) <= keys, path


def test_every_field_of_a_domains_entry_is_documented():
    """A recipe's `domains:` entries (DomainEntry) are declared once; train.yaml's comment and the README name
    every field, and the check of an entry knows exactly those fields."""
    from muactl.train.recipes import DomainEntry

    names = [f.name for f in fields(DomainEntry)]
    conf = (CONF_DIR / "train.yaml").read_text()
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("**Several domains, one policy**"):]
    for name in names:
        assert f"{name}:" in conf.split("domains:", 1)[1].split("\ndata:", 1)[0] or name == "name", name
        assert f"`{name}`" in section or name == "name", name
    r = runner.invoke(app, ["train", "grpo", "domains=[{name: bank, colour: red}]", "--cfg"])
    assert r.exit_code == 2 and f"an entry has {', '.join(names)}" in r.output
