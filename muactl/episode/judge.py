"""The judge of natural-language assertions (`expect.nl_assertions`, `--judge MODEL`).

A task may state what the agent must have done in words ("The agent tells the user the order cannot
be cancelled"); an LLM reads what was said (the user's messages and the agent's text turns, not tool
calls: the same conversation the user saw) and gives a verdict and a reason for each statement. The
verdicts join the reward only when a judge is given; otherwise the breakdown lists them as not judged.
A judge that cannot be reached or keeps answering with something other than the verdicts raises
InfraError: the episode cannot be scored, so it is excluded and retried on resume, never paid 0.
"""

from __future__ import annotations

from .answers import json_object_in

from typing import Any

from ..errors import InfraError, RequestRejected

SYSTEM = """\
You check statements about a conversation between a customer ("user") and a support agent ("agent").
For each numbered statement, decide from the conversation alone whether it holds. A statement about
something the agent did not say or do does not hold.
Answer with JSON only, no markdown: {"verdicts": [{"id": 1, "met": true, "reason": "one short sentence"}, ...]},
one entry per statement, in order."""

ATTEMPTS = 2  # a second chance after an answer that is not the verdicts asked for


def transcript(messages: list[dict[str, Any]]) -> str:
    from .transcript import shown_to_user

    lines = []
    for m in messages:
        if m["role"] == "user":
            lines.append(f"user: {m['content']}")
        elif shown_to_user(m):
            lines.append(f"agent: {m['content']}")
    return "\n".join(lines) or "(nothing was said)"


def parse_verdicts(text: str, assertions: list[str]) -> list[dict[str, Any]]:
    """The verdicts in a judge's answer, one per assertion; ValueError says what is wrong with it."""
    data = json_object_in(text)
    items = data.get("verdicts") if isinstance(data, dict) else None
    if not isinstance(items, list) or len(items) != len(assertions):
        raise ValueError(f"expected {len(assertions)} verdicts in a 'verdicts' list")
    out = []
    for i, (item, assertion) in enumerate(zip(items, assertions), 1):
        if not isinstance(item, dict) or not isinstance(item.get("met"), bool):
            raise ValueError(f"verdict {i} has no true/false 'met'")
        out.append({"assertion": assertion, "ok": item["met"], "reason": str(item.get("reason") or "")[:500]})
    return out


class Judge:
    """`spec`: any litellm model id (with `api_base` for a local OpenAI-compatible server) or hf:<model>."""

    def __init__(self, spec: str, api_base: str | None = None, timeout_s: float = 60.0, retries: int = 4,
                 backoff_s: float = 1.0, max_tokens: int | None = 512):
        self.spec = spec
        self.max_new_tokens = max_tokens or 512
        self.cfg = None
        if not spec.startswith("hf:"):
            from ..models.llm import LLMConfig

            self.cfg = LLMConfig(spec, api_base=api_base, timeout_s=timeout_s, retries=retries, backoff_s=backoff_s,
                                 max_tokens=self.max_new_tokens)

    async def _ask(self, messages: list[dict[str, str]], domain) -> str:
        if self.cfg is not None:
            from ..models.llm import complete

            msg, _usage = await complete(self.cfg, messages)
            return msg["content"] or ""
        import asyncio

        from ..models.generation import load_model

        lm = load_model(self.spec[3:], domain=domain)
        return await asyncio.to_thread(lm.chat, messages, self.max_new_tokens, 0.0, 0)

    async def verdicts(self, assertions: list[str], messages: list[dict[str, Any]], domain=None) -> list[dict[str, Any]]:
        numbered = "\n".join(f"{i}. {a}" for i, a in enumerate(assertions, 1))
        ask = [{"role": "system", "content": SYSTEM},
               {"role": "user", "content": f"Conversation:\n{transcript(messages)}\n\nStatements:\n{numbered}"}]
        return await self._answered(ask, lambda answer: parse_verdicts(answer, assertions), domain)

    async def _answered(self, ask: list[dict[str, str]], parse, domain) -> list[dict[str, Any]]:
        """The judge's answer to `ask`, read by `parse` (ValueError: unreadable, asked once more)."""
        why = ""
        for _ in range(ATTEMPTS):
            try:
                answer = await self._ask(ask, domain)
            except RequestRejected as e:  # the conversation is too long for the judge, say: not the agent's doing
                raise InfraError(str(e)) from e
            try:
                return parse(answer)
            except ValueError as e:
                why = str(e)
                ask = [*ask, {"role": "assistant", "content": answer},
                       {"role": "user", "content": f"That cannot be read: {why}. Answer with the JSON only."}]
        raise InfraError(f"{self.spec} gave no usable verdicts: {why}")

    async def tau2_verdicts(self, assertions: list[str], messages: list[dict[str, Any]], domain=None) -> list[dict[str, Any]]:
        """The verdicts with τ²-bench's judge prompt (the domain's judge_prompt, scoring: tau2) and its answer
        format; one entry per result the judge gives, as τ² counts them."""
        from .tau2_scoring import judge_messages, parse_results

        prompt = getattr(getattr(domain, "spec", None), "domain", None)
        prompt = getattr(prompt, "judge_prompt", None)
        if prompt is None:
            raise InfraError("the domain has no judge_prompt for τ²'s NL assertions (re-import it with muactl import tau2)")
        return await self._answered(judge_messages(prompt.model_dump(), assertions, messages), parse_results, domain)

    def describe(self) -> dict[str, Any]:
        return {"judge": self.spec}
