"""Retry-After: a rate-limited request is retried no sooner than the server asks, against the real
local OpenAI-compatible server (tests/fakes/openai_server.py); only the model's replies are fake."""

from __future__ import annotations

import asyncio
import time

import pytest

from muactl.errors import InfraError
from muactl.models.llm import LLMConfig, complete
from tests.fakes.openai_server import FakeOpenAI, Reply


class RateLimited:
    """429 with the given headers for the first `failures` requests, then a normal reply; records when
    each request came."""

    def __init__(self, headers: dict[str, str], failures: int = 2):
        self.headers, self.failures = headers, failures
        self.times: list[float] = []

    def __call__(self, body) -> Reply:
        self.times.append(time.monotonic())
        if len(self.times) <= self.failures:
            return Reply(status=429, headers=self.headers)
        return Reply(content="hello")


def _ask(server, retries: int = 3) -> dict:
    cfg = LLMConfig("openai/fake", api_base=server.base, retries=retries, backoff_s=0.01, timeout_s=10)
    msg, _ = asyncio.run(complete(cfg, [{"role": "user", "content": "hi"}]))
    return msg


@pytest.mark.parametrize("headers,wait", [({"Retry-After": "2"}, 2.0), ({"retry-after-ms": "1500"}, 1.5)])
def test_retry_after_is_honoured(headers, wait):
    responder = RateLimited(headers)
    with FakeOpenAI(responder) as server:
        assert _ask(server)["content"] == "hello"
    assert len(responder.times) == 3
    gaps = [b - a for a, b in zip(responder.times, responder.times[1:])]
    assert min(gaps) >= wait - 0.05, f"retried after {gaps} s; the server asked for {wait} s"


def test_without_retry_after_the_own_backoff_applies():
    responder = RateLimited({})
    with FakeOpenAI(responder) as server:
        assert _ask(server)["content"] == "hello"
    assert responder.times[2] - responder.times[1] < 0.5


def test_a_retry_after_beyond_the_limit_gives_up_at_once():
    responder = RateLimited({"Retry-After": "86400"})
    with FakeOpenAI(responder) as server:
        start = time.monotonic()
        with pytest.raises(InfraError, match="retry after 86400 s"):
            _ask(server)
    assert len(responder.times) == 1 and time.monotonic() - start < 5
