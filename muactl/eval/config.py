"""The settings of `muactl eval` (EvalConfig), light to import: the CLI builds its options from them at start."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..limits import MAX_CONCURRENCY, MAX_INSTANCES, MAX_TRIALS
from ..options import option


# Every setting of `muactl eval`, declared once: its flags and help (the CLI is built from them) and its key in
# a train recipe's eval stage (the hydra schema and the stage's EvalConfig are built from those).
@dataclass
class EvalConfig:
    domain: str = option(help="Domain name or folder (not needed with --resume).", cli_default=None, recipe="domain")
    agent: str = option("oracle", "--agent", help="oracle | oracle:varied | hf:<model> | vllm:<model> | a litellm model id | "
                        "adversary:<do-nothing|transfer-at-once|number-sprayer|id-echo> (reward loophole probes).",
                        recipe="model.name")  # the eval stage plays its own checkpoint (hf:)
    user: str = option("scripted", "--user", help="scripted | scripted:varied (several phrasings) | hf:<model> | a litellm model id.", recipe="user.model")
    split: str | None = option("test", "--split", help="train | test | all.", recipe="eval.split")
    # explicit task ids (they override split), or ["template:<id>|all"]: set by --task and --tasks
    tasks: list[str] = option(None, "--task", "--tasks", default_factory=list, own=True, recipe="eval.tasks")
    n: int = option(100, "--n", min=1, max=MAX_INSTANCES, help="With --tasks template:...: how many instances.",
                    recipe="eval.n")
    db: str = option("fixed", "--db", help="With --tasks template:...: fixed | random (a fresh database each).",
                     recipe="eval.db")
    trials: int = option(1, "--trials", "-k", min=1, max=MAX_TRIALS, help="Trials per task; pass^1..k are reported.", recipe="eval.trials")
    concurrency: int = option(8, "--concurrency", min=1, max=MAX_CONCURRENCY, help="Episodes in flight at once.", recipe="eval.concurrency")
    seed: int = option(0, "--seed", help="Run seed (each episode's seed derives from it).", recipe="seed")
    max_turns: int = option(24, "--max-turns", min=1, help="Agent turns before an episode is cut.", recipe="eval.max_turns")
    max_tool_errors: int = option(4, "--max-tool-errors", min=0, help="Failed tool calls (and malformed replies) an "
                                  "episode survives; one more ends it (too_many_errors).", recipe="episode.max_tool_errors")
    timeout_s: float = option(600.0, "--episode-timeout", min=1.0, help="Seconds one episode may run (then: timeout).",
                              recipe="episode.timeout_s")
    # every API call (API agents and users, judges, simulated tools): a slow server needs a longer timeout
    max_tokens: int = option(1024, "--max-tokens", min=1, help="Tokens per API reply: API agents, LLM users, judges, "
                             "simulated tools (local models: --max-new-tokens).", recipe="api.max_tokens")
    llm_timeout_s: float = option(60.0, "--request-timeout", min=1.0, help="Seconds per API request before it is "
                                  "retried; raise it for a slow (CPU-hosted) server.", recipe="api.timeout_s")
    retries: int = option(4, "--retries", min=0, help="Retries of a failed API call (rate limit, 5xx, timeout); then "
                          "the episode is infra_error (not counted).", recipe="api.retries")
    backoff_s: float = option(1.0, "--backoff", min=0.0, help="Seconds before the first API retry; doubles per retry.",
                              recipe="api.backoff_s")
    api_base: str | None = option(None, "--api-base", help="OpenAI-compatible server for the agent.",
                                  not_in_recipe="train evaluates its own local checkpoints (hf:), which need no server")
    user_api_base: str | None = option(None, "--user-api-base", help="OpenAI-compatible server for the user.",
                                       recipe="user.api_base")
    temperature: float = option(0.0, "--temperature", help="Agent sampling temperature (0: greedy).",
                                recipe="model.temperature")
    user_temperature: float = option(0.0, "--user-temperature", help="User simulator temperature.",
                                     recipe="user.temperature")
    max_new_tokens: int = option(256, "--max-new-tokens", help="Tokens per agent turn (local models).",
                                 recipe="model.max_new_tokens")
    thinking: bool = option(False, "--thinking", help="A local model whose chat template has a "
                            "thinking switch (Qwen3's enable_thinking): think before replying. Default off, MUA-RL's "
                            "non-thinking mode. Any <think> block is stored as the turn's reasoning, never shown.",
                            recipe="model.thinking")
    tool_model: str | None = option(None, "--tool-model", help="litellm model that plays simulated tools.",
                                    recipe="synth.tool_model")
    opening: str | None = option(None, "--opening", help="Who speaks first: agent (greeting) or user.",
                                 recipe="episode.opening")
    trust: bool = option(False, "--trust", help="Allow the domain's Python tools to run.", recipe="trust")
    judge: str | None = option(None, "--judge", help="litellm model id or hf:<model> that checks the tasks' "
                               "expect.nl_assertions (without it they are reported as not judged and do not count).",
                               not_in_recipe="the recipe's eval stage does not judge NL assertions yet (grpo.judge "
                               "judges rollouts)")
    judge_api_base: str | None = option(None, "--judge-api-base", help="OpenAI-compatible server for the judge.",
                                        not_in_recipe="as judge")
    scoring: str | None = option(None, "--scoring", help="muactl | tau2 (τ²-bench's evaluator, by each task's reward "
                                 "basis). Default: the domain's `scoring:` in eval (muactl when it names none), muactl "
                                 "in synth.", not_in_recipe="train's eval stage scores as its domain says; GRPO and "
                                 "synth train on muactl's reward")

    def llm_options(self) -> dict[str, Any]:
        """The API-call settings as make_agent, make_user and the tool players take them."""
        return {"timeout_s": self.llm_timeout_s, "retries": self.retries, "backoff_s": self.backoff_s,
                "max_tokens": self.max_tokens}
