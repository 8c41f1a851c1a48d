"""Task files: tasks/*.yaml loaded into spec models, every file's problems reported together."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import Problem, SpecError
from . import models as m
from .problems import validate
from .source import Located, load_yaml


TASK_FILE_SPLITS = {"train", "test"}


YAML_SUFFIXES = (".yaml", ".yml")


@dataclass
class TaskSpec:
    task: m.Task
    file: Path
    index: int
    doc: Located

    @property
    def split(self) -> str:
        # task files not named after a split must say it per task (load_task_file checks); "train" is
        # for tasks made in code (template instances, the free chat)
        return self.task.split or (self.file.stem if self.file.stem in TASK_FILE_SPLITS else "train")

    def problem(self, path: tuple, message: str, word: str | None = None) -> Problem:
        return self.doc.problem(path, message, prefix=self._prefix, word=word)

    @property
    def _prefix(self) -> tuple:
        return ("tasks", self.index) if isinstance(self.doc.data, dict) else (self.index,)


def load_task_file(path: Path) -> list[TaskSpec]:
    """A task file is a list of tasks, or a mapping with a `tasks:` list."""
    out, problems = load_task_file_partial(path)
    if problems:
        raise SpecError(problems)
    return out


def load_task_file_partial(path: Path) -> tuple[list[TaskSpec], list[Problem]]:
    """The tasks of a file that parsed, and the problems of those that did not."""
    try:
        doc = load_yaml(path)
    except SpecError as e:
        return [], list(e.problems)
    data = doc.data
    prefix: tuple = ()
    if isinstance(data, dict):
        if "tasks" not in data or set(data) - {"tasks"}:
            extra = sorted(set(data) - {"tasks"})
            return [], [doc.problem((extra[0],) if extra else (), "a task file is a list of tasks, or a mapping with only a 'tasks:' list")]
        data, prefix = data["tasks"], ("tasks",)
    if not isinstance(data, list):
        return [], [doc.problem(prefix, "expected a list of tasks (each starting with '- id: ...')")]
    out, problems = [], []
    for i, item in enumerate(data):
        task, found = validate(doc, m.Task, item, prefix=prefix + (i,))
        problems.extend(found)
        if task is not None:
            spec = TaskSpec(task, path, i, doc)
            if task.split is None and path.stem not in TASK_FILE_SPLITS:
                # a file's name is its tasks' split only for train and test: dev.yaml silently becoming
                # train (or a split no command knows) would put held-out tasks into training
                problems.append(spec.problem(("id",), f"{path.name} is not named after a split (train.yaml, "
                                             "test.yaml), so each of its tasks needs `split: train` or `split: test`"))
            out.append(spec)
    return out, problems


def task_files(tasks_dir: Path | None) -> list[Path]:
    """Task files: every *.yaml and *.yml in the folder but the templates file."""
    if tasks_dir is None or not tasks_dir.is_dir():
        return []
    return sorted(p for p in tasks_dir.iterdir() if p.suffix in YAML_SUFFIXES and p.stem != "templates" and p.is_file())


def load_tasks(*tasks_dirs: Path | None) -> list[TaskSpec]:
    """All tasks of a domain (from each of its folders, DomainRef.task_dirs), every file's problems reported
    together; duplicate ids are problems."""
    out, problems = load_tasks_partial(*tasks_dirs)
    if problems:
        raise SpecError(problems)
    return out


def stray_folders(tasks_dir: Path | None) -> list[Problem]:
    """A folder inside a domain's task folder: muactl reads task files from the folder itself only, so the
    tasks in it would silently not exist (a held-out set left out of every eval, say)."""
    if tasks_dir is None or not tasks_dir.is_dir():
        return []
    return [Problem(str(p), 1, 1, "", f"{p.name}/ is a folder inside {tasks_dir}; task files sit directly in "
                    f"{tasks_dir.name}/ (its sub-folders are never read): move its files up, or remove it")
            for p in sorted(tasks_dir.iterdir()) if p.is_dir() and not p.name.startswith(".")]


def load_tasks_partial(*tasks_dirs: Path | None) -> tuple[list[TaskSpec], list[Problem]]:
    """The tasks that parsed (the first of each id) and every problem of the task files and their folders."""
    out, problems = [], []
    for tasks_dir in tasks_dirs:
        problems += stray_folders(tasks_dir)
        for path in task_files(tasks_dir):
            tasks, found = load_task_file_partial(path)
            out.extend(tasks)
            problems.extend(found)
    seen: dict[str, TaskSpec] = {}
    for t in out:
        if t.task.id in seen:
            first = seen[t.task.id]
            problems.append(t.problem(("id",), f"duplicate task id '{t.task.id}' (first defined at {first.file.name}:{first.doc.pos(first._prefix + ('id',))[0]})"))
        else:
            seen[t.task.id] = t
    return list(seen.values()), problems
