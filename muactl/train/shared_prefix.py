"""The model body's hidden states for a batch whose rows share prefixes, each shared prefix computed once.

The rollouts of a GRPO group start with the same tokens: system prompt, tools, greeting and first user turn
(~1,000 of a bank conversation's ~1,600), often more when the sampled turns agree. In a causal model a token's
keys, values and hidden state depend only on the tokens before it, so for rows that start with the same L
tokens one forward pass over those L tokens (batch 1) gives what every row's plain forward computes there; each
row then runs only its own remaining tokens, attending to the prefix's keys/values through a read-only cache.
Gradients flow into the prefix through those keys/values and add up over the rows, as the plain pass's do.
The results equal a plain forward pass up to float rounding (tests/test_grpo.py checks log-probs and
gradients in float32).

`plan_shares` chooses which rows share what: sorted, rows next to each other have the longest common prefixes,
and a dynamic programme over the sorted order splits them into runs that minimise the tokens computed (two
groups of one step share only the system prompt with each other, but their prompts within each group). Rows
that share too little run as a plain batch.

Gradient checkpointing (GRPO's default) replays each decoder layer in the backward pass. A replay must see the
same cache: the prefix pass records each layer's keys/values by replacing them (never appending), and the
rows' pass reads the prefix without storing anything, so transformers is told the layers may keep their cache
(`_can_checkpoint_with_cache`). Reentrant checkpointing would detach the recorded keys/values from the graph;
that is detected and the batch then takes the plain pass.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, DynamicLayer
from transformers.modeling_layers import GradientCheckpointingLayer

from ..models.generation import full_attention_only

# a separate forward pass costs about as much as this many tokens: shorter shared prefixes are not worth one
MIN_SHARED = 32


@dataclass
class Share:
    """Batch rows (indices) computed together; `length` tokens of their prefix once (0: a plain batch)."""

    rows: list[int]
    length: int


def common_length(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def plan_shares(seqs: list[list[int]], min_shared: int = MIN_SHARED) -> list[Share]:
    """Rows grouped to minimise the tokens computed: a group of n rows sharing L tokens costs its tokens minus
    (n - 1) * L, plus `min_shared` for its extra forward pass. Every row keeps at least one token of its own (the
    rows' pass needs an input). Rows in no sharing group come last, as one Share of length 0."""
    order = sorted(range(len(seqs)), key=lambda i: seqs[i])
    lcp = [common_length(seqs[a], seqs[b]) for a, b in zip(order, order[1:])]
    n = len(order)
    # best[j]: (cost, cut) for the first j sorted rows; a cut (i, L) says rows order[i:j] share L tokens (0: plain)
    best: list[tuple[float, tuple[int, int]]] = [(0.0, (0, 0))]
    for j in range(1, n + 1):
        length = len(seqs[order[j - 1]])
        choice = (best[j - 1][0] + length, (j - 1, 0))  # row j-1 alone, plain
        shared, shortest, tokens = None, length, length
        for i in range(j - 2, -1, -1):  # rows order[i:j]
            shared = lcp[i] if shared is None else min(shared, lcp[i])
            shortest = min(shortest, len(seqs[order[i]]))
            tokens += len(seqs[order[i]])
            length_i = min(shared, shortest - 1)
            if length_i < min_shared:
                break  # the common prefix only shrinks as the run grows
            cost = best[i][0] + tokens - (j - i - 1) * length_i + min_shared
            if cost < choice[0]:
                choice = (cost, (i, length_i))
        best.append(choice)
    shares, plain, j = [], [], n
    while j > 0:
        i, length = best[j][1]
        if length:
            shares.append(Share(sorted(order[i:j]), length))
        else:
            plain += order[i:j]
        j = i
    shares.reverse()
    if plain:
        shares.append(Share(sorted(plain), 0))
    return shares


class _RecordedLayer(DynamicLayer):
    """The prefix pass's keys/values of one layer as last computed: a checkpoint replay replaces them."""

    def update(self, key_states, value_states, *args, **kwargs):
        self.keys, self.values, self.is_initialized = key_states, value_states, True
        return key_states, value_states


class _ReadOnlyPrefixLayer(DynamicLayer):
    """Attention over [prefix, new tokens] without storing the new tokens, so that a replay reads the same."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor):
        super().__init__()
        self.keys, self.values, self.is_initialized = keys, values, True
        self.device = keys.device

    def update(self, key_states, value_states, *args, **kwargs):
        return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)


@contextlib.contextmanager
def _layers_keep_cache(body):
    layers = [m for m in body.modules() if isinstance(m, GradientCheckpointingLayer)]
    for m in layers:
        m._can_checkpoint_with_cache = True
    try:
        yield
    finally:
        for m in layers:
            del m._can_checkpoint_with_cache  # back to the class's False


def real_spans(attention_mask: torch.Tensor) -> list[tuple[int, int]] | None:
    """Each row's [start, end) of real tokens, or None when some row's real tokens are not one contiguous run."""
    spans = []
    for row in attention_mask.bool():
        idx = row.nonzero()[:, 0]
        if len(idx) == 0:
            return None
        start, end = int(idx[0]), int(idx[-1]) + 1
        if end - start != len(idx):
            return None
        spans.append((start, end))
    return spans


def hidden_at(body, input_ids: torch.Tensor, attention_mask: torch.Tensor, want: torch.Tensor,
              batch_size: int | None = None) -> torch.Tensor:
    """(want.sum(), hidden) in row-major order of `want` (rows, columns: bool, on real tokens only): the body's
    last hidden states there, as body(input_ids, attention_mask).last_hidden_state[want] gives them, with each
    shared prefix computed once. `batch_size` bounds the rows of one forward pass."""
    spans = real_spans(attention_mask)
    if (spans is None or not full_attention_only(body) or (want & ~attention_mask.bool()).any()):
        return _plain(body, input_ids, attention_mask, want, list(range(len(input_ids))), batch_size)
    seqs = [input_ids[i, s:e].tolist() for i, (s, e) in enumerate(spans)]
    per_row: dict[int, torch.Tensor] = {}
    for share in plan_shares(seqs):
        if share.length:
            got = _shared(body, seqs, spans, want, share, batch_size)
            if got is None:  # the prefix's keys/values lost their gradient (reentrant checkpointing)
                return _plain(body, input_ids, attention_mask, want, list(range(len(input_ids))), batch_size)
        else:
            got = _plain(body, input_ids, attention_mask, want, share.rows, batch_size, split=True)
        per_row.update(zip(share.rows, got))
    return torch.cat([per_row[i] for i in range(len(input_ids))])


def _plain(body, input_ids, attention_mask, want, rows, batch_size, split=False):
    """The plain pass over `rows` (chunks of batch_size): the wanted hidden states, concatenated or per row."""
    step = batch_size or len(rows)
    out = []
    for k in range(0, len(rows), step):
        chunk = rows[k:k + step]
        # only the columns where some row of the chunk has a real token
        cols = attention_mask[chunk].bool().any(0).nonzero()[:, 0]
        span = slice(int(cols[0]), int(cols[-1]) + 1) if len(cols) else slice(None)
        hidden = body(input_ids=input_ids[chunk, span], attention_mask=attention_mask[chunk, span],
                      use_cache=False).last_hidden_state
        out += [hidden[j][want[i, span]] for j, i in enumerate(chunk)]
    return out if split else torch.cat(out)


def _shared(body, seqs, spans, want, share: Share, batch_size):
    """Per row of the share, its wanted hidden states: the prefix once, then the rows' own tokens (chunks of
    batch_size rows) over the prefix's keys/values. None if those keys/values lost their gradient."""
    length, device = share.length, want.device
    prefix = torch.tensor([seqs[share.rows[0]][:length]], device=device)
    recorded = Cache(layer_class_to_replicate=_RecordedLayer)
    with _layers_keep_cache(body):
        prefix_hidden = body(input_ids=prefix, position_ids=torch.arange(length, device=device)[None],
                             attention_mask=torch.ones_like(prefix), cache=recorded, use_cache=False).last_hidden_state[0]
    kv = [(layer.keys, layer.values) for layer in recorded.layers]
    if prefix_hidden.requires_grad and not kv[0][0].requires_grad:
        return None
    out = []
    step = batch_size or len(share.rows)
    for k in range(0, len(share.rows), step):
        rows = share.rows[k:k + step]
        own = [seqs[i][length:] for i in rows]
        width = max(map(len, own))
        ids = torch.zeros(len(rows), width, dtype=torch.long, device=device)
        mask = torch.zeros(len(rows), length + width, dtype=torch.long, device=device)
        mask[:, :length] = 1
        for r, toks in enumerate(own):  # right padding: a real token never attends to it
            ids[r, :len(toks)] = torch.tensor(toks, device=device)
            mask[r, length:length + len(toks)] = 1
        cache = Cache(layers=[_ReadOnlyPrefixLayer(key.expand(len(rows), -1, -1, -1), value.expand(len(rows), -1, -1, -1))
                              for key, value in kv])
        positions = torch.arange(length, length + width, device=device)[None].expand(len(rows), -1)
        with _layers_keep_cache(body):
            hidden = body(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache,
                          use_cache=False).last_hidden_state
        # position j of a row's real tokens: the prefix's j below `length`, else the row's own j - length
        source = torch.cat([prefix_hidden, hidden.reshape(-1, hidden.size(-1))])
        for r, i in enumerate(rows):
            j = want[i].nonzero()[:, 0] - spans[i][0]
            out.append(source[torch.where(j < length, j, length + r * width + j - length)])
    return out
