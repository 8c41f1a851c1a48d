"""Issue 31 §1, several domains in one run: `domains:` in a recipe (and --domain repeated), bad input naming file,
line and field before a run exists, `domain:` meaning what it always meant, the SFT mix by weight with each row's
domain, GRPO's groups drawn by weight (within a binomial bound), and real runs over bank and retail on tiny with
per-domain metrics in runs.sqlite, TensorBoard and the report. The model is the real tiny model or, where only
the draw is under test, a fake policy whose outcomes the test sets (tests/test_grpo.py's fake_policy)."""

from __future__ import annotations

import json
import math
import os
from collections import Counter

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.train.mix import mix_rows, parts
from muactl.train.recipes import compose

from .test_grpo import FakeTrainer, fake_episode, fake_policy

runner = CliRunner()
MIX = """\
stages: [grpo]
domains:
  - name: bank
    weight: 3
    tasks: template:all
    db: random
  - name: retail
"""


def test_domains_compose_into_parts_with_their_shares_and_their_own_settings(in_tmp):
    (in_tmp / "mix.yaml").write_text(MIX)
    cfg = compose(in_tmp / "mix.yaml", [])
    assert cfg.domain is None
    bank, retail = parts(cfg)
    assert (bank.name, bank.share, retail.name, retail.share) == ("bank", 0.75, "retail", 0.25)
    # each domain's view: its entry's tasks and db, the run's own settings elsewhere
    assert (bank.cfg.domain, bank.cfg.tasks, bank.cfg.synth.tasks, bank.cfg.db) == ("bank", "template:all", "template:all", "random")
    assert (retail.cfg.domain, retail.cfg.tasks, retail.cfg.synth.tasks, retail.cfg.db) == ("retail", None, "train", "fixed")

    # a domain named by its folder: a label without '/' names its files, metrics and the run
    from muactl.spec.library import find_domain
    from muactl.train.mix import run_domain

    by_path = compose(None, [f"domains=[bank, {{name: '{find_domain('retail').root}/'}}]"])
    assert run_domain(by_path) == "bank+retail" and run_domain(compose(None, [])) == "bank"
    # a run saves its resolved config (domain: null beside domains:); --resume composes it back unchanged
    from omegaconf import OmegaConf

    from muactl.train.recipes import to_yaml

    for config in (cfg, compose(None, ["domain=retail"])):
        (in_tmp / "config.yaml").write_text(to_yaml(config))
        assert OmegaConf.to_container(compose(in_tmp / "config.yaml", [])) == OmegaConf.to_container(config)


def test_domain_keeps_its_meaning_and_the_cli_repeats_domain(in_tmp):
    (in_tmp / "one.yaml").write_text("domain: retail\n")
    cfg = compose(in_tmp / "one.yaml", [])
    assert cfg.domain == "retail" and list(cfg.domains) == []
    [only] = parts(cfg)
    assert (only.name, only.share, only.cfg is cfg) == ("retail", 1.0, True)  # the whole config, as before
    r = runner.invoke(app, ["train", "grpo", "--domain", "bank:2", "--domain", "retail", "--cfg"])
    assert r.exit_code == 0, r.output
    assert "domain: null" in r.output and "- name: bank\n  weight: 2.0" in r.output and "- name: retail\n  weight: 1.0" in r.output


@pytest.mark.parametrize("text, message", [
    ("domains:\n  - name: bank\n  - name: nope\n", "mix.yaml:3: domains[1].name: no domain named 'nope'"),
    ("domains:\n  - name: bank\n  - name: retail\n    weight: 0\n", "mix.yaml:4: domains[1].weight: must be a number > 0, not 0"),
    ("domains:\n  - name: bank\n    weight: -2\n", "mix.yaml:3: domains[0].weight: must be a number > 0, not -2"),
    ("domains:\n  - name: bank\n    weight: lots\n", "mix.yaml:3: domains[0].weight: must be a number > 0, not 'lots'"),
    ("domain: bank\ndomains: [bank, retail]\n", "mix.yaml:2: domains: and mix.yaml:1 (domain:) both say what the run"),
    ("domains:\n  - name: bank\n    wieght: 2\n", "mix.yaml:3: domains[0].wieght: unknown field"),
    ("domains: [bank, bank]\n", "domains[1].name: bank is listed twice"),
    ("domains:\n  - name: bank\n    db: sometimes\n", "mix.yaml:3: domains[0].db: must be fixed or random"),
])
def test_bad_domains_name_file_line_and_field_before_a_run_exists(in_tmp, text, message):
    (in_tmp / "mix.yaml").write_text(text + "stages: [grpo]\n")
    r = runner.invoke(app, ["train", str(in_tmp / "mix.yaml"), "run_id=bad"])
    assert r.exit_code == 2 and message in r.output.replace("\n", " ").replace(str(in_tmp) + "/", ""), r.output
    assert "Traceback" not in r.output and not (in_tmp / "runs" / "bad").exists()


@pytest.mark.parametrize("args, message", [
    (["--domain", "bank:0"], "domains[0].weight: must be a number > 0, not 0"),
    (["--domain", "bank", "domain=retail"], "both say what the run trains on"),
    (["domains=[bank,{name: retail, weight: -1}]"], "domains[1].weight: must be a number > 0, not -1"),
    (["--domain", "nowhere"], "domains[0].name: no domain named 'nowhere'"),
])
def test_bad_domains_on_the_command_line(in_tmp, args, message):
    r = runner.invoke(app, ["train", "grpo", *args, "run_id=bad"])
    assert r.exit_code == 2 and message in r.output.replace("\n", " "), r.output
    assert not (in_tmp / "runs" / "bad").exists()


def binomial_ok(k: int, n: int, p: float, z: float = 4.0) -> bool:
    """k successes of n draws with chance p, within z standard deviations (z=4: a false alarm ~6e-5)."""
    return abs(k - n * p) <= z * math.sqrt(n * p * (1 - p))


def test_the_sft_mix_follows_the_weights_and_keeps_each_rows_domain():
    rows = {"bank": [{"domain": "bank", "i": i} for i in range(40)], "retail": [{"domain": "retail", "i": i} for i in range(30)]}
    mixed, figures = mix_rows(rows, {"bank": 0.75, "retail": 0.25}, seed=0)
    counts = Counter(r["domain"] for r in mixed)
    assert counts == {"bank": 40, "retail": 13}  # the largest mix with 3:1 and no row repeated
    assert figures["retail"] == {"kept": 30, "mixed": 13, "share": 0.25}
    assert mixed != sorted(mixed, key=lambda r: r["domain"])  # shuffled together, not one domain after the other
    assert mix_rows(rows, {"bank": 0.75, "retail": 0.25}, seed=0)[0] == mixed  # seeded


@pytest.mark.slow  # ~25 s: 400 groups stored
def test_grpo_draws_each_groups_domain_by_weight_within_a_binomial_bound(in_tmp):
    """400 groups over bank (weight 3) and retail (weight 1), played by a fake policy that solves every other
    rollout (so every group has signal and none is re-drawn): the groups per domain follow 3:1 within sampling
    error, each episode is stored with its domain, and the per-domain figures reach TRL's metrics."""
    from muactl.episode.user import ScriptedUser
    from muactl.models.generation import load_model
    from muactl.runs.store import RunStore
    from muactl.train.grpo import Rollouts
    from muactl.train.mix import open_parts

    cfg = compose(None, ["domains=[{name: bank, weight: 3}, retail]", "grpo.group_size=2", "grpo.tasks_per_step=4"])
    playing = open_parts(cfg, lambda view: ScriptedUser)
    lm = load_model("tiny", [p.opened.compiled for p in playing])
    store = RunStore.create("grpo", "bank+retail", {}, path=in_tmp / "run")
    rollouts = Rollouts(cfg, playing[0].opened, store, lm.tokenizer, ScriptedUser, playing=playing)
    fake_policy(rollouts, lambda job, k: fake_episode(job, success=k % 2 == 0))
    trainer = FakeTrainer(lm.model)
    retail_ids = {t.task.id for t in playing[1].opened.tasks}
    for step in range(100):
        trainer.state.global_step = step
        rollouts([[{"role": "user", "content": "x"}]] * 8, trainer)
    m = trainer._metrics["train"]
    bank, retail = sum(m["domain/bank/groups"]), sum(m["domain/retail/groups"])
    assert bank + retail == 400 and binomial_ok(int(bank), 400, 0.75), (bank, retail)
    assert sum(m["domain/bank/groups_with_signal"]) == bank and m["domain/retail/success"][0] == 0.5
    stored = Counter((e["domain"], e["task_id"] in retail_ids) for e in store.episodes())
    assert set(stored) == {("bank", False), ("retail", True)}  # each episode stored with the domain it was played in
    assert stored[("bank", False)] == 2 * bank
    # a resumed run rebuilds each domain's pass rates from the episodes stored with that domain
    resumed = Rollouts(cfg, playing[0].opened, store, lm.tokenizer, ScriptedUser, playing=playing)
    resumed._replay(step=100)

    def rates(r):
        return [{n: list(q) for n, q in s.curriculum.recent.items()} for s in r.sources]

    assert rates(resumed) == rates(rollouts) and any(rates(resumed)[1].values())


@pytest.mark.slow  # ~30 s: the oracle plays every training task of both domains, tiny their test tasks
def test_a_pipeline_over_bank_and_retail_mixes_sft_data_and_evaluates_each_domain_and_all(in_tmp):
    (in_tmp / "mix.yaml").write_text("stages: [synth, eval]\nsynth: {trials: 1}\neval: {max_turns: 1, concurrency: 20}\n"
                                     "domains:\n  - {name: bank, weight: 3}\n  - retail\n")
    r = runner.invoke(app, ["train", str(in_tmp / "mix.yaml"), "run_id=s1", "model.max_new_tokens=4"])
    assert r.exit_code == 0, r.output
    run = in_tmp / "runs" / "s1"
    stages = json.loads((run / "stages.json").read_text())
    rows = [json.loads(line) for line in (run / "sft.jsonl").read_text().splitlines()]
    counts = Counter(row["domain"] for row in rows)
    figures = stages["synth"]["domains"]
    assert counts == {d: f["mixed"] for d, f in figures.items()} and stages["synth"]["kept"] == len(rows)
    assert abs(counts["bank"] / len(rows) - 0.75) <= 1 / len(rows)  # 3:1 up to rounding
    assert (run / "sft-bank.jsonl").is_file() and (run / "synth-retail" / "runs.sqlite").is_file()
    base = stages["eval"]["base"]  # the row is over both domains' test tasks, each domain's figures beside it
    assert base["episodes"] == base["domains"]["bank"]["episodes"] + base["domains"]["retail"]["episodes"]
    assert {t.split("/")[0] for t in base["per_task"]} == {"bank", "retail"} and "tiny-bank+retail-" in base["model"]
    assert "base by domain: bank pass^1 0.000 over 20 episodes, retail pass^1" in r.output, r.output
    at = next(i for i, row in enumerate(rows) if row["domain"] == "retail")
    r = runner.invoke(app, ["data", "show", str(run / "sft.jsonl"), "--index", str(at)])
    assert r.exit_code == 0 and f"#{at}: domain retail, task " in r.output, r.output


@pytest.mark.slow
def test_grpo_over_bank_and_retail_logs_per_domain_metrics_heldout_and_report(in_tmp):
    r = runner.invoke(app, ["train", "grpo", "--domain", "bank:3", "--domain", "retail", "grpo.group_size=2",
                            "grpo.tasks_per_step=2", "grpo.max_turns=2", "grpo.max_new_tokens=8", "grpo.steps=2",
                            "grpo.eval_every=2", "grpo.eval_tasks=template:all", "grpo.eval_n=2", "eval.max_turns=1",
                            "model.max_new_tokens=8", "run_id=g1"])
    assert r.exit_code == 0, r.output
    from muactl.runs.store import RunStore

    store = RunStore.open("g1")
    assert store.info()["domain"] == "bank+retail"
    names = {row["name"] for row in store.db["metrics"].rows}
    for d in ("bank", "retail"):
        assert {f"domain/{d}/groups", f"domain/{d}/groups_with_signal", f"domain/{d}/heldout_success"} <= names, names
    assert {"domain/bank/reward", "domain/retail/reward"} & names and "heldout/success" in names
    groups = sum(row["value"] for row in store.db["metrics"].rows if row["name"].endswith("/groups"))
    assert groups == 4  # 2 steps x 2 groups, each of one domain
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    [events] = (in_tmp / "runs" / "g1" / "tensorboard" / "grpo").rglob("events.out.tfevents*")
    tags = EventAccumulator(str(events)).Reload().Tags()["scalars"]
    assert any(t.endswith("domain/bank/groups") for t in tags) and any(t.endswith("domain/retail/groups") for t in tags), tags
    r = runner.invoke(app, ["report", "g1"])
    page = (in_tmp / "runs" / "g1" / "report" / "index.html").read_text()
    assert r.exit_code == 0 and "<h2>Domains</h2>" in page and "<td>retail</td>" in page


def test_sft_says_per_domain_how_many_rows_fit_max_length():
    """A row longer than sft.max_length is skipped, which shifts a mix away from its weights: SFT says so."""
    from muactl.domain.open import open_domain
    from muactl.models.folder import load_tokenizer
    from muactl.models.registry import resolve
    from muactl.train.sft import domains_fitting

    tokenizer = load_tokenizer(resolve("tiny", open_domain("bank", with_tasks=False).compiled))

    def row(domain: str, words: int) -> dict:
        return {"domain": domain, "messages": [{"role": "user", "content": "hello " * words},
                                               {"role": "assistant", "content": "Yes."}]}

    rows = [row("bank", 3), row("bank", 3), row("retail", 3), row("retail", 400)]
    assert domains_fitting(tokenizer, rows, max_length=200) == "bank 2 of 2, retail 1 of 2"


@pytest.mark.slow  # ~1 min: the import, then the oracle on every airline and bank training task
@pytest.mark.skipif(not os.environ.get("TAU2_BENCH"), reason="set TAU2_BENCH to a τ²-bench checkout to import its data")
def test_a_pipeline_over_bank_and_an_imported_tau2_domain(in_tmp):
    """The issue's third domain: τ² airline imported from the checkout, mixed 1:1 with bank."""
    r = runner.invoke(app, ["import", "tau2", os.environ["TAU2_BENCH"], "--domain", "airline"])
    assert r.exit_code == 0, r.output
    (in_tmp / "mix.yaml").write_text("stages: [synth, eval]\nsynth: {trials: 1}\neval: {max_turns: 1, concurrency: 20}\n"
                                     "domains:\n  - bank\n  - tau2-airline\n")
    r = runner.invoke(app, ["train", str(in_tmp / "mix.yaml"), "run_id=t1", "model.max_new_tokens=4"])
    assert r.exit_code == 0, r.output
    stages = json.loads((in_tmp / "runs" / "t1" / "stages.json").read_text())
    assert set(stages["synth"]["domains"]) == {"bank", "tau2-airline"}
    mixed = {d: f["mixed"] for d, f in stages["synth"]["domains"].items()}
    assert abs(mixed["bank"] - mixed["tau2-airline"]) <= 1 and min(mixed.values()) > 0, mixed
    base = stages["eval"]["base"]
    assert set(base["domains"]) == {"bank", "tau2-airline"}
    assert base["episodes"] == sum(f["episodes"] for f in base["domains"].values())
