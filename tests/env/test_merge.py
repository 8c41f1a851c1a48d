"""`builtin: merge`, a task's data patch (τ²'s initialization_data) as a setup call: records merged into a
declared table by primary key. Real SQLite, a real domain, validate and the oracle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from muactl.domain.validate import validate_domain
from muactl.env.sandbox import new_env

DOMAIN = """\
name: patch
description: Patched per task.
policy: none
database:
  tables:
    users:
      columns: {user_id: text, name: text, email: text, vip: boolean, prefs: json}
      primary_key: user_id
  seed:
    users:
      - {user_id: u1, name: Ann, email: ann@x.org, vip: false, prefs: {lang: en}}
tools:
  get_user:
    description: One user.
    params:
      user_id: {type: string}
    query: SELECT * FROM users WHERE user_id = :user_id
    returns: row
  set_email:
    description: Change a user's email.
    params:
      user_id: {type: string}
      email: {type: string}
    writes:
      - UPDATE users SET email = :email WHERE user_id = :user_id
    message: done
  update_records: {builtin: merge, side: env}
spec_version: 2
"""

TASKS = """\
- id: patched
  user: {reason: change the email of u2}
  setup:
    - update_records: {table: users, records: [{user_id: u1, vip: true}, {user_id: u2, name: Bo, prefs: {lang: fr}}]}
  expect:
    actions:
      - get_user: {user_id: u2}
      - set_email: {user_id: u2, email: bo@x.org}
"""


@pytest.fixture
def opened(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for sub, name, text in (("domains", "domain.yaml", DOMAIN), ("tasks", "test.yaml", TASKS)):
        (Path(tmp_path) / sub / "patch").mkdir(parents=True, exist_ok=True)
        (Path(tmp_path) / sub / "patch" / name).write_text(text)
    return validate_domain("patch")


def user(env, uid):
    return json.loads(env.call("get_user", {"user_id": uid}).content)


def test_records_are_merged_by_key_given_columns_replaced_new_keys_inserted(opened):
    env = new_env(opened.compiled)
    try:
        before = env.state_hash()
        r = env.call("update_records", {"table": "users", "records": [{"user_id": "u1", "vip": True},
                                                                       {"user_id": "u2", "name": "Bo"}]})
        assert r.content == "Merged 2 record(s) into users." and r.changed
        assert user(env, "u1") == {"user_id": "u1", "name": "Ann", "email": "ann@x.org", "vip": True,
                                   "prefs": {"lang": "en"}}  # only vip replaced
        assert user(env, "u2") == {"user_id": "u2", "name": "Bo", "email": None, "vip": None, "prefs": None}
        assert env.state_hash() != before and env.state_hash() == env.full_state_hash()
    finally:
        env.close()


@pytest.mark.parametrize("args, message", [
    ({"table": "nowhere", "records": []}, "'nowhere' is not a declared table"),
    ({"table": "users", "records": [{"name": "x"}]}, "record 0 of users has no primary key 'user_id'"),
    ({"table": "users", "records": [{"user_id": "u1", "age": 3}]}, "has no column 'age'"),
    ({"table": "users", "records": [{"user_id": "u1"}, {"user_id": "u3", "vip": "yes"}]}, "record 1 of users"),
])
def test_a_bad_record_changes_nothing_and_says_which(opened, args, message):
    env = new_env(opened.compiled)
    try:
        before = env.state_hash()
        r = env.call("update_records", args)
        assert r.error and message in r.content, r.content
        assert env.state_hash() == before
    finally:
        env.close()


def test_the_patch_is_a_tasks_setup_hidden_from_the_agent_and_the_oracle_is_paid(opened):
    from muactl.eval.config import EvalConfig
    from muactl.eval.evaluate import run_eval

    assert "update_records" not in [t.name for t in opened.compiled.agent_tools()]
    _, summary = run_eval(EvalConfig(domain="patch", split="all"), opened=opened)
    assert summary["avg_reward"] == 1.0  # u2 exists only through the setup's merge
