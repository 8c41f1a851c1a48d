"""Simulator fidelity (muactl/episode/fidelity.py) and interaction metrics: measured per episode, summarized per
task and overall, stored in runs.sqlite and shown by `muactl eval` and `muactl runs show`. Real domains,
real SQLite; LLM users talk through the real local OpenAI-compatible server, only their model is fake."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from muactl.cli import app
from muactl.eval.config import EvalConfig
from muactl.eval.evaluate import run_eval
from muactl.spec.library import builtin_root
from muactl.runs.store import RunStore
from tests.fakes.openai_server import FakeOpenAI, Reply, user_goal

runner = CliRunner()
WIDE = {"COLUMNS": "250"}


@pytest.fixture(autouse=True)
def runs_root(in_tmp) -> Path:
    return in_tmp / "runs"  # conftest's in_tmp: a private cwd and runs folder


@pytest.mark.parametrize("domain", ["bank", "retail"])
def test_scripted_user_passes_every_check_on_the_builtin_tasks(domain):
    store, summary = run_eval(EvalConfig(domain=domain, split="test"))
    f = summary["user_fidelity"]
    assert summary["pass^1"] == 1.0 and f["faithful"] == 1.0 and f["episodes"] == summary["episodes"]
    for check in ("stated_goal", "gave_facts", "consented", "never_played_agent", "right_stop", "within_budget"):
        assert f[check] == 1.0 and f[f"{check}_n"] > 0, check
    assert f["refused"] is None  # no built-in task has a user who declines
    # stored per episode, in their own columns
    row = store.db.execute("SELECT fidelity, interaction FROM episodes LIMIT 1").fetchone()
    assert json.loads(row[0])["stated_goal"] is True and "effective_turns" in json.loads(row[1])


def test_interaction_metrics_of_one_known_episode():
    # move-quin with the oracle: asks details, find_customer, list_accounts, asks consent, transfer, done
    store, summary = run_eval(EvalConfig(domain="bank", tasks=["move-quin"]))
    [e] = store.episodes()
    assert e["interaction"] == {"effective_turns": 6.0, "first_correct_write": 5.0, "tool_errors": 0.0, "user_turns": 4.0}
    assert (summary["effective_turns"], summary["first_correct_write"], summary["user_turns"]) == (6.0, 5.0, 4.0)
    assert summary["correct_write_share"] == 1.0


def _agent_playing_user(body):
    """The failure seen with a 135M model as user: it talks like the agent and never ends."""
    return Reply(content="Hello! How can I help you today? Shall I check your account?")


def test_a_user_that_plays_the_agent_is_caught_and_withholding_consent_fails_the_task(runs_root):
    with FakeOpenAI(_agent_playing_user) as server:
        r = runner.invoke(app, ["eval", "bank", "--task", "move-quin", "--user", "openai/bad", "--user-api-base",
                                server.base, "--max-turns", "8"], env=WIDE)
    assert r.exit_code == 0, r.output
    [run] = list(runs_root.iterdir())
    summary = json.loads((run / "summary.json").read_text())
    f = summary["user_fidelity"]
    assert summary["pass^1"] == 0.0  # the oracle waited for a yes that never came: no transfer
    assert (f["stated_goal"], f["never_played_agent"], f["consented"], f["faithful"]) == (0.0, 0.0, 0.0, 0.0)
    store = RunStore.open(run.name)
    [e] = store.episodes()
    assert e["interaction"]["first_correct_write"] is None
    shown = runner.invoke(app, ["runs", "show", run.name], env=WIDE).output
    assert "simulated user fidelity per task" in shown and "move-quin" in shown and "never played agent" in shown
    assert "eval" in r.output and "simulated user fidelity" in r.output


def _polite_user(body):
    """A well-behaved LLM user (fake model) that follows its prompt, including the consent section."""
    goal = user_goal(body)
    system = body["messages"][0]["content"]
    history = body["messages"][1:]
    last = history[-1]["content"] if history else ""
    if not any(m["role"] == "assistant" for m in history):
        return Reply(content=goal["reason"].replace("You want", "I want").replace("your", "my"))
    if "(yes/no)" in last:
        return Reply(content="Yes, go ahead." if "Say yes." in system else "No, please don't.")
    if "complete" in last:
        return Reply(content="Thanks. ###STOP###")
    return Reply(content=goal["known"] or "I don't know.")


@pytest.fixture
def declining_bank(tmp_path):
    """The built-in bank domain with one task whose user declines the transfer (user.consent: false)."""
    shutil.copytree(builtin_root() / "domains" / "bank", tmp_path / "domains" / "bank")
    (tmp_path / "tasks" / "bank").mkdir(parents=True)
    task = {"id": "quin-declines", "user": {"reason": "You want to move 10 from your checking account to your "
                                                      "holiday account.", "known": "Your name is Quin.", "consent": False},
            "expect": {"actions": [{"find_customer": {"name": "Quin"}}, {"list_accounts": {"customer_id": "c42"}},
                                   {"transfer_funds": {"from_account": "a726", "to_account": "a827", "amount": 10}}],
                       "assert": [{"query": "SELECT balance FROM accounts WHERE account_id = 'a726'", "equals": 395}]}}
    (tmp_path / "tasks" / "bank" / "test.yaml").write_text(yaml.safe_dump([task], sort_keys=False))
    return tmp_path


def test_a_user_that_leaves_before_the_agent_can_act_fails_right_stop(runs_root):
    """The trained bank user's failures: "Yep, that's right. Goodbye." to "Shall I proceed?", or a goodbye in the
    opening message, ends the chat with the stop the task calls for, before the agent could act. right_stop holds
    only when the stop came later."""
    def agrees_and_leaves(body):
        reply = _polite_user(body)
        return Reply(content="Yes, go ahead. Goodbye. ###STOP###") if reply.content.startswith("Yes") else reply

    def asks_and_leaves(body):
        reply = _polite_user(body)
        opening = not any(m["role"] == "assistant" for m in body["messages"][1:])
        return Reply(content=reply.content + " Thanks, bye! ###STOP###") if opening else reply

    for user in (agrees_and_leaves, asks_and_leaves):
        with FakeOpenAI(user) as server:
            _, summary = run_eval(EvalConfig(domain="bank", tasks=["move-quin"], user="openai/leaves", user_api_base=server.base))
        f = summary["user_fidelity"]
        assert summary["pass^1"] == 0.0 and (f["stated_goal"], f["right_stop"], f["faithful"]) == (1.0, 0.0, 0.0), user


def test_leaving_early_is_read_from_the_agents_last_message():
    """left_early: the user's stop right after the opening, or after a request to confirm that made no call and
    whose answer the task wants to be yes; not after a request that came with a call, a refusal's, or a stop that
    was not the user's."""
    from types import SimpleNamespace

    from muactl.episode.fidelity import left_early

    yes, no = SimpleNamespace(consent=True), SimpleNamespace(consent=False)
    greeting = [{"role": "assistant", "content": "Hi! How can I help you today?"}]
    opened = [*greeting, {"role": "user", "content": "I want to move 10. Bye."}]
    asked = [*opened, {"role": "assistant", "content": "Shall I move 10 from a726 to a827? (yes/no)"},
             {"role": "user", "content": "Yes. Bye."}]
    handed = [*opened, {"role": "assistant", "content": "Can you confirm you got through?",
                        "tool_calls": [{"name": "transfer_to_human_agents", "arguments": {}}]},
              {"role": "user", "content": "Yes."}]
    assert left_early(yes, opened, "user_stop") and left_early(no, opened, "user_stop")
    assert left_early(yes, asked, "user_stop") and not left_early(no, asked, "user_stop")
    assert not left_early(yes, handed, "user_transfer") and not left_early(yes, asked, "max_turns")
    assert not left_early(yes, [*asked[:-1], {"role": "user", "content": "Yes."}, {"role": "assistant", "content": "Done."}],
                          "user_stop")
    with FakeOpenAI(_polite_user) as server:  # the same user waiting for the change: every check holds
        _, summary = run_eval(EvalConfig(domain="bank", tasks=["move-quin"], user="openai/polite", user_api_base=server.base))
    assert summary["pass^1"] == 1.0 and summary["user_fidelity"]["right_stop"] == 1.0


def test_a_task_whose_user_declines(declining_bank):
    r = runner.invoke(app, ["validate", "./domains/bank"])
    assert r.exit_code == 0, r.output  # the right end state is the one before the declined write
    _, summary = run_eval(EvalConfig(domain="./domains/bank"))
    assert summary["pass^1"] == 1.0 and summary["user_fidelity"]["refused"] == 1.0
    assert summary["user_fidelity"]["consented"] is None
    with FakeOpenAI(_polite_user) as server:  # the LLM user reads "Say no" in its prompt
        _, summary = run_eval(EvalConfig(domain="./domains/bank", user="openai/polite", user_api_base=server.base))
    assert summary["pass^1"] == 1.0 and summary["user_fidelity"]["refused"] == 1.0

    def says_yes(body):  # a user that ignores the task and agrees: the transfer happens, the task fails
        reply = _polite_user(body)
        return Reply(content="Yes, go ahead.") if reply.content.startswith("No") else reply

    with FakeOpenAI(says_yes) as server:
        _, summary = run_eval(EvalConfig(domain="./domains/bank", user="openai/yes", user_api_base=server.base))
    assert summary["pass^1"] == 0.0 and summary["user_fidelity"]["refused"] == 0.0


def test_older_runs_gain_the_new_columns(runs_root):
    store, _ = run_eval(EvalConfig(domain="bank", tasks=["move-quin"]))
    with store.db.conn:
        store.db.conn.execute("ALTER TABLE episodes DROP COLUMN fidelity")
        store.db.conn.execute("ALTER TABLE episodes DROP COLUMN interaction")
    again = RunStore.open(store.id)
    assert {"fidelity", "interaction"} <= set(again.db["episodes"].columns_dict)
    assert again.episodes()[0]["fidelity"] == {}
    assert runner.invoke(app, ["runs", "show", store.id], env=WIDE).exit_code == 0


@pytest.mark.slow  # about 20-40 s quiet: the default run stays under 10 minutes
def test_small_local_users_get_a_role_reminding_prompt():
    """What a small local model playing the user is given, and that its reply is the model's answer to it."""
    from types import SimpleNamespace

    from muactl.episode.user import HFUser, small_model_messages
    from muactl.domain.open import open_domain

    bank = open_domain("bank")
    task = bank.task("move-quin")
    agent_msgs = [{"role": "user", "content": "I want to move 10 from my checking account to my holiday account."},
                  {"role": "assistant", "content": "Could you please give me your name?"}]
    ctx = SimpleNamespace(task=task, domain=bank.compiled, messages=[{"role": "system", "content": "x"}, *agent_msgs],
                          seed=0, state={})
    msgs = small_model_messages(ctx)
    assert msgs[0]["role"] == "system" and "You are the customer, not the agent" in msgs[0]["content"]
    assert "I want to move 10" in msgs[0]["content"] and "Quin" in msgs[0]["content"]
    assert "'Yes, please go ahead.'" in msgs[0]["content"] and "###STOP###" in msgs[0]["content"]
    # roles flipped: the agent's words are the model's "user" turns, marked as the agent's, with the reminder
    assert [m["role"] for m in msgs[1:]] == ["assistant", "user"]
    assert msgs[-1]["content"].startswith("Support agent: Could you please give me your name?")
    assert "(You are the customer." in msgs[-1]["content"]
    opening = small_model_messages(SimpleNamespace(task=task, domain=bank.compiled, messages=[], seed=0, state={}))
    assert opening[-1]["content"].startswith("Support agent: Hello, how can I help you today?")

    import asyncio

    from muactl.episode.user import split_stop
    from muactl.models.generation import load_model

    user = HFUser("tiny")  # the real local path (tiny, random weights): the model is given exactly those messages
    lm = load_model("tiny", bank.compiled)
    asked, generate = [], lm.generate

    def recording(prompts, *rest):
        asked.extend(prompts)
        return generate(prompts, *rest)

    lm.generate = recording  # the queue is made in the episode's event loop, so it calls this
    try:
        reply = asyncio.run(user.respond(ctx))
    finally:
        del lm.generate
    assert asked == [lm.encode(lm.format.render(msgs, add_generation_prompt=True))]
    alone = split_stop(lm.chat(msgs, user.max_new_tokens, 0.0, 0))
    assert (reply.content, reply.stop) == (alone.content, alone.stop)
    # the opening message is the goal in the user's words; the model writes the rest
    first = asyncio.run(user.respond(SimpleNamespace(task=task, domain=bank.compiled, seed=0, state={},
                                                     messages=[{"role": "system", "content": "x"}])))
    assert first.content == "I want to move 10 from my checking account to my holiday account." and not first.stop


def test_a_reply_is_held_to_the_checks_one_message_decides():
    """reply_breaks: the opening must carry the goal, an answer to "shall I proceed?" the task's consent, and no
    message may read like the agent's; anything else is left to the whole episode's checks."""
    import dataclasses

    from muactl.domain.open import open_domain
    from muactl.episode.fidelity import reply_breaks

    task = open_domain("bank").task("move-quin")  # consents; the goal: move 10 from checking to holiday
    start = [{"role": "system", "content": "x"}]
    goal = "I want to move 10 from my checking account to my holiday account."
    assert reply_breaks(task, start, goal) is None
    assert reply_breaks(task, start, "Hi, I need some help with my accounts.") == "stated_goal"
    assert reply_breaks(task, start, "I want to move 20 from my checking account to my holiday account.") == "stated_goal"
    assert reply_breaks(task, start, goal + " Thanks, goodbye!", ends=True) == "right_stop"  # asks, and leaves at once
    asked = [*start, {"role": "user", "content": goal}, {"role": "assistant", "content": "Could you give me your name?"}]
    assert reply_breaks(task, asked, "My name is Quin.") is None  # past the opening, the goal need not be said again
    assert reply_breaks(task, asked, "My name is Qiun.") == "gave_facts"  # asked, and the fact garbled
    assert reply_breaks(task, asked, "Sure, happy to.") == "gave_facts"
    again = [*asked, {"role": "user", "content": "I am Quin."}, {"role": "assistant", "content": "Which account?"}]
    assert reply_breaks(task, again, "The checking one.") is None  # every known fact said already
    assert reply_breaks(task, again, "How can I help you today?") == "never_played_agent"
    assert reply_breaks(task, again, "Sure, could you give me your name?") == "never_played_agent"  # parroting
    confirm = [*asked, {"role": "user", "content": "Quin."},
               {"role": "assistant", "content": "Shall I move 10 from a726 to a827? (yes/no)"}]
    assert reply_breaks(task, confirm, "Yes, please go ahead.") is None
    assert reply_breaks(task, confirm, "No, not now.") == "consented"
    assert reply_breaks(task, confirm, "Hmm, what was the amount again") == "consented"  # no answer is no consent
    assert reply_breaks(task, confirm, "Yes, go ahead. Goodbye.", ends=True) == "right_stop"  # gone before the change
    assert reply_breaks(task, again, "The checking one. Bye.", ends=True) is None  # not an answer to a request to confirm
    declining = dataclasses.replace(task, task=task.task.model_copy(update={
        "user": task.task.user.model_copy(update={"consent": False})}))
    assert reply_breaks(declining, confirm, "No, please do not make that change.") is None
    assert reply_breaks(declining, confirm, "Yes, please go ahead.") == "refused"
    assert reply_breaks(declining, confirm, "No, leave it. Goodbye.", ends=True) is None  # a refusal may end the chat


def test_local_llm_users_of_concurrent_episodes_share_generate_calls():
    """Every episode makes its own user object, yet their turns on one local model go out in one batch (tiny:
    six user turns at once, one generate call), as a local agent's do."""
    import asyncio
    from types import SimpleNamespace

    from muactl.domain.open import open_domain
    from muactl.episode.user import HFUser
    from muactl.models.generation import load_model

    bank = open_domain("bank")
    tasks = [t for t in bank.tasks if t.split == "test"][:6]
    lm = load_model("tiny", bank.compiled)

    async def six_turns():
        ctxs = [SimpleNamespace(task=t, domain=bank.compiled, seed=i, state={},
                                messages=[{"role": "system", "content": "x"}, {"role": "user", "content": t.task.user.reason},
                                          {"role": "assistant", "content": "Could you please give me your name?"}])
                for i, t in enumerate(tasks)]
        replies = await asyncio.gather(*(HFUser("tiny").respond(c) for c in ctxs))
        return replies, HFUser("tiny").queue(lm).batch_sizes

    replies, sizes = asyncio.run(six_turns())
    assert len(replies) == 6 and all(isinstance(r.content, str) for r in replies)
    assert sizes == [6]


def test_the_scripted_user_takes_a_closing_question_as_a_closing(bank):
    """A refusal that ends with "Anything else?" offers to end the chat: the scripted user stops (reward 1)
    instead of answering "I don't know that, sorry.". A real question before it is still answered.
    The agent is a fixed script (no model)."""
    import asyncio

    from muactl.episode.agents.base import Agent, AgentReply
    from muactl.episode.rollout import RolloutConfig, run_episode
    from muactl.episode.user import ScriptedUser

    class Refuser(Agent):
        name = "script"

        def __init__(self, closing: str):
            self.closing = closing

        async def act(self, ctx) -> AgentReply:
            step = ctx.state.setdefault("step", 0)
            ctx.state["step"] = step + 1
            script = [AgentReply(f"Could you tell me your name? {self.closing}"),
                      AgentReply("", [{"name": "find_customer", "arguments": {"name": "Ned"}}]),
                      AgentReply("", [{"name": "list_accounts", "arguments": {"customer_id": "c52"}}]),
                      AgentReply(f"Sorry, your checking account holds only 195, less than 300. {self.closing}")]
            return script[min(step, len(script) - 1)]

    for closing in ("Anything else?", "Is there anything else I can help you with today?",
                    "Can I help you with anything else?"):
        ep = asyncio.run(run_episode(bank.task("refuse-overdraft-ned"), bank.compiled, Refuser(closing),
                                     ScriptedUser(), RolloutConfig()))
        said = [m["content"] for m in ep.messages if m["role"] == "user"]
        assert said[1] == "My name is Ned.", (closing, said)  # the question before it was answered
        assert "I don't know that, sorry." not in said and ep.termination == "user_stop", (closing, said)
        assert ep.reward == 1.0, (closing, ep.breakdown)


# a user sentence that the pronoun rewriting broke: "me" as a subject, "I" as an object, a be-verb that does not agree
BROKEN_PERSON = r"(?<!let )(?<!help )(?<!make )\bme (?:have|want|need|will|would|can|do|did|am|are|is|was|were|think|know|keep|\w{2,}ed)\b|" \
                r"\b(?:to|for|with|at|from|about|help|tell|told|give|gave|thank|let|ask|asked) I\b(?!')|" \
                r"\bI (?:are|were|is|has)\b|\b(?:are|is|were) I\b"


@pytest.mark.parametrize("said, says", [
    ("You are checking how much you have in your checking account.", "I am checking how much I have in my checking account."),
    ("You want to know how much you will get back.", "I want to know how much I will get back."),
    ("For your order #W1 you want two changes.", "For my order #W1 I want two changes."),
    ("You see a payment you do not recognise.", "I see a payment I do not recognise."),
    ("You want to return the shirt you received; if that is impossible you keep it.",
     "I want to return the shirt I received; if that is impossible I keep it."),
    ("Earlier today you already changed an item.", "Earlier today I already changed an item."),
    ("You want to cancel because you {reason}.", "I want to cancel because I {reason}."),
    ("The agent told you the price.", "The agent told me the price."),
    ("The bank charged you twice and owes you 20.", "The bank charged me twice and owes me 20."),
    ("You want them to help you and let you know.", "I want them to help me and let me know."),
    ("A letter was sent to you. Thank you.", "A letter was sent to me. Thank you."),
    ("The card is yours, not your friend's; you did it yourself.", "The card is mine, not my friend's; I did it myself."),
    ("Are you sure? You were told you aren't allowed.", "Am I sure? I was told I'm not allowed."),
    ("You're moving and you've paid; you'll call and you'd like a refund.",
     "I'm moving and I've paid; I'll call and I'd like a refund."),
    ("Do you have more than you need? What can you do?", "Do I have more than I need? What can I do?"),
    ("Your name is Ned. Yours is the savings account.", "My name is Ned. Mine is the savings account."),
    ("The agent wants you to wait; it suits you.", "The agent wants me to wait; it suits me."),
])
def test_the_scripted_user_says_its_goal_in_the_first_person(said, says):
    from muactl.episode.user import first_person

    assert first_person(said) == says
    assert not re.search(BROKEN_PERSON, says, re.I)  # the table's own answers pass the check used below


def test_the_demos_sft_conversations_have_no_broken_sentence():
    """`muactl synth` as the quickstart runs it (bank, oracle agent, scripted user, train split): every user
    sentence keeps its subject, object and verb agreement. Before the rewrite, 3 of 43 said "how much me have";
    the bank's template instances are checked too."""
    for extra in ([], ["--tasks", "template:all", "--n", "48"]):
        out = Path(f"sft{len(extra)}.jsonl")
        r = runner.invoke(app, ["synth", "bank", "--agent", "oracle", "--user", "scripted", "--trials", "1",
                                "-o", str(out), *extra])
        assert r.exit_code == 0, r.output
        convs = [json.loads(line) for line in out.read_text().splitlines()]
        assert len(convs) >= 43
        said = [m["content"] for c in convs for m in c["messages"] if m["role"] == "user"]
        assert [s for s in said if re.search(BROKEN_PERSON, s, re.I)] == []
        assert "I am checking how much I have in my checking account." in said or extra
