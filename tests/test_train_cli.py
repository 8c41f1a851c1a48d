"""`muactl train --resume RUN` on its own (issue 25.6): the run folder says what it was (sft, grpo or a
recipe) and its saved config is resumed; a stage that disagrees with the run, or a run that is not a
training run, is refused with the command that does continue it. The model is the tiny test model."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf
from typer.testing import CliRunner

from muactl.cli import app
from muactl.runs.store import RunStore
from muactl.train.recipes import compose

runner = CliRunner()


def _run(kind: str, run_id: str, overrides: list[str]) -> RunStore:
    """A run folder as `muactl train` leaves it (its resolved config saved), without training anything."""
    cfg = compose(None, overrides + [f"run_id={run_id}"])
    store = RunStore.create(kind, "bank", OmegaConf.to_container(cfg, resolve=True), run_id=run_id)
    store.update(status="interrupted")
    store.unlock()
    return store


@pytest.mark.parametrize("kind, shown", [("grpo", "steps: 7"), ("sft", "max_steps: 5"), ("train", "stages:")])
def test_resume_alone_reads_what_the_run_was(in_tmp, kind, shown):
    # before the fix: exit 2, "Missing argument 'what'", whatever the run was
    _run(kind, "r1", ["grpo.steps=7", "sft.max_steps=5"])
    r = runner.invoke(app, ["train", "--resume", "r1", "--cfg"])
    assert r.exit_code == 0, r.output
    assert shown in r.output and "run_id: r1" in r.output


def test_resume_alone_takes_overrides_after_it(in_tmp):
    _run("grpo", "r2", ["grpo.steps=7"])
    r = runner.invoke(app, ["train", "--resume", "r2", "grpo.steps=9", "--cfg"])
    assert r.exit_code == 0 and "steps: 9" in r.output, r.output


def test_a_stage_that_disagrees_with_the_run_says_what_to_pass(in_tmp):
    _run("sft", "r3", [])
    r = runner.invoke(app, ["train", "grpo", "--resume", "r3", "--cfg"])
    assert r.exit_code == 2 and "run r3 is a sft run" in r.output and "muactl train --resume r3" in r.output, r.output
    r = runner.invoke(app, ["train", "sft", "--resume", "r3", "--cfg"])  # the same stage, named: fine
    assert r.exit_code == 0, r.output


def test_an_eval_run_is_sent_to_eval(in_tmp):
    _run("eval", "r4", [])
    r = runner.invoke(app, ["train", "--resume", "r4"])
    assert r.exit_code == 2 and "not a training run" in r.output and "muactl eval --resume r4" in r.output, r.output


def test_train_with_nothing_says_what_to_pass(in_tmp):
    r = runner.invoke(app, ["train"])
    assert r.exit_code == 2 and "--resume RUN_ID" in r.output and "stage (sft, grpo, user)" in r.output, r.output


@pytest.mark.slow
def test_resume_alone_continues_an_sft_run_from_its_checkpoint(in_tmp):
    """End to end on the tiny model: one step, kept (keep_checkpoints=true), then `train --resume RUN sft.max_steps=2`
    goes on from it; the run's saved config keeps them on."""
    r = runner.invoke(app, ["synth", "bank", "--trials", "1", "--tasks", "move-quin,close-ned", "-o", "d.jsonl"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["train", "sft", "data=d.jsonl", "sft.max_steps=1", "sft.batch_size=2", "sft.save_steps=1",
                            "keep_checkpoints=true", "run_id=s1"])
    assert r.exit_code == 0 and "removed" not in r.output, r.output
    sft = in_tmp / "runs" / "s1" / "sft"
    # the model card travels with every checkpoint: tiny is prompted with the compact tool list
    assert json.loads((sft / "checkpoint-1" / "muactl.json").read_text()) == {"format": "chatml", "tools": "compact"}
    assert (sft / "checkpoint-1" / "optimizer.pt").is_file()
    r = runner.invoke(app, ["train", "--resume", "s1", "sft.max_steps=2"])
    assert r.exit_code == 0 and "resuming from" in r.output and "sft/checkpoint-1" in r.output, r.output
    assert RunStore.open("s1").info()["status"] == "finished"
    assert sorted(p.name for p in sft.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]


def _finished_sft_run(in_tmp, run_id: str, leftover: bool) -> RunStore:
    """A `train sft` run as it ends: finished, checkpoint-final written; with `leftover`, a checkpoint-N that a
    removal cut off left behind (no trainer_state.json: nothing to resume from). No training: only the files."""
    (in_tmp / "d.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", '
                                    '"content": "hello"}]}\n')
    store = _run("sft", run_id, ["data=d.jsonl", "sft.max_steps=2"])
    (store.path / "checkpoint-final").mkdir()
    (store.path / "checkpoint-final" / "config.json").write_text("{}")
    if leftover:
        (store.path / "sft" / "checkpoint-2").mkdir(parents=True)
        (store.path / "sft" / "checkpoint-2" / "optimizer.pt").write_bytes(b"x" * 1000)
    store.update(status="finished", summary={"sft": {"steps": 2}, "checkpoint": str(store.path / "checkpoint-final")})
    return store


def test_resuming_a_finished_sft_run_without_checkpoints_trains_nothing(in_tmp, monkeypatch):
    """Its checkpoint-N removed, a finished run resumed would train from step 0: it is skipped instead (what a cut-off
    removal left goes), more steps are refused with what to do, and sft.resume=false still starts over."""
    import muactl.train.sft as sft

    store = _finished_sft_run(in_tmp, "f1", leftover=True)
    trained = []
    monkeypatch.setattr(sft, "run_sft", lambda cfg, store, data, log: trained.append(cfg) or (None, {}))
    r = runner.invoke(app, ["train", "--resume", "f1"])
    assert r.exit_code == 0 and "its sft finished already" in r.output and not trained, r.output
    assert not (store.path / "sft" / "checkpoint-2").exists() and "removed its 1 resumable checkpoint" in r.output
    assert RunStore.open("f1").info()["status"] == "finished"
    r = runner.invoke(app, ["train", "--resume", "f1", "sft.max_steps=5"])
    assert r.exit_code == 2 and "sft.max_steps=5 cannot train it on" in r.output and not trained, r.output
    assert f"muactl train sft model={store.path / 'checkpoint-final'}" in r.output
    r = runner.invoke(app, ["train", "--resume", "f1", "sft.resume=false"])
    assert r.exit_code == 0 and len(trained) == 1, r.output


# ---------------------------------------------------------------- input checked before any work (issue 27.2)


@pytest.mark.parametrize("args, message", [
    (["grpo", "model=runs/nosft/checkpoint-final"], "unknown model 'runs/nosft/checkpoint-final'"),
    (["grpo", "model=half"], "half is not a complete model checkpoint (no weights and no tokenizer file)"),
    (["sft", "data=d.jsonl", "model=config-and-weights"], "config-and-weights is not a complete model checkpoint "
                                                         "(no tokenizer file)"),
    (["sft", "data=data/missing.jsonl"], "data file data/missing.jsonl not found"),
    (["sft"], "sft needs data=FILE.jsonl"),
    (["grpo", "domain=no-such-domain"], "no-such-domain"),
    (["grpo", "tasks=template:nope"], "no template 'nope'"),
    (["examples/x.yaml", "eval.tasks=[no-such-task]"], "eval.tasks: no task 'no-such-task'"),
    (["examples/x.yaml", "synth.tasks=template:nope"], "synth.tasks: no template 'nope'"),
    (["examples/x.yaml", "stages=[synth,rl]"], "unknown stages ['rl']"),
])
def test_bad_train_input_fails_before_a_run_folder_exists(in_tmp, args, message):
    # before the fix: the ~110-line config was printed, a run folder made, and `muactl runs` listed it as failed
    (in_tmp / "examples").mkdir()
    (in_tmp / "examples" / "x.yaml").write_text("domain: bank\nmodel: tiny\n")
    (in_tmp / "d.jsonl").write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    for folder, files in {"half": ["config.json"], "config-and-weights": ["config.json", "model.safetensors"]}.items():
        (in_tmp / folder).mkdir()  # a copy cut off part way: before the fix, the load failed inside a new run folder
        for name in files:
            (in_tmp / folder / name).write_text("{}")
    r = runner.invoke(app, ["train", *args, "run_id=bad"])
    assert r.exit_code == 2 and message in r.output, r.output
    assert "grpo:\n" not in r.output and "run:" not in r.output  # no config dump, no run announced
    assert not (in_tmp / "runs" / "bad").exists()
    listed = runner.invoke(app, ["runs"])
    assert listed.output.startswith("no runs in"), listed.output


def _recipe_run_after_synth(run_id: str, data: str) -> RunStore:
    """A recipe run whose synth stage finished (stages.json names its data), cut off before sft."""
    store = _run("train", run_id, ["domain=bank", "model=tiny", "stages=[synth,sft]"])
    (store.path / "stages.json").write_text(json.dumps({"synth": {"data": data, "kept": 1}}))
    return store


def test_resuming_a_recipe_with_stages_sft_takes_the_runs_own_synth_data(in_tmp, monkeypatch):
    # before the fix: exit 2 "sft needs data=FILE.jsonl", though the pipeline would read the run's synth output
    import muactl.train.pipeline as pipeline

    data = in_tmp / "kept.jsonl"
    data.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n')
    _recipe_run_after_synth("r5", str(data))
    reached = []
    monkeypatch.setattr(pipeline, "run_pipeline", lambda cfg, store, log: reached.append(list(cfg.stages)) or {})
    r = runner.invoke(app, ["train", "--resume", "r5", "stages=[sft]"])
    assert r.exit_code == 0 and reached == [["sft"]], r.output


def test_resuming_with_stages_sft_when_the_runs_synth_data_is_gone_says_so(in_tmp):
    _recipe_run_after_synth("r6", "runs/r6/sft.jsonl")
    r = runner.invoke(app, ["train", "--resume", "r6", "stages=[sft]"])
    assert r.exit_code == 2 and "data file runs/r6/sft.jsonl not found" in r.output, r.output


def test_good_task_lists_pass_the_checks(in_tmp):
    from muactl.domain.open import open_domain
    from muactl.train.inputs import check_tasks

    bank = open_domain("bank")
    for tasks in (compose(None, ["eval.tasks=[template:balance]"]).eval.tasks, "template:all", "test", ["move-quin"]):
        check_tasks(bank, tasks, "eval.tasks")


def test_bad_sft_data_names_the_line(in_tmp):
    (in_tmp / "d.jsonl").write_text('{"messages": []}\nnot json\n')
    r = runner.invoke(app, ["train", "sft", "data=d.jsonl", "run_id=bad"])
    assert r.exit_code == 2 and "d.jsonl:2: invalid JSON" in r.output, r.output
    assert not (in_tmp / "runs" / "bad").exists()


def test_the_config_is_printed_only_when_asked(in_tmp):
    r = runner.invoke(app, ["train", "grpo", "--show-config"])
    assert r.exit_code == 0 and "group_size: 8" in r.output
    assert not (in_tmp / "runs").exists()


@pytest.mark.parametrize("override, hint", [("sft.epoch=2", "did you mean sft.epochs?"), ("seeed=1", "did you mean seed?"),
                                            ("grpo.stepz=3", "did you mean grpo.steps?")])
def test_a_misspelt_override_gets_did_you_mean(in_tmp, override, hint):
    r = runner.invoke(app, ["train", "sft", override, "--cfg"])
    assert r.exit_code == 2 and hint in r.output, r.output


@pytest.mark.parametrize("kind, stage, override", [("train", "grpo", "grpo.steps=16"), ("train", "sft", "sft.epochs=3"),
                                                   ("user", "sft", "sft.epochs=3")])
def test_a_finished_stage_asked_to_train_longer_is_refused(in_tmp, kind, stage, override):
    # before the fix: the stage recorded in stages.json was skipped, the run said "finished" and trained nothing more
    from muactl.train.checkpoints import check_finished_stages
    from muactl.runs.stages import save_stages

    store = _run(kind, "rs", ["grpo.steps=8", "sft.epochs=2"])
    save_stages(store, {stage: {"checkpoint": str(store.path / stage / "checkpoint-final")}})
    args = ["train", *(["user"] if kind == "user" else []), "--resume", "rs", override]
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and f"finished its {stage} stage" in r.output and override in r.output, r.output
    assert f"muactl train {stage} model={store.path / stage / 'checkpoint-final'}" in r.output
    assert RunStore.open("rs").info()["status"] == "interrupted"  # refused before the run was touched
    check_finished_stages(store, compose(store.path / "config.yaml", []), {stage: {"checkpoint": "x"}})  # unchanged: fine
