"""One exception per failure state. The CLI maps every MuactlError to exit code 2 and its message.

Each message says what is wrong and what to do next, so the CLI never needs a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


class MuactlError(Exception):
    """Base of every error muactl reports to a user."""

    exit_code = 2


@dataclass(frozen=True, order=True)
class Problem:
    """One problem in a domain or task file: where it is and what would fix it."""

    file: str
    line: int
    column: int
    key: str
    message: str

    def __str__(self) -> str:
        key = f" {self.key}:" if self.key else ""
        return f"{self.file}:{self.line}:{self.column}:{key} {self.message}"


class SpecError(MuactlError):
    """A domain or task file is malformed. Carries every problem found, not only the first."""

    def __init__(self, problems: list[Problem]):
        self.problems = sorted(set(problems))
        n = len(self.problems)
        head = f"{n} problem{'s' if n != 1 else ''} found:"
        super().__init__("\n".join([head, *map(str, self.problems)]))

    @classmethod
    def single(cls, file: Path | str, message: str, line: int = 1, column: int = 1, key: str = ""):
        return cls([Problem(str(file), line, column, key, message)])


class DomainNotFound(MuactlError):
    """No domain of that name in ./domains, the installed library or the built-ins."""


class ToolNotFound(MuactlError):
    """A tool name that the domain does not declare."""


class ScaffoldExists(MuactlError):
    """`muactl init` would overwrite files."""


class UsageError(MuactlError):
    """Command-line input that is well-formed for the shell but wrong for muactl (bad JSON args...)."""


class UnsafePack(MuactlError):
    """A pack archive that muactl refuses to install (links, traversal, bad checksums, oversized...)."""


class PackExists(MuactlError):
    """Installing would replace another installed version of the same domain."""


class PackNotInstalled(MuactlError):
    """`muactl uninstall NAME` for a name that is not in the user library."""


class McpError(MuactlError):
    """An MCP server could not be started or reached."""


class RunNotFound(MuactlError):
    """No run with that id under the runs folder."""


class RunUnreadable(MuactlError):
    """A run folder whose runs.sqlite is damaged, truncated or not muactl's."""


class RunBusy(MuactlError):
    """Another muactl process is writing to this run (two --resume of one run at once)."""


class ModelError(MuactlError):
    """A model reference that cannot be resolved or loaded."""


class GoldReplayFailed(MuactlError):
    """A task's setup or gold action fails when replayed on a fresh sandbox, so its right end state is not
    known: the task needs fixing (`muactl validate` names the same call), never a silently wrong reward."""


class Tau2ScoringFailed(MuactlError):
    """τ²-bench's evaluator itself fails on this episode (an env assertion's call errors, as mock's do when
    the agent never created what they check): under scoring: tau2 the episode cannot be scored, as in τ²."""


# Not MuactlErrors: these end an episode with an outcome (or are turned into a ModelError), they are not
# reported to the user as a command's failure.

class Tau2Unsupported(Exception):
    """A construct of τ²-bench's source that `muactl import tau2` does not rebuild (a tool schema): the tool
    keeps muactl's own schema, and benchmarks/tau2_verify.py counts it as different. Never reaches the CLI."""


class CallUnreadable(ValueError):
    """A benchmark's gold call string that its own parser rejects (ACEBench's milestones; importers/acebench_truth)."""


class FormatError(Exception):
    """A tokenizer whose chat template muactl cannot prompt with tools (models.py makes it a ModelError)."""


class AgentError(Exception):
    """The agent could not produce a turn because of what it did (its API refused its own messages, its
    context overflowed): ends as agent_error, a scored failure."""


class ContextOverflow(AgentError):
    """A prompt that, with the tokens a turn may add, does not fit a local model's context: checked per
    prompt before a batch is generated. The agent's own conversation makes it a scored agent_error; a
    simulator's (caught by the user turn) a user_error."""


class InfraError(Exception):
    """Transport failed (connection, timeout, 5xx, 429 after retries; bad credentials or an unknown
    model; a local generate call that crashed): ends as infra_error, excluded from pass^k and retried
    on resume."""


class UserError(Exception):
    """The user simulator broke (it crashed, its model refused the request, it sent an empty message):
    ends as user_error, excluded from pass^k and retried on resume."""


class RequestRejected(Exception):
    """An API refused a request for what it contains (4xx: bad request, context window exceeded,
    content policy). The caller decides whose failure that is: the agent's own messages make it the
    agent's (a scored failure), the simulator's make it a user_error."""
