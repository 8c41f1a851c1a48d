"""Spec -> CompiledDomain: the SQLite template, tool handlers with their schemas, and the agent prompt."""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..spec.load import DomainSpec
from ..spec.models import SPEC_VERSION
from .changelog import with_log
from .database import build_template, cache_dir, schema_connection
from .prompt import agent_system_prompt
from .tools import CompiledTool, compile_tool

# bump when the template layout changes, so old cache entries are not reused
TEMPLATE_FORMAT = 2


@dataclass
class CompiledDomain:
    spec: DomainSpec
    tools: dict[str, CompiledTool]
    template_path: Path
    system_prompt: str
    content_hash: str
    trust: bool = False  # whether python tool handlers may run (the user passed --trust)
    players: dict = field(default_factory=dict)  # async players for simulated/mcp tools, by kind
    _template: bytes | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return self.spec.domain.name

    @property
    def tables(self) -> dict:
        return self.spec.domain.database.tables

    def writes(self, name: str) -> bool:
        """Whether the tool may change the database (a consent-needing action); unknown names do not."""
        tool = self.tools.get(name)
        if tool is None:
            return False
        if tool.kind == "sql":
            return bool(tool.spec.writes)
        return tool.kind == "python"

    def hands_over(self, name: str) -> bool:
        """Whether the tool hands the user over to a human without ending the episode (`hands_over: true`, on the
        tool kinds that have the field); unknown names do not."""
        tool = self.tools.get(name)
        return tool is not None and bool(getattr(tool.spec, "hands_over", False))

    def system_prompt_for(self, task) -> str:
        """The agent's system prompt in a task (a spec Task): the domain's, with the task's agent_context where
        the policy says {context} when it has one."""
        if task.agent_context is None:
            return self.system_prompt
        policy = self.spec.policy_text.replace("{context}", task.agent_context)
        return agent_system_prompt(self.spec.domain.description, policy, self.spec.agent_prompt_text)

    def agent_tools(self) -> list[CompiledTool]:
        return [t for t in self.tools.values() if t.side == "agent" and not getattr(t.spec, "discoverable", False)]

    def user_tools(self, task=None) -> list[CompiledTool]:
        """The user's tools (in a task, a spec Task: those its user_tools names, when it names them)."""
        mine = None if task is None else task.user_tools
        return [t for t in self.tools.values() if t.side == "user" and (mine is None or t.name in mine)]

    def template_bytes(self) -> bytes:
        """The template, read once per process (read-only) with its change log added (changelog.py);
        forks deserialize a copy and never write it."""
        if self._template is None:
            disk = sqlite3.connect(f"file:{self.template_path}?mode=ro", uri=True)
            data = disk.serialize()
            disk.close()
            self._template = with_log(data, self.tables)
        return self._template


def content_hash(spec: DomainSpec) -> str:
    h = hashlib.sha256(f"muactl-template:{TEMPLATE_FORMAT}:{SPEC_VERSION}".encode())
    for path in sorted(spec.files):
        h.update(str(path.relative_to(spec.root) if path.is_relative_to(spec.root) else path.name).encode())
        h.update(b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:24]


def compile_domain(spec: DomainSpec) -> CompiledDomain:
    """Build (or reuse from the cache) the template DB and compile the tools. Seed problems raise SpecError."""
    digest = content_hash(spec)
    path = cache_dir() / "templates" / f"{spec.domain.name}-{digest}.sqlite"
    if not path.exists():
        build_template(spec, path)
    conn = schema_connection(spec.domain)  # to read which table columns each tool's query returns
    try:
        tools = {name: compile_tool(name, t, spec.domain, conn) for name, t in spec.domain.tools.items()}
    finally:
        conn.close()
    prompt = agent_system_prompt(spec.domain.description, spec.policy_text, spec.agent_prompt_text)
    return CompiledDomain(spec, tools, path, prompt, digest)


__all__ = ["CompiledDomain", "CompiledTool", "compile_domain", "__version__"]
