"""reward.score on hand-built episodes of the real built-in domains (real SQLite, real gold replay):
each case states the exact value and the breakdown entry that decides it."""

from __future__ import annotations

import pytest

from muactl.env import gold
from muactl.env.gold import gold_hash
from muactl.episode.reward import output_said, score, tokens
from muactl.episode.types import EXCLUDED, Episode, outcome_of
from muactl.spec.tasks import TaskSpec
from muactl.spec.models import Task
from muactl.env.sandbox import new_env


def play(opened, task_id: str, said: list[str], termination: str = "user_stop", calls: list[dict] | None = None,
         transfer: bool = False, verdicts=None, task: Task | None = None):
    """Score an episode in which the agent made `calls` (default: the gold actions) and said `said`."""
    spec = opened.task(task_id)
    if task is not None:
        spec = TaskSpec(task, spec.file, spec.index, spec.doc)
    env = new_env(opened.compiled)
    env.replay(spec.task.setup)
    gold = spec.task.expect.actions if calls is None else calls
    messages = [{"role": "system", "content": "policy"}, {"role": "user", "content": "hello"}]
    for i, call in enumerate(gold):
        (name, args), = call.items()
        result = env.call(name, args)
        messages.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "name": name, "arguments": args}]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "name": name, "content": result.content, "error": result.error})
    messages += [{"role": "assistant", "content": text} for text in said]
    ep = Episode(spec.task.id, 0, 0, messages, termination)
    ep.final_hash = env.state_hash()
    try:
        value, breakdown = score(spec, opened.compiled, env, ep, verdicts)
    finally:
        env.close()
    ep.reward, ep.breakdown = value, breakdown
    return value, breakdown, ep


# ---------------------------------------------------------------- outputs


@pytest.mark.parametrize("required,text,said", [
    ("12", "you have 112 left", False),            # a number is not a part of a longer one
    ("12", "account a12", False),                  # nor of an id
    ("12", "it is 12.", True),
    ("$50", "that costs $500", False),
    ("$50", "that costs $50.", True),
    ("yes", "my eyes", False),                     # words match on token boundaries
    ("1,000", "your balance is 1000.00", True),    # numbers compare as numbers
    ("1000", "your balance is $1,000", True),
    ("1000.00", "you have 1000", True),
    ("1000", "you have 1,0000", False),
    ("226.74", "refunded 226.7", False),
    ("In Transit", "status:   in_transit", True),  # case, spacing and underscores ignored
    ("#W5252486", "order W5252486 is pending", True),
    ('["W5252486", "W9938814"]', "W9938814, and also W5252486", True),  # a JSON list: every value, any order
    ('["W5252486", "W9938814"]', "only W5252486", False),
    ('{"status": "delivered", "total": 15}', "It was delivered; the total was 15.00.", True),
])
def test_whole_token_output_matching(required, text, said):
    assert output_said(required, [text]) is said


def test_tokens_are_words_and_numbers():
    from decimal import Decimal

    assert tokens("Balance: $1,250.50 on a305 (12%)") == ["balance", Decimal("1250.50"), "on", "a305", Decimal("12")]


def test_balance_task_pays_for_the_number_said_and_only_it(bank):
    assert play(bank, "balance-pia", ["Your checking balance is 540."])[0] == 1.0
    value, b, _ = play(bank, "balance-pia", ["Your checking balance is 5400."])
    assert value == 0.0 and b["outputs"] == {"checking": True, "540": False} and b["db_match"] and b["ended_normally"]
    value, b, _ = play(bank, "balance-pia", [])  # missing output
    assert value == 0.0 and b["outputs"] == {"checking": False, "540": False}


def test_text_beside_a_tool_call_is_not_shown_to_the_user(bank):
    """The user never sees an assistant turn that carries tool calls; saying the number there earns nothing."""
    spec = bank.task("balance-pia")
    calls = spec.task.expect.actions
    value, b, ep = play(bank, "balance-pia", [], calls=calls)
    ep.messages.insert(2, {"role": "assistant", "content": "It is 540.", "tool_calls": [
        {"id": "x", "name": "find_customer", "arguments": {"name": "Pia"}}]})
    ep.messages.insert(3, {"role": "tool", "tool_call_id": "x", "name": "find_customer", "content": "c46"})
    env = new_env(bank.compiled)
    assert score(spec, bank.compiled, env, ep)[0] == 0.0
    ep.messages.append({"role": "assistant", "content": "Your checking has 540.", "malformed": "bad call"})  # parse failures too
    assert score(spec, bank.compiled, env, ep)[0] == 0.0
    ep.messages.append({"role": "assistant", "content": "Your checking has 540."})
    assert score(spec, bank.compiled, env, ep)[0] == 1.0
    env.close()


def test_the_domain_greeting_is_not_the_agents_output(bank):
    value, b, ep = play(bank, "balance-pia", [])
    ep.messages.insert(1, {"role": "assistant", "content": "Hi! 540 ways to help with checking.", "fixed": True})
    env = new_env(bank.compiled)
    assert score(bank.task("balance-pia"), bank.compiled, env, ep)[0] == 0.0
    env.close()


# ---------------------------------------------------------------- endings and the database


def test_user_stop_vs_max_turns_and_other_endings(bank):
    assert play(bank, "move-mia", ["Done."], "user_stop")[0] == 1.0
    for termination in ("max_turns", "timeout", "out_of_scope", "too_many_errors", "agent_error", "user_transfer"):
        value, b, _ = play(bank, "move-mia", ["Done."], termination)
        assert value == 0.0 and b["ended_normally"] is False and b["db_match"] is True, termination


def test_failed_sql_assertion_and_wrong_database(bank):
    value, b, _ = play(bank, "move-mia", ["Done."], calls=[])  # nothing moved
    assert value == 0.0 and b["db_match"] is False
    assert [a["ok"] for a in b["assertions"]] == [False, False]
    assert b["assertions"][0]["why"] == "got 520, expected 370"
    # the right end state reached by another path still pays: the state is compared, not the path
    spec = bank.task("move-mia")
    two_steps = [{"transfer_funds": {"from_account": "a778", "to_account": "a295", "amount": 100}},
                 {"transfer_funds": {"from_account": "a778", "to_account": "a295", "amount": 50}}]
    assert play(bank, "move-mia", ["Done."], calls=two_steps)[0] == 1.0
    assert spec.task.expect.actions  # (the gold path is one call)


def test_sql_assertion_on_json_values(retail):
    """A JSON column compares by value (key order and spacing do not matter), against the real retail rows."""
    from muactl.env.gold import assertion_result
    from muactl.spec.models import Assertion

    address = {"zip": "68142", "state": "NE", "address1": "6532 Cedar Avenue", "address2": "", "city": "Omaha",
               "country": "USA"}
    query = "SELECT address FROM orders WHERE order_id = '#W4861339'"
    env = new_env(retail.compiled)
    try:
        assert assertion_result(env, Assertion(query=query, equals=address)) == (True, "")
        ok, why = assertion_result(env, Assertion(query=query, equals=dict(address, zip="68143")))
        assert ok is False and why.startswith("got '{") and "68143" in why
        assert assertion_result(env, Assertion(query="SELECT json_extract(address, '$.zip') FROM orders "
                                               "WHERE order_id = '#W4861339'", equals="68142")) == (True, "")
    finally:
        env.close()


def test_expected_transfer_needs_the_agents_tool_call(bank):
    spec = bank.task("human-quin")
    assert spec.task.expect.transfer
    assert play(bank, "human-quin", [], "transfer")[0] == 1.0
    # the user says ###TRANSFER### (termination user_transfer) after the agent looked the customer up
    value, b, _ = play(bank, "human-quin", ["Let me get someone."], "user_transfer", calls=spec.task.expect.actions[:1])
    assert value == 0.0 and b["ended_normally"] is False and b["db_match"] is True
    # a user stop is not a transfer either
    assert play(bank, "human-quin", ["Bye."], "user_stop", calls=spec.task.expect.actions[:1])[0] == 0.0


def test_a_refusal_pays_only_with_its_look_ups_and_its_reason(bank):
    """refuse-overdraft-ned changes nothing: the evidence of the work is the look-ups (expect.required_calls)
    and the balance that is too low, said to the user (expect.outputs)."""
    reason = ["I cannot move 300: your checking account holds only 195."]
    assert play(bank, "refuse-overdraft-ned", reason)[0] == 1.0
    value, b, _ = play(bank, "refuse-overdraft-ned", reason, calls=[])  # said it without looking anything up
    assert value == 0.0 and b["required_calls"] == {"find_customer(name=Ned)": False, "list_accounts(customer_id=c52)": False}
    assert b["db_match"] and all(b["outputs"].values())
    value, b, _ = play(bank, "refuse-overdraft-ned", ["I am sorry, I cannot do that."])  # looked up, no reason
    assert value == 0.0 and b["outputs"] == {"checking": False, "195": False} and all(b["required_calls"].values())
    lower = [{"find_customer": {"name": " ned"}}, {"list_accounts": {"customer_id": "c52"}}]  # text: case and spaces
    assert play(bank, "refuse-overdraft-ned", reason, calls=lower)[0] == 1.0


def test_a_required_call_that_failed_is_no_look_up(bank):
    spec = bank.task("refuse-overdraft-ned")
    _, b, ep = play(bank, "refuse-overdraft-ned", ["Your checking account holds 195, less than 300."])
    assert b["success"] and b["evidence_turns"] == [3, 3, 1, 2]  # outputs, then calls: the turn each was first met
    next(m for m in ep.messages if m["role"] == "tool" and m["name"] == "list_accounts")["error"] = True
    env = new_env(bank.compiled)
    value, b = score(spec, bank.compiled, env, ep)
    env.close()
    assert value == 0.0 and b["required_calls"]["list_accounts(customer_id=c52)"] is False
    assert b["evidence_turns"] == [3, 3, 1, None]


def test_a_transfer_without_the_look_up_pays_nothing(bank):
    spec = bank.task("human-quin")
    value, b, _ = play(bank, "human-quin", [], "transfer", calls=spec.task.expect.actions[1:])
    assert value == 0.0 and b["required_calls"] == {"find_customer(name=Quin)": False} and b["ended_normally"]


def test_a_transfer_where_none_is_expected_pays_nothing(bank):
    value, b, _ = play(bank, "refuse-overdraft-ned", [], "transfer")
    assert value == 0.0 and b["ended_normally"] is False and b["db_match"] is True


# ---------------------------------------------------------------- natural-language assertions


def nl_task(bank, statements):
    spec = bank.task("refuse-overdraft-ned")
    return spec.task.model_copy(update={"expect": spec.task.expect.model_copy(update={"nl_assertions": statements})})


def test_nl_assertions_join_the_reward_only_when_judged(bank):
    task = nl_task(bank, ["The agent says there is not enough money."])
    refusal = ["Sorry, your checking account has only 195: not enough money."]
    value, b, _ = play(bank, task.id, refusal, task=task)
    assert value == 1.0 and b["nl_judged"] is False
    assert b["nl_assertions"] == [{"assertion": "The agent says there is not enough money.", "ok": None,
                                   "reason": "not judged (no --judge)"}]
    failed = [{"assertion": "The agent says there is not enough money.", "ok": False, "reason": "it did not"}]
    value, b, _ = play(bank, task.id, refusal, task=task, verdicts=failed)
    assert value == 0.0 and b["nl_judged"] is True and b["nl_assertions"] == failed
    held = [dict(failed[0], ok=True, reason="it said so")]
    assert play(bank, task.id, refusal, task=task, verdicts=held)[0] == 1.0


# ---------------------------------------------------------------- outcome classes


@pytest.mark.parametrize("termination,success,outcome", [
    ("user_stop", True, "success"), ("user_stop", False, "failure"), ("transfer", True, "success"),
    ("max_turns", False, "failure"), ("agent_error", False, "failure"), ("too_many_errors", False, "failure"),
    ("user_transfer", False, "failure"), ("infra_error", False, "infra_error"), ("user_error", False, "user_error"),
])
def test_every_episode_ends_in_exactly_one_outcome_class(bank, termination, success, outcome):
    assert outcome_of(termination, success) == outcome
    said = ["Done."]
    value, b, ep = play(bank, "move-mia", said, termination)
    assert ep.outcome == ("success" if termination == "user_stop" else outcome if termination in EXCLUDED else "failure")
    assert ep.counted == (termination not in EXCLUDED)
    if termination in EXCLUDED:
        assert value == 0.0 and not b["success"]


# ---------------------------------------------------------------- the gold-hash cache


def test_gold_cache_keys_on_task_content_not_id(bank):
    spec = bank.task("move-mia")
    before = gold_hash(spec, bank.compiled)
    other = spec.task.model_copy(update={"expect": spec.task.expect.model_copy(update={"actions": [
        {"transfer_funds": {"from_account": "a778", "to_account": "a295", "amount": 10}}]})})
    changed = gold_hash(TaskSpec(other, spec.file, spec.index, spec.doc), bank.compiled)
    assert changed != before and gold_hash(spec, bank.compiled) == before  # same id, other actions


def test_gold_cache_is_bounded(bank, monkeypatch):
    monkeypatch.setattr(gold, "GOLD_CACHE_SIZE", 3)
    monkeypatch.setattr(gold, "_GOLD", type(gold._GOLD)())
    for spec in bank.tasks[:5]:
        gold_hash(spec, bank.compiled)
    assert len(gold._GOLD) == 3


def test_schema_states_what_is_paid():
    import json

    from typer.testing import CliRunner

    from muactl.cli import app

    expect = json.loads(CliRunner().invoke(app, ["schema"]).output)["$defs"]["Expect"]
    assert "12 is not in 112" in expect["properties"]["outputs"]["description"]
    transfer = expect["properties"]["transfer"]["description"]
    assert "`hands_over`" in transfer and "###TRANSFER### otherwise earns nothing" in transfer
    assert "judge" in expect["properties"]["nl_assertions"]["description"] and "pays 1 only if" in expect["description"]


# ---------------------------------------------------------------- evidence fields, checked when read


@pytest.mark.parametrize("extra,message", [
    ("    required_calls:\n      - list_accounts: {customer_id: c1}\n",
     "required call list_accounts {'customer_id': 'c1'} is not one of the gold actions"),
    ("    outputs: [savings]\n    refusal: It is not empty.\n",
     "the refusal does not say the output 'savings'; it must carry every output"),
])
def test_evidence_the_oracle_could_not_give_is_a_validation_error(in_tmp, extra, message):
    """A required call outside the gold path, or a refusal that leaves out an output, would fail the oracle on
    every episode: `muactl validate` names the file, the line and the reason, exit 2."""
    import shutil

    from typer.testing import CliRunner

    from muactl.cli import app
    from muactl.spec.library import builtin_root

    shutil.copytree(builtin_root() / "domains" / "bank", in_tmp / "domains" / "mybank")
    spec = in_tmp / "domains" / "mybank" / "domain.yaml"
    spec.write_text(spec.read_text().replace("name: bank\n", "name: mybank\n"))
    (in_tmp / "tasks" / "mybank").mkdir(parents=True)
    (in_tmp / "tasks" / "mybank" / "test.yaml").write_text(
        "- id: t1\n  user:\n    reason: You want to close your savings account.\n  expect:\n    actions:\n"
        "      - find_customer: {name: Cy}\n" + extra)
    r = CliRunner().invoke(app, ["validate", str(in_tmp / "domains" / "mybank")])
    assert r.exit_code == 2 and "test.yaml:4:" in r.output and message in r.output, r.output
