"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests. Only the *model* is fake: a Python
function (the responder) decides each reply; everything between muactl and it (litellm, HTTP, JSON)
is real. Faults are injected per request: HTTP errors, delays, malformed bodies."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[dict] = field(default_factory=list)  # [{"name", "arguments": dict}]
    status: int = 200
    delay: float = 0.0
    raw: str | None = None  # send this body verbatim (malformed JSON tests)


Responder = Callable[[dict[str, Any]], Reply]


class FakeOpenAI:
    def __init__(self, responder: Responder):
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server.lock:
                    server.requests.append(body)
                reply = server.responder(body)
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.raw is not None:
                    data = reply.raw.encode()
                elif reply.status != 200:
                    data = json.dumps({"error": {"message": f"injected {reply.status}", "type": "server_error"}}).encode()
                else:
                    data = json.dumps(_completion(body, reply)).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _completion(request: dict, reply: Reply) -> dict:
    calls = [{"id": f"call_{i}_{time.monotonic_ns()}", "type": "function",
              "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
             for i, c in enumerate(reply.tool_calls)]
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if calls:
        message["tool_calls"] = calls
    return {"id": "chatcmpl-test", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", "fake"),
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


def is_user_request(body: dict) -> bool:
    """User-simulator requests carry muactl's user prompt; agent requests carry the tools."""
    system = body["messages"][0]["content"] if body.get("messages") else ""
    return "# Your goal" in system


def oracle_like_agent(domain_tasks: dict[str, Any]) -> Callable[[dict], Reply]:
    """An API 'model' that plays the agent by replaying a task's gold actions, found from the user's
    first message; used to show API agents go through the same engine and reward."""

    def respond(body: dict) -> Reply:
        msgs = body["messages"]
        first_user = next((m["content"] for m in msgs if m["role"] == "user"), "")
        task = next((t for key, t in domain_tasks.items() if key in first_user), None)
        done = sum(1 for m in msgs if m["role"] == "tool")
        actions = task.expect.actions if task else []
        if done < len(actions):
            (name, args), = actions[done].items()
            return Reply(tool_calls=[{"name": name, "arguments": args}])
        said = "; ".join(task.expect.outputs) if task else ""
        return Reply(content=f"All done. {said}".strip())

    return respond
