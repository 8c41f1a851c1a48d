"""`muactl init NAME`: write a small, complete domain that validates as it is.

`init clinic` writes the clinic front desk that the README's tour uses (domain/ and tasks/ here); any
other name gets a neutral starter (starter/: a small help desk, its description naming NAME) to edit
into the user's own domain, so `init library` does not leave a clinic behind under another name."""

from __future__ import annotations

from pathlib import Path

from ..errors import ScaffoldExists
from ..spec.library import refuse_builtin_write

HERE = Path(__file__).parent


def scaffold(name: str, project: Path, force: bool = False) -> list[Path]:
    """Write domains/NAME/ and tasks/NAME/ under `project`. Refuses to overwrite unless force."""
    refuse_builtin_write(project / "domains" / name)
    refuse_builtin_write(project / "tasks" / name)
    source = HERE if name == "clinic" else HERE / "starter"
    plan: list[tuple[Path, Path]] = []
    for src in sorted((source / "domain").rglob("*")):
        if src.is_file():
            plan.append((src, project / "domains" / name / src.relative_to(source / "domain")))
    for src in sorted((source / "tasks").rglob("*")):
        if src.is_file():
            plan.append((src, project / "tasks" / name / src.relative_to(source / "tasks")))
    existing = [dst for _, dst in plan if dst.exists()]
    if existing and not force:
        shown = ", ".join(str(p) for p in existing[:3]) + (" ..." if len(existing) > 3 else "")
        raise ScaffoldExists(f"would overwrite {shown}; pass --force to overwrite, or pick another name")
    for src, dst in plan:
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_text(src.read_text().replace("__NAME__", name))
    return [dst for _, dst in plan]
