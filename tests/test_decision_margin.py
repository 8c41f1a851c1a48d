"""benchmarks/decision_margin.py: where two arms' greedy conversations part, and the log-probability margin between
the two turns there, on tiny (built locally; its weights are random, so only the arithmetic is checked)."""

import importlib.util
import json
import sqlite3
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def dm(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # it imports rl_gain, as a script run from there would
    spec = importlib.util.spec_from_file_location("decision_margin", ROOT / "benchmarks" / "decision_margin.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("rl_gain", None)


def _act(turn):  # token ids from 100 up stand for tool calls here, the rest for text
    return "call" if turn[0] >= 100 else "reply"


def test_the_decision_is_the_first_turn_acting_differently_or_ending_where_the_other_goes_on(dm):
    #          user | opening reply | user | call | tool | last reply (a refusal) | user
    a = ([1, 2, 10, 11, 3, 100, 4, 20, 5], [0, 0, 1, 1, 0, 1, 0, 1, 0])
    # the opening worded differently; the same call; a reply the conversation goes on after, then a write
    b = ([1, 2, 10, 12, 3, 100, 4, 21, 6, 101, 7, 22, 5], [0, 0, 1, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0])
    d = dm.decision(a, b, _act)
    assert d["prefix"] == a[0][:7] and d["turns"] == ([20], [21])
    assert d["acts"] == ("reply (last)", "reply") and d["exact"] is False  # B's turn follows A's wording
    assert dm.decision(a, a, _act) == dm.SAME
    writes_at_once = ([1, 2, 10, 11, 3, 100, 4, 101, 6, 22, 5], [0, 0, 1, 1, 0, 1, 0, 1, 0, 1, 0])
    d = dm.decision(a, writes_at_once, _act)
    assert d["turns"] == ([20], [101]) and d["acts"] == ("reply (last)", "call") and d["exact"] is True
    reworded = ([1, 2, 10, 12, 3, 100, 4, 23, 5], [0, 0, 1, 1, 0, 1, 0, 1, 0])
    assert dm.decision(a, reworded, _act) == dm.SAME  # other words, the same actions: no decision to score


@pytest.fixture
def tiny_lm(bank):
    from muactl.models.generation import LocalLM
    from muactl.models.tiny import tiny_path

    return LocalLM(tiny_path(bank.compiled), prefix_cache=False)


def test_turn_logprob_is_what_greedy_decoding_maximizes_and_adds_up_over_a_turn(dm, tiny_lm):
    import torch

    prefix = tiny_lm.tokenizer.encode("<|im_start|>user\nI want to close my savings account.<|im_end|>\n<|im_start|>assistant\n")
    with tiny_lm._no_grad():  # as decoding and turn_logprob compute (bf16 autocast where the CPU has it)
        greedy = int(tiny_lm.model(torch.tensor([prefix], device=tiny_lm.device)).logits[0, -1].argmax())
    scores = {t: dm.turn_logprob(tiny_lm, prefix, [t]) for t in {*range(200), greedy}}
    assert max(scores, key=scores.get) == greedy  # the next token's distribution, not the one before or after it
    assert sum(torch.tensor(list(scores.values())).exp().tolist()) < 1.0 + 1e-4  # log-probabilities, not logits
    a, b = [greedy, 5, 9], [7, 8]
    whole = dm.turn_logprob(tiny_lm, prefix, a + b)
    assert whole == pytest.approx(dm.turn_logprob(tiny_lm, prefix, a) + dm.turn_logprob(tiny_lm, prefix + a, b), abs=1e-3)


def _eval_run(folder: Path, traces: dict[str, tuple[list[int], list[int]]]) -> None:
    """An eval run's store with the columns the benchmark reads: each scored episode's token trace."""
    folder.mkdir(parents=True)
    with sqlite3.connect(folder / "runs.sqlite") as db:
        db.execute("CREATE TABLE episodes (id INTEGER, task_id TEXT, outcome TEXT)")
        db.execute("CREATE TABLE traces (episode_id INTEGER, ids TEXT, mask TEXT)")
        for eid, (task, (ids, mask)) in enumerate(traces.items()):
            db.execute("INSERT INTO episodes VALUES (?, ?, 'failure')", (eid, task))
            db.execute("INSERT INTO traces VALUES (?, ?, ?)", (eid, json.dumps(ids), json.dumps(mask)))


def _perturbed(tiny_lm, out: Path) -> Path:
    """Another checkpoint: tiny with noise on its weights, so each arm's row must come from its own model."""
    import torch

    from muactl.models.folder import save_atomically
    from muactl.models.generation import LocalLM

    out.parent.mkdir(parents=True, exist_ok=True)
    other = LocalLM(tiny_lm.path, prefix_cache=False)
    torch.manual_seed(0)
    with torch.no_grad():
        for w in other.model.parameters():
            w.add_(0.5 * torch.randn_like(w) * w.std())
    return save_atomically(other.model, other.tokenizer, out)


def test_an_out_folder_is_scored_per_seed_and_template(dm, tiny_lm, tmp_path, capsys, monkeypatch):
    """Two arms that act differently on one refusal (a reply against a close_account call) and alike on a balance
    question: one decision scored, under each arm's own checkpoint and a third one named with --score."""
    tok = tiny_lm.tokenizer
    prefix = tok.encode("<|im_start|>user\nPlease close my savings account.<|im_end|>\n<|im_start|>assistant\n")
    refuse = tok.encode("I cannot, it still holds 445.<|im_end|>")
    close = tok.encode('<tool_call>\n{"name": "close_account", "arguments": {"account_id": "a55"}}\n</tool_call><|im_end|>')
    tail = tok.encode("\n<|im_start|>user\nOK<|im_end|>")

    def trace(turn):
        return prefix + turn + tail, [0] * len(prefix) + [1] * len(turn) + [0] * len(tail)

    _eval_run(tmp_path / "runs" / "eval-a", {"refuse-close-nonempty-1": trace(refuse), "balance-2": trace(refuse)})
    _eval_run(tmp_path / "runs" / "eval-b", {"refuse-close-nonempty-1": trace(close), "balance-2": trace(refuse)})
    (tmp_path / "results.json").write_text(json.dumps({
        "sft:3": {"heldout": {"refuse-close-nonempty-1": 1, "balance-2": 1}, "heldout_run": "eval-a"},
        "sft+grpo:3": {"heldout": {"refuse-close-nonempty-1": 0, "balance-2": 1}, "heldout_run": "eval-b"}}))
    (tmp_path / "runs" / "sft-3" / "sft").mkdir(parents=True)
    (tmp_path / "runs" / "sft-3" / "sft" / "checkpoint-final").symlink_to(tiny_lm.path)
    grpo = _perturbed(tiny_lm, tmp_path / "runs" / "sft-grpo-3" / "checkpoint-final")
    monkeypatch.setattr(sys, "argv", ["decision_margin.py", "--out", str(tmp_path), "--seeds", "3",
                                      "--score", f"other={tiny_lm.path}"])  # a third model on the same decisions
    dm.main()
    text = capsys.readouterr().out
    from muactl.models.generation import LocalLM

    margins = {}
    for name, lm in (("sft", tiny_lm), ("sft+grpo", LocalLM(grpo, prefix_cache=False))):
        margins[name] = m = dm.turn_logprob(lm, prefix, refuse) - dm.turn_logprob(lm, prefix, close)
        # 1 instance, 1 with the same conversation before it; median, mean [interval of one], smallest, prefers sft
        assert (f"| 3, refuse-close-nonempty | {name} | 1 | 1 | {m:+.2f} | {m:+.2f} [{m:+.2f}, {m:+.2f}] | {m:+.2f} "
                f"| {int(m > 0)}/1 |") in text
    assert abs(margins["sft"] - margins["sft+grpo"]) > 0.01  # the rows come from two different models
    assert f"| 3, refuse-close-nonempty | other | 1 | 1 | {margins['sft']:+.2f} |" in text
    assert "| 3, balance |" not in text  # the arms agree there: nothing to score
    assert "refuse-close-nonempty: reply (last) -> close_account (last) (pass, fail) x1" in text
    assert "not scored: the same actions 1" in text


def test_a_missing_checkpoint_or_evaluation_is_named(dm, tiny_lm, tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["decision_margin.py", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):  # argparse's error: not an rl_gain --out folder
        dm.main()
    (tmp_path / "results.json").write_text(json.dumps({"sft:0": {"heldout": {}, "heldout_run": "eval-a"}}))
    monkeypatch.setattr(sys, "argv", ["decision_margin.py", "--out", str(tmp_path), "--seeds", "0"])
    with pytest.raises(SystemExit, match=r"seed 0: no checkpoint at .*sft-0/sft/checkpoint-final"):
        dm.main()
    for arm in ("sft", "sft+grpo"):
        dm.checkpoint(tmp_path, arm, 0).parent.mkdir(parents=True)
        dm.checkpoint(tmp_path, arm, 0).symlink_to(tiny_lm.path)
    with pytest.raises(SystemExit, match=r"no evaluation run recorded for sft\+grpo:0"):
        dm.main()
    assert dm.checkpoint(tmp_path, "sft+grpo", 0) == tmp_path / "runs" / "sft-grpo-0" / "checkpoint-final"
    monkeypatch.setattr(sys, "argv", ["decision_margin.py", "--out", str(tmp_path), "--score", f"sft={tiny_lm.path}"])
    with pytest.raises(SystemExit):  # a --score named like an arm would replace that arm's model in its rows
        dm.main()
