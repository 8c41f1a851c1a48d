"""The test fake's own hygiene: a closed FakeOpenAI leaves no handler thread behind."""

import threading
import time

import httpx

from tests.fakes.openai_server import FakeOpenAI, Reply


def _handlers() -> int:
    return sum(t.name.endswith("(process_request_thread)") for t in threading.enumerate())


def test_a_closed_fake_server_ends_its_kept_alive_connections():
    before = _handlers()
    client = httpx.Client()  # keeps its connections alive, as litellm's cached clients do
    try:
        with FakeOpenAI(lambda body: Reply(content="hi")) as fake:
            for _ in range(3):
                r = client.post(f"{fake.base}/chat/completions", json={"messages": []})
                assert r.status_code == 200
            assert _handlers() > before
        deadline = time.time() + 5
        while _handlers() > before and time.time() < deadline:
            time.sleep(0.02)
        assert _handlers() == before
    finally:
        client.close()
