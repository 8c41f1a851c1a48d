"""muactl domains as Gymnasium environments: `muactl/Agent-v0` (you play the agent) and `muactl/User-v0`
(you play the user against a muactl agent).

    import gymnasium, muactl.gym
    env = gymnasium.make("muactl/Agent-v0", domain="bank")      # or "muactl.gym:muactl/Agent-v0"
    obs, info = env.reset(seed=0)                              # json.loads(obs): the new messages

Both run the episode engine that eval, training and `serve openenv` run (episode/stepwise.py drives
rollout.run_episode with the caller as one party), so an episode here is played, bounded and scored
exactly as there. make()'s keyword arguments are `serve openenv`'s settings (ServeConfig: domain, tasks,
split, db, user, seed, max_turns, max_tool_errors, timeout_s, opening, trust ...); UserEnv adds the agent.

Spaces (strings, so any model's text fits; json.loads reads them):
- observation: a JSON array of the messages the caller has not seen, OpenAI-shaped (role, content; tool
  results with tool_call_id and name), written with ensure_ascii, so it is printable ASCII. AgentEnv: at
  reset the system prompt, the greeting if any and the user's first message; after a turn with tool calls
  their results, after a text turn the user's reply. UserEnv: the agent's text turns only (never tools).
- AgentEnv action: {"content": text for the user, "tool_calls": a JSON array of {"name", "arguments", "id"?}
  ("" or "[]": none)}; a list instead of JSON text, or a bare string (a text turn), is taken too. Tool
  calls that are not well-formed reach the agent as the engine's parse-error turn, as a model's would.
- UserEnv action: the user's message; ###STOP### (or ###TRANSFER###, ###OUT-OF-SCOPE###) ends the episode.
- reward: 0 until the last step, then the scorer's (reward.py). `terminated` on the engine's own ends,
  `truncated` on max_turns and the timeout. info: task_id and seed; at reset the agent's tool schemas
  (AgentEnv) or the user's instructions, the prompt LLM users get (UserEnv); at the end termination,
  breakdown and the state hash (UserEnv: the user's fidelity too).

Seeding: reset(seed=s) plays what `serve openenv`'s reset(seed=s) plays (the task or template instance,
and the episode seed); reset() draws s from the env's generator, so a seeded reset followed by unseeded
ones repeats. options={"task_id": ...} names a task. Each env has its own event loop; a new reset or
close() cancels an unfinished episode and waits until its sandbox is closed.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import functools
import json
import string
from collections.abc import Mapping
from typing import Any

try:
    import gymnasium
    from gymnasium import spaces
except ImportError as e:  # an optional extra
    raise ImportError(f"muactl.gym needs gymnasium: pip install 'muactl[gym]' ({e})") from None

from .episode.agents.base import Agent, AgentReply
from .episode.stepwise import ExternalUser, StepwiseEpisode, Turn, public_message
from .episode.user import user_system_prompt
from .errors import UsageError
from .models.chatml import decode_arguments
from .share.openenv_server import ServeConfig, TaskSource, check_user

AGENT_ENV_ID, USER_ENV_ID = "muactl/Agent-v0", "muactl/User-v0"
MAX_OBSERVATION_CHARS = 1 << 20
MAX_ACTION_CHARS = 8192
# json.dumps(ensure_ascii=True) writes only these
JSON_CHARS = "".join(chr(c) for c in range(0x20, 0x7F))
# what a sampled action is made of (actions may hold any text; these make random ones readable)
TEXT_CHARS = string.ascii_letters + string.digits + string.punctuation + " "
TRUNCATIONS = {"max_turns", "timeout"}  # the episode was cut off, not finished
SERVER_ONLY = {"max_sessions", "host", "port"}


def serve_config(kwargs: dict[str, Any]) -> ServeConfig:
    fields = {f.name for f in dataclasses.fields(ServeConfig)} - SERVER_ONLY
    unknown = sorted(set(kwargs) - fields)
    if unknown:
        raise UsageError(f"unknown muactl.gym setting(s) {', '.join(unknown)}; known: {', '.join(sorted(fields))}")
    if "domain" not in kwargs:
        raise UsageError("muactl.gym needs domain=... (a built-in domain name or a domain folder)")
    return ServeConfig(**kwargs)


@functools.lru_cache(maxsize=None)
def opened_domain(name: str, trust: bool):
    """A domain opened once per process: the envs of a vector env share it, as `serve openenv`'s sessions do
    (a domain folder edited after the first make() needs a new process)."""
    from .domain.open import open_domain

    return open_domain(name, trust=trust)


class EpisodeEnv(gymnasium.Env):
    """What AgentEnv and UserEnv share: the served tasks, an event loop of its own, one episode at a time."""

    metadata = {"render_modes": []}

    def __init__(self, cfg: ServeConfig, render_mode: str | None = None):
        # spaces per env, not per class: each has its own generator (action_space.seed)
        self.observation_space = spaces.Text(MAX_OBSERVATION_CHARS, min_length=2, charset=JSON_CHARS)
        self.action_space = self.new_action_space()
        self.render_mode = render_mode
        self.cfg, self.rollout = cfg, cfg.rollout()
        self.source = TaskSource(cfg, opened_domain(cfg.domain, cfg.trust))
        self.check()  # a bad setting fails here, before anything is held that close() would have to free
        self.loop = asyncio.new_event_loop()
        self.episode: StepwiseEpisode | None = None
        self._seed = 0

    # what the subclasses say: who plays the other party, and what the caller's action means
    def new_action_space(self) -> spaces.Space:
        raise NotImplementedError

    def check(self) -> None:
        return None

    def new_episode(self, task, domain, trial: int) -> StepwiseEpisode:
        raise NotImplementedError

    def turn_of(self, action: Any) -> AgentReply | str:
        raise NotImplementedError

    def opening_info(self) -> dict[str, Any]:
        return {}

    def closing_info(self, ep) -> dict[str, Any]:
        return {}

    # gymnasium's API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        task_id = options.pop("task_id", None)
        if options:
            raise UsageError(f"unknown reset option(s) {', '.join(sorted(options))}; known: task_id")
        self._stop()
        if seed is None:
            seed = int(self.np_random.integers(2**31))
        task, domain = self.source.draw(task_id, seed)
        self.episode = self.new_episode(task, domain, seed)
        self._seed = seed
        turn = self._run(self.episode.start())
        return observation(turn), {**self._info(turn), **self.opening_info()}

    def step(self, action: Any):
        if self.episode is None:
            raise UsageError("call reset() before step()")
        turn = self._run(self.episode.step(self.turn_of(action)))
        ep = turn.episode
        truncated = ep is not None and ep.termination in TRUNCATIONS
        return observation(turn), float(ep.reward) if ep else 0.0, ep is not None and not truncated, truncated, \
            self._info(turn)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self._stop()
        self.loop.run_until_complete(self.close_party())
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()
        super().close()

    async def close_party(self) -> None:
        return None

    @property
    def context(self):
        """The engine's EpisodeContext at the caller's turn (None before reset or after the end): what
        muactl's own agents and users read, for baselines (see AgentEnv.action_of)."""
        return None if self.episode is None or self.episode.done else self.episode.ctx

    def _run(self, coro):
        if self.loop.is_closed():
            coro.close()
            raise UsageError("this environment is closed; make a new one")
        return self.loop.run_until_complete(coro)

    def _stop(self) -> None:
        """Cancel the episode in play, if any, and wait until its sandbox is closed."""
        if self.episode is not None:
            ep, self.episode = self.episode, None
            ep.cancel()
            self.loop.run_until_complete(ep.settled())

    def _info(self, turn: Turn) -> dict[str, Any]:
        info: dict[str, Any] = {"task_id": self.episode.task.task.id, "seed": self._seed}
        ep = turn.episode
        if ep is not None:
            info.update(termination=ep.termination, breakdown=copy.deepcopy(ep.breakdown), state_hash=ep.final_hash,
                        **({"error": ep.error} if ep.error else {}), **self.closing_info(ep))
        return info


def observation(turn: Turn) -> str:
    return json.dumps([public_message(m) for m in turn.messages], ensure_ascii=True)


class AgentEnv(EpisodeEnv):
    """You play the agent against the domain's simulated user (`user=`: scripted, hf:<model> or a litellm id)."""

    def __init__(self, render_mode: str | None = None, **kwargs: Any):
        super().__init__(serve_config(kwargs), render_mode)

    def check(self) -> None:
        check_user(self.cfg, self.source.opened)

    def new_action_space(self) -> spaces.Space:
        return spaces.Dict({"content": spaces.Text(MAX_ACTION_CHARS, min_length=0, charset=TEXT_CHARS),
                            "tool_calls": spaces.Text(MAX_ACTION_CHARS, min_length=0, charset=JSON_CHARS)})

    def new_episode(self, task, domain, trial: int) -> StepwiseEpisode:
        from .episode.user import make_user

        user = make_user(self.cfg.user, api_base=self.cfg.user_api_base, temperature=self.cfg.user_temperature)
        return StepwiseEpisode(task, domain, user, self.rollout, trial=trial, trust=self.cfg.trust)

    def turn_of(self, action: Any) -> AgentReply:
        return agent_reply(action)

    def opening_info(self) -> dict[str, Any]:
        return {"tools": self.episode.tools}

    def action_of(self, agent: Agent) -> dict[str, str]:
        """The action a muactl agent (oracle, hf:<model> ...) would take now: for baselines and demonstrations."""
        if self.context is None:
            raise UsageError("no turn to take: reset first (or the episode is over)")
        return as_action(self._run(agent.act(self.context)))


def as_action(reply: AgentReply) -> dict[str, str]:
    """An AgentReply as an AgentEnv action."""
    calls = [{"name": c["name"], "arguments": c.get("arguments", {}), **({"id": c["id"]} if c.get("id") else {})}
             for c in reply.tool_calls]
    return {"content": reply.content or "", "tool_calls": json.dumps(calls) if calls else ""}


def agent_reply(act: Any) -> AgentReply:
    """An AgentEnv action as the engine's AgentReply. A wrong type is the caller's mistake (UsageError);
    tool calls that do not parse are the agent's, reported to it as the engine reports a model's."""
    if isinstance(act, str):
        return AgentReply(act)
    if not isinstance(act, Mapping):
        raise UsageError(f"an AgentEnv action is a dict with content and tool_calls, or a string; not {type(act).__name__}")
    unknown = sorted(set(act) - {"content", "tool_calls"})
    if unknown:
        raise UsageError(f"unknown AgentEnv action key(s) {', '.join(map(str, unknown))}; known: content, tool_calls")
    content, calls = act.get("content", ""), act.get("tool_calls", "")
    if not isinstance(content, str):
        raise UsageError(f"an AgentEnv action's content is a string, not {type(content).__name__}")
    if isinstance(calls, str):
        if not calls.strip():
            return AgentReply(content)
        try:
            calls = json.loads(calls)
        except (ValueError, RecursionError) as e:
            return AgentReply(content, [], error=f"tool_calls is not JSON ({e})")
    if not isinstance(calls, list):
        return AgentReply(content, [], error="tool_calls must be an array of {name, arguments} objects")
    good, bad = [], 0
    for c in calls:
        if isinstance(c, Mapping) and isinstance(c.get("name"), str) and c["name"]:
            call = {"name": c["name"], "arguments": decode_arguments(c.get("arguments", {}))}
            if isinstance(c.get("id"), str) and c["id"]:
                call["id"] = c["id"]
            good.append(call)
        else:
            bad += 1
    return AgentReply(content, good, error=f"{bad} tool call(s) without a name" if bad else None)


class UserEnv(EpisodeEnv):
    """You play the user against a muactl agent (`agent=`: oracle, hf:<model>, a litellm id ...; `agent_api_base`,
    `agent_temperature`, `agent_max_new_tokens` for local models). Actions are the user's messages.
    User-side tools (dual control) are not offered: in such domains the caller can only ask the agent."""

    def __init__(self, render_mode: str | None = None, agent: str = "oracle", agent_api_base: str | None = None,
                 agent_temperature: float = 0.0, agent_max_new_tokens: int = 256, **kwargs: Any):
        from .episode.agents import make_agent

        self.agent = make_agent(agent, api_base=agent_api_base, temperature=agent_temperature,
                                max_new_tokens=agent_max_new_tokens)  # a bad agent fails before the env holds anything
        super().__init__(serve_config(kwargs), render_mode)

    def new_action_space(self) -> spaces.Space:
        return spaces.Text(MAX_ACTION_CHARS, min_length=1, charset=TEXT_CHARS)

    def new_episode(self, task, domain, trial: int) -> StepwiseEpisode:
        return StepwiseEpisode(task, domain, ExternalUser(), self.rollout, trial=trial, trust=self.cfg.trust,
                               agent=self.agent)

    def turn_of(self, action: Any) -> str:
        if not isinstance(action, str):
            raise UsageError(f"a UserEnv action is the user's message (a string), not {type(action).__name__}")
        return action

    def opening_info(self) -> dict[str, Any]:
        return {"instructions": user_system_prompt(self.context)} if self.context is not None else {}

    def closing_info(self, ep) -> dict[str, Any]:
        return {"fidelity": dict(ep.fidelity)}

    async def close_party(self) -> None:
        await self.agent.close()


def register_envs() -> None:
    """Make the two ids known to gymnasium.make (importing muactl.gym does it)."""
    for env_id, entry in ((AGENT_ENV_ID, "muactl.gym:AgentEnv"), (USER_ENV_ID, "muactl.gym:UserEnv")):
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry)


register_envs()
