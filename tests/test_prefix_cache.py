"""LocalLM's prefix cache on the real tiny model: the same generations as without it (greedy ids
identical, logprobs within 1e-5; sampled ids identical for the same seed), for batches whose prompts
share a long system prompt + tools prefix and differ in length after it; bounded, keyed by the
prefix's token ids, and dropped when the weights change."""

from __future__ import annotations

import copy

import pytest

from muactl.models import generation as models
from muactl.models.chatml import render
from muactl.models.generation import load_model, LocalLM

MAX_NEW = 16


@pytest.fixture(scope="module")
def bank():
    from muactl.domain.open import open_domain

    return open_domain("bank", with_tasks=False).compiled


@pytest.fixture(scope="module")
def base(bank):
    return load_model("tiny", bank)


def fresh(base, cache: bool, model=None) -> LocalLM:
    return LocalLM.from_model(model or base.model, base.tokenizer, prefix_cache=cache)


def prompt(lm, bank, user: str, system: str | None = None) -> list[int]:
    tools = [t.openai_schema() for t in bank.tools.values()]
    msgs = [{"role": "system", "content": system or bank.system_prompt}, {"role": "user", "content": user}]
    return lm.encode(render(msgs, tools, add_generation_prompt=True))


USERS = ["I want to check my balance.", "Please move 200 dollars from savings to checking, my account is 12345.",
         "Hi", "I lost my card yesterday and I need a new one sent to my home address as soon as possible, thanks."]


def assert_same(expected, got):
    assert len(expected) == len(got)
    for (ids_a, lps_a), (ids_b, lps_b) in zip(expected, got):
        assert ids_a == ids_b
        assert len(lps_a) == len(lps_b)
        assert max((abs(a - b) for a, b in zip(lps_a, lps_b)), default=0.0) < 1e-5


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("size", [1, 4])
def test_cached_generation_equals_uncached(base, bank, temperature, size):
    off, on = fresh(base, False), fresh(base, True)
    batch = [prompt(base, bank, u) for u in USERS[:size]]
    assert len({len(p) for p in batch}) == size  # rows differ in length after the shared prefix
    expected = off.generate(batch, MAX_NEW, temperature, seed=7)
    assert_same(expected, on.generate(batch, MAX_NEW, temperature, seed=7))  # computes the prefix
    assert_same(expected, on.generate(batch, MAX_NEW, temperature, seed=7))  # reuses it
    assert on.prefix_stats["misses"] == 1 and on.prefix_stats["hits"] == 1
    shared = len(next(iter(on._prefixes)))
    assert shared >= 1000 and all(p[:shared] == batch[0][:shared] for p in batch)
    assert off.prefix_stats["misses"] == off.prefix_stats["hits"] == 0 and not off._prefixes


def test_autocast_generates_in_bf16_on_the_models_device(base, bank):
    """GRPO samples under bf16 autocast wherever it trains so (GPUs, bf16 CPUs): the autocast region is opened for
    the model's own device type and the generation runs inside it."""
    import torch

    lm = fresh(base, False)
    lm.autocast = True
    seen = []
    hook = lm.model.lm_head.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
    try:
        [(ids, lps)] = lm.generate([prompt(base, bank, USERS[0])], 4, 0.0, seed=7)
    finally:
        hook.remove()
    assert ids and len(lps) == len(ids) and seen and set(seen) == {torch.bfloat16}


@pytest.mark.slow  # about 20-40 s quiet: the default run stays under 10 minutes
def test_batch_then_one_at_a_time_reuse_the_system_prompt(base, bank):
    """A one-prompt batch caches all but its last token; a later prompt that extends it (the episode's
    next turn) or shares only the system prompt with it (another episode) computes only the rest."""
    off, on = fresh(base, False), fresh(base, True)
    batch = [prompt(base, bank, u) for u in USERS]
    assert_same(off.generate(batch, MAX_NEW), on.generate(batch, MAX_NEW))
    system = on.prefix_stats["computed_tokens"]
    for p in batch:
        assert_same(off.generate([p], MAX_NEW), on.generate([p], MAX_NEW))
    assert on.prefix_stats["computed_tokens"] - system < sum(len(p) for p in batch) - 4 * system + 4
    longer = batch[0] + base.encode(" and my savings too, please") + batch[0][-3:]
    before = on.prefix_stats["computed_tokens"]
    assert_same(off.generate([longer], MAX_NEW, 1.0, seed=3), on.generate([longer], MAX_NEW, 1.0, seed=3))
    assert on.prefix_stats["computed_tokens"] - before == len(longer) - len(batch[0])
    # a stored prefix longer than what a batch shares is cut, not recomputed
    shorter = [batch[0][:-5], batch[1]]
    before = on.prefix_stats["computed_tokens"]
    assert_same(off.generate(shorter, MAX_NEW), on.generate(shorter, MAX_NEW))
    assert on.prefix_stats["computed_tokens"] == before


def test_prefixes_differing_in_one_token_do_not_collide(base, bank):
    off, on = fresh(base, False), fresh(base, True)
    a = prompt(base, bank, "Hi", system=bank.system_prompt)
    b = list(a)
    b[5] = a[6] if a[6] != a[5] else base.eos_id  # same length, one early token different
    pair_a, pair_b = [a, a + a[-4:]], [b, b + b[-4:]]
    for batch in (pair_a, pair_b, pair_a, pair_b):
        assert_same(off.generate(batch, MAX_NEW), on.generate(batch, MAX_NEW))
    assert len(on._prefixes) == 2 and on.prefix_stats["hits"] == 2
    keys = list(on._prefixes)
    assert keys[0][5] != keys[1][5] and len(keys[0]) == len(keys[1])


def test_cache_is_bounded(base, bank, monkeypatch):
    monkeypatch.setattr(models, "PREFIX_CACHE_ENTRIES", 2)
    on = fresh(base, True)
    for i in range(4):
        on.generate([prompt(base, bank, "Hi", system=f"{i} {bank.system_prompt}")] * 2, 2)
        assert len(on._prefixes) <= 2
    assert on.prefix_stats["misses"] == 4
    monkeypatch.setattr(models, "PREFIX_CACHE_TOKENS", 10)  # one entry stays (the batch in use), however large
    on.generate([prompt(base, bank, "Hi")] * 2, 2)
    assert len(on._prefixes) == 1


def test_short_prompts_are_not_cached(base):
    on = fresh(base, True)
    on.generate([base.encode("hello there")] * 2, 4)
    assert not on._prefixes and on.prefix_stats["misses"] == 0


def test_weight_changes_drop_the_cache(base, bank):
    import torch

    model = copy.deepcopy(base.model)
    on = fresh(base, True, model)
    batch = [prompt(base, bank, u) for u in USERS[:2]]
    on.generate(batch, MAX_NEW)
    assert on._prefixes
    on.invalidate_cache()
    assert not on._prefixes
    on.generate(batch, MAX_NEW)
    with torch.no_grad():  # as an optimizer step does: in place
        for p in model.parameters():
            p.mul_(1.5)
    expected = fresh(base, False, model).generate(batch, MAX_NEW)
    assert_same(expected, on.generate(batch, MAX_NEW))
    assert on.prefix_stats["misses"] == 3 and on.prefix_stats["hits"] == 0


def test_off_switch(base, monkeypatch):
    monkeypatch.setenv("MUACTL_PREFIX_CACHE", "0")
    assert not LocalLM.from_model(base.model, base.tokenizer).prefix_cache
    assert LocalLM.from_model(base.model, base.tokenizer, prefix_cache=True).prefix_cache
    monkeypatch.delenv("MUACTL_PREFIX_CACHE")
    assert LocalLM.from_model(base.model, base.tokenizer).prefix_cache


@pytest.mark.slow
def test_stop_ends_a_generate_call_in_flight(base, bank):
    """Ctrl-C cancels an eval's tasks; the batcher then calls stop() so the generate thread ends within a token
    instead of finishing its batch (issue 27.4). Same prompts and seed with and without the stop."""
    import threading
    import time

    lm = fresh(base, cache=False)
    prompts = [lm.encode(u) for u in USERS[:2]]  # short prompts: the test is about the new tokens
    new = 40
    full = lm.generate(prompts, new, 1.0, 7)
    out = []
    worker = threading.Thread(target=lambda: out.append(lm.generate(prompts, new, 1.0, 7)))
    worker.start()
    while not lm._generating.locked() and worker.is_alive():
        time.sleep(0.001)
    lm.stop()
    worker.join(timeout=30)
    assert not worker.is_alive() and out
    assert max(len(ids) for ids, _ in out[0]) < max(len(ids) for ids, _ in full)
    # the next call is not stopped: stop() cuts only the call in flight
    assert_same(full, lm.generate(prompts, new, 1.0, 7))
