"""Options more than one command takes (typer.Option objects, declared once)."""

from __future__ import annotations

import typer

# Episode limits and API-call settings, shared by eval and synth: EvalConfig's fields (tests check that
# every field has its option and the same default).
MAX_TOOL_ERRORS = typer.Option(4, "--max-tool-errors", min=0, help="Failed tool calls (and malformed replies) an "
                               "episode survives; one more ends it (too_many_errors).")
EPISODE_TIMEOUT = typer.Option(600.0, "--episode-timeout", min=1.0, help="Seconds one episode may run (then: timeout).")
MAX_TOKENS = typer.Option(1024, "--max-tokens", min=1, help="Tokens per API reply: API agents, LLM users, judges, "
                          "simulated tools (local models: --max-new-tokens).")
REQUEST_TIMEOUT = typer.Option(60.0, "--request-timeout", min=1.0, help="Seconds per API request before it is "
                               "retried; raise it for a slow (CPU-hosted) server.")
RETRIES = typer.Option(4, "--retries", min=0, help="Retries of a failed API call (rate limit, 5xx, timeout); then "
                       "the episode is infra_error (not counted).")
BACKOFF = typer.Option(1.0, "--backoff", min=0.0, help="Seconds before the first API retry; doubles per retry.")
# shared by eval and synth (synth keeps only episodes whose reward, judged assertions included, is 1)
JUDGE = typer.Option(None, "--judge", help="litellm model id or hf:<model> that checks the tasks' "
                     "expect.nl_assertions (without it they are reported as not judged and do not count).")
JUDGE_API_BASE = typer.Option(None, "--judge-api-base", help="OpenAI-compatible server for the judge.")
