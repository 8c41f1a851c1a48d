"""The one place muactl calls litellm: async chat completions with retries, backoff and a timeout.

Used by API agents, LLM user simulators, simulated tools and the judge. Failures fall in three kinds:
- transient (rate limits, 5xx, timeouts, connection errors, malformed replies: no choices, or over
  limits.MAX_REPLY_CHARS): retried with exponential backoff, waiting at least what the server asks
  for in `Retry-After` (or `retry-after-ms`); when retries run out, or the wait asked is over
  MAX_RETRY_AFTER_S, the caller gets InfraError (`infra_error`, excluded);
- the service refuses to serve at all (bad credentials, unknown model or provider, no permission or
  credit, a parameter it does not take): InfraError at once, retrying cannot help;
- the request itself is refused (400 bad request, context window exceeded, content policy, 422):
  RequestRejected at once; whose fault that is depends on whose messages they were (the caller says).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

from ..errors import InfraError, RequestRejected
from ..limits import MAX_REPLY_CHARS
from .chatml import split_reasoning


@dataclass
class LLMConfig:
    model: str
    api_base: str | None = None
    api_key: str | None = None
    temperature: float = 0.0
    max_tokens: int | None = 1024
    timeout_s: float = 60.0
    retries: int = 4
    backoff_s: float = 1.0


def litellm():
    """Import litellm without its network fetch of the price list."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm as _litellm

    _litellm.suppress_debug_info = True
    _litellm.telemetry = False
    return _litellm


MAX_RETRY_AFTER_S = 120.0  # a server asking for a longer wait is treated as down for this episode


def retry_after(exc: Exception) -> float | None:
    """Seconds the server asked us to wait (Retry-After: seconds or an HTTP date; retry-after-ms), if any."""
    headers = getattr(exc, "litellm_response_headers", None) or getattr(getattr(exc, "response", None), "headers", None)
    if not headers:
        return None
    try:
        ms = headers.get("retry-after-ms")
        if ms is not None:
            return max(0.0, float(ms) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        value = value.strip()
        if value.replace(".", "", 1).isdigit():
            return float(value)
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):  # a header we cannot read: fall back to our own backoff
        return None


def classify(exc: Exception) -> str:
    """'transient' (retry), 'service' (the provider will not serve us: infra) or 'rejected' (the
    request's content was refused)."""
    lt = litellm()

    def kinds(*names: str) -> tuple[type, ...]:
        return tuple(getattr(lt, n) for n in names if hasattr(lt, n))

    if isinstance(exc, kinds("APIConnectionError")):  # timeouts included
        return "transient"
    # setup, not content: a key, a model name, a provider or a parameter the provider does not take
    if isinstance(exc, kinds("AuthenticationError", "NotFoundError", "PermissionDeniedError", "PaymentRequiredError",
                             "UnsupportedParamsError", "LiteLLMUnknownProvider", "UnsupportedEndpointError",
                             "EndpointNotSupportedByModelError")):
        return "service"
    # ContextWindowExceededError and ContentPolicyViolationError are BadRequestErrors
    if isinstance(exc, kinds("BadRequestError", "UnprocessableEntityError")):
        return "rejected"
    return "transient"


class _MalformedReply(Exception):
    """A 200 reply that is not a usable completion (no choices, or too big): retried like a 5xx."""


def reply_parts(resp) -> tuple[Any, list[dict[str, Any]]]:
    """The first choice's message and its tool calls; _MalformedReply says what the reply lacks."""
    choices = getattr(resp, "choices", None)
    if not choices:
        raise _MalformedReply("the reply has no 'choices' (is the server OpenAI-compatible?)")
    msg = getattr(choices[0], "message", None)
    if msg is None:
        raise _MalformedReply("the reply's first choice has no 'message'")
    calls = [{"id": tc.id, "name": tc.function.name, "arguments": tc.function.arguments} for tc in msg.tool_calls or []]
    size = len(msg.content or "") + sum(len(str(c["name"] or "")) + len(str(c["arguments"] or "")) for c in calls)
    if size > MAX_REPLY_CHARS:
        raise _MalformedReply(f"the reply holds {size:,} characters, over muactl's limit of {MAX_REPLY_CHARS:,} "
                              "(limits.MAX_REPLY_CHARS)")
    return msg, calls


def visible_reply(msg) -> dict[str, str | None]:
    """A reply's content without its reasoning, and the reasoning: a server's own field (reasoning_content,
    as vLLM's reasoning parsers and litellm give it) and any <think> block left in the content. No caller
    (agent, user, judge, simulated tool) reads a model's thinking as what it said."""
    content, thought = split_reasoning(msg.content or "")
    given = getattr(msg, "reasoning_content", None)  # litellm also moves a leading <think> block here
    parts = [p.strip() for p in (given if isinstance(given, str) else None, thought) if p and p.strip()]
    reasoning = "\n\n".join(parts) or None
    return {"content": content.strip() if reasoning else content, "reasoning": reasoning}


async def complete(cfg: LLMConfig, messages: list[dict[str, Any]], tools: list[dict] | None = None,
                   seed: int | None = None) -> tuple[dict[str, Any], dict[str, float]]:
    """One chat completion. Returns (message as a dict, usage with prompt/completion tokens and cost)."""
    lt = litellm()
    kwargs: dict[str, Any] = dict(model=cfg.model, messages=messages, temperature=cfg.temperature,
                                  timeout=cfg.timeout_s, num_retries=0)
    if cfg.max_tokens:
        kwargs["max_tokens"] = cfg.max_tokens
    if tools:
        kwargs["tools"] = tools
    if seed is not None:
        kwargs["seed"] = seed
    if cfg.api_base:
        kwargs["api_base"] = cfg.api_base
        kwargs["api_key"] = cfg.api_key or os.environ.get("OPENAI_API_KEY") or "sk-local"
    elif cfg.api_key:
        kwargs["api_key"] = cfg.api_key
    last: Exception | None = None
    for attempt in range(cfg.retries + 1):
        try:
            resp = await asyncio.wait_for(lt.acompletion(**kwargs), timeout=cfg.timeout_s + 5)
            msg, calls = reply_parts(resp)
            usage = {"prompt_tokens": getattr(resp.usage, "prompt_tokens", 0) or 0,
                     "completion_tokens": getattr(resp.usage, "completion_tokens", 0) or 0}
            cost = (getattr(resp, "_hidden_params", None) or {}).get("response_cost")
            if cost:
                usage["cost"] = float(cost)
            return {**visible_reply(msg), "tool_calls": calls}, usage
        except asyncio.CancelledError:
            raise
        except Exception as e:  # classify below: permanent errors are not retried
            last = e
            kind = classify(e)
            if kind != "transient" or attempt == cfg.retries:
                break
            delay = cfg.backoff_s * (2 ** attempt) * (0.5 + random.random() / 2)
            asked = retry_after(e)
            if asked is not None and asked > MAX_RETRY_AFTER_S:
                raise InfraError(f"{cfg.model}: {type(e).__name__}: the server asks to retry after {asked:.0f} s, "
                                 f"over muactl's {MAX_RETRY_AFTER_S:.0f} s limit: {str(e)[:200]}") from None
            await asyncio.sleep(max(delay, asked or 0.0))
    what = "malformed reply" if isinstance(last, _MalformedReply) else type(last).__name__
    message = f"{cfg.model}: {what}: {str(last)[:300]}"
    raise (RequestRejected if kind == "rejected" else InfraError)(message)
