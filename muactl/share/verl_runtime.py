"""What an exported verl agent loop runs, kept free of verl imports so it is tested without verl.

One `EpisodeRunner` per worker process holds the opened domain and plays one task per call through
muactl's own episode engine (rollout.run_episode): the simulated user, the sandbox and the reward are
exactly those of `muactl eval` and `muactl train grpo`. Only the policy differs: `VerlPolicy` renders
turns in the model's chat format like the local agents do (agents/formats.py), and asks verl's server
manager for the tokens. The trajectory's ids and mask come from the TokenTrace as they grew, never re-tokenized:
mask 1 on what the policy sampled, 0 on system, greeting, user and tool tokens.

Excluded episodes (infra_error, user_error: the API or the simulator broke, not the policy) say nothing
about the policy, as in `muactl train grpo`. Each is played again with a fresh seed, up to EXCLUDED_REPLAYS
times, so its group gets a scored episode instead; one still excluded after that goes back with a response
mask of zeros, so no token of it is trained on. verl's GRPO still counts its reward (0) in its group's mean
and spread (an agent loop cannot drop a sample), which is why replaying comes first.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AgentError
from ..episode.agents.local import LocalAgent

EXCLUDED_REPLAYS = 2  # plays of an excluded episode after the first, before it is sent back masked


class VerlPolicy(LocalAgent):
    """A local-model policy whose generate call is verl's `server_manager.generate`."""

    def __init__(self, server_manager, tokenizer, sampling_params: dict[str, Any], max_new_tokens: int,
                 response_length: int, request_id: str | None = None):
        super().__init__("verl", temperature=float(sampling_params.get("temperature", 1.0)), max_new_tokens=max_new_tokens)
        self.name = "verl"
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        from ..models.folder import chat_format

        self.format = chat_format(tokenizer)  # its card's (ChatML for muactl's own), else its template's family
        self.sampling_params = dict(sampling_params)
        self.response_length = response_length
        self.request_id = request_id or uuid.uuid4().hex  # one per episode: sticky routing, prefix cache hits

    async def _complete(self, prompt: list[int], ctx) -> tuple[list[int], list[float] | None]:
        first = ctx.trace.prompt_len or len(prompt)
        budget = self.response_length - (len(prompt) - first)
        if budget <= 1:
            # verl keeps only response_length tokens: a longer episode could not be trained on as played
            raise AgentError(f"response budget of {self.response_length} tokens used up")
        params = dict(self.sampling_params, max_tokens=min(self.max_new_tokens, budget - 1))
        params["stop_token_ids"] = sorted(set(params.get("stop_token_ids") or []) | set(self.format.end_ids))
        out = await self.server_manager.generate(request_id=self.request_id, prompt_ids=prompt, sampling_params=params)
        ids = list(out.token_ids)
        lps = list(out.log_probs) if getattr(out, "log_probs", None) else None
        ends = [i for i, t in enumerate(ids[:-1]) if t in self.format.end_ids]
        if ends:  # a server that ran past the stop token: keep the turn only
            cut = ends[0] + 1
            ids, lps = ids[:cut], (lps[:cut] if lps else None)
        return ids, lps


def fit_prompt(prompt_ids: list[int], prompt_length: int) -> list[int]:
    """The prompt as verl can pad it: at most rollout.prompt_length ids, cut from the left as verl's own
    loops do (verl 0.9 has this as a private method of AgentLoopBase; 0.8.0 lacks it)."""
    if len(prompt_ids) > prompt_length:
        import logging

        logging.getLogger(__name__).warning("prompt of %d tokens exceeds rollout.prompt_length=%d; left-truncating "
                                            "(raise data.max_prompt_length)", len(prompt_ids), prompt_length)
        return prompt_ids[-prompt_length:]
    return prompt_ids


@dataclass
class EpisodeResult:
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    reward: float
    num_turns: int
    termination: str
    excluded: bool = False  # infra_error or user_error after every replay: response_mask is all 0
    metrics: dict[str, float] = field(default_factory=dict)
    breakdown: dict[str, Any] = field(default_factory=dict)


class EpisodeRunner:
    """The domain, its tasks and the user simulator of one exported agent loop, shared per process."""

    _shared: dict[tuple, EpisodeRunner] = {}

    def __init__(self, domain_dir: str | Path, user: str = "scripted", user_api_base: str | None = None,
                 user_temperature: float = 0.7, max_turns: int = 12, max_new_tokens: int = 512,
                 max_tool_errors: int = 4, timeout_s: float = 600.0, trust: bool = False, max_tokens: int = 1024,
                 request_timeout_s: float = 60.0, retries: int = 4):
        from ..domain.open import open_domain

        self.opened = open_domain(str(Path(domain_dir).resolve()), trust=trust)
        self.tasks = {t.task.id: t for t in self.opened.tasks}
        self.user, self.user_api_base, self.user_temperature = user, user_api_base, user_temperature
        self.max_turns, self.max_new_tokens = max_turns, max_new_tokens
        self.max_tool_errors, self.timeout_s = max_tool_errors, timeout_s
        self.llm = {"max_tokens": max_tokens, "timeout_s": request_timeout_s, "retries": retries}  # an LLM user's calls

    @classmethod
    def shared(cls, domain_dir: str | Path, **kw) -> EpisodeRunner:
        key = (str(Path(domain_dir).resolve()), tuple(sorted(kw.items())))
        if key not in cls._shared:  # verl builds one agent loop object per sample: open the domain once
            cls._shared[key] = cls(domain_dir, **kw)
        return cls._shared[key]

    async def run(self, task_id: str, server_manager, tokenizer, sampling_params: dict[str, Any],
                  response_length: int, seed: int = 0, trial: int = 0, request_id: str | None = None) -> EpisodeResult:
        from ..episode.user import make_user
        from ..episode.rollout import RolloutConfig, run_episode

        if task_id not in self.tasks:
            raise KeyError(f"task {task_id!r} is not in the exported domain {self.opened.ref.name}")
        for replay in range(EXCLUDED_REPLAYS + 1):
            policy = VerlPolicy(server_manager, tokenizer, sampling_params, self.max_new_tokens, response_length,
                                request_id if replay == 0 else None)
            user = make_user(self.user, api_base=self.user_api_base, temperature=self.user_temperature, **self.llm)
            cfg = RolloutConfig(max_turns=self.max_turns, max_tool_errors=self.max_tool_errors, timeout_s=self.timeout_s,
                                seed=seed + replay)
            ep = await run_episode(self.tasks[task_id], self.opened.compiled, policy, user, cfg, trial=trial)
            if ep.counted:
                break
        trace = ep.trace
        if trace is None or not trace.mask.count(1):  # no response to give verl, masked or not
            raise RuntimeError(f"episode of {task_id} ended before the policy generated anything: {ep.termination} {ep.error or ''}")
        p = trace.prompt_len
        response = trace.ids[p:][:response_length]
        return EpisodeResult(
            prompt_ids=trace.ids[:p], response_ids=response,
            response_mask=trace.mask[p:][:response_length] if ep.counted else [0] * len(response),
            response_logprobs=trace.logprobs[p:][:response_length] if any(trace.logprobs) else None,
            reward=float(ep.reward), num_turns=len(ep.messages), termination=ep.termination, excluded=not ep.counted,
            metrics={"generate_sequences": ep.timing.get("agent", 0.0), "tool_calls": ep.timing.get("tools", 0.0),
                     "compute_score": ep.timing.get("reward", 0.0)},
            breakdown=ep.breakdown)
