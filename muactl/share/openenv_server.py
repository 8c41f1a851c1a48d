"""`muactl serve openenv DOMAIN`: a domain as an OpenEnv environment (the `openenv` package's server).

Every OpenEnv session (one WebSocket connection of an `EnvClient`) gets its own `MuactlEnvironment`:
its own simulated user and, per episode, its own sandbox database, so concurrent sessions never see
each other's writes. The conversation is the episode engine's (stepwise.py drives rollout.run_episode):

- `reset(task_id=None, seed=None)` draws a task (the named one; else the next of the served task files,
  or a fresh template instance, on a random database with --db random) and returns the opening
  observation: the system prompt (the domain's policy), the agent's tool schemas, the greeting if the
  domain has one, and the user's first message.
- `step(MuactlAction(message=..., tool_calls=[...]))` is one agent turn. Tool calls run on the
  session's sandbox and their results come back as `tool` messages (the agent acts again); a turn
  without calls goes to the simulated user, whose reply comes back as a `user` message.
- The step that ends the episode has `done=True`, the reward (1 only if the task is really done, see
  reward.py) and its breakdown, and the termination reason.

Tool-call arguments may be a JSON object or JSON text; anything else is reported to the agent as the
tool's error, as in every muactl episode.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import uuid
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

OPENENV_VERSION = "0.10.0"
INSTALL_HINT = ("the OpenEnv server needs the openenv extra: pip install 'muactl[openenv]' && "
                f"pip install --no-deps openenv=={OPENENV_VERSION}")


def import_openenv():
    try:
        from openenv.core.env_server import http_server  # noqa: F401
    except ImportError as e:
        raise UsageError(f"{INSTALL_HINT} ({e})") from None


@dataclass
class ServeConfig:
    domain: str
    tasks: str | None = None  # template:<id>|template:all, or task ids separated by commas; None: the split's tasks
    split: str = "train"  # task files of this split, or the template stream (train and test never overlap)
    db: str = "random"  # with templates: random (a fresh database per instance) | fixed (the seed database)
    user: str = "scripted"
    user_api_base: str | None = None
    user_temperature: float = 0.0
    seed: int = 0
    max_turns: int = 24
    max_tool_errors: int = 4
    timeout_s: float = 600.0  # per episode, the client's thinking time included
    opening: str | None = None
    trust: bool = False
    max_sessions: int = 64
    host: str = "127.0.0.1"
    port: int = 8000

    def rollout(self):
        """The episode engine's settings for every episode served."""
        from ..episode.rollout import RolloutConfig

        return RolloutConfig(max_turns=self.max_turns, max_tool_errors=self.max_tool_errors, timeout_s=self.timeout_s,
                             opening=self.opening, seed=self.seed)


def check_user(cfg: ServeConfig, opened) -> None:
    """A bad local user model fails now, not in the first episode."""
    if cfg.user.startswith("hf:"):
        from ..models.registry import resolve

        resolve(cfg.user[3:], opened.compiled)


class TaskSource:
    """Where reset() gets its tasks: the served task files in turn, or template instances."""

    def __init__(self, cfg: ServeConfig, opened):
        from ..eval.evaluate import select_tasks
        from ..domain.task_templates import is_template_spec, select_templates

        self.cfg, self.opened = cfg, opened
        self.templates = select_templates(opened, cfg.tasks) if is_template_spec(cfg.tasks) else None
        if self.templates is None:
            ids = [i.strip() for i in (cfg.tasks or "").split(",") if i.strip()]
            self.tasks = select_tasks(opened, cfg.split, ids)
        if cfg.db not in ("fixed", "random"):
            raise UsageError(f"--db must be 'fixed' or 'random', not '{cfg.db}'")
        self._next = itertools.count()
        self.trials = itertools.count()  # each episode its own seed (for sampling users), seed= or not

    def draw(self, task_id: str | None = None, seed: int | None = None):
        """(task, the compiled domain it runs on)."""
        from ..domain.task_templates import domain_for

        if task_id is not None:
            if self.templates is not None:
                raise UsageError("this server draws template instances; reset() takes no task_id")
            task = self.opened.task(task_id)
        elif self.templates is None:
            k = next(self._next) if seed is None else random.Random(seed).randrange(len(self.tasks))
            task = self.tasks[k % len(self.tasks)]
        else:
            task = self._instance(next(self._next) if seed is None else seed)
        return task, domain_for(self.opened, task)

    def _instance(self, k: int):
        """Instance k of the stream eval and training draw from (same seed, same instance)."""
        from ..domain.task_templates import draw, stream_seed

        split = "test" if self.cfg.split == "test" else "train"

        def seed_of(j: int):
            s = stream_seed(split, self.cfg.seed, k + j)
            return s, (s if self.cfg.db == "random" else None)

        drawn = draw(self.opened, [self.templates[k % len(self.templates)]], 1, seed_of, split, max_tries=8)
        if not drawn.tasks:
            raise UsageError(f"no instance could be drawn near seed {k}: {drawn.dropped[0][3] if drawn.dropped else '?'}")
        return drawn.tasks[0]


def build_app(cfg: ServeConfig, opened=None):
    """The FastAPI app OpenEnv builds around MuactlEnvironment (WebSocket sessions at /ws)."""
    from ..domain.open import open_domain

    opened = opened or open_domain(cfg.domain, trust=cfg.trust)
    source = TaskSource(cfg, opened)  # bad --tasks or --split fail here, before the slow imports
    import_openenv()
    from openenv.core.env_server.http_server import create_fastapi_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State
    from pydantic import BaseModel, Field

    from ..episode.agents.base import AgentReply
    from ..models.chatml import decode_arguments
    from ..episode.user import make_user
    from ..episode.stepwise import StepwiseEpisode, public_message

    rcfg = cfg.rollout()
    check_user(cfg, opened)

    class ToolCall(BaseModel):
        name: str = Field(description="The tool to call.")
        arguments: dict[str, Any] | str = Field(default_factory=dict, description="Its arguments (an object or JSON text).")
        id: str | None = Field(default=None, description="Optional id, echoed as the tool message's tool_call_id.")

    class MuactlAction(Action):
        """One agent turn: text for the user, or tool calls (or both)."""

        message: str = Field(default="", description="What the agent says to the user.")
        tool_calls: list[ToolCall] = Field(default_factory=list, description="Tool calls to run on the sandbox.")

    class MuactlObservation(Observation):
        messages: list[dict[str, Any]] = Field(default_factory=list, description=(
            "Messages the agent has not seen, OpenAI-shaped: at reset the system prompt, greeting and the user's "
            "first message; then tool results (role tool) or the user's reply (role user)."))
        tools: list[dict[str, Any]] = Field(default_factory=list, description="The agent's tool schemas (at reset).")
        task_id: str = ""
        termination: str | None = Field(default=None, description="Why the episode ended (on the last step).")
        breakdown: dict[str, Any] = Field(default_factory=dict, description="The reward's breakdown (on the last step).")

    class ResetArgs(BaseModel):
        """reset()'s arguments, checked whichever way they came (OpenEnv checks HTTP's seed only)."""

        task_id: str | None = Field(default=None, max_length=200)
        seed: int | None = Field(default=None, ge=0, lt=2**63)
        episode_id: str | None = Field(default=None, max_length=255)

    class MuactlState(State):
        task_id: str | None = None
        done: bool = False
        termination: str | None = None
        reward: float | None = None
        state_hash: str | None = None

    class MuactlEnvironment(Environment[MuactlAction, MuactlObservation, MuactlState]):
        SUPPORTS_CONCURRENT_SESSIONS = True  # each instance has its own user and sandbox

        def __init__(self):
            super().__init__()
            self.user = make_user(cfg.user, api_base=cfg.user_api_base, temperature=cfg.user_temperature)
            self.episode: StepwiseEpisode | None = None
            self.loop: asyncio.AbstractEventLoop | None = None
            self._state = MuactlState()

        def _observe(self, turn, tools: bool = False) -> MuactlObservation:
            ep = turn.episode
            self._state.done = turn.done
            if ep is not None:
                self._state.termination, self._state.reward, self._state.state_hash = ep.termination, ep.reward, ep.final_hash
            return MuactlObservation(messages=[public_message(m) for m in turn.messages],
                                     tools=self.episode.tools if tools else [], task_id=self.episode.task.task.id,
                                     done=turn.done, reward=ep.reward if ep else None,
                                     termination=ep.termination if ep else None,
                                     breakdown=ep.breakdown if ep else {})

        async def reset_async(self, seed: int | None = None, episode_id: str | None = None,
                              task_id: str | None = None, **kwargs: Any) -> MuactlObservation:
            args = ResetArgs(task_id=task_id, seed=seed, episode_id=episode_id)  # a ValidationError: 422
            task_id, seed, episode_id = args.task_id, args.seed, args.episode_id
            self._stop()
            task, domain = source.draw(task_id, seed)
            self.loop = asyncio.get_running_loop()
            trial = next(source.trials) if seed is None else seed
            self.episode = StepwiseEpisode(task, domain, self.user, rcfg, trial=trial, trust=cfg.trust)
            self._state = MuactlState(episode_id=episode_id or uuid.uuid4().hex, task_id=task.task.id)
            return self._observe(await self.episode.start(), tools=True)

        async def step_async(self, action: MuactlAction, timeout_s: float | None = None, **kwargs: Any) -> MuactlObservation:
            if self.episode is None:
                raise UsageError("call reset() before step(); over HTTP every request gets a fresh environment, "
                                 "so episodes are played over a WebSocket session (/ws)")
            calls = [{"name": c.name, "arguments": decode_arguments(c.arguments), **({"id": c.id} if c.id else {})}
                     for c in action.tool_calls]
            turn = await self.episode.step(AgentReply(action.message, calls))
            self._state.step_count += 1
            return self._observe(turn)

        def reset(self, seed=None, episode_id=None, **kwargs):  # the server awaits reset_async
            raise NotImplementedError("MuactlEnvironment runs on the server's event loop: use reset_async")

        def step(self, action, timeout_s=None, **kwargs):
            raise NotImplementedError("MuactlEnvironment runs on the server's event loop: use step_async")

        @property
        def state(self) -> MuactlState:
            return self._state

        def _stop(self) -> None:
            if self.episode is not None:
                ep, self.episode = self.episode, None
                if self.loop is not None and self.loop.is_running():
                    self.loop.call_soon_threadsafe(ep.cancel)  # close() may come from a worker thread
                else:
                    ep.cancel()

        def close(self) -> None:
            self._stop()

    app = create_fastapi_app(MuactlEnvironment, MuactlAction, MuactlObservation, max_concurrent_envs=cfg.max_sessions,
                             env_name=f"muactl-{opened.spec.domain.name}", state_cls=MuactlState)
    app.state.muactl = {"domain": opened.spec.domain.name, "action": MuactlAction, "observation": MuactlObservation}
    answer_misuse(app)
    return app


def answer_misuse(app) -> None:
    """A client's mistake gets a 4xx, never a 500, and the WebSocket session goes on: bad reset()
    arguments 422, a wrong call (step before reset, an unknown task) 400, and a WebSocket frame that is
    not a JSON object an error frame (OpenEnv's own loop would end the session on it)."""
    from fastapi.responses import JSONResponse
    from pydantic import ValidationError

    from ..errors import MuactlError

    async def invalid(_request, e: ValidationError):
        return JSONResponse({"detail": e.errors(include_url=False, include_context=False, include_input=False)},
                            status_code=422)

    async def refused(_request, e: MuactlError):
        return JSONResponse({"detail": str(e)}, status_code=400)

    app.add_exception_handler(ValidationError, invalid)
    app.add_exception_handler(MuactlError, refused)
    app.add_middleware(ObjectFramesOnly)


class ObjectFramesOnly:
    """ASGI middleware: a WebSocket frame that is JSON but not an object (or a binary frame) is answered
    with OpenEnv's error frame and never reaches the session's loop. Malformed JSON goes through: OpenEnv
    answers that one itself."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)

        async def objects_only():
            while True:
                message = await receive()
                problem = _frame_problem(message) if message["type"] == "websocket.receive" else None
                if problem is None:
                    return message
                await send({"type": "websocket.send", "text": json.dumps(
                    {"type": "error", "data": {"message": problem, "code": "VALIDATION_ERROR"}})})

        return await self.app(scope, objects_only, send)


def _frame_problem(message: dict[str, Any]) -> str | None:
    text = message.get("text")
    if text is None:
        return "send JSON objects as text frames, not binary frames"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return None if isinstance(value, dict) else f"a message must be a JSON object, not {type(value).__name__}"


def serve(cfg: ServeConfig, log=None) -> None:
    import uvicorn

    app = build_app(cfg)
    if log:
        log(f"serving {app.state.muactl['domain']} as an OpenEnv environment on http://{cfg.host}:{cfg.port} "
            f"(WebSocket sessions at /ws, up to {cfg.max_sessions}); Ctrl-C stops")
        if cfg.host not in ("127.0.0.1", "localhost", "::1"):
            log("warning: this address is reachable from other machines and the server has no authentication")
    uvicorn.run(app, host=cfg.host, port=cfg.port, log_level="warning")
