"""One generate call for every episode waiting on the same local model: concurrent episodes put their prompts
in a queue, which waits until no other episode can make progress (scripted users and tools answer within the
same event-loop tick, a model answers when its own batch returns), then generates them together. A prompt that does not fit the model's context is refused on its own
(ContextOverflow), before the batch is generated. Local agents
(episode/agents/local.py) and local LLM users (episode/user.py) each keep one."""

from __future__ import annotations

import asyncio
import zlib
from typing import Callable

from ..errors import ContextOverflow, InfraError

Generate = Callable[[list[list[int]], int, float, int | None], list[tuple[list[int], list[float]]]]


class Batcher:
    """Collects prompts from concurrent episodes and generates them together."""

    def __init__(self, generate: Generate, max_batch: int = 64, context: int | None = None,
                 stop: Callable[[], None] | None = None):
        self.generate = generate
        self.stop = stop  # cuts the generate call in flight short when the run is cancelled (Ctrl-C)
        self.max_batch = max_batch
        self.context = context  # tokens the model attends over (prompt and new ones); None: not checked
        self.pending: list[tuple[list[int], int, asyncio.Future]] = []  # (prompt, episode seed, result)
        self.running = False
        self.calls = 0  # generate calls made (the benchmark reports batch sizes)
        self.batch_sizes: list[int] = []

    async def submit(self, prompt: list[int], max_new_tokens: int, temperature: float, seed: int) -> tuple[list[int], list[float]]:
        # checked here, per prompt: in the batch, one over-long prompt would fail every episode's generate call
        if self.context and len(prompt) + max_new_tokens > self.context:
            raise ContextOverflow(f"context overflow: a prompt of {len(prompt)} tokens plus {max_new_tokens} new ones "
                                  f"exceeds the model's context of {self.context} tokens")
        fut = asyncio.get_running_loop().create_future()
        self.pending.append((prompt, seed, fut))
        self._params = (max_new_tokens, temperature)
        if not self.running:
            self.running = True
            asyncio.ensure_future(self._drain())
        return await fut

    async def _drain(self) -> None:
        try:
            while self.pending:
                last, stable = -1, 0
                while stable < 3 and len(self.pending) < self.max_batch:
                    await asyncio.sleep(0)
                    stable = stable + 1 if len(self.pending) == last else 0
                    last = len(self.pending)
                # arrival order can differ between runs (thread and lock wake-ups), so the batch's order
                # and sampling seed come from its contents: same episodes, same seeds, same samples
                self.pending.sort(key=lambda item: (item[1], len(item[0]), item[0]))
                batch, self.pending = self.pending[: self.max_batch], self.pending[self.max_batch:]
                max_new, temperature = self._params
                seed = zlib.crc32(repr([(s, len(p)) for p, s, _ in batch]).encode())
                self.calls += 1
                self.batch_sizes.append(len(batch))
                try:
                    results = await asyncio.to_thread(self.generate, [p for p, _, _ in batch], max_new, temperature, seed)
                except asyncio.CancelledError:
                    # the loop is closing (Ctrl-C) and will wait for this thread: let it end within a token
                    if self.stop is not None:
                        self.stop()
                    raise
                except Exception as e:  # the machine failed, not the policy: infra_error, and none hangs
                    for _, _, fut in batch:
                        if not fut.done():
                            fut.set_exception(InfraError(f"local generation failed: {type(e).__name__}: {e}"))
                    continue
                for (_, _, fut), res in zip(batch, results):
                    if not fut.done():
                        fut.set_result(res)
        finally:
            self.running = False
