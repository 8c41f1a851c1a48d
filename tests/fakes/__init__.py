"""Test doubles at the model/LLM boundary, and small helpers for tests that start local servers."""

import socket


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (for a server a test starts)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
