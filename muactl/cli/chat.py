"""The chat command: talk to an agent as its user in a terminal UI."""

from __future__ import annotations

import sys
from typing import Optional

import typer

from ..errors import UsageError
from ..eval.config import EvalConfig
from .app import command
from .options import field_option


@command()
def chat(
    domain: str = typer.Argument(..., help="Domain name (./domains, installed, built-in) or a folder holding domain.yaml."),
    agent: str = typer.Option("oracle", "--agent", help="oracle | hf:<model or checkpoint> | vllm:<model> | a litellm model id."),
    task: Optional[str] = typer.Option(None, "--task", help="Start on this task (default: pick one, or chat freely)."),
    show_goal: bool = typer.Option(False, "--show-goal", help="Show the task's user goal beside the chat."),
    watch: bool = typer.Option(False, "--watch", help="Watch the agent against a simulated user; ctrl+t takes over."),
    user: str = typer.Option("scripted", "--user", help="The simulated user in --watch: scripted | hf:<model> | a litellm model id."),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="OpenAI-compatible server for the agent (and the --watch user)."),
    pace: float = typer.Option(1.0, "--pace", min=0.0, help="Seconds before each simulated user turn in --watch."),
    max_tokens: int = field_option(EvalConfig, "max_tokens"),
    request_timeout: float = field_option(EvalConfig, "llm_timeout_s"),
    retries: int = field_option(EvalConfig, "retries"),
    thinking: bool = field_option(EvalConfig, "thinking"),
    trust: bool = typer.Option(False, "--trust", help="Allow the domain's Python tools to run."),
) -> None:
    """Talk to an agent as its user in a terminal UI; see every tool call and what it did to the database.

    Each chat is scored like an eval episode and saved (marked human, with your rating and note) in
    runs/<id>/runs.sqlite. Keys: enter sends, ctrl+e ends (or type ###STOP###), ctrl+r retries a failed
    agent turn, ctrl+t takes over / gives back the user's seat in --watch, ctrl+q quits.
    Examples:
      [bold]muactl chat retail --agent hf:runs/<id>/checkpoint-final[/bold]
      [bold]muactl chat retail --agent openai/gpt-4o-mini --task cancel-gift-card-order --show-goal[/bold]
      [bold]muactl chat bank --agent hf:tiny --watch --user scripted[/bold]
    """
    from ..domain.open import open_domain

    opened = open_domain(domain, trust=trust)
    if task:
        opened.task(task)  # an unknown id fails here, with suggestions, before the screen opens
    from ..eval.preflight import check_episode_parts

    check_episode_parts(agent, user if watch else "scripted", api_base, api_base)  # a missing key or model folder too
    if not sys.stdin.isatty() or not sys.stdout.isatty():
        raise UsageError("muactl chat needs an interactive terminal (stdin and stdout must be a TTY)")
    from ..chat import ChatConfig, run_chat  # imports textual: only this command pays for it

    cfg = ChatConfig(domain=domain, agent=agent, task=task, show_goal=show_goal, watch=watch, user=user,
                     api_base=api_base, user_api_base=api_base, trust=trust, pace_s=pace, max_tokens=max_tokens,
                     llm_timeout_s=request_timeout, retries=retries, thinking=thinking)
    chats = run_chat(cfg, opened)
    if chats.store is None:
        typer.echo("no chat was saved")
        return
    store = chats.store
    n = len(store.episodes())
    typer.echo(f"saved {n} chat{'s' * (n != 1)} to {store.path}/  (muactl runs show {store.id})")
    typer.echo(f"export the good ones as SFT data: muactl synth --from-chats {store.id} -o chats.jsonl")
