"""Domain packs: one file that carries a domain, its tasks and a manifest, installable on another machine.

A `.muapack` is a gzip'd tar holding `manifest.json`, `domain/...` (the folder with domain.yaml) and
`tasks/...` (its task files). The manifest lists every file with its sha256 and size, the domain's name,
version and spec version, and whether it carries Python handlers or MCP server commands.

Install treats the archive as hostile. It never calls tarfile's extract functions: each member is
checked (regular files and folders only; no absolute paths, `..`, links, devices or fifos; size limits
per member, in total and in count, and on PAX / GNU long-name headers before tarfile reads them), every
file must be listed in the manifest with a matching sha256, and nothing else may be present. Files are written one by one into a staging folder, the domain is
checked there without running any of its code (Python gold paths are not replayed, MCP servers are not
started), and only then moved into the user library. Tools that run code (python, mcp) stay disabled
until the user passes --trust (library.py: trust follows the install record written beside domain.yaml).
A pack named like a built-in domain installs only with --force. Staging folders are named NAME.PID.RANDOM,
so an install can remove the ones a killed install left behind.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .. import __version__
from ..errors import PackExists, PackNotInstalled, SpecError, UnsafePack, UsageError
from ..limits import quote
from ..spec.library import INSTALLED_MANIFEST, DomainRef, builtin_root, find_domain, user_library

PACK_FORMAT = 1
MANIFEST = "manifest.json"
SUFFIX = ".muapack"

# Generous for YAML, CSV and JSONL domains, small enough that a hostile pack cannot fill a disk.
MAX_MEMBER_BYTES = 64 * 1024 * 1024
MAX_TOTAL_BYTES = 256 * 1024 * 1024
MAX_MEMBERS = 10_000
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
MAX_ARCHIVE_BYTES = 256 * 1024 * 1024
# A PAX or GNU long-name header holds a path and a few attributes: a few KiB at most. tarfile reads such
# a header whole before looking at it, so its size is checked first (a gzip bomb there cost gigabytes).
MAX_HEADER_BYTES = 64 * 1024

_SKIP_NAMES = {"__pycache__", ".git", ".hg", ".svn", ".DS_Store", ".ipynb_checkpoints", INSTALLED_MANIFEST}
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_SHA = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class PackResult:
    path: Path
    manifest: dict[str, Any]


@dataclass
class InstallResult:
    name: str
    version: str
    root: Path
    manifest: dict[str, Any]
    replaced: str | None = None  # the version that was there before (with --force)
    unchanged: bool = False  # the same pack was already installed
    shadows_builtin: bool = False  # named like a built-in domain, which it now hides (with --force)


# ---------------------------------------------------------------- pack


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def collect_files(folder: Path, prefix: str, skip: Path | None = None) -> list[tuple[str, Path]]:
    out = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part in _SKIP_NAMES or part.endswith(".pyc") for part in rel.parts):
            continue
        if skip is not None and (path == skip or skip in path.parents):
            continue
        if path.is_symlink():
            raise UsageError(f"{path} is a symbolic link; packs carry regular files only (copy the file in instead)")
        if path.is_file():
            out.append((f"{prefix}/{rel.as_posix()}", path))
    return out


def pack_domain(name: str, output: Path | None = None) -> PackResult:
    """Check a domain (as install will) and write NAME-VERSION.muapack with its tasks and a manifest."""
    ref = find_domain(name)
    spec, tasks, facts = check_static(ref)
    d = spec.domain
    tasks_dir = ref.tasks_dir if ref.tasks_dir and ref.tasks_dir.is_dir() else None
    inner_tasks = ref.root / "tasks"
    files = collect_files(ref.root, "domain", skip=inner_tasks if inner_tasks.is_dir() else None)
    if tasks_dir is not None:
        files += collect_files(tasks_dir, "tasks")
    entries = []
    for arcname, path in files:
        data = path.read_bytes()
        entries.append({"path": arcname, "sha256": _sha256(data), "size": len(data)})
    manifest = {
        "format": PACK_FORMAT, "name": d.name, "version": d.version, "spec_version": d.spec_version,
        "description": d.description.strip(), "tasks": len(tasks), "created_by": f"muactl {__version__}",
        **facts, "files": entries,
    }
    output = Path(output) if output else Path(f"{d.name}-{d.version}{SUFFIX}")
    output.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    # fixed mtimes, owners and modes: packing the same folder twice gives the same bytes
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for arcname, data in [(MANIFEST, json.dumps(manifest, indent=2).encode())] + [
                (e["path"], p.read_bytes()) for e, (_, p) in zip(entries, files)]:
            info = tarfile.TarInfo(arcname)
            info.size, info.mode, info.mtime, info.uid, info.gid = len(data), 0o644, 0, 0, 0
            tar.addfile(info, io.BytesIO(data))
    with open(output, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as gz:
        gz.write(buf.getvalue())
    return PackResult(output, manifest)


def check_static(ref: DomainRef):
    """Load and check a domain and its tasks without running any of its code. Gold paths are replayed
    on a sandbox unless the domain declares Python tools (their handlers run only with --trust, so such
    a domain's tasks are checked without replay); MCP tools are not started, so their arguments are not
    checked here. Returns (spec, tasks, manifest facts)."""
    from ..spec import models as m
    from ..domain.open import open_domain
    from ..domain.validate import check_tasks

    opened = open_domain(ref, start_mcp=False)
    spec, tasks = opened.spec, opened.tasks
    tools = spec.domain.tools
    python_tools = sorted(n for n, t in tools.items() if isinstance(t, m.PythonTool))
    mcp_tools = sorted(n for n, t in tools.items() if isinstance(t, m.McpTool))
    py_files = any(ref.root.rglob("*.py"))
    problems = check_tasks(opened, replay=not python_tools)
    if problems:
        raise SpecError(problems)
    commands = sorted({" ".join(t.mcp.command) for t in tools.values() if isinstance(t, m.McpTool)})
    facts = {"has_python": bool(python_tools or py_files), "python_tools": python_tools,
             "mcp_tools": mcp_tools, "mcp_commands": commands}
    return spec, tasks, facts


# ---------------------------------------------------------------- install


def _member_path(name: str) -> PurePosixPath:
    """The member's name as a safe relative path, or UnsafePack saying why not."""
    if not name or "\x00" in name:
        raise UnsafePack(f"member {name!r} has an empty or invalid name")
    if "\\" in name:
        raise UnsafePack(f"member {name!r} contains a backslash; pack paths use '/'")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise UnsafePack(f"member {name!r} has an absolute path; refusing to install")
    path = PurePosixPath(name)
    if any(part == ".." for part in path.parts):
        raise UnsafePack(f"member {name!r} climbs out of the pack with '..' (path traversal); refusing to install")
    parts = [p for p in path.parts if p not in ("", ".")]
    if not parts:
        raise UnsafePack(f"member {name!r} has an empty path")
    return PurePosixPath(*parts)


def _kind(info: tarfile.TarInfo) -> str:
    if info.issym():
        return f"a symbolic link (to {info.linkname!r})"
    if info.islnk():
        return f"a hard link (to {info.linkname!r})"
    if info.ischr() or info.isblk():
        return "a device file"
    if info.isfifo():
        return "a fifo"
    return "a special file"


class _BoundedTarInfo(tarfile.TarInfo):
    """TarInfo that refuses an extended header (PAX, GNU long name or link) larger than
    MAX_HEADER_BYTES before tarfile reads it into memory."""

    def _check_header(self) -> None:
        if self.size > MAX_HEADER_BYTES:
            kind = "PAX" if self.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE) else "GNU long-name"
            raise UnsafePack(f"a {kind} header of {self.size} bytes is over the {MAX_HEADER_BYTES}-byte limit for "
                             "headers; refusing to install")

    def _proc_pax(self, tarfile):
        self._check_header()
        return super()._proc_pax(tarfile)

    def _proc_gnulong(self, tarfile):
        self._check_header()
        return super()._proc_gnulong(tarfile)


def read_pack(path: Path) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Open a pack and return (manifest, {member path: bytes}) after every safety check; writes nothing."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path} is not a file; give a .muapack made by `muactl pack`")
    if path.stat().st_size > MAX_ARCHIVE_BYTES:
        raise UnsafePack(f"{path} is {path.stat().st_size} bytes, over the {MAX_ARCHIVE_BYTES}-byte limit for packs")
    try:
        tar = tarfile.open(path, mode="r:*", tarinfo=_BoundedTarInfo)
    except (tarfile.TarError, OSError, EOFError) as e:
        raise UnsafePack(f"{path} is not a muactl pack (not a readable tar archive: {e})") from None
    files: dict[str, bytes] = {}
    total = 0
    with tar:
        try:
            for count, info in enumerate(tar, 1):
                if count > MAX_MEMBERS:
                    raise UnsafePack(f"{path} has more than {MAX_MEMBERS} members; refusing to install")
                rel = _member_path(info.name)
                if info.isdir():
                    continue
                if not info.isreg():
                    raise UnsafePack(f"member {info.name!r} is {_kind(info)}; packs may hold regular files only")
                if info.size > MAX_MEMBER_BYTES:
                    raise UnsafePack(f"member {info.name!r} is {info.size} bytes, over the {MAX_MEMBER_BYTES}-byte "
                                     "limit per file; refusing to install")
                total += info.size
                if total > MAX_TOTAL_BYTES:
                    raise UnsafePack(f"{path} unpacks to more than {MAX_TOTAL_BYTES} bytes; refusing to install")
                key = rel.as_posix()
                if key in files:
                    raise UnsafePack(f"member {key!r} appears twice in the pack; refusing to install")
                f = tar.extractfile(info)
                data = f.read(info.size + 1) if f is not None else b""
                if len(data) != info.size:
                    raise UnsafePack(f"member {key!r} does not hold the {info.size} bytes its header claims")
                files[key] = data
        except (tarfile.TarError, EOFError, OSError, gzip.BadGzipFile) as e:
            raise UnsafePack(f"{path} is damaged ({type(e).__name__}: {e}); download it again") from None
    raw = files.pop(MANIFEST, None)
    if raw is None:
        raise UnsafePack(f"{path} has no {MANIFEST}; it was not made by `muactl pack`")
    if len(raw) > MAX_MANIFEST_BYTES:
        raise UnsafePack(f"{MANIFEST} is over {MAX_MANIFEST_BYTES} bytes")
    manifest = _check_manifest(raw)
    listed = {e["path"]: e for e in manifest["files"]}
    extra = sorted(set(files) - set(listed))
    if extra:
        raise UnsafePack(f"the pack holds files its manifest does not list: {', '.join(extra[:5])}; refusing to install")
    missing = sorted(set(listed) - set(files))
    if missing:
        raise UnsafePack(f"the manifest lists files the pack does not hold: {', '.join(missing[:5])}; refusing to install")
    for key, data in files.items():
        entry = listed[key]
        if entry["size"] != len(data) or entry["sha256"] != _sha256(data):
            raise UnsafePack(f"checksum mismatch for {key}: the file was changed after packing; refusing to install")
    return manifest, files


def _check_manifest(raw: bytes) -> dict[str, Any]:
    from ..spec.models import SPEC_VERSION

    try:
        manifest = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise UnsafePack(f"{MANIFEST} is not valid JSON ({e})") from None
    if not isinstance(manifest, dict):
        raise UnsafePack(f"{MANIFEST} must be a JSON object")
    if manifest.get("format") != PACK_FORMAT:
        raise UnsafePack(f"pack format {manifest.get('format')!r} is not one this muactl reads ({PACK_FORMAT}); "
                         "upgrade muactl or re-pack the domain")
    name, version = manifest.get("name"), manifest.get("version")
    if not isinstance(name, str) or not _NAME.match(name):
        raise UnsafePack(f"{MANIFEST} has an invalid domain name {name!r}")
    if not isinstance(version, str) or not version or len(version) > 64:
        raise UnsafePack(f"{MANIFEST} has an invalid version {version!r}")
    spec_version = manifest.get("spec_version")
    if isinstance(spec_version, bool) or not isinstance(spec_version, int) or spec_version < 1:
        raise UnsafePack(f"{MANIFEST} has an invalid spec_version {quote(spec_version)}; it was not made by `muactl pack`")
    if spec_version > SPEC_VERSION:
        raise UnsafePack(f"the pack needs domain format {quote(spec_version)}; this muactl reads up to {SPEC_VERSION}. Upgrade muactl.")
    entries = manifest.get("files")
    if not isinstance(entries, list):
        raise UnsafePack(f"{MANIFEST} has no 'files' list")
    seen = set()
    for e in entries:
        if not (isinstance(e, dict) and isinstance(e.get("path"), str) and isinstance(e.get("sha256"), str)
                and _SHA.match(e["sha256"]) and isinstance(e.get("size"), int) and e["size"] >= 0):
            raise UnsafePack(f"{MANIFEST} has a malformed file entry: {str(e)[:120]}")
        rel = _member_path(e["path"]).as_posix()
        if rel != e["path"] or rel in seen or rel == MANIFEST:
            raise UnsafePack(f"{MANIFEST} lists {e['path']!r} in a non-canonical form or twice")
        top = rel.split("/", 1)[0]
        if top not in ("domain", "tasks") or "/" not in rel:
            raise UnsafePack(f"{MANIFEST} lists {rel!r}, outside domain/ and tasks/")
        if rel.startswith("domain/tasks/"):
            raise UnsafePack(f"{rel!r}: a pack's domain/ folder may not hold a tasks/ folder (tasks go in tasks/)")
        seen.add(rel)
    if "domain/domain.yaml" not in seen:
        raise UnsafePack("the pack has no domain/domain.yaml")
    manifest["has_python"] = bool(manifest.get("has_python")) or any(p.endswith(".py") for p in seen)
    return manifest


def installed_manifest(root: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((root / INSTALLED_MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def install_pack(path: Path, force: bool = False) -> InstallResult:
    """Verify a pack and install it into the user library. Runs none of the domain's code."""
    path = Path(path)
    manifest, files = read_pack(path)
    name, version = manifest["name"], manifest["version"]
    library = user_library()
    target = library / name
    archive_sha = _sha256(path.read_bytes())
    shadows = (builtin_root() / "domains" / name / "domain.yaml").is_file()
    replaced = None
    if target.exists() or target.is_symlink():
        old = installed_manifest(target)
        if old is not None and old.get("archive_sha256") == archive_sha:
            return InstallResult(name, version, target, old, unchanged=True, shadows_builtin=shadows)
        if old is None:
            what = f"a domain folder muactl did not install is at {target}"
        else:
            what = f"{name} {old.get('version', '?')} is already installed (from {old.get('source', '?')})"
        if not force:
            raise PackExists(f"{what}. Pass --force to replace it with {version}, or run `muactl uninstall {name}` first.")
        replaced = old.get("version", "?") if old else "unknown"
    if shadows and not force:
        raise PackExists(f"the pack is named {name}, like muactl's built-in domain {name}: installed, it would "
                         f"replace the built-in wherever `{name}` is named. Pass --force to install it anyway.")
    staging_root = library.parent / "staging"
    staging_root.mkdir(parents=True, exist_ok=True)
    _clean_staging(staging_root)
    stage = Path(tempfile.mkdtemp(prefix=f"{name}.{os.getpid()}.", dir=staging_root))
    try:
        root = stage / name
        for key, data in sorted(files.items()):
            top, rest = key.split("/", 1)
            dest = root / rest if top == "domain" else root / "tasks" / rest
            dest.parent.mkdir(parents=True, exist_ok=True)
            # O_EXCL: a path written twice (case-folding file systems) fails instead of overwriting
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        ref = DomainRef(name, root, root / "tasks", "installed", foreign="is a pack being installed")
        spec, _, facts = check_static(ref)
        if spec.domain.name != name or spec.domain.version != version:
            raise UnsafePack(f"the manifest says {name} {version} but domain.yaml says "
                             f"{spec.domain.name} {spec.domain.version}; refusing to install")
        record = dict(manifest, **facts, source=str(path.resolve()), source_name=path.name,
                      archive_sha256=archive_sha, installed_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        record["has_python"] = bool(manifest["has_python"] or facts["has_python"])
        (root / INSTALLED_MANIFEST).write_text(json.dumps(record, indent=2))
        library.mkdir(parents=True, exist_ok=True)
        if replaced is not None:
            trash = stage / ".old"
            os.replace(target, trash)
        os.replace(root, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return InstallResult(name, version, target, record, replaced=replaced, shadows_builtin=shadows)


def _clean_staging(staging_root: Path) -> None:
    """Remove staging folders that an install killed midway left behind (kill -9, a power cut). Each is
    named NAME.PID.RANDOM; one whose process is still running belongs to an install in progress."""
    for entry in staging_root.iterdir():
        parts = entry.name.split(".")
        pid = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
        if pid is not None and _running(pid):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):  # someone else's process: alive
        return True
    return True


def uninstall(name: str) -> Path:
    """Remove an installed pack from the user library (local and built-in domains are never touched)."""
    library = user_library()
    target = library / name
    if not _NAME.match(name) or not (target / "domain.yaml").is_file():
        installed = sorted(p.name for p in library.glob("*") if (p / "domain.yaml").is_file()) if library.is_dir() else []
        raise PackNotInstalled(f"no installed domain named '{name}' in {library} (installed: {', '.join(installed) or 'none'}). "
                               "Local domains in ./domains are plain folders: delete them yourself.")
    if target.is_symlink():
        target.unlink()
    else:
        shutil.rmtree(target)
    return target
