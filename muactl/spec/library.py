"""Where domains live: ./domains (the working directory), the user's installed library, the built-ins.

A name is looked up in that order, so a local copy shadows an installed or built-in domain of the
same name. A path to a folder holding domain.yaml works too.

Trust follows what a folder holds, never how it was named or where it was found: a folder that holds an
install record (an installed pack, reached by its name, by its path, or copied into ./domains or
anywhere else), any folder of the installed library, and the `domain/` folder of a pack unpacked by hand
(the pack's manifest.json beside it) are someone else's, so their MCP commands start only with --trust,
whichever lookup reached them (`foreign` says why). Python tools need --trust in every domain. Tasks sit
in `<root>/tasks/` when the domain carries them (installed packs), beside `domain/` in an unpacked pack,
else in `tasks/<name>/` next to the `domains/` folder. A built-in or installed domain also reads the
project's `./tasks/<name>/` (the user's own tasks for it, e.g. generated from its templates).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import DomainNotFound, UsageError

ORIGIN_ORDER = ("local", "installed", "builtin")
INSTALLED_MANIFEST = ".muapack.json"  # beside domain.yaml in the library: what was installed, from where
PACK_MANIFEST = "manifest.json"  # at the top of a .muapack, beside its domain/ and tasks/ folders


@dataclass(frozen=True)
class DomainRef:
    name: str
    root: Path  # the folder holding domain.yaml
    tasks_dir: Path | None
    origin: str  # local | installed | builtin | path: where it was found
    foreign: str | None = None  # why the folder is someone else's (None: the user's own or muactl's)
    # the project's ./tasks/NAME/ for a built-in or installed domain: the user's own tasks (`tasks generate -o`)
    # beside the domain's, since the domain's own folder is not theirs to write
    project_tasks: Path | None = None

    @property
    def task_dirs(self) -> list[Path]:
        """Every folder whose task files are this domain's: its own, then the project's."""
        return [d for d in (self.tasks_dir, self.project_tasks) if d is not None]

    @property
    def untrusted(self) -> bool:
        """Someone else's domain (a pack, installed or unpacked): its MCP commands start only with --trust."""
        return self.foreign is not None

    def trust_hint(self) -> str:
        """Why its external programs did not start, and how to let them."""
        return (f"{self.root} {self.foreign}, so its MCP commands start only with --trust: re-run with --trust "
                "if you trust its author")


def builtin_root() -> Path:
    """The folder holding the built-in domains/ and tasks/: the source tree when run from a checkout
    or an editable install, else the copy shipped inside the wheel as package data."""
    here = Path(__file__).resolve().parents[1]  # the muactl package
    repo = here.parent
    if (repo / "domains").is_dir() and (repo / "pyproject.toml").is_file():
        return repo
    return here / "_builtin"


def refuse_builtin_write(path: Path) -> None:
    """The built-in domains and tasks are muactl's own, never a user's project: no command writes into them.
    Run from the source checkout, `./domains` and `./tasks` *are* the built-ins, so a scaffold or a generated
    task file there would silently become (or grow) a built-in; the user is sent to a project folder instead."""
    target = path.resolve()
    for folder in (builtin_root() / "domains", builtin_root() / "tasks"):
        folder = folder.resolve()
        if target == folder or folder in target.parents:
            raise UsageError(
                f"{path} is inside muactl's built-in {folder.name}/ folder ({folder}), which muactl never writes to "
                f"(run from the source checkout, ./domains and ./tasks are the built-ins, not a project); work in a "
                f"project folder of your own: mkdir my-project && cd my-project && muactl init NAME")


def user_library() -> Path:
    """Installed domain packs: $MUACTL_HOME/domains, default ~/.local/share/muactl/domains."""
    home = os.environ.get("MUACTL_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share", "muactl")
    return Path(home) / "domains"


def foreign_reason(root: Path) -> str | None:
    """Why the folder holding domain.yaml is someone else's, judged by what it holds; None when nothing says so."""
    if (root / INSTALLED_MANIFEST).exists():
        return f"holds a pack's install record ({INSTALLED_MANIFEST})"
    if _unpacked(root):
        return f"is the domain/ folder of an unpacked pack ({PACK_MANIFEST} beside it)"
    try:
        in_library = root.resolve().parent == user_library().resolve()
    except (OSError, RuntimeError):
        in_library = False
    return "is in the installed library" if in_library else None


def _unpacked(root: Path) -> bool:
    return root.name == "domain" and (root.parent / PACK_MANIFEST).is_file()


def _ref(name: str, root: Path, project: Path | None, origin: str) -> DomainRef:
    """A found domain: trust is judged on the folder itself, whichever lookup found it."""
    foreign = foreign_reason(root)
    tasks_dir = _tasks_for(root, project)
    extra = None
    if origin in ("installed", "builtin"):  # found outside the project: the project's tasks for it add to its own
        mine = Path.cwd() / "tasks" / name
        if mine.is_dir() and (tasks_dir is None or mine.resolve() != tasks_dir.resolve()):
            extra = mine
    if (root / INSTALLED_MANIFEST).exists():
        origin = "installed"
    return DomainRef(name, root, tasks_dir, origin, foreign, extra)


def _tasks_for(root: Path, project: Path | None) -> Path | None:
    if (root / "tasks").is_dir():
        return root / "tasks"
    if _unpacked(root):
        return root.parent / "tasks"
    if project is not None:
        return project / "tasks" / root.name
    return root.parent.parent / "tasks" / root.name


def _roots() -> list[tuple[str, Path, Path | None]]:
    cwd = Path.cwd()
    builtin = builtin_root()
    out = [("local", cwd / "domains", cwd), ("installed", user_library(), None), ("builtin", builtin / "domains", builtin)]
    # running inside the source checkout: its domains are the built-ins, not local ones
    return [o for i, o in enumerate(out) if not (o[0] == "local" and o[1].resolve() == out[2][1].resolve())]


def _by_path(candidate: Path) -> DomainRef:
    root = candidate.resolve()
    in_library = root.parent == user_library().resolve()
    return _ref(root.name, root, None, "installed" if in_library else "path")


def find_domain(name: str) -> DomainRef:
    candidate = Path(name)
    if (candidate / "domain.yaml").is_file() and (os.sep in name or name.startswith(".") or not _named(name)):
        return _by_path(candidate)
    for origin, folder, project in _roots():
        root = folder / name
        if (root / "domain.yaml").is_file():
            return _ref(name, root, project, origin)
    if (candidate / "domain.yaml").is_file():
        return _by_path(candidate)
    known = ", ".join(sorted({d.name for d in list_domains()})) or "none"
    raise DomainNotFound(
        f"no domain named '{name}' in ./domains, {user_library()} or the built-ins (known: {known}). "
        f"Create one with `muactl init {name}`, or pass the path of a folder holding domain.yaml.")


def _named(name: str) -> bool:
    return any((folder / name / "domain.yaml").is_file() for _, folder, _ in _roots())


def list_domains() -> list[DomainRef]:
    """Every domain found, shadowed ones included (the first of each name is the one used)."""
    out = []
    for origin, folder, project in _roots():
        if not folder.is_dir():
            continue
        for root in sorted(folder.iterdir()):
            if (root / "domain.yaml").is_file():
                out.append(_ref(root.name, root, project, origin))
    return out


def hidden_by_project(name: str) -> list[DomainRef]:
    """The installed and built-in domains a project's domains/NAME shadows: the ones that name meant before."""
    out = []
    for origin, folder, project in _roots():
        if origin != "local" and (folder / name / "domain.yaml").is_file():
            out.append(_ref(name, folder / name, project, origin))
    return out
