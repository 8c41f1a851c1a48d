"""Which files in tasks/<domain>/ hold tasks, and which split a task is in: *.yaml and *.yml are task
files (templates.yaml / templates.yml aside); a file's name is its tasks' split only for train and
test, so a task in any other file (dev.yaml) must say `split:` itself instead of silently becoming train."""

from __future__ import annotations

from typer.testing import CliRunner

from muactl.cli import app
from muactl.domain.open import open_domain

runner = CliRunner()

TASK = """\
- id: {id}
{split}  user:
    reason: You want to know your next appointment.
    known: Your phone number is 5550102.
  expect:
    actions:
      - find_patient_by_phone: {{phone: "5550102"}}
"""


def _write(project, name: str, task_id: str, split: str | None) -> None:
    text = TASK.format(id=task_id, split=f"  split: {split}\n" if split else "")
    (project / "tasks" / "clinic" / name).write_text(text)


def test_yml_task_files_are_read(project):
    _write(project, "extra.yml", "from-yml", "test")
    opened = open_domain("clinic")
    task = opened.task("from-yml")
    assert task.split == "test"
    r = runner.invoke(app, ["validate", "clinic"])
    assert r.exit_code == 0 and "5 tasks" in r.output, r.output


def test_a_file_not_named_after_a_split_needs_split_in_each_task(project):
    _write(project, "dev.yaml", "held-out", None)
    r = runner.invoke(app, ["validate", "clinic"])
    assert r.exit_code == 2
    assert "tasks/clinic/dev.yaml:1:3: [0].id: dev.yaml is not named after a split" in r.output, r.output
    assert "split: train` or `split: test`" in r.output
    _write(project, "dev.yaml", "held-out", "test")
    assert open_domain("clinic").task("held-out").split == "test"


def test_templates_yml_is_the_templates_file_not_tasks(project):
    (project / "tasks" / "clinic" / "templates.yml").write_text("[]\n")
    assert open_domain("clinic").templates == []  # read as (empty) templates, not as a task file
