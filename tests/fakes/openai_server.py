"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests. Only the *model* is fake: a Python
function (the responder) decides each reply; everything between muactl and it (litellm, HTTP, JSON)
is real. Faults are injected per request: HTTP errors, delays, malformed bodies."""

from __future__ import annotations

import hashlib
import json
import random
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    content: str | None = None
    tool_calls: list[dict] = field(default_factory=list)  # [{"name", "arguments": dict}]
    status: int = 200
    delay: float = 0.0
    raw: str | None = None  # send this body verbatim (malformed JSON tests)
    headers: dict[str, str] = field(default_factory=dict)  # extra response headers (Retry-After...)


Responder = Callable[[dict[str, Any]], Reply]


@dataclass
class Late:
    """A fault for Faulty: the wrapped responder's own reply, sent after `delay` seconds. A client whose timeout
    is shorter retries; but a client whose event loop was busy past the timeout (a loaded machine) finds the
    reply already there and reads it, which is right, so the fault carries the right answer, not a marker
    text that would change the episode when it is read."""
    delay: float


class FakeOpenAI:
    def __init__(self, responder: Responder):
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.inflight = 0
        self.max_inflight = 0  # the most requests the server was answering at once
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out in two writes; with Nagle on, the body waits for a delayed
            # ACK (~40 ms per request), which would swamp every timing measured against this server
            disable_nagle_algorithm = True

            def log_message(self, *a):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server.lock:
                    server.requests.append(body)
                    server.inflight += 1
                    server.max_inflight = max(server.max_inflight, server.inflight)
                try:
                    self._answer(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass
                finally:
                    with server.lock:
                        server.inflight -= 1

            def _answer(self, body):
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
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        class Server(ThreadingHTTPServer):
            request_queue_size = 512  # the default backlog of 5 refuses connections at concurrency 128

            def __init__(self, *args):
                super().__init__(*args)
                self.connections: set[socket.socket] = set()

            def process_request(self, request, client_address):
                with server.lock:
                    self.connections.add(request)
                super().process_request(request, client_address)

            def shutdown_request(self, request):
                with server.lock:
                    self.connections.discard(request)
                super().shutdown_request(request)

            def hang_up(self):
                """End the clients' kept-alive connections: each holds a handler thread that would wait for
                its next request long after the test (hundreds over a run, each still answering with this
                server's responder)."""
                with server.lock:
                    connections = list(self.connections)
                for conn in connections:
                    try:
                        conn.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

            def handle_error(self, request, client_address):
                import sys

                if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
                    return  # a client that hung up (timeout or Ctrl-C tests) is not a server bug
                super().handle_error(request, client_address)

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.hang_up()
        self.httpd.server_close()


def _completion(request: dict, reply: Reply) -> dict:
    # ids derive from the request, so the same conversation gets the same ids (reproducibility tests)
    digest = hashlib.sha256(json.dumps(request.get("messages"), sort_keys=True).encode()).hexdigest()[:12]
    calls = [{"id": f"call_{digest}_{i}", "type": "function",
              "function": {"name": c["name"], "arguments": c["arguments"] if isinstance(c["arguments"], str)
                           else json.dumps(c["arguments"])}}
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


def is_tool_request(body: dict) -> bool:
    """Requests of the simulated-tool player (muactl/episode/simulated.py)."""
    system = body["messages"][0]["content"] if body.get("messages") else ""
    return system.startswith("You are simulating one tool")


def _section(system: str, title: str) -> str:
    m = re.search(rf"^# {re.escape(title)}\n(.*?)(?=\n\n# |\Z)", system, re.DOTALL | re.MULTILINE)
    return m.group(1).strip() if m else ""


def user_goal(body: dict) -> dict[str, str]:
    """The goal, known facts and persona a user-simulator request carries in its system prompt."""
    system = body["messages"][0]["content"]
    return {"reason": _section(system, "Your goal"), "known": _section(system, "What you know"),
            "unknown": _section(system, "What you do not know"), "persona": _section(system, "Your personality")}


def opening_line(task) -> str:
    """What the fake LLM user says first: its goal and known facts (the fake agent finds the task by it)."""
    return " ".join(f"{task.user.reason} {task.user.known or ''}".split())


def fake_user(body: dict) -> Reply:
    """An LLM user that states its goal and known facts, then stops when the agent is done."""
    goal = user_goal(body)
    msgs = body["messages"]
    said = [m for m in msgs[1:] if m["role"] == "assistant"]
    last_agent = next((m["content"] for m in reversed(msgs) if m["role"] == "user"), "")
    if not said:
        return Reply(content=" ".join(f"{goal['reason']} {goal['known']}".split()))
    if "All done" in last_agent or "Goodbye" in last_agent:
        return Reply(content="Thank you! ###STOP###")
    return Reply(content=goal["known"] or "I don't know.")


def gold_agent(tasks) -> Responder:
    """An API agent that recognises the task from the user's opening line (see fake_user), replays its
    gold actions one tool call per turn, then says its required outputs and "All done"."""
    by_line: dict[str, Any] = {}
    for t in tasks:
        by_line.setdefault(opening_line(t), t)

    def respond(body: dict) -> Reply:
        msgs = body["messages"]
        first_user = next((m["content"] for m in msgs if m["role"] == "user"), "")
        task = by_line.get(" ".join(first_user.split()))
        if task is None:
            return Reply(content="Sorry, I cannot help with that. Goodbye.")
        done = sum(1 for m in msgs if m["role"] == "tool")
        if done < len(task.expect.actions):
            (name, args), = task.expect.actions[done].items()
            return Reply(tool_calls=[{"name": name, "arguments": args}])
        return Reply(content=" ".join(f"All done. {'; '.join(task.expect.outputs)}".split()))

    return respond


def two_sided(agent: Responder, user: Responder = fake_user, tool: Responder | None = None) -> Responder:
    """One server playing the agent, the user and (optionally) simulated tools, told apart by prompt."""

    def respond(body: dict) -> Reply:
        if is_user_request(body):
            return user(body)
        if tool is not None and is_tool_request(body):
            return tool(body)
        return agent(body)

    return respond


def do_nothing_agent(body: dict) -> Reply:
    return Reply(content="Goodbye.")


class Faulty:
    """Wraps a responder and injects faults: the first `first` requests get `fault`; after that each
    request gets one of `faults` with probability `p` (seeded). Counts what it injected."""

    def __init__(self, base: Responder, fault: Reply | None = None, first: int = 0,
                 faults: list[Reply | Late] | None = None, p: float = 0.0, seed: int = 0,
                 only: Callable[[dict], bool] | None = None):
        self.base, self.fault, self.first, self.faults, self.p = base, fault, first, faults or [], p
        self.only = only  # inject only into requests this accepts
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.seen = 0
        self.injected = 0

    def __call__(self, body: dict) -> Reply:
        if self.only is None or self.only(body):
            with self.lock:
                self.seen += 1
                if self.fault is not None and self.seen <= self.first:
                    self.injected += 1
                    return self.fault
                if self.faults and self.rng.random() < self.p:
                    self.injected += 1
                    fault = self.rng.choice(self.faults)
                    if not isinstance(fault, Late):
                        return fault
                    return replace(self.base(body), delay=fault.delay)
        return self.base(body)
