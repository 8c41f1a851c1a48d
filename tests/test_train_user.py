"""`muactl train user` (issue 30): the varied scripted user, a user model's training data (one example per user
message, loss on that reply only, never the agent's tools or the database), the fidelity filter, the verdict of a
user model in eval, and a trained user loaded as `--user hf:PATH`. Real built-in domains, real SQLite, the real
tiny model; LLM users talk through the real local OpenAI-compatible server, only their model is fake."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from muactl.cli import app
from muactl.episode.fidelity import variation
from muactl.episode.user import _REWORDINGS, first_person
from muactl.eval.config import EvalConfig
from muactl.eval.evaluate import run_eval
from muactl.runs.store import RunStore
from tests.fakes.openai_server import FakeOpenAI, Reply

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
WIDE = {"COLUMNS": "250"}


@pytest.fixture(autouse=True)
def private_runs(in_tmp):
    return in_tmp


def conversations(store):
    return [store.messages(e["id"]) for e in store.episodes()]


def said_by_task(store) -> dict[str, list[str]]:
    return {e["task_id"]: [m["content"] for m in store.messages(e["id"]) if m["role"] == "user"] for e in store.episodes()}


# ---------------------------------------------------------------- variation on purpose


@pytest.mark.parametrize("domain", ["bank", "retail"])
def test_varied_scripted_user_stays_faithful_and_says_things_more_ways(domain):
    draw = dict(domain=domain, tasks=["template:all"], n=40, split="test")
    plain, ps = run_eval(EvalConfig(**draw))
    varied, vs = run_eval(EvalConfig(**draw, user="scripted:varied"))
    assert ps["pass^1"] == vs["pass^1"] == 1.0
    assert vs["user_fidelity"]["faithful"] == 1.0 and vs["user_fidelity"]["gave_facts"] == 1.0
    a, b = variation(conversations(plain)), variation(conversations(varied))
    assert b["distinct_2"] > a["distinct_2"] * 1.1 and b["openings_per_100"] > a["openings_per_100"]
    again, _ = run_eval(EvalConfig(**draw, user="scripted:varied"))  # drawn from the episode's seed: replayed alike
    assert said_by_task(again) == said_by_task(varied)


def test_the_variation_benchmark_prints_each_users_row_and_its_checks(tmp_path):
    """benchmarks/user_variation.py is where the README's variation figures come from: one row per user with
    distinct-2, faithful, pass^1 and redraws, then that user's share per check (with the episodes it applied to)."""
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "user_variation.py"), "--domains", "bank",
                          "--episodes", "20"], env={**os.environ, "MUACTL_RUNS": str(tmp_path)},
                         capture_output=True, text=True, timeout=300, check=True).stdout.splitlines()
    rows = {line.split()[1]: (line.split(), out[k + 1]) for k, line in enumerate(out) if line.startswith("bank ")}
    assert set(rows) == {"scripted", "scripted:varied"}
    for user, (row, checks) in rows.items():
        episodes, faithful, pass1, redrawn = row[2], row[7], row[8], row[9]
        assert (episodes, faithful, pass1, redrawn) == ("20", "1.00", "1.00", "0"), user
        assert "stated_goal 1.00 (20)" in checks and "gave_facts 1.00 (20)" in checks, checks
    assert float(rows["scripted:varied"][0][5]) > 1.5 * float(rows["scripted"][0][5])  # distinct-2


def test_every_goal_rewording_fires_on_some_built_in_goal():
    """A rewording no goal matches is dead weight that looks like variation: each one matches a bank or retail
    template's goal as the user says it (first person)."""
    def strings(node):
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            return [s for child in node for s in strings(child)]
        return [first_person(node)] if isinstance(node, str) else []

    root = Path(__file__).resolve().parents[1]
    reasons = [s for domain in ("bank", "retail") for s in strings(yaml.safe_load((root / "tasks" / domain / "templates.yaml").read_text()))]
    dead = [pattern for pattern, _ in _REWORDINGS if not any(re.search(pattern, r) for r in reasons)]
    assert dead == []


def test_every_restated_goal_keeps_what_stated_goal_checks():
    """A goal said another way (whole, then reworded) still carries every number of the task's goal and at least
    half of its content words, on real retail and bank template instances over many draws, and every restatement
    fires on some instance (none is dead weight)."""
    from muactl.domain.open import open_domain
    from muactl.domain.task_templates import draw_stream
    from muactl.episode.fidelity import _numbers, _words
    from muactl.episode.user import _RESTATEMENTS, ScriptedUser

    user, fired, said = ScriptedUser(varied=True), set(), set()
    for domain in ("retail", "bank"):
        for spec in draw_stream(open_domain(domain), "template:all", n=40, seed=0, db="fixed").tasks:
            reason = spec.task.user.reason
            fired |= {k for k, (pattern, _) in enumerate(_RESTATEMENTS) if re.search(pattern, first_person(reason))}
            for seed in range(30):
                goal = user.goal(_ctx(seed, spec.task.persona), reason)
                words = set(_words(reason))
                assert _numbers(reason) <= _numbers(goal), goal
                assert len(words & set(_words(goal))) * 2 >= len(words), (reason, goal)
                said.add(goal)
    assert fired == set(range(len(_RESTATEMENTS)))
    assert not [g for g in said if re.search(r"[.?] [a-z]|\.\.|  ", g)]  # no sentence left in lower case


def _ctx(seed: int, persona: str | None = None, messages=()):
    """What ScriptedUser reads of an episode: its seed, its messages and the task's persona."""
    return SimpleNamespace(seed=seed, messages=list(messages), task=SimpleNamespace(task=SimpleNamespace(persona=persona)))


def test_every_user_phrasing_keeps_what_the_oracle_and_the_checks_key_on():
    from muactl.episode.agents.oracle import consent_in
    from muactl.episode.fidelity import _AGENT_TALK
    from muactl.episode.user import _CONTEXTS, _REWORDINGS, PERSONA_PHRASES, USER_PHRASES

    pools = [USER_PHRASES, *PERSONA_PHRASES.values()]
    lines = [(k, line) for pool in pools for k, options in pool.items() for line in options]
    assert all(consent_in(line) is True for k, line in lines if k == "yes")
    assert all(consent_in(line) is False for k, line in lines if k == "no")
    assert all("{facts}" in line for k, line in lines if k == "facts")
    assert not [line for k, line in lines + [("context", c) for c in _CONTEXTS] if _AGENT_TALK.search(line)]
    assert not [w for _, words in _REWORDINGS for w in words if any(ch.isdigit() for ch in w)]
    assert all(set(p) >= {"aside"} for p in PERSONA_PHRASES.values())


def test_the_task_persona_colours_the_varied_users_words():
    from muactl.episode.user import PERSONA_PHRASES, USER_PHRASES, ScriptedUser

    user = ScriptedUser(varied=True)
    said = {p: {user.say(_ctx(s, p), "yes") for s in range(200)} for p in ("brief", "polite")}
    assert said["brief"] & set(PERSONA_PHRASES["brief"]["yes"]) and not said["brief"] & set(PERSONA_PHRASES["polite"]["yes"])
    assert said["polite"] & set(PERSONA_PHRASES["polite"]["yes"]) and said["polite"] & set(USER_PHRASES["yes"])
    assert user.persona(_ctx(1, "a persona of the user's own")) in PERSONA_PHRASES  # drawn, per episode
    assert ScriptedUser().say(_ctx(1, "brief"), "yes") == USER_PHRASES["yes"][0]  # the plain user: one way
    goals = {user.goal(_ctx(s, "anxious"), "You want to move 250 from your savings account because you think it "
                                            "is safer.") for s in range(60)}
    assert len(goals) > 40 and all("250" in g and "savings account" in g for g in goals)


def test_varied_facts_keep_every_value_in_another_order_and_wording():
    from muactl.episode.user import ScriptedUser

    user, known = ScriptedUser(varied=True), "Your name is Maya Novak. Your email is maya.novak34@example.com."
    said = {user.facts(_ctx(s), known) for s in range(40)}
    assert all("Maya Novak" in t and "maya.novak34@example.com" in t for t in said)
    assert len(said) > 10
    assert any(t.index("maya.novak34") < t.index("Maya Novak") for t in said)  # the order changes too
    starts = {m.group(1) for t in said for m in re.finditer(r"(?:^|[.?] )([a-z][\w-]*)", t)}
    assert starts <= {"maya"}, starts  # a sentence begins in lower case only with the email itself
    assert ScriptedUser().facts(_ctx(3), known) == \
        "My name is Maya Novak. My email is maya.novak34@example.com."


def test_distinct_n_counts_different_ngrams():
    from muactl.episode.fidelity import distinct_n

    assert distinct_n(["a b a b"], 2) == pytest.approx(2 / 3)
    assert distinct_n(["one"], 2) is None
    assert variation([[{"role": "user", "content": "hi there"}], [{"role": "user", "content": "Hi  there"}]])[
        "openings_per_100"] == 50


# ---------------------------------------------------------------- the training data


def test_user_examples_train_only_the_reply_and_never_show_tools_or_data():
    from muactl.domain.open import open_domain
    from muactl.models.folder import load_tokenizer
    from muactl.models.registry import resolve
    from muactl.train.sft import tokenize_example
    from muactl.train.user_sft import stored_messages, user_examples

    bank = open_domain("bank")
    store, _ = run_eval(EvalConfig(domain="bank", tasks=["move-quin"], user="scripted:varied", agent="oracle:varied"))
    [e] = store.episodes()
    messages = stored_messages(store, e["id"])
    tool_results = [m["content"] for m in messages if m["role"] == "tool"]
    examples = user_examples(bank.spec, bank.task("move-quin"), messages, e["termination"])
    said = [m["content"] for m in messages if m["role"] == "user"]
    assert [x["messages"][-1]["content"] for x in examples][:-1] == said[:-1]
    assert examples[-1]["messages"][-1]["content"] == f"{said[-1]} ###STOP###"  # it ended the episode
    tok = load_tokenizer(resolve("tiny", bank.compiled))
    for x in examples:
        text = json.dumps(x["messages"])
        assert "tool" not in {m["role"] for m in x["messages"]} and "tool_calls" not in text
        assert "customer service agent" not in text and "find_customer" not in text  # no agent prompt, no tools
        assert not any(r in text for r in tool_results)  # nothing the database answered
        ex = tokenize_example(tok, x, 4096)
        trained = tok.decode([i for i, m in zip(ex["input_ids"], ex["assistant_masks"]) if m])
        assert trained.strip() == x["messages"][-1]["content"] + "<|im_end|>", trained


def test_consent_pairs_teach_each_answer_to_a_confirmation_both_ways():
    """user_sft.consent_pairs: a yes to "shall I proceed?" (move-quin) and a no (retail's decline-exchange) each
    come back as the opposite answer under the opposite instruction line, on the same conversation; without the
    option the examples are the user's messages only."""
    from muactl.domain.open import open_domain
    from muactl.episode.agents.oracle import consent_in
    from muactl.episode.fidelity import answers_to_confirm
    from muactl.train.user_sft import run_tasks, stored_messages, user_examples

    for domain, tasks in (("bank", ["move-quin"]), ("retail", ["template:decline-exchange"])):
        opened = open_domain(domain)
        store, _ = run_eval(EvalConfig(domain=domain, tasks=tasks, n=1, user="scripted:varied", agent="oracle:varied"))
        [e] = store.episodes()
        messages = stored_messages(store, e["id"])
        task = run_tasks(store, opened)[e["task_id"]]
        plain = user_examples(opened.spec, task, messages, e["termination"])
        paired = user_examples(opened.spec, task, messages, e["termination"], consent_pairs=True)
        [i] = answers_to_confirm(messages)
        assert consent_in(messages[i]["content"]) is task.task.user.consent
        assert paired[:len(plain)] == plain and len(paired) == len(plain) + 1
        pair = paired[-1]
        assert pair["consent_pair"] and consent_in(pair["messages"][-1]["content"]) is (not task.task.user.consent)
        original = next(x for x in plain if x["messages"][-1]["content"] == messages[i]["content"])
        assert pair["messages"][1:-1] == original["messages"][1:-1]  # the same conversation ...
        before, after = original["messages"][0]["content"], pair["messages"][0]["content"]
        said = "'No, please do not make that change.'" if task.task.user.consent else "'Yes, please go ahead.'"
        assert said in after and said not in before  # ... under the other instruction
        assert "Also:" not in after


def _agent_playing_user(body):
    return Reply(content="Hello! How can I help you today? Shall I check your account?")


def test_only_faithful_episodes_become_training_data():
    from muactl.domain.open import open_domain
    from muactl.train.user_sft import faithful_episodes

    good, _ = run_eval(EvalConfig(domain="bank", tasks=["move-quin", "close-ned"]))
    with FakeOpenAI(_agent_playing_user) as server:
        bad, _ = run_eval(EvalConfig(domain="bank", tasks=["move-quin"], user="openai/bad", user_api_base=server.base,
                                     max_turns=6))
    kept, counts = faithful_episodes([good.id, str(bad.path)], open_domain("bank"))
    assert sorted(t.task.id for t, _, _ in kept) == ["close-ned", "move-quin"]
    assert counts == {"episodes": 3, "kept": 2, "unfaithful": 1, "not_played": 0, "other_task": 0}
    drawn, _ = run_eval(EvalConfig(domain="bank", tasks=["template:balance"], n=3))  # instances, drawn again to read
    kept, counts = faithful_episodes([drawn.id], open_domain("bank"))
    assert counts["kept"] == 3 and kept[0][0].task.id.startswith("balance")


@pytest.mark.parametrize("args, message", [
    (["user_sft.runs=[no-such-run]"], "no-such-run"),
    (["user_sft.eval_tasks=[no-such-task]"], "user_sft.eval_tasks: no task 'no-such-task'"),
    (["user_sft.user=hf:runs/none/checkpoint-final"], "user_sft.user hf:runs/none/checkpoint-final"),
    (["user_sft.draws=0"], "user_sft.draws: 0 is not between 1 and 16"),
])
def test_bad_train_user_input_fails_before_a_run_folder_exists(in_tmp, args, message):
    r = runner.invoke(app, ["train", "user", *args, "run_id=bad"])
    assert r.exit_code == 2 and message in r.output, r.output
    assert not (in_tmp / "runs" / "bad").exists()


def test_train_user_refuses_a_run_of_another_domain(in_tmp):
    other, _ = run_eval(EvalConfig(domain="retail", tasks=["template:all"], n=1))
    r = runner.invoke(app, ["train", "user", "domain=bank", f"user_sft.runs=[{other.id}]", "run_id=bad"])
    assert r.exit_code == 2 and "is on domain retail, not bank" in r.output, r.output


# ---------------------------------------------------------------- a user model where a user is accepted


@pytest.fixture(scope="module")
def tiny_folder():
    """The tiny model's folder: a real checkpoint (random weights) standing in for a trained user."""
    from muactl.domain.open import open_domain
    from muactl.models.registry import resolve

    return str(resolve("tiny", open_domain("bank", with_tasks=False).compiled))


def test_grpo_config_takes_a_user_model_by_path(tiny_folder):
    from muactl.episode.user import HFUser
    from muactl.train.grpo import user_factory
    from muactl.train.inputs import check_train_inputs
    from muactl.train.recipes import compose

    cfg = compose(None, [f"user=hf:{tiny_folder}", "user.temperature=0.7"])
    check_train_inputs(cfg, "grpo")
    user = user_factory(cfg)()
    assert isinstance(user, HFUser) and user.model_ref == tiny_folder and user.temperature == 0.7
    with pytest.raises(Exception, match="no config.json|unknown model"):
        check_train_inputs(compose(None, ["user=hf:runs/none/checkpoint-final"]), "grpo")


def test_a_card_marked_as_user_writes_its_own_opening(tmp_path, tiny_folder):
    import shutil

    from muactl.domain.open import open_domain
    from muactl.episode.user import HFUser
    from muactl.models.folder import mark_card, read_card

    bank = open_domain("bank")
    folder = tmp_path / "user-model"
    shutil.copytree(tiny_folder, folder)
    mark_card(folder, plays="user")
    assert read_card(folder)["plays"] == "user" and read_card(folder)["format"] == "chatml"  # the card kept
    ctx = SimpleNamespace(task=bank.task("move-quin"), domain=bank.compiled, seed=0, state={},
                          messages=[{"role": "system", "content": "x"}])
    goal = "I want to move 10 from my checking account to my holiday account."
    assert asyncio.run(HFUser(tiny_folder, max_new_tokens=8).respond(ctx)).content == goal  # an untrained one: the goal
    trained = asyncio.run(HFUser(str(folder), max_new_tokens=8).respond(ctx))
    assert trained.content != goal  # the model wrote it (random weights: not the goal)


def test_a_sampled_trained_user_draws_again_a_reply_that_breaks_its_instructions(tmp_path, tiny_folder):
    """The card's `draws`: a sampled reply that breaks reply_breaks is drawn again with another seed; when every
    draw broke one, the greedy reply is said; greedy users and cards without draws take one draw. Only the model's
    words are faked (the real tiny folder and batcher)."""
    import shutil

    from muactl.domain.open import open_domain
    from muactl.episode.user import HFUser
    from muactl.models.folder import mark_card
    from muactl.models.generation import load_model

    bank = open_domain("bank")
    folder = tmp_path / "user-model"
    shutil.copytree(tiny_folder, folder)
    mark_card(folder, plays="user", draws=3)
    lm = load_model(str(folder), bank.compiled)
    goal = "I want to move 10 from my checking account to my holiday account."
    calls: list[tuple[float, int]] = []

    def play(said: list[str], user: HFUser, messages=({"role": "system", "content": "x"},)):
        words = iter(said)

        def fake_generate(prompts, max_new_tokens, temperature=0.0, seed=None):
            calls.append((temperature, seed))
            return [(lm.encode(next(words)), [0.0]) for _ in prompts]

        calls.clear()
        lm.generate = fake_generate  # the episode's event loop makes the queue, which then calls this
        try:
            ctx = SimpleNamespace(task=bank.task("move-quin"), domain=bank.compiled, seed=5, state={}, messages=list(messages))
            return asyncio.run(user.respond(ctx))
        finally:
            del lm.generate

    sampled = HFUser(str(folder), temperature=0.7, max_new_tokens=8)
    reply = play(["How can I help you today?", "Hello there.", goal], sampled)
    assert reply.content == goal and reply.usage == {"redrawn": 2.0}
    assert [t for t, _ in calls] == [0.7, 0.7, 0.7] and len(set(calls)) == 3  # each draw its own seed
    reply = play(["Hello there."] * 3 + ["Hi."], sampled)
    assert reply.content == "Hi." and reply.usage == {"redrawn": 3.0}  # every draw broke one: greedy
    assert [t for t, _ in calls] == [0.7, 0.7, 0.7, 0.0]
    greedy = play(["Hello there."], HFUser(str(folder), temperature=0.0, max_new_tokens=8))
    assert greedy.content == "Hello there." and not greedy.usage and len(calls) == 1
    confirm = [{"role": "system", "content": "x"}, {"role": "user", "content": goal},
               {"role": "assistant", "content": "Could you give me your name?"}, {"role": "user", "content": "Quin."},
               {"role": "assistant", "content": "Shall I move 10 from a726 to a827? (yes/no)"}]
    reply = play(["Yep, that's right. Goodbye. ###STOP###", "Yes, please go ahead."], sampled, confirm)
    assert (reply.content, reply.stop, reply.usage) == ("Yes, please go ahead.", None, {"redrawn": 1.0})  # a yes that left
    mark_card(folder, draws=1)
    assert play(["Hello there."], sampled).content == "Hello there." and len(calls) == 1


@pytest.mark.slow
def test_eval_reports_whether_a_user_model_is_faithful(tiny_folder):
    r = runner.invoke(app, ["eval", "bank", "--task", "move-quin", "--user", f"hf:{tiny_folder}", "--max-turns", "4"],
                      env=WIDE)
    assert r.exit_code == 0, r.output
    assert "user model NOT faithful at >= 0.90 on every check" in r.output and "95% intervals" in r.output
    scripted = runner.invoke(app, ["eval", "bank", "--task", "move-quin"], env=WIDE)
    assert "user model" not in scripted.output  # the scripted user is no model under test


@pytest.mark.slow
def test_train_a_tiny_user_end_to_end(in_tmp):
    """Issue 30.4: a tiny user trained on one task's faithful episodes; fidelity is computed on its held-out run,
    and the checkpoint plays the user in `muactl eval --user hf:PATH`."""
    # a randomly initialised 4-layer model learns slowly: 24 epochs of one episode's 4 messages and its consent
    # pair (~3 min CPU)
    r = runner.invoke(app, ["train", "user", "model=tiny", "domain=bank", "user_sft.tasks=[move-quin]",
                            "user_sft.trials=1", "sft.max_steps=60", "sft.batch_size=2", "sft.lr=3e-3",
                            "sft.warmup_ratio=0", "sft.logging_steps=10", "user_sft.eval_tasks=[move-quin]",
                            "user_sft.max_turns=6", "user_sft.consent_pairs=true", "run_id=u"], env=WIDE)
    assert r.exit_code == 0, r.output
    assert "1 faithful episodes of 1" in r.output and "user model" in r.output and "95% intervals" in r.output
    assert "5 examples (one per user message, and 1 consent pairs)" in r.output  # move-quin's yes, taught as a no too
    state = json.loads((in_tmp / "runs" / "u" / "stages.json").read_text())
    trained, scripted = state["eval"]["trained"], state["eval"]["scripted"]
    assert state["data"]["examples"] == 5 and state["data"]["consent_pairs"] == 1 and state["sft"]["steps"] == 60
    assert trained["fidelity"]["episodes"] == 1 and trained["verdict"]["threshold"] == 0.9
    assert set(trained["verdict"]["intervals"]) >= {"stated_goal", "never_played_agent", "faithful"}
    assert scripted["fidelity"]["faithful"] == 1.0 and scripted["pass^1"] == 1.0
    assert scripted["pass^1_interval"] == [1.0, 1.0] and state["eval"]["pass^1_gap"]["tasks"] == 1
    assert "trained user - scripted user, paired over 1 instances" in r.output
    final = state["sft"]["checkpoint"]
    card = json.loads((in_tmp / final / "muactl.json").read_text())
    assert card["plays"] == "user" and card["draws"] == 4  # user_sft.draws: a sampled reply may be drawn 4 times
    assert not list((in_tmp / "runs" / "u" / "sft").glob("checkpoint-*"))  # the finished stage keeps checkpoint-final only
    r = runner.invoke(app, ["eval", "bank", "--task", "move-quin", "--user", f"hf:{final}", "--max-turns", "6"], env=WIDE)
    assert r.exit_code == 0 and "user model" in r.output, r.output
    [run] = [p for p in (in_tmp / "runs").iterdir() if p.name != "u"]
    [e] = RunStore.open(run.name).episodes()
    opening = next(m for m in RunStore.open(run.name).messages(e["id"]) if m["role"] == "user")
    assert opening["content"].strip(), e  # the trained model wrote the opening message


def test_a_train_user_run_resumes_as_one(in_tmp):
    from omegaconf import OmegaConf

    from muactl.train.recipes import compose

    store = RunStore.create("user", "bank", OmegaConf.to_container(compose(None, ["user_sft.trials=3"])), run_id="u1")
    (store.path / "config.yaml").write_text(OmegaConf.to_yaml(compose(None, ["user_sft.trials=3"])))
    store.update(status="failed")
    assert RunStore.open("u1").info()["resume"] == "muactl train user --resume u1"
    r = runner.invoke(app, ["train", "--resume", "u1", "--cfg"])
    assert r.exit_code == 0 and "trials: 3" in r.output, r.output
    r = runner.invoke(app, ["train", "sft", "--resume", "u1"])
    assert r.exit_code == 2 and "is a user run (user), not sft" in r.output, r.output


def test_the_pass_gap_pairs_the_instances_and_says_whether_it_is_within_the_threshold():
    from muactl.train.user_sft import gap_line, pass_gap

    scripted = {f"t{i}": 1.0 for i in range(20)}
    same = pass_gap(dict(scripted), scripted)
    assert same["difference"] == 0 and same["interval"] == [0, 0] and same["within"] and same["tasks"] == 20
    harder = pass_gap({**scripted, "t0": 0.0, "t1": 0.0, "extra": 1.0}, scripted)  # 'extra' has no pair: left out
    assert harder["difference"] == -0.1 and harder["interval"][0] < -0.1 < harder["interval"][1] <= 0
    assert not harder["within"] and harder["tasks"] == 20
    assert gap_line(harder).endswith("-0.10 [" + f"{harder['interval'][0]:+.2f}, {harder['interval'][1]:+.2f}]: not within 0.05")
