"""What an episode is made of, below the parts that play it: the context agents and users read, the stored
episode with its token trace, and the terminations and outcome classes it can end in."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..compile import CompiledDomain
    from ..env.sandbox import Environment
    from ..spec.tasks import TaskSpec

TERMINATIONS = ("user_stop", "agent_done", "transfer", "user_transfer", "out_of_scope", "max_turns", "too_many_errors", "timeout",
                "agent_error", "user_error", "infra_error")
USER_ENDINGS = ("user_stop", "user_transfer", "out_of_scope")  # what a user's message ends an episode with (user.py)


# Outcome classes. success and failure are the agent's (scored: its own API errors, context overflow and
# malformed calls are failures). The excluded ones say nothing about the agent: they leave pass^k and
# GRPO's baselines, are reported on their own, and are run again by --resume.
EXCLUDED = ("infra_error", "user_error")
OUTCOMES = ("success", "failure", *EXCLUDED)
TIMED_OUT = "wall-clock timeout"  # the error of an episode whose timeout was excluded (RolloutConfig.timeout_excluded)


def outcome_of(termination: str, success: bool) -> str:
    return termination if termination in EXCLUDED else ("success" if success else "failure")


@dataclass
class TokenTrace:
    """Token-exact trajectory of a local policy: every id the template inserted (mask 0) or the policy
    sampled (mask 1, with its logprob). Generated ids are appended as produced, never re-tokenized."""

    ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)  # 0.0 where mask is 0
    prompt_len: int = 0  # ids before the first sampled token
    rendered_upto: int = 0  # messages already turned into ids

    def add(self, ids: list[int], sampled: bool, logprobs: list[float] | None = None) -> None:
        if sampled and not self.mask.count(1) and not self.prompt_len:
            self.prompt_len = len(self.ids)
        self.ids.extend(ids)
        self.mask.extend([1 if sampled else 0] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))


@dataclass
class EpisodeContext:
    task: TaskSpec
    domain: CompiledDomain
    env: Environment
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]  # OpenAI schemas of the agent's tools
    user_tools: list[dict[str, Any]]
    seed: int
    trial: int
    trace: TokenTrace | None = None
    state: dict[str, Any] = field(default_factory=dict)  # scratch space for agents and users


@dataclass
class Episode:
    task_id: str
    trial: int
    seed: int
    messages: list[dict[str, Any]]
    termination: str
    reward: float = 0.0
    breakdown: dict[str, Any] = field(default_factory=dict)
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    records: list[dict[str, Any]] = field(default_factory=list)  # per tool call: turn, tool, error, changed
    usage: dict[str, float] = field(default_factory=dict)
    timing: dict[str, float] = field(default_factory=dict)
    final_hash: str = ""
    error: str | None = None
    trace: TokenTrace | None = None
    fidelity: dict[str, bool | None] = field(default_factory=dict)  # how the simulated user behaved (fidelity.py)
    interaction: dict[str, float | None] = field(default_factory=dict)  # effective turns, first correct write ...
    # the user's own tool calls (dual control), {"name", "arguments"} each: not in messages, which hold what the
    # agent saw; τ²'s scoring looks for gold actions among them too
    user_calls: list[dict[str, Any]] = field(default_factory=list)
    # a task with fixed turns: per turn that ended, the state hash then and how many messages there were
    # (the per-turn checks of reward.turn_checks read the state and the tool results up to that point)
    turn_ends: list[dict[str, Any]] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        return outcome_of(self.termination, bool(self.breakdown.get("success")))

    @property
    def counted(self) -> bool:
        """Excluded episodes (infra_error, user_error) say nothing about the agent: not in pass^k."""
        return self.termination not in EXCLUDED

    @property
    def timed_out(self) -> bool:
        """Ended by the wall clock: scored (`timeout`, eval) or excluded (training)."""
        return self.termination == "timeout" or (self.termination == "infra_error" and (self.error or "").startswith(TIMED_OUT))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
