"""One-line facts about every domain found, for `muactl domains`."""

from __future__ import annotations

from typing import Any

from ..errors import SpecError
from ..spec.library import list_domains
from ..spec.load import load_domain
from ..spec.tasks import load_tasks


def domain_summaries() -> list[dict[str, Any]]:
    rows = []
    seen: set[str] = set()
    for ref in list_domains():
        row: dict[str, Any] = {"name": ref.name, "origin": ref.origin, "path": str(ref.root), "shadowed": ref.name in seen}
        seen.add(ref.name)
        if ref.origin == "installed":
            from .packs import installed_manifest

            m = installed_manifest(ref.root)
            if m is not None:  # where the pack came from and what it may run
                row["pack"] = {k: m.get(k) for k in ("version", "source", "source_name", "installed_at", "has_python",
                                                    "mcp_commands")}
        try:
            spec = load_domain(ref.root)
            tasks = load_tasks(*ref.task_dirs)
        except SpecError as e:
            row["error"] = f"invalid ({len(e.problems)} problems; run muactl validate {ref.root})"
            rows.append(row)
            continue
        d = spec.domain
        row.update(version=d.version, tables=len(d.database.tables), tools=len(d.tools), tasks=len(tasks),
                   train=sum(t.split == "train" for t in tasks), test=sum(t.split == "test" for t in tasks),
                   description=d.description.strip())
        rows.append(row)
    return rows
