"""Task templates: generation (deterministic, deduplicated, gold paths replayed), validation errors
with file:line, train/test disjointness, on-the-fly instances in eval and GRPO, and the CLI."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.errors import SpecError, UsageError
from muactl.eval.config import EvalConfig
from muactl.eval.evaluate import run_eval
from muactl.spec.tasks import load_task_file, load_tasks
from muactl.domain.task_templates import draw_stream, generate, instance_key, write_tasks
from muactl.domain.validate import validate_domain

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()





def test_builtin_templates_cover_the_task_kinds(bank, retail):
    assert len(bank.templates) >= 5 and len(retail.templates) >= 8
    for opened in (bank, retail):
        hand = {tag for t in opened.tasks for tag in t.task.tags}
        made = {tag for ts in opened.templates for tag in ts.template.tags}
        assert {"write", "info", "refuse"} <= made
        assert made <= hand | {"modify-items", "decline"}  # kinds only templates make
    assert bank.spec.domain.database.generate


def test_generation_is_deterministic_and_carries_provenance(bank, tmp_path):
    a = generate(bank, None, 30, 5, db_seed=100)
    b = generate(bank, None, 30, 5, db_seed=100)
    c = generate(bank, None, 30, 6, db_seed=100)
    ids = [t.task.id for t in a.tasks]
    assert ids == [t.task.id for t in b.tasks] and len(set(ids)) == 30
    assert ids != [t.task.id for t in c.tasks]
    o = a.tasks[0].task.origin
    assert o.template == "move" and o.seed == 5 and o.db_seed == 100 and o.bindings["customer_id"]
    write_tasks(a.tasks, tmp_path / "one.yaml")
    write_tasks(b.tasks, tmp_path / "two.yaml")
    assert (tmp_path / "one.yaml").read_text() == (tmp_path / "two.yaml").read_text()
    loaded = load_task_file(tmp_path / "one.yaml")  # an ordinary task file
    assert [t.task for t in loaded] == [t.task for t in a.tasks]


def test_duplicate_bindings_are_written_once(bank):
    drawn = generate(bank, ["close"], 200, 0)  # few empty accounts in the seed database
    keys = [instance_key(t.task) for t in drawn.tasks]
    assert len(keys) == len(set(keys)) < 200 and drawn.duplicates > 0


def test_failing_gold_paths_are_dropped_and_reported(bank):
    from muactl.domain.task_templates import TaskTemplateSpec, draw

    ts = next(t for t in bank.templates if t.id == "move")
    data = dict(ts.data, expect={**ts.data["expect"], "actions": ts.data["expect"]["actions"][:2]})
    broken = TaskTemplateSpec(ts.template, ts.file, ts.index, ts.doc, data)
    drawn = draw(bank, [broken], 3, lambda k: (k, None))
    assert not drawn.tasks and len(drawn.dropped) >= 3
    assert "assertion" in drawn.dropped[0][3]


def test_train_and_test_instances_are_disjoint(bank):
    train = draw_stream(bank, "template:all", 300, seed=0, db="random", split="train").tasks
    test = draw_stream(bank, "template:all", 100, seed=0, db="random", split="test").tasks
    assert not {instance_key(t.task) for t in train} & {instance_key(t.task) for t in test}
    assert not {t.task.origin.db_seed for t in train} & {t.task.origin.db_seed for t in test}
    # different run seeds draw different train instances, still never a test one
    other = draw_stream(bank, "template:all", 50, seed=7, db="random", split="train").tasks
    assert not {instance_key(t.task) for t in other} & {instance_key(t.task) for t in test}


def test_a_template_named_twice_is_drawn_twice_as_often(bank):
    # how `muactl train user` gives a rare behaviour more episodes (README: retail's decline-exchange drawn 4x)
    from collections import Counter

    drawn = draw_stream(bank, "template:balance,move,move", 30, seed=0, db="random", split="train").tasks
    assert Counter(t.task.origin.template for t in drawn) == {"move": 20, "balance": 10}
    assert len({instance_key(t.task) for t in drawn}) == 30  # distinct instances, not copies


def _pairs(drawn):
    tasks = [t.task for t in drawn.tasks]
    return list(zip(tasks[::2], tasks[1::2]))


def test_contrast_pairs_differ_only_where_the_decision_does(bank):
    from collections import Counter

    spec = "template:refuse-overdraft,refuse-close-nonempty,refuse-close-nonempty"
    drawn = draw_stream(bank, spec, 40, seed=1, db="random", split="train", contrast=True)
    assert len(drawn.tasks) == 40 and len({instance_key(t.task) for t in drawn.tasks}) == 40
    assert any("contrast: no sample row" in why for _, _, _, why in drawn.dropped)  # pairs not made are dropped whole
    kinds = Counter((a.origin.template, b.origin.template) for a, b in _pairs(drawn))
    assert set(kinds) == {("refuse-overdraft", "move"), ("refuse-close-nonempty", "close")}, kinds
    for refuse, write in _pairs(drawn):
        r, w = refuse.origin.bindings, write.origin.bindings
        assert refuse.origin.db_seed == write.origin.db_seed and r["customer_id"] == w["customer_id"]
        if refuse.origin.template == "refuse-overdraft":  # the same two accounts: one amount fits, one does not
            assert (r["from_id"], r["to_id"]) == (w["from_id"], w["to_id"])
            assert w["amount"] <= r["from_balance"] < r["amount"]
        else:  # the same customer: this account is empty, that one is not
            assert r["balance"] > 0 and write.expect.actions[-1] == {"close_account": {"account_id": w["account_id"]}}
    odd = draw_stream(bank, "template:refuse-overdraft", 3, seed=1, db="random", split="train", contrast=True)
    assert [t.task.origin.template for t in odd.tasks] == ["refuse-overdraft", "move", "refuse-overdraft"]  # n counts both halves
    # each pair's first half is the stream's own instance; without --contrast the stream is what it always was
    plain = draw_stream(bank, spec, 90, seed=1, db="random", split="train")
    assert {instance_key(a) for a, _ in _pairs(drawn)} <= {instance_key(t.task) for t in plain.tasks}
    assert all(t.task.origin.template != "move" for t in plain.tasks)


def test_a_contrast_on_a_column_the_template_lacks_drops_the_pair(bank):
    from muactl.domain.task_templates import TaskTemplateSpec, draw
    from muactl.spec.task_templates import Contrast

    ts = next(t for t in bank.templates if t.id == "refuse-overdraft")
    odd = TaskTemplateSpec(ts.template.model_copy(update={"contrast": Contrast(template="move", same=["nope"])}),
                           ts.file, ts.index, ts.doc, ts.data)
    drawn = draw(bank, [odd], 2, lambda k: (k, None), contrast=True, max_tries=3)
    assert not drawn.tasks and drawn.dropped[0][3] == "contrast: nope is not a binding of template 'refuse-overdraft'"


def test_synth_contrast_cli_writes_pairs_the_oracle_solves(in_tmp):
    import json

    res = runner.invoke(app, ["synth", "bank", "--tasks", "template:refuse-overdraft", "--contrast", "--n", "6",
                              "--db", "random", "--trials", "1", "-o", "pairs.jsonl"])
    assert res.exit_code == 0, res.output
    assert "kept 6 of 6" in res.output
    ids = [json.loads(line)["task_id"] for line in (in_tmp / "pairs.jsonl").read_text().splitlines()]
    assert sorted(i.rsplit("-", 1)[0] for i in ids) == ["move"] * 3 + ["refuse-overdraft"] * 3  # in the order they end
    # the run's tasks read back (as `train user` does with user_sft.runs) include the partners
    from muactl.domain.open import open_domain
    from muactl.runs.store import RunStore
    from muactl.train.user_sft import run_tasks

    run_id = res.output.split("/runs/")[1].split("/")[0]
    assert set(ids) <= set(run_tasks(RunStore.open(run_id), open_domain("bank")))
    for args, message in ((["--n", "2"], "give --tasks template:"),
                          (["--tasks", "template:move", "--n", "2"], "none of the templates move declares a contrast")):
        res = runner.invoke(app, ["synth", "bank", "--contrast", *args, "-o", "no.jsonl"])
        assert res.exit_code == 2 and message in res.output, res.output
    assert not (in_tmp / "no.jsonl").exists()


def test_oracle_solves_every_instance_on_random_databases(in_tmp, bank):
    cfg = EvalConfig(domain="bank", tasks=["template:all"], n=28, db="random", seed=3, concurrency=8)
    store, summary = run_eval(cfg, opened=bank)
    assert summary["episodes"] == 28 and summary["pass^1"] == 1.0
    eps = store.episodes()
    assert len({e["task_id"] for e in eps}) == 28


def test_oracle_solves_retail_instances(in_tmp, retail):
    cfg = EvalConfig(domain="retail", tasks=["template:all"], n=18, seed=1, split="train", concurrency=8)
    _, summary = run_eval(cfg, opened=retail)
    assert summary["pass^1"] == 1.0


def test_generated_files_validate_beside_hand_written_ones(in_tmp):
    shutil.copytree(ROOT / "domains/bank", in_tmp / "domains/bank")
    shutil.copytree(ROOT / "tasks/bank", in_tmp / "tasks/bank")
    res = runner.invoke(app, ["tasks", "generate", "bank", "--all-templates", "--n", "14", "--seed", "9000",
                              "--db-seed", "9000", "--split", "test", "-o", "tasks/bank/gen-test.yaml"])
    assert res.exit_code == 0, res.output
    assert "wrote 14 tasks" in res.output
    opened = validate_domain("bank")  # the random-database tasks replay on their own instances
    gen = [t for t in opened.tasks if t.task.origin]
    assert len(gen) == 14 and all(t.split == "test" for t in gen)
    store, summary = run_eval(EvalConfig(domain="bank", split="test", tasks=[t.task.id for t in gen]))
    assert summary["pass^1"] == 1.0


@pytest.mark.slow  # ~8 s of CPU: three validations of bank, templates included
def test_generated_tasks_for_a_builtin_domain_are_read_from_the_project(in_tmp):
    """`tasks generate bank ... -o tasks/bank/gen-train.yaml` (as the README does for retail), in a project
    without a bank of its own: validate counts the new tasks beside the built-in ones and eval plays them; a
    file written anywhere else is said to be read by nothing, with the folder it must go to."""
    builtin = len(load_tasks(ROOT / "tasks" / "bank"))
    res = runner.invoke(app, ["tasks", "generate", "bank", "--all-templates", "--n", "5", "--seed", "1",
                              "-o", "tasks/bank/gen-train.yaml"])
    assert res.exit_code == 0 and "read them with bank's other tasks" in res.output, res.output
    res = runner.invoke(app, ["validate", "bank"])
    assert res.exit_code == 0 and f"{builtin + 5} tasks" in res.output, res.output
    gen = [t.task.id for t in load_tasks(in_tmp / "tasks" / "bank")]
    _, summary = run_eval(EvalConfig(domain="bank", split="train", tasks=gen))
    assert summary["episodes"] == 5 and summary["pass^1"] == 1.0
    res = runner.invoke(app, ["tasks", "generate", "bank", "--all-templates", "--n", "3", "--seed", "50", "-o", "gen/x.yaml"])
    assert res.exit_code == 0 and "note: nothing reads gen/x.yaml where it is: move it into tasks/bank/" in res.output
    shutil.move("gen/x.yaml", "tasks/bank/x.yaml")
    assert f"{builtin + 8} tasks" in runner.invoke(app, ["validate", "bank"]).output


# ---------------------------------------------------------------- validation errors


TEMPLATE = """\
- id: cancel
  persona: [polite, brief]
  sample: >-
    SELECT p.phone, a.appointment_id, p.patient_id FROM appointments a JOIN patients p ON p.patient_id = a.patient_id
    WHERE a.status = 'scheduled'
  user:
    reason: You want to cancel appointment {appointment_id}.
    known: Your phone number is {phone}.
  expect:
    actions:
      - find_patient_by_phone: {phone: "{phone}"}
      - list_appointments: {patient_id: "{patient_id}"}
      - cancel_appointment: {appointment_id: "{appointment_id}"}
    assert:
      - query: SELECT status FROM appointments WHERE appointment_id = '{appointment_id}'
        equals: cancelled
"""


def _templates(project: Path, text: str) -> Path:
    path = project / "tasks/clinic/templates.yaml"
    path.write_text(text)
    return path


def _line(path: Path, snippet: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if snippet in line)


def test_a_sound_template_validates(project):
    _templates(project, TEMPLATE)
    opened = validate_domain("clinic")
    assert [t.id for t in opened.templates] == ["cancel"]


@pytest.mark.parametrize("old, new, snippet, fragment", [
    ("known: Your phone number is {phone}.", "known: Your phone number is {phnoe}.", "{phnoe}",
     "placeholder {phnoe} is not bound"),
    ("WHERE a.status = 'scheduled'", "WHERE a.status = 'no-such-status'", "sample:", "returned no rows"),
    ("WHERE a.status = 'scheduled'", "WHERE a.stauts = 'scheduled'", "sample:", "stauts"),
    ("persona: [polite, brief]", "persona: [polite, grumpy]", "persona:", "undefined persona 'grumpy'"),
    ("- cancel_appointment:", "- cancel_apointment:", "cancel_apointment", "undefined tool"),
    ("equals: cancelled", "equals: canceled", "    assert:", "does not hold"),
    ("  user:", "  derive:\n    when: SELECT :nope\n  user:", "when:", ":nope is not bound"),
    ("  sample: >-", "  sampel: x\n  sample: >-", "sampel", "did you mean 'sample'"),
    ("  user:", "  contrast: {template: nope, same: [phone]}\n  user:", "contrast:", "no template 'nope' in this file"),
    ("  user:", "  contrast: {template: cancel, same: [phone]}\n  user:", "contrast:", "cannot be its own contrast"),
    ("  user:", "  contrast: {template: cancel, same: []}\n  user:", "contrast:", "at least 1"),
])
def test_template_problems_name_file_and_line(project, old, new, snippet, fragment):
    assert TEMPLATE.count(old) == 1
    path = _templates(project, TEMPLATE.replace(old, new))
    with pytest.raises(SpecError) as e:
        validate_domain("clinic")
    hits = [p for p in e.value.problems if fragment in p.message]
    assert hits, [p.message for p in e.value.problems]
    assert hits[0].file == str(path) and hits[0].line == _line(path, snippet), hits[0]


@pytest.mark.parametrize("same, fragment", [
    ("[nope]", "contrast: nope is not a binding of template 'refuse-close-nonempty'"),
    ("[balance]", "contrast: the sample query has no column balance"),  # close's sample has none
    ("[account_id]", "no pair could be drawn"),  # an empty account is never the non-empty one
])
def test_contrast_problems_name_file_and_line(in_tmp, same, fragment):
    shutil.copytree(ROOT / "domains/bank", in_tmp / "domains/bank")
    shutil.copytree(ROOT / "tasks/bank", in_tmp / "tasks/bank")
    path = in_tmp / "tasks/bank/templates.yaml"
    old = "contrast: {template: close, same: [customer_id]}"
    assert path.read_text().count(old) == 1
    path.write_text(path.read_text().replace(old, f"contrast: {{template: close, same: {same}}}"))
    with pytest.raises(SpecError) as e:
        validate_domain("bank")
    hits = [p for p in e.value.problems if fragment in p.message]
    assert hits, [p.message for p in e.value.problems]
    assert hits[0].file == str(path) and hits[0].line == _line(path, f"same: {same}"), hits[0]


def test_a_contrast_check_stops_at_the_first_budget_stop(bank, monkeypatch):
    # a sample or partner stopped by its SQL budget would spend it again on every later try (untrusted templates)
    from muactl.domain import template_checks
    from muactl.domain.task_templates import LimitStop

    ts = next(t for t in bank.templates if t.id == "refuse-overdraft")
    calls = []

    def stopped(*args, **kwargs):
        calls.append(args)
        return None, LimitStop("the sample query failed: budget")

    monkeypatch.setattr(template_checks, "instantiate", stopped)
    assert template_checks._check_contrast(ts, bank, 3) == [] and len(calls) == 1
    monkeypatch.undo()
    monkeypatch.setattr(template_checks, "contrast_partner", lambda *a: stopped(*a))
    assert template_checks._check_contrast(ts, bank, 3) == [] and len(calls) == 2


def test_a_partner_with_its_own_problem_is_not_called_missing(in_tmp):
    shutil.copytree(ROOT / "domains/bank", in_tmp / "domains/bank")
    shutil.copytree(ROOT / "tasks/bank", in_tmp / "tasks/bank")
    path = in_tmp / "tasks/bank/templates.yaml"
    old = "- id: close\n  description:"
    assert path.read_text().count(old) == 1
    path.write_text(path.read_text().replace(old, "- id: close\n  descripton:"))
    with pytest.raises(SpecError) as e:
        validate_domain("bank")
    assert [p.message for p in e.value.problems if "contrast" in p.message or "no template" in p.message] == []
    assert any("descripton" in p.message for p in e.value.problems)


def test_validate_cli_reports_template_problems(project):
    _templates(project, TEMPLATE.replace("{phone}.", "{phnoe}."))
    res = runner.invoke(app, ["validate", "clinic"])
    assert res.exit_code == 2
    assert "templates.yaml:" in res.output and "{phnoe}" in res.output


# ---------------------------------------------------------------- on the fly: CLI, config, GRPO


def test_eval_cli_with_templates_on_random_databases(in_tmp):
    res = runner.invoke(app, ["eval", "bank", "--tasks", "template:all", "--n", "14", "--db", "random", "--seed", "7",
                              "--agent", "oracle", "--user", "scripted"])
    assert res.exit_code == 0, res.output
    assert "1.000" in res.output
    res = runner.invoke(app, ["eval", "bank", "--tasks", "template:nope", "--n", "2"])
    assert res.exit_code == 2 and "no template 'nope'" in res.output
    res = runner.invoke(app, ["eval", "retail", "--tasks", "template:all", "--db", "random", "--n", "2"])
    assert res.exit_code == 2 and "no random database" in res.output


def test_tasks_generate_cli(in_tmp):
    out = in_tmp / "gen.yaml"
    res = runner.invoke(app, ["tasks", "generate", "retail", "--template", "cancel-pending", "--n", "5", "--seed", "1",
                              "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert len(load_task_file(out)) == 5
    res = runner.invoke(app, ["tasks", "generate", "retail", "--n", "5", "-o", str(out)])
    assert res.exit_code == 2 and "--all-templates" in res.output


def test_train_config_takes_template_tasks():
    from muactl.train.recipes import compose

    cfg = compose(None, ["tasks=template:all", "db=random"])
    assert (cfg.tasks, cfg.db) == ("template:all", "random")


def test_grpo_draws_a_fresh_instance_per_group(bank):
    from muactl.domain.task_templates import TEST_BASE
    from muactl.train.grpo import Rollouts

    grpo = SimpleNamespace(group_size=4, judge=None, band_low=0.1, band_high=0.9, instance_per_rollout=False,
                           band_retry=0)
    cfg = SimpleNamespace(seed=0, domain="bank", domains=None, db="random", tasks="template:all", grpo=grpo)
    r = Rollouts(cfg, bank, store=None, tokenizer=None, make_user=None)
    bank_source = r.sources[0]  # a run over one domain has one source of prompts
    jobs = r._jobs([(bank_source, "template:move")] * 4 + [(bank_source, "template:balance")] * 4, step=3)
    assert len({id(j.task) for j in jobs[:4]}) == 1 and jobs[0].task is not jobs[4].task
    seeds = {j.task.task.origin.db_seed for j in jobs}
    assert len(seeds) == 2 and all(s < TEST_BASE for s in seeds)
    assert jobs[0].domain.instance_key == f"db{jobs[0].task.task.origin.db_seed}"
    again = r._jobs([(bank_source, "template:move")] * 4, step=4)
    assert instance_key(again[0].task.task) != instance_key(jobs[0].task.task)


def test_unknown_template_is_a_usage_error(bank):
    with pytest.raises(UsageError):
        draw_stream(bank, "template:nope", 1, 0)


def test_eval_refuses_task_ids_and_templates_together(in_tmp):
    from typer.testing import CliRunner

    from muactl.cli import app

    r = CliRunner().invoke(app, ["eval", "bank", "--task", "move-mia", "--tasks", "template:move"])
    assert r.exit_code == 2 and "not both" in r.output
