"""What an importer writes: converted tasks, each validated as a muactl task before its file is written."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def write_imported_tasks(file: Path, tasks: list[tuple[str, dict[str, Any]]], checkout: Path, header: str,
                         noun: str = "task") -> None:
    """Write (id, task dict) pairs as a task file; a task that does not validate is the checkout's problem,
    named by its id (`noun` is what the benchmark calls it: task, entry). Nothing to write writes no file."""
    from types import SimpleNamespace

    from pydantic import ValidationError

    from ..domain.task_templates import write_tasks
    from ..errors import SpecError
    from ..spec import models as m

    specs = []
    for task_id, task in tasks:
        try:
            specs.append(SimpleNamespace(task=m.Task.model_validate(task)))
        except ValidationError as e:
            first = e.errors()[0]
            raise SpecError.single(checkout, f"{noun} {task_id!r} does not make a muactl task: {first['msg']} at "
                                             f"{'.'.join(map(str, first['loc']))}") from None
    if specs:
        write_tasks(specs, file, header)
