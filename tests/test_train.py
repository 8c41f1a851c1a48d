"""Cold start: synthesis, hydra configs, the SFT loss mask, and a short real SFT run on tiny."""

import json

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from muactl.train.recipes import CONF_DIR, GROUPS, compose, options
from muactl.errors import UsageError

runner = CliRunner()



# ---------------------------------------------------------------- config


def test_every_shipped_config_composes():
    for group in GROUPS:
        for option in options(group):
            overrides = [f"{group}={option}"] + (["model.name=some/model"] if (group, option) == ("model", "hf") else [])
            cfg = compose(None, overrides)
            assert cfg[group] is not None
    assert set(options("model")) >= {"tiny", "smollm2-135m", "hf"}
    for path in CONF_DIR.rglob("*.yaml"):
        assert path.read_text().strip(), path


def test_overrides_and_model_ids():
    cfg = compose(None, ["model=smollm2-135m", "data=data/bank-sft.jsonl", "sft.epochs=2"])
    assert (cfg.model.name, cfg.data, cfg.sft.epochs) == ("smollm2-135m", "data/bank-sft.jsonl", 2)
    cfg = compose(None, ["model=Qwen/Qwen3-8B", "sft.lora=true"])
    assert cfg.model.name == "Qwen/Qwen3-8B" and cfg.sft.lora is True
    cfg = compose(None, ["user=openai/gpt-4o-mini"])
    assert cfg.user.kind == "litellm" and cfg.user.model == "openai/gpt-4o-mini"


@pytest.mark.parametrize("bad, fragment", [
    (["sft.epohcs=2"], "sft.epohcs"),
    (["sft.epochs=abc"], "sft.epochs"),
    (["sft.lora=maybe"], "sft.lora"),
    (["model.name"], "override"),
    (["nogroup=1"], "nogroup"),
])
def test_bad_overrides_are_clear_errors(bad, fragment):
    with pytest.raises(UsageError) as e:
        compose(None, bad)
    assert fragment in str(e.value)


def test_bad_override_on_the_cli_exits_2_without_traceback(in_tmp):
    r = runner.invoke(app, ["train", "sft", "sft.epohcs=2"])
    assert r.exit_code == 2 and "sft.epohcs" in r.output and "Traceback" not in r.output


def test_user_config_file_between_defaults_and_overrides(in_tmp):
    f = in_tmp / "exp.yaml"
    f.write_text("model: smollm2-135m\nsft:\n  epochs: 5\n  lr: 0.001\ndomain: retail\n")
    cfg = compose(f, ["sft.epochs=1"])
    assert cfg.model.name == "smollm2-135m" and cfg.sft.lr == 0.001 and cfg.sft.epochs == 1 and cfg.domain == "retail"


# ---------------------------------------------------------------- synth


def test_synth_keeps_successes_drops_duplicates_and_writes_trl_format(in_tmp):
    out = in_tmp / "data" / "bank-sft.jsonl"
    r = runner.invoke(app, ["synth", "bank", "--agent", "oracle", "--user", "scripted", "--trials", "2", "-o", str(out)])
    assert r.exit_code == 0, r.output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    stats = json.loads((out.parent / "bank-sft.stats.json").read_text())
    assert stats["episodes"] == 88 and stats["successes"] == 88
    # oracle + scripted user is deterministic: the second trial of each task is an exact duplicate
    assert stats["kept"] == len(rows) and stats["duplicates_dropped"] >= 44
    assert f"kept {len(rows)} of 88 episodes: {stats['duplicates_dropped']} duplicates dropped, 0 failed" in r.output
    assert len({json.dumps(r["messages"]) for r in rows}) == len(rows)
    calls = [c for r in rows for m in r["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert calls and all(c["type"] == "function" and isinstance(c["function"]["arguments"], dict) for c in calls)
    assert any(m["role"] == "tool" for m in rows[0]["messages"])
    assert {t["function"]["name"] for t in rows[0]["tools"]} >= {"find_customer", "list_accounts"}
    # the datasets library reads it as it is
    from datasets import load_dataset

    ds = load_dataset("json", data_files=str(out), split="train")
    assert len(ds) == len(rows) and "tools" in ds.column_names
    r = runner.invoke(app, ["data", "show", str(out), "--index", "1"])
    assert r.exit_code == 0 and "find_customer" in r.output and "agent:" in r.output


def test_synth_rejects_failed_episodes(in_tmp):
    from muactl.episode.agents.base import Agent, AgentReply
    from muactl.train.synth_config import SynthConfig
    from muactl.train.synth import run_synth

    class Quits(Agent):
        async def act(self, ctx):
            return AgentReply("Goodbye.")

    import muactl.eval.evaluate as ev

    orig = ev.build_parts
    ev.build_parts = lambda cfg, opened: (Quits(), orig(cfg, opened)[1])
    try:
        store, stats = run_synth(SynthConfig(domain="bank", trials=1, output=str(in_tmp / "x.jsonl")))
    finally:
        ev.build_parts = orig
    # a do-nothing agent succeeds nowhere, refusals included (they pay for the look-ups and the reason), so
    # nothing becomes SFT data
    assert not any(row["successes"] for row in stats["per_task"].values())
    assert stats["kept"] + stats["duplicates_dropped"] == 0 and stats["failed"] == stats["episodes"] > 0
    assert stats["infra_errors"] == 0
    out = in_tmp / "x.jsonl"
    assert not out.exists() or out.read_text() == ""


def test_synth_resume_appends_without_duplicates(in_tmp):
    from muactl.train.synth_config import SynthConfig
    from muactl.train.synth import run_synth

    out = in_tmp / "r.jsonl"
    store, first = run_synth(SynthConfig(domain="bank", trials=1, tasks=["move-quin"], output=str(out)))
    store, again = run_synth(SynthConfig(domain="bank", trials=1, output=str(out)), resume=store.id)
    assert again["kept"] == first["kept"] == 1  # nothing left to run, nothing written twice
    assert len(out.read_text().splitlines()) == 1


# ---------------------------------------------------------------- the loss mask


def test_sft_mask_covers_exactly_the_assistant_turns(in_tmp):
    from muactl.models.chatml import IM_END
    from muactl.models.folder import load_tokenizer
    from muactl.models.tiny import tiny_path
    from muactl.train.sft import tokenize_example
    from muactl.train.synth_config import SynthConfig
    from muactl.train.synth import read_jsonl, run_synth
    from muactl.domain.open import open_domain

    run_synth(SynthConfig(domain="bank", trials=1, tasks=["move-quin"], output=str(in_tmp / "one.jsonl")))
    record = read_jsonl(in_tmp / "one.jsonl")[0]
    tok = load_tokenizer(tiny_path(open_domain("bank", with_tasks=False).compiled))
    ex = tokenize_example(tok, record, 100_000)
    ids, mask = ex["input_ids"], ex["assistant_masks"]
    # split the sequence into turns at <|im_start|> and check each turn's mask
    start = tok.convert_tokens_to_ids("<|im_start|>")
    turns, cur = [], []
    for i, t in enumerate(ids):
        if t == start and cur:
            turns.append(cur)
            cur = []
        cur.append(i)
    turns.append(cur)
    roles = [m["role"] for m in record["messages"]]
    assert len(turns) == len(roles)
    assert record["not_trained"] == [1]  # the greeting is template text
    # OpenAI's shape, nothing muactl-only inside messages: call ids, and the id each tool result answers
    assert not any("fixed" in m or "error" in m for m in record["messages"])
    call_ids = [c["id"] for m in record["messages"] for c in m.get("tool_calls") or []]
    answered = [m["tool_call_id"] for m in record["messages"] if m["role"] == "tool"]
    assert call_ids and answered == call_ids and len(set(call_ids)) == len(call_ids)
    for k, (role, idx) in enumerate(zip(roles, turns)):
        text = tok.decode([ids[i] for i in idx])
        masked = [ids[i] for i in idx if mask[i]]
        if role == "assistant" and k not in record["not_trained"]:
            header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)
            # everything after the header is trained: content or tool calls, and <|im_end|>; not the newline after it
            assert masked and masked == [ids[i] for i in idx][len(header):-1], text
            assert tok.decode(masked).endswith(IM_END)
        else:  # system, user and tool turns, and the fixed greeting, never carry loss
            assert not masked, (role, text)
    assistant_with_call = [m for m in record["messages"] if m["role"] == "assistant" and m.get("tool_calls")]
    assert assistant_with_call  # tool calls are among the trained tokens
    assert "<tool_call>" in tok.decode([t for t, k in zip(ids, mask) if k])


# ---------------------------------------------------------------- SFT end to end (tiny, a few steps)


def test_train_sft_on_tiny_writes_a_loadable_checkpoint_and_resumes(in_tmp, monkeypatch):
    from muactl.models import memory

    heap = []  # issue 27: SFT bounds the heap while it trains and unbounds it after, before anything generates
    monkeypatch.setattr(memory, "bound_heap", lambda: heap.append("bound"))
    monkeypatch.setattr(memory, "unbound_heap", lambda: heap.append("unbound"))
    r = runner.invoke(app, ["synth", "bank", "--trials", "1", "--tasks", "move-quin,close-ned,move-mia", "-o", "d.jsonl"])
    assert r.exit_code == 0, r.output
    args = ["train", "sft", "data=d.jsonl", "sft.max_steps=2", "sft.batch_size=2", "sft.save_steps=1",
            "sft.logging_steps=1", "run_id=sft-test"]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert heap == ["bound", "unbound"]
    assert "sft: precision: " in r.output and "batch 2 x grad_accum 1" in r.output
    assert "gradient checkpointing off" in r.output  # a CPU has the memory; recomputation would double the step
    # issue 27.1: a line per logging step, TRL's raw dict of it only in the store
    assert "sft step 1/2: loss " in r.output and "sft step 2/2: loss " in r.output and "{'loss'" not in r.output, r.output
    run = in_tmp / "runs" / "sft-test"
    final = run / "checkpoint-final"
    assert (final / "config.json").is_file() and (final / "tokenizer.json").is_file()
    # the model card travels with every checkpoint: tiny is prompted with the compact tool list
    import json

    assert json.loads((final / "muactl.json").read_text()) == {"format": "chatml", "tools": "compact"}
    assert "max_steps: 2" in (run / "config.yaml").read_text()
    # the stage finished: its resumable checkpoints (optimizer state and all) are gone, and checkpoint-final is the
    # model alone (test_train_cli keeps them with keep_checkpoints=true)
    assert "sft: finished; removed its 2 resumable checkpoints" in r.output, r.output
    assert not list((run / "sft").glob("checkpoint-*")), list((run / "sft").iterdir())
    assert {p.name for p in final.iterdir()} == {"config.json", "generation_config.json", "model.safetensors",
                                                 "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                                                 "muactl.json"}
    # an hf: agent loads it directly and runs an episode
    r = runner.invoke(app, ["eval", "bank", "--agent", f"hf:{final}", "--task", "move-quin", "--max-turns", "2",
                            "--max-new-tokens", "8"])
    assert r.exit_code == 0, r.output
    # resuming the finished run trains nothing (its checkpoints are gone: it would have started over)
    weights = (final / "model.safetensors").read_bytes()
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "its sft finished already" in r.output and "sft step" not in r.output, r.output
    assert (final / "model.safetensors").read_bytes() == weights
    # ... and more steps on it cannot continue: said, with what to do instead
    r = runner.invoke(app, args[:3] + ["sft.max_steps=3"] + args[4:])
    assert r.exit_code == 2 and "sft.max_steps=3 cannot train it on" in r.output and "keep_checkpoints=true" in r.output
    assert "Traceback" not in r.output and (final / "model.safetensors").read_bytes() == weights
    from muactl.runs.store import RunStore

    metrics = {row["name"] for row in RunStore.open("sft-test").db["metrics"].rows}
    assert "sft/loss" in metrics


# ---------------------------------------------------------------- synthesis with an API teacher


def test_synth_with_an_api_teacher_and_llm_user_over_a_local_server(in_tmp):
    """The teacher and the user are litellm models served by a real local HTTP server (the model is fake):
    successes are kept, with the native tool calls turned into the TRL format."""
    from muactl.train.synth_config import SynthConfig
    from muactl.train.synth import read_jsonl, run_synth
    from muactl.domain.open import open_domain
    from tests.fakes.openai_server import FakeOpenAI, Faulty, Reply, gold_agent, two_sided

    tasks = [t.task for t in open_domain("bank").tasks if t.split == "train"][:6]
    responder = Faulty(two_sided(gold_agent(tasks)), first=2, fault=Reply(status=500))  # it survives two 500s
    with FakeOpenAI(responder) as server:
        cfg = SynthConfig(domain="bank", agent="openai/teacher", user="openai/user", api_base=server.base,
                          user_api_base=server.base, tasks=[t.id for t in tasks], trials=1,
                          output=str(in_tmp / "api.jsonl"), backoff_s=0.01)
        store, stats = run_synth(cfg)
    rows = read_jsonl(in_tmp / "api.jsonl")
    assert stats["episodes"] == 6 and stats["kept"] == len(rows) == stats["successes"]
    write_tasks = [t for t in tasks if t.expect.actions and t.expect.assert_]
    assert len(rows) >= len(write_tasks) > 0
    calls = [c for r in rows for m in r["messages"] if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert calls and all(isinstance(c["function"]["arguments"], dict) for c in calls)


def test_resume_skips_a_checkpoint_cut_off_mid_save(tmp_path):
    """kill -9 during a save leaves checkpoint-N without trainer_state.json (written last): resume from N-1."""
    from muactl.train.checkpoints import last_checkpoint

    assert last_checkpoint(tmp_path / "missing") is None
    for n, state in ((2, '{"global_step": 2}'), (10, '{"global_step": 10}'), (11, None), (12, '{"global_')):
        (tmp_path / f"checkpoint-{n}").mkdir()
        (tmp_path / f"checkpoint-{n}" / "model.safetensors").write_text("x")
        if state is not None:
            (tmp_path / f"checkpoint-{n}" / "trainer_state.json").write_text(state)
    assert last_checkpoint(tmp_path) == tmp_path / "checkpoint-10"


def test_training_precision(monkeypatch):
    """float32 weights with bf16 autocast on GPUs and on CPUs with native bf16; an explicit dtype is taken as given."""
    import torch

    from muactl.models.precision import cpu_has_bf16, training_precision

    assert training_precision("float32") == (torch.float32, False)
    assert training_precision("bfloat16") == (torch.bfloat16, True)
    if not torch.cuda.is_available():
        assert training_precision(None) == (torch.float32, cpu_has_bf16())
        monkeypatch.setenv("MUACTL_CPU_BF16", "0")
        assert training_precision(None) == (torch.float32, False)
    # on a GPU the weights stay float32 too (bf16 autocast): bf16 weights round small updates away
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert training_precision(None) == (torch.float32, True)
    weight = torch.tensor(0.05, dtype=torch.bfloat16)
    assert weight + 2e-5 == weight  # why: a typical RL step is lost on a bf16 weight


def test_native_bf16_means_the_cpu_flags_not_onednn_emulation():
    """cpu_has_bf16 agrees with the kernel's CPU flags: AVX512-BF16 or AMX. On an AVX512 core without them oneDNN
    still says bf16 is "supported" (emulated, 2.9x slower than float32 here), which once made training choose it."""
    from pathlib import Path

    from muactl.models.precision import cpu_has_bf16

    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo to read the CPU flags from")
    flags = {f for line in cpuinfo.read_text().splitlines() if line.startswith("flags") for f in line.split(":", 1)[1].split()}
    assert cpu_has_bf16() == bool(flags & {"avx512_bf16", "amx_bf16", "amx_tile"})


def test_example_configs_compose():
    """The recipes in examples/ compose against the config schema (what `muactl train FILE --cfg` does)."""
    from pathlib import Path

    examples = Path(__file__).resolve().parent.parent / "examples"
    quick = compose(examples / "quickstart.yaml", [])
    assert quick.model.name == "smollm2-135m" and list(quick.stages) == ["synth", "sft", "grpo", "eval"]
    gpu = compose(examples / "gpu-qwen3.yaml", [])
    assert "Qwen3" in gpu.model.name and gpu.user.kind == "litellm"
    mix = compose(examples / "two-domains.yaml", [])
    assert mix.domain is None and [(d.name, d.weight) for d in mix.domains] == [("bank", 3.0), ("retail", 1.0)]


def test_gradient_checkpointing_only_where_memory_is_scarce(monkeypatch):
    import torch

    from muactl.models.precision import gradient_checkpointing

    assert gradient_checkpointing(True, "sft") is True and gradient_checkpointing(False, "grpo") is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gradient_checkpointing(None, "sft") is False
    assert gradient_checkpointing(None, "grpo") is True  # a whole step's conversations in one batch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert gradient_checkpointing(None, "sft") is True


def test_precision_note_says_which_and_why(monkeypatch):
    import torch

    from muactl.models.precision import precision_note

    assert precision_note("float32") == "precision: float32 weights (model.dtype=float32)"
    if not torch.cuda.is_available():
        monkeypatch.setenv("MUACTL_CPU_BF16", "0")
        assert precision_note(None) == "precision: float32 weights (MUACTL_CPU_BF16=0)"


def test_sft_batch_defaults_fit_the_model():
    from muactl.models.precision import sft_batch

    assert sft_batch("smollm2-135m", None, None, cuda=False) == (2, 4)  # 8 examples per update, 2 at a time
    assert sft_batch("tiny", None, None, cuda=False) == (8, 1)
    assert sft_batch("Qwen/Qwen3-8B", None, None, cuda=False) == (1, 8)
    assert sft_batch("Qwen/Qwen3-8B", None, None, cuda=True) == (8, 1)
    assert sft_batch("smollm2-135m", 4, None, cuda=False) == (4, 1)  # explicit settings are taken as given
    assert sft_batch("smollm2-135m", 2, 3, cuda=False) == (2, 3)
