"""Policy backends: oracle, oracle:varied, adversary:<name>, hf:<model>, vllm:<model>, and any litellm model id."""

from __future__ import annotations

from .base import Agent


def make_agent(spec: str, api_base: str | None = None, temperature: float = 0.0, max_new_tokens: int = 256,
               timeout_s: float = 60.0, retries: int = 4, max_batch: int = 64, backoff_s: float = 1.0,
               max_tokens: int | None = 1024, thinking: bool = False) -> Agent:
    """'oracle' | 'oracle:varied' | 'adversary:<name>' | 'hf:<model>' | 'vllm:<model>' | a litellm model id (openai/gpt-4o-mini,
    hosted_vllm/x ...). `thinking` (model.thinking) is a local model's: its template's enable_thinking."""
    if spec in ("oracle", "oracle:varied"):
        from .oracle import OracleAgent

        return OracleAgent(varied=spec == "oracle:varied")
    if spec.startswith("adversary:"):
        from ...errors import UsageError
        from .adversarial import ADVERSARIES

        if spec[10:] not in ADVERSARIES:
            raise UsageError(f"unknown adversary '{spec[10:]}' (one of: {', '.join(ADVERSARIES)})")
        return ADVERSARIES[spec[10:]]()
    if spec.startswith(("hf:", "vllm:")):
        check_local_model(spec.split(":", 1)[1])
    if spec.startswith("hf:"):
        from .local import HFAgent

        return HFAgent(spec[3:], temperature=temperature, max_new_tokens=max_new_tokens, max_batch=max_batch,
                       thinking=thinking)
    if spec.startswith("vllm:"):
        from .local import VLLMAgent, import_vllm

        import_vllm()
        return VLLMAgent(spec[5:], temperature=temperature, max_new_tokens=max_new_tokens, max_batch=max_batch,
                         thinking=thinking)
    from ...models.llm import LLMConfig
    from .api import APIAgent

    return APIAgent(LLMConfig(spec, api_base=api_base, temperature=temperature, timeout_s=timeout_s, retries=retries,
                              backoff_s=backoff_s, max_tokens=max_tokens))


def check_local_model(ref: str) -> None:
    """A checkpoint folder whose chat template cannot express tools fails here, before any episode runs
    (loading is lazy; a refusal there would end every episode as agent_error instead)."""
    from pathlib import Path

    if Path(ref).expanduser().is_dir() and (Path(ref).expanduser() / "config.json").is_file():
        from ...models.folder import chat_format, load_tokenizer

        chat_format(load_tokenizer(Path(ref).expanduser()))
