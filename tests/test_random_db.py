"""Randomized databases: generators declared in domain.yaml, drawn offline from a seed."""

from __future__ import annotations

from pathlib import Path

import pytest

from muactl.errors import SpecError
from muactl.compile.randomdb import draw_rows, instance, instance_bytes
from muactl.env.gold import gold_hash
from muactl.domain.validate import validate_domain
from muactl.env.sandbox import new_env



def _rows(domain):
    env = new_env(domain)
    try:
        return {t: sorted(map(repr, env.rows(t))) for t in domain.tables}
    finally:
        env.close()


def test_same_seed_same_database_new_seed_new_database(bank):
    a, b, c = instance(bank.compiled, 11), instance(bank.compiled, 11), instance(bank.compiled, 12)
    assert _rows(a) == _rows(b)
    assert _rows(a) != _rows(c)
    assert _rows(a) != _rows(bank.compiled)  # the fixed seed database is untouched
    assert instance(bank.compiled, None) is bank.compiled


def test_bank_instance_has_the_seed_databases_shape(bank):
    rows = draw_rows(bank.spec.domain.database.generate, 5)
    customers, accounts = rows["customers"], rows["accounts"]
    assert len(customers) == 40 and len({c["name"] for c in customers}) == 40
    ids = {c["customer_id"] for c in customers}
    assert all(i[0] == "c" and 10 <= int(i[1:]) <= 99 for i in ids)
    assert len({a["account_id"] for a in accounts}) == len(accounts)
    kinds = {}
    for a in accounts:
        assert a["customer_id"] in ids and a["balance"] % 5 == 0 and 0 <= a["balance"] <= 600
        kinds.setdefault(a["customer_id"], []).append(a["kind"])
    assert all(k.count("checking") == 1 and len(set(k)) == len(k) for k in kinds.values())


def test_gold_hash_is_per_instance(bank):
    from muactl.domain.task_templates import instantiate

    from muactl.errors import GoldReplayFailed

    ts = next(t for t in bank.templates if t.id == "move")
    task, why = instantiate(ts, bank, 3, 77)
    other, why2 = instantiate(ts, bank, 3, 78)
    assert task is not None and other is not None, (why, why2)
    assert gold_hash(task, instance(bank.compiled, 77)) != gold_hash(other, instance(bank.compiled, 78))
    with pytest.raises(GoldReplayFailed):  # an instance's gold path names that database's customers and accounts
        gold_hash(task, instance(bank.compiled, 78))


def test_building_an_instance_is_cheap(bank):
    import time

    t = time.perf_counter()
    for s in range(20):
        instance_bytes(bank.compiled, 50_000 + s)
    assert (time.perf_counter() - t) / 20 < 0.5  # generous: the real figure (ms) is in benchmarks/random_db.py


GEN = """
  generate:
    patients:
      rows: 5
      columns:
        patient_id: {pattern: "p{nn}", unique: true}
        name: {choice: [Ann, Bob, Cid, Dee, Eve, Fay], unique: true}
"""


def _with_generate(project: Path, text: str) -> None:
    path = project / "domains/clinic/domain.yaml"
    src = path.read_text()
    assert "  seed: data/\n" in src
    path.write_text(src.replace("  seed: data/\n", "  seed: data/\n" + text, 1))


def _problems(name="clinic"):
    with pytest.raises(SpecError) as e:
        validate_domain(name)
    return e.value.problems


def _line(project: Path, snippet: str) -> int:
    lines = (project / "domains/clinic/domain.yaml").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if snippet in line)


def test_generator_errors_name_file_and_line(project):
    import yaml

    doc = yaml.safe_load((project / "domains/clinic/domain.yaml").read_text())
    cols = doc["database"]["tables"]["patients"]["columns"]
    assert "patient_id" in cols and "name" in cols, cols
    _with_generate(project, GEN.replace("{choice: [Ann", "{int: [1, 5], choice: [Ann"))
    probs = _problems()
    msgs = " | ".join(p.message for p in probs)
    assert "exactly one of" in msgs and "(got choice, int)" in msgs
    assert all(p.file.endswith("domain.yaml") for p in probs)
    assert any(p.line == _line(project, "name: {int") for p in probs)


def test_generator_semantic_errors(project):
    _with_generate(project, GEN.replace('name: {choice', 'nmae: {choice').replace(
        "rows: 5", "rows: 5").replace('pattern: "p{nn}"', 'pattern: "p{nn}{oops}"'))
    probs = _problems()
    msgs = {p.message.split(" (")[0].split(";")[0] for p in probs}
    assert any("'nmae' is not a column" in m for m in msgs), msgs
    assert any("{oops}" in p.message and p.line == _line(project, "p{nn}{oops}") for p in probs)


def test_generator_unique_exhausted_is_reported(project):
    _with_generate(project, GEN.replace("rows: 5", "rows: 9"))
    probs = _problems()
    assert any("unique" in p.message for p in probs)


def test_generator_pattern_naming_a_later_column_is_reported(project):
    _with_generate(project, GEN.replace('pattern: "p{nn}"', 'pattern: "p-{name}"'))
    probs = _problems()
    assert any("{name}" in p.message and "drawn after" in p.message for p in probs), [p.message for p in probs]


@pytest.mark.timeout(120)  # before the limits: a billion rows were drawn in Python until memory ran out
def test_generators_are_bounded(project, monkeypatch):
    monkeypatch.setattr("muactl.compile.randomdb.MAX_GENERATED_ROWS", 1000)  # the real 100,000 takes seconds to reach
    _with_generate(project, GEN.replace("rows: 5", "rows: 1000000000").replace('"p{nn}"', '"p{nnnnnnnnnnnn}"').replace(
        "name: {choice: [Ann, Bob, Cid, Dee, Eve, Fay], unique: true}", "name: {pattern: 'n{nnnnnn}'}"))
    assert any("more than 1,000 rows (MAX_GENERATED_ROWS)" in p.message for p in _problems())
    path = project / "domains/clinic/domain.yaml"
    path.write_text(path.read_text().replace("rows: 1000000000", "rows: 5").replace("n{nnnnnn}", "n{" + "n" * 5000 + "}"))

    assert any("over 64 characters (MAX_PATTERN_SLOT)" in p.message for p in _problems())
