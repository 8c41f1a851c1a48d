"""GRPO's SFT anchor (grpo.sft_coef, muactl/train/anchor.py): its loss is SFT's on the assistant tokens, its rows
a function of (seed, step, micro-batch), and from the CLI it pulls the update toward the SFT data. The model is
`tiny` (random weights); the data is the oracle's real bank conversations."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app

runner = CliRunner()
FAST = ["domain=bank", "grpo.group_size=2", "grpo.tasks_per_step=2", "grpo.max_turns=3", "grpo.max_new_tokens=12"]


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory):
    from muactl.train.synth import run_synth
    from muactl.train.synth_config import SynthConfig

    out = tmp_path_factory.mktemp("anchor") / "sft.jsonl"
    run_synth(SynthConfig(domain="bank", trials=1, split="test", output=str(out)))
    return out


def _tiny():
    import torch
    from transformers import AutoModelForCausalLM

    from muactl.domain.open import open_domain
    from muactl.models.folder import load_tokenizer
    from muactl.models.registry import resolve

    path = resolve("tiny", open_domain("bank", with_tasks=False).compiled)
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), load_tokenizer(path)


def _anchor(sft_data, tokenizer, per_update=3, loss="nll"):
    from muactl.train.anchor import SFTAnchor

    return SFTAnchor.from_data(sft_data, tokenizer, 4096, coef=1.0, per_update=per_update, seed=0, log=lambda s: None,
                               loss=loss)


def test_the_anchor_loss_is_the_sft_loss_on_assistant_tokens(sft_data):
    """The mean cross-entropy of a plain forward pass at the tokens SFT trains on (assistant turns), rows of
    different lengths padded into one batch; and it backpropagates."""
    import contextlib

    import torch

    model, tokenizer = _tiny()
    anchor = _anchor(sft_data, tokenizer)
    rows = anchor.draw(step=0, micro=0)
    assert len({len(r["input_ids"]) for r in rows}) > 1  # the padding is exercised
    nll, figures = anchor.losses(model, 0, 0, head_fp32=False, autocast=contextlib.nullcontext)
    total, count = 0.0, 0
    with torch.no_grad():
        for r in rows:
            ids = torch.tensor([r["input_ids"]])
            logits = model(input_ids=ids).logits[0, :-1]
            trained = torch.tensor(r["assistant_masks"][1:], dtype=torch.bool)
            total += torch.nn.functional.cross_entropy(logits[trained], ids[0, 1:][trained], reduction="sum").item()
            count += int(trained.sum())
    assert count > 50 and nll.item() == pytest.approx(total / count, rel=1e-5) == figures["anchor/nll"]
    nll.backward()
    assert model.get_output_embeddings().weight.grad.abs().sum() > 0


def test_drift_counts_only_the_tokens_now_predicted_worse_than_at_the_start(sft_data):
    """grpo.sft_loss=drift: 0 with no gradient at the starting policy; after the weights move, per conversation the
    sum over its assistant tokens of max(0, NLL now - NLL at the start), averaged over the conversations, with the
    gradient of the tokens that got worse only (both checked against plain forward passes)."""
    import contextlib

    import torch

    model, tokenizer = _tiny()
    anchor = _anchor(sft_data, tokenizer, loss="drift")
    anchor.remember_start(model, False, contextlib.nullcontext, steps=2, accumulation=1)
    assert sorted(anchor.start) == [(0, 0), (1, 0)]
    rows = anchor.draw(step=1, micro=0)
    drift, figures = anchor.losses(model, 1, 0, False, contextlib.nullcontext)
    drift.backward()
    assert drift.item() == 0.0 and figures["anchor/nll"] > 1
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())  # relu: no pull at "no worse"

    def token_nll(r):
        ids = torch.tensor([r["input_ids"]])
        logits = model(input_ids=ids).logits[0, :-1]
        trained = torch.tensor(r["assistant_masks"][1:], dtype=torch.bool)
        return torch.nn.functional.cross_entropy(logits[trained], ids[0, 1:][trained], reduction="none")

    with torch.no_grad():
        start = [token_nll(r) for r in rows]
        torch.manual_seed(0)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    now = [token_nll(r) for r in rows]
    worse = [n.detach() > s for n, s in zip(now, start)]
    assert all(w.any() and not w.all() for w in worse)  # some tokens got worse, some did not
    want = sum(float((n.detach() - s)[w].sum()) for n, s, w in zip(now, start, worse)) / len(rows)
    (sum(n[w].sum() for n, w in zip(now, worse)) / len(rows)).backward()
    head = model.get_output_embeddings().weight
    expected, head.grad = head.grad.clone(), None
    drift, figures = anchor.losses(model, 1, 0, False, contextlib.nullcontext)
    assert drift.item() == pytest.approx(want, rel=1e-4) == figures["anchor/drift"]
    assert figures["anchor/nll"] == pytest.approx(float(torch.cat(now).detach().mean()), rel=1e-4)
    model.zero_grad()
    drift.backward()
    assert torch.allclose(head.grad, expected, rtol=1e-3, atol=1e-6)
    with pytest.raises(RuntimeError, match="no starting NLL for step 2"):
        anchor.losses(model, 2, 0, False, contextlib.nullcontext)


def test_the_rows_are_a_function_of_seed_step_and_micro_batch(sft_data):
    _, tokenizer = _tiny()
    a, b = _anchor(sft_data, tokenizer), _anchor(sft_data, tokenizer)
    assert len(a.rows) > 10
    assert a.draw(3, 0) == b.draw(3, 0)  # a resumed run draws what the uninterrupted one drew
    assert a.draw(3, 0) != a.draw(4, 0) and a.draw(3, 0) != a.draw(3, 1)


def test_train_grpo_with_the_anchor_pulls_the_policy_toward_the_sft_data(in_tmp, sft_data):
    """From the CLI: the anchor's NLL is logged at every step and shown on the step line, and the trained policy
    fits the SFT data better than the one GRPO trains without it (same seed, same rollouts' draw)."""
    import contextlib

    import torch
    from transformers import AutoModelForCausalLM

    from muactl.runs.store import RunStore

    common = ["train", "grpo", *FAST, "grpo.steps=2", "grpo.lr=1e-3", "grpo.warmup_ratio=0", f"data={sft_data}"]
    r = runner.invoke(app, [*common, "grpo.sft_coef=1.0", "grpo.sft_rows=2", "run_id=anchored"])
    assert r.exit_code == 0, r.output
    assert "SFT anchor (nll), weight 1: 2 of" in r.output and "per micro-batch" in r.output
    steps = [line for line in r.output.splitlines() if line.startswith("grpo step ")]
    assert len(steps) == 2 and all(", SFT anchor NLL " in line for line in steps), steps
    logged = [row for row in RunStore.open("anchored").db["metrics"].rows if row["name"] == "anchor/nll"]
    assert sorted(row["step"] for row in logged) == [1, 2]
    r = runner.invoke(app, [*common, "run_id=free"])
    assert r.exit_code == 0 and "SFT anchor" not in r.output, r.output
    drift = [*common, "grpo.sft_coef=1.0", "grpo.sft_rows=2", "grpo.sft_loss=drift", "grpo.save_steps=1"]
    r = runner.invoke(app, [*drift, "keep_checkpoints=true", "run_id=drift"])
    assert r.exit_code == 0 and "SFT anchor (drift), weight 1" in r.output, r.output
    assert "the starting policy's NLL on the 2 batches the run will draw" in r.output, r.output
    steps = [line for line in r.output.splitlines() if line.startswith("grpo step ")]
    assert len(steps) == 2 and all(" nats per conversation)" in line for line in steps), steps
    # extended by a step from its checkpoint, whose weights are moved here (random tiny's groups carry no signal,
    # so GRPO alone leaves them): step 3 compares with the starting policy, not with the checkpoint it resumed from
    from safetensors.torch import load_file, save_file

    saved = in_tmp / "runs" / "drift" / "grpo" / "checkpoint-2" / "model.safetensors"
    torch.manual_seed(0)
    save_file({k: v + 0.05 * torch.randn_like(v) for k, v in load_file(saved).items()}, saved, metadata={"format": "pt"})
    r = runner.invoke(app, ["train", "--resume", "drift", "grpo.steps=3"])
    assert r.exit_code == 0 and "the starting policy's NLL on the 3 batches" in r.output, r.output
    drift = {row["step"]: row["value"] for row in RunStore.open("drift").db["metrics"].rows if row["name"] == "anchor/drift"}
    # step 1's batch is scored before any update, as the same batch: nothing is worse, not even by rounding
    assert sorted(drift) == [1, 2, 3] and drift[1] == 0.0 and drift[3] > 1, drift

    _, tokenizer = _tiny()
    rows = _anchor(sft_data, tokenizer).rows[:8]

    def fit(run_id):
        model = AutoModelForCausalLM.from_pretrained(in_tmp / "runs" / run_id / "checkpoint-final", dtype=torch.float32)
        with torch.no_grad():
            nll, scored = _anchor(sft_data, tokenizer).token_nll(model, rows, False, contextlib.nullcontext)
            return (nll.sum() / scored.sum()).item()

    anchored, free = fit("anchored"), fit("free")
    assert anchored < free - 0.5, (anchored, free)


@pytest.mark.parametrize("override, message", [
    ("grpo.sft_coef=-1", "grpo.sft_coef must be a number >= 0"),
    ("grpo.sft_coef=nan", "grpo.sft_coef must be a number >= 0"),
    ("grpo.sft_rows=0", "grpo.sft_rows must be >= 1"),
    ("grpo.sft_loss=kl", "grpo.sft_loss must be one of nll, drift, not 'kl'"),
    ("grpo.sft_coef=0.5", "grpo.sft_coef=0.5 anchors GRPO to SFT data: name it with data=FILE.jsonl"),
    ("grpo.sft_loss=drift", "grpo.sft_loss=drift names the SFT anchor's loss, which is off: set grpo.sft_coef > 0"),
])
def test_a_bad_anchor_setting_fails_before_a_run_exists(in_tmp, override, message):
    r = runner.invoke(app, ["train", "grpo", *FAST, override, "run_id=bad"])
    assert r.exit_code == 2 and message in r.output, r.output
    assert not (in_tmp / "runs" / "bad").exists()


def test_anchor_data_without_examples_is_refused(in_tmp):
    empty = in_tmp / "empty.jsonl"
    empty.write_text("\n")
    r = runner.invoke(app, ["train", "grpo", *FAST, "grpo.sft_coef=0.5", f"data={empty}", "run_id=bad"])
    assert r.exit_code == 2 and "holds no examples" in r.output, r.output
    bad = in_tmp / "bad.jsonl"
    bad.write_text(json.dumps({"messages": []}) + "\n{oops\n")
    r = runner.invoke(app, ["train", "grpo", *FAST, "grpo.sft_coef=0.5", f"data={bad}", "run_id=bad"])
    assert r.exit_code == 2 and f"grpo.sft_coef's data: {bad}:2: invalid JSON" in r.output, r.output
    silent = in_tmp / "silent.jsonl"
    silent.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")
    r = runner.invoke(app, ["train", "grpo", *FAST, "grpo.sft_coef=0.5", f"data={silent}", "run_id=bad"])
    assert r.exit_code == 2 and f"{silent}: example 1 has no assistant turn" in r.output, r.output
    r = runner.invoke(app, ["train", "grpo", *FAST, "grpo.sft_coef=0.5", f"data={in_tmp / 'gone.jsonl'}", "run_id=bad"])
    assert r.exit_code == 2 and "grpo.sft_coef's data: data file" in r.output and "not found" in r.output, r.output
    assert not (in_tmp / "runs" / "bad").exists()


def _config_only_checkpoint(folder, config: dict):
    """A checkpoint folder that passes the registry's file check (empty weights and tokenizer files) and whose
    config.json is `config`: the anchor's checks read only the config."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "tokenizer_config.json").write_text("{}")
    return folder


def test_a_model_whose_logits_are_scaled_is_refused_before_a_run_exists(in_tmp, sft_data):
    """The anchor's loss takes the policy-token path, which has no logit soft-capping: such a model (a Gemma-2
    config; its default caps the logits) is refused before a run folder exists."""
    folder = _config_only_checkpoint(in_tmp / "capped", {"model_type": "gemma2"})
    r = runner.invoke(app, ["train", "grpo", *FAST, "grpo.sft_coef=0.5", f"data={sft_data}", f"model={folder}",
                            "run_id=bad"])
    assert r.exit_code == 2 and "is not a plain causal LM (its logits are scaled: final_logit_softcapping)" in r.output, r.output
    assert not (in_tmp / "runs" / "bad").exists()


def test_drift_refuses_a_model_that_trains_with_dropout(in_tmp, sft_data):
    """drift compares the NLL now with the NLL at the start; with dropout on, the two differ by noise alone. A GPT-2
    config (dropout 0.1 by default) is refused before a run folder exists under drift, and passes this check
    under nll (it fails later, when its empty weights are loaded)."""
    folder = _config_only_checkpoint(in_tmp / "dropping", {"model_type": "gpt2", "attn_pdrop": 0.0})
    anchored = [*FAST, "grpo.sft_coef=0.5", f"data={sft_data}", f"model={folder}"]
    r = runner.invoke(app, ["train", "grpo", *anchored, "grpo.sft_loss=drift", "run_id=bad"])
    assert r.exit_code == 2, r.output
    assert f"grpo.sft_loss=drift: {folder} trains with dropout (embd_pdrop=0.1, resid_pdrop=0.1)" in r.output, r.output
    assert "summary_first_dropout" not in r.output and "attn_pdrop" not in r.output
    assert not (in_tmp / "runs" / "bad").exists()
    r = runner.invoke(app, ["train", "grpo", *anchored, "run_id=bad2"])
    assert "trains with dropout" not in r.output, r.output


def test_token_drift_lists_the_turns_a_moved_checkpoint_predicts_worse(in_tmp, sft_data, capsys, monkeypatch):
    """benchmarks/token_drift.py (issue 26's reading of where GRPO moved away from the SFT data): the same
    checkpoint twice rises nowhere; a checkpoint with moved weights rises, and its turns are listed first."""
    import importlib.util
    import sys

    import torch

    model, tokenizer = _tiny()
    model.save_pretrained(in_tmp / "start")
    tokenizer.save_pretrained(in_tmp / "start")
    torch.manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(in_tmp / "moved")
    root = Path(__file__).resolve().parent.parent
    monkeypatch.syspath_prepend(str(root / "benchmarks"))  # it imports decision_margin, as a script run from there would
    spec = importlib.util.spec_from_file_location("token_drift", root / "benchmarks" / "token_drift.py")
    token_drift = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(token_drift)
    monkeypatch.setattr(sys, "argv", ["token_drift", "--data", str(sft_data), "--top", "3",
                                      f"start={in_tmp / 'start'}", f"same={in_tmp / 'start'}", f"moved={in_tmp / 'moved'}"])
    try:
        token_drift.main()
    finally:
        sys.modules.pop("decision_margin", None)
        sys.modules.pop("rl_gain", None)
    out = capsys.readouterr().out
    assert "| template | conversations | start | same | moved |" in out, out
    listed = [line for line in out.splitlines() if line.startswith("| moved |") or line.startswith("| same |")]
    assert len(listed) == 3 and all(line.startswith("| moved |") for line in listed), out
    rise = [float(v) for v in listed[0].split("|")[5:8]]  # sum start, sum same, sum moved
    assert rise[0] == rise[1] < rise[2], listed[0]
