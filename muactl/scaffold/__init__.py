"""`muactl init NAME`: write a small, complete domain that validates as it is."""

from __future__ import annotations

from pathlib import Path

from ..errors import ScaffoldExists
from ..library import refuse_builtin_write

HERE = Path(__file__).parent


def scaffold(name: str, project: Path, force: bool = False) -> list[Path]:
    """Write domains/NAME/ and tasks/NAME/ under `project`. Refuses to overwrite unless force."""
    refuse_builtin_write(project / "domains" / name)
    refuse_builtin_write(project / "tasks" / name)
    plan: list[tuple[Path, Path]] = []
    for src in sorted((HERE / "domain").rglob("*")):
        if src.is_file():
            plan.append((src, project / "domains" / name / src.relative_to(HERE / "domain")))
    for src in sorted((HERE / "tasks").rglob("*")):
        if src.is_file():
            plan.append((src, project / "tasks" / name / src.relative_to(HERE / "tasks")))
    existing = [dst for _, dst in plan if dst.exists()]
    if existing and not force:
        shown = ", ".join(str(p) for p in existing[:3]) + (" ..." if len(existing) > 3 else "")
        raise ScaffoldExists(f"would overwrite {shown}; pass --force to overwrite, or pick another name")
    for src, dst in plan:
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(src.read_text().replace("__NAME__", name))
    return [dst for _, dst in plan]
