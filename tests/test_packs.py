"""Domain packs: pack -> install -> validate -> eval round trip, and a corpus of hostile archives that
install must refuse without writing anything into the library."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.share import packs
from muactl.cli import app
from muactl.errors import PackExists, PackNotInstalled, UnsafePack
from muactl.spec.library import find_domain, user_library
from muactl.env.sandbox import new_env

runner = CliRunner()


@pytest.fixture(autouse=True)
def clean_library(tmp_path, monkeypatch):
    monkeypatch.setenv("MUACTL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    yield


def _pack(project: Path, out: str = "clinic-0.1.0.muapack") -> Path:
    result = runner.invoke(app, ["pack", "domains/clinic", "-o", str(project / out)])
    assert result.exit_code == 0, result.output
    return project / out


def _members(pack: Path) -> dict[str, bytes]:
    with tarfile.open(pack) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}


def test_pack_is_deterministic_and_lists_every_file_with_its_checksum(project):
    first = _pack(project)
    data = first.read_bytes()
    second = _pack(project, "again.muapack")
    assert second.read_bytes() == data
    files = _members(first)
    manifest = json.loads(files.pop("manifest.json"))
    assert (manifest["name"], manifest["version"], manifest["spec_version"], manifest["has_python"]) == ("clinic", "0.1.0", 2, False)
    assert {e["path"] for e in manifest["files"]} == set(files)
    assert {"domain/domain.yaml", "domain/policy.md", "tasks/train.yaml", "tasks/test.yaml"} <= set(files)
    for e in manifest["files"]:
        assert e["sha256"] == hashlib.sha256(files[e["path"]]).hexdigest() and e["size"] == len(files[e["path"]])


def test_round_trip_pack_install_validate_eval_gives_the_same_result(project, tmp_path, monkeypatch):
    from muactl.eval.config import EvalConfig
    from muactl.eval.evaluate import run_eval

    pack = _pack(project)
    _, source = run_eval(EvalConfig(domain="clinic", split="all", trials=2))
    result = runner.invoke(app, ["install", str(pack)])
    assert result.exit_code == 0, result.output
    assert (user_library() / "clinic" / "domain.yaml").is_file()
    # away from the project, the name resolves to the installed pack
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    ref = find_domain("clinic")
    assert ref.origin == "installed" and ref.tasks_dir == user_library() / "clinic" / "tasks"
    ok = runner.invoke(app, ["validate", "clinic"])
    assert ok.exit_code == 0 and "installed" in ok.output, ok.output
    _, installed = run_eval(EvalConfig(domain="clinic", split="all", trials=2))
    keys = ["pass^1", "pass^2", "episodes", "avg_reward", "avg_turns", "tool_error_rate", "terminations"]
    assert {k: installed[k] for k in keys} == {k: source[k] for k in keys}
    assert installed["pass^1"] == 1.0
    listing = runner.invoke(app, ["domains", "--json"])
    row = next(r for r in json.loads(listing.output) if r["name"] == "clinic")
    assert row["origin"] == "installed" and row["version"] == "0.1.0" and row["pack"]["source_name"] == pack.name
    table = runner.invoke(app, ["domains"], env={"COLUMNS": "250"})
    assert "clinic-0.1.0.muapack" in table.output
    gone = runner.invoke(app, ["uninstall", "clinic"])
    assert gone.exit_code == 0 and not (user_library() / "clinic").exists()
    again = runner.invoke(app, ["uninstall", "clinic"])
    assert again.exit_code == 2 and "no installed domain named 'clinic'" in again.output


def test_install_never_replaces_another_version_silently(project):
    pack = _pack(project)
    packs.install_pack(pack)
    assert packs.install_pack(pack).unchanged  # the same pack again: nothing to do
    yaml_path = project / "domains" / "clinic" / "domain.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("version: 0.1.0", "version: 0.2.0"))
    newer = _pack(project, "clinic-0.2.0.muapack")
    with pytest.raises(PackExists, match=r"clinic 0.1.0 is already installed .*--force.*muactl uninstall clinic"):
        packs.install_pack(newer)
    result = runner.invoke(app, ["install", str(newer)])
    assert result.exit_code == 2 and "already installed" in result.output
    r = packs.install_pack(newer, force=True)
    assert (r.version, r.replaced) == ("0.2.0", "0.1.0")
    assert packs.installed_manifest(user_library() / "clinic")["version"] == "0.2.0"


def test_pack_with_python_handlers_installs_but_its_tools_need_trust(project, tmp_path):
    root = project / "domains" / "clinic"
    marker = tmp_path / "handler-ran"
    (root / "handlers.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\n"
        "def count_patients(db):\n    return db.execute('SELECT count(*) FROM patients').fetchone()[0]\n")
    text = (root / "domain.yaml").read_text()
    (root / "domain.yaml").write_text(text.replace("\n# How simulated users behave",
        "\n  count_patients:\n    description: Count patients.\n    python: handlers:count_patients\n\n# How simulated users behave"))
    pack = _pack(project)
    manifest = json.loads(_members(pack)["manifest.json"])
    assert manifest["has_python"] and manifest["python_tools"] == ["count_patients"]
    result = runner.invoke(app, ["install", str(pack)])
    assert result.exit_code == 0 and "--trust" in result.output
    assert not marker.exists()  # nothing ran at pack or install time
    from muactl.domain.open import open_domain

    (project / "domains" / "clinic" / "domain.yaml").unlink()  # make the name resolve to the installed copy
    env = new_env(open_domain("clinic", with_tasks=False).compiled)
    refused = env.call("count_patients", {})
    assert refused.error and "--trust" in refused.content and not marker.exists()
    trusted = new_env(open_domain("clinic", with_tasks=False, trust=True).compiled)
    assert trusted.call("count_patients", {}).content == "3" and marker.exists()


# ---------------------------------------------------------------- hostile archives


def _manifest_for(files: dict[str, bytes], **over) -> bytes:
    m = {"format": 1, "name": "clinic", "version": "0.1.0", "spec_version": 1, "has_python": False,
         "files": [{"path": p, "sha256": hashlib.sha256(d).hexdigest(), "size": len(d)} for p, d in files.items()]}
    m.update(over)
    return json.dumps(m).encode()


def _build(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for item in members:
            if isinstance(item, tarfile.TarInfo):
                tar.addfile(item)
            else:
                name, data = item
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def _good_files(project: Path) -> dict[str, bytes]:
    return {k: v for k, v in _members(_pack(project, "good.muapack")).items() if k != "manifest.json"}


def _special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, linkname
    return info


HOSTILE = {
    "traversal": (lambda f: [("manifest.json", _manifest_for(f)), *f.items(), ("../../evil.txt", b"x")], "path traversal"),
    "traversal-inside": (lambda f: [("manifest.json", _manifest_for(f)), *f.items(), ("domain/../../evil.txt", b"x")], "path traversal"),
    "absolute": (lambda f: [("manifest.json", _manifest_for(f)), *f.items(), ("/tmp/evil.txt", b"x")], "absolute path"),
    "symlink": (lambda f: [("manifest.json", _manifest_for(f)), *f.items(), _special("domain/data/link", tarfile.SYMTYPE, "/etc/passwd")], "symbolic link"),
    "hardlink": (lambda f: [("manifest.json", _manifest_for(f)), *f.items(), _special("domain/data/hard", tarfile.LNKTYPE, "/etc/passwd")], "hard link"),
    "device": (lambda f: [("manifest.json", _manifest_for(f)), *f.items(), _special("domain/data/dev", tarfile.CHRTYPE)], "device"),
    "fifo": (lambda f: [("manifest.json", _manifest_for(f)), *f.items(), _special("domain/data/pipe", tarfile.FIFOTYPE)], "fifo"),
    "checksum": (lambda f: [("manifest.json", _manifest_for(f)),
                            *[(k, v + b"\n# changed" if k == "domain/policy.md" else v) for k, v in f.items()]], "checksum mismatch"),
    "no-manifest": (lambda f: list(f.items()), "no manifest.json"),
    "manifest-lies": (lambda f: [("manifest.json", _manifest_for({**f, "domain/data/extra.csv": b"a,b\n"})), *f.items()],
                      "manifest lists files the pack does not hold"),
    "unlisted-extra": (lambda f: [("manifest.json", _manifest_for(f)), *f.items(), ("domain/run_me.py", b"import os\n")],
                       "does not list: domain/run_me.py"),
    "outside-layout": (lambda f: [("manifest.json", _manifest_for({**f, "evil/x": b"x"})), *f.items(), ("evil/x", b"x")],
                       "outside domain/ and tasks/"),
    "duplicate": (lambda f: [("manifest.json", _manifest_for(f)), *f.items(), ("domain/policy.md", b"other")], "appears twice"),
    "bad-json": (lambda f: [("manifest.json", b"{not json"), *f.items()], "not valid JSON"),
    "name-mismatch": (lambda f: [("manifest.json", _manifest_for(f, name="other")), *f.items()], "domain.yaml says clinic"),
    "future-spec": (lambda f: [("manifest.json", _manifest_for(f, spec_version=99999999999999999999999)), *f.items()],
                    "needs domain format 99999999999999999999999; this muactl reads up to 2. Upgrade muactl."),
    "bool-spec": (lambda f: [("manifest.json", _manifest_for(f, spec_version=True)), *f.items()], "invalid spec_version True"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archive_is_refused_and_nothing_is_written(project, tmp_path, case):
    build, message = HOSTILE[case]
    pack = _build(tmp_path / f"{case}.muapack", build(_good_files(project)))
    result = runner.invoke(app, ["install", str(pack)])
    assert result.exit_code == 2, result.output
    assert message in result.output.replace("\n", " ")
    library = user_library()
    assert not library.exists() or not any(library.iterdir())
    assert not (tmp_path / "evil.txt").exists() and not Path("/tmp/evil.txt").exists()
    staging = library.parent / "staging"
    assert not staging.exists() or not any(staging.iterdir())


def test_oversized_member_and_total_are_refused(project, tmp_path, monkeypatch):
    files = _good_files(project)
    big = {**files, "domain/data/big.csv": b"0" * 4096}
    pack = _build(tmp_path / "big.muapack", [("manifest.json", _manifest_for(big)), *big.items()])
    monkeypatch.setattr(packs, "MAX_MEMBER_BYTES", 2048)
    with pytest.raises(UnsafePack, match="over the 2048-byte limit per file"):
        packs.install_pack(pack)
    monkeypatch.setattr(packs, "MAX_MEMBER_BYTES", 1 << 20)
    monkeypatch.setattr(packs, "MAX_TOTAL_BYTES", 4096)
    with pytest.raises(UnsafePack, match="unpacks to more than 4096 bytes"):
        packs.install_pack(pack)


def test_not_an_archive_and_missing_file(tmp_path):
    junk = tmp_path / "junk.muapack"
    junk.write_bytes(gzip.compress(b"hello") + b"garbage")
    with pytest.raises(UnsafePack, match="not a muactl pack|damaged"):
        packs.install_pack(junk)
    result = runner.invoke(app, ["install", str(tmp_path / "nope.muapack")])
    assert result.exit_code == 2 and "is not a file" in result.output
    with pytest.raises(PackNotInstalled):
        packs.uninstall("clinic")


# ---------------------------------------------------------------- trust and containment


def test_trust_follows_the_install_record_not_how_the_domain_is_named(project, tmp_path, monkeypatch):
    """An installed pack's MCP command and Python tools stay off without --trust when the domain is
    named by its folder's path (absolute, or ./name from inside the library), or copied elsewhere."""
    import shutil
    import sys

    from muactl.domain.open import open_domain

    marker = tmp_path / "command-ran"
    root = project / "domains" / "clinic"
    (root / "handlers.py").write_text("def count_patients(db):\n    return 3\n")
    text = (root / "domain.yaml").read_text()
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')"]
    (root / "domain.yaml").write_text(text.replace("\n# How simulated users behave",
        "\n  count_patients:\n    description: Count patients.\n    python: handlers:count_patients\n"
        f"  lookup:\n    mcp: {{command: {json.dumps(command)}, tool: find_patient_by_phone}}\n"
        "\n# How simulated users behave"))
    assert runner.invoke(app, ["install", str(_pack(project))]).exit_code == 0
    installed = user_library() / "clinic"
    copy = tmp_path / "copied" / "clinic"
    shutil.copytree(installed, copy)
    monkeypatch.chdir(user_library())
    for name in (str(installed), "./clinic", str(copy)):
        assert find_domain(name).origin == "installed", name
        r = runner.invoke(app, ["tools", name])
        assert not marker.exists(), f"{name}: the pack's MCP command ran without --trust"
        r = runner.invoke(app, ["call", name, "count_patients"])
        assert r.exit_code == 3 and "--trust" in r.output, r.output
    r = runner.invoke(app, ["validate", "./clinic"])
    assert not marker.exists()
    from muactl.errors import SpecError

    with pytest.raises(SpecError, match="could not list the server's tools"):  # with trust it starts (and is no server)
        open_domain("./clinic", with_tasks=False, trust=True)
    assert marker.exists()


def _clinic_with_an_mcp_command(project: Path, marker: Path) -> None:
    """The scaffolded clinic plus an mcp tool whose command, once started, leaves `marker` behind."""
    import sys

    root = project / "domains" / "clinic"
    command = [sys.executable, "-c", f"open({str(marker)!r}, 'w').write('ran')"]
    text = (root / "domain.yaml").read_text()
    (root / "domain.yaml").write_text(text.replace("\n# How simulated users behave",
        f"\n  lookup:\n    mcp: {{command: {json.dumps(command)}, tool: find_patient_by_phone}}\n"
        "\n# How simulated users behave"))


def test_trust_follows_the_folders_contents_on_every_lookup(project, tmp_path):
    """Issue 25.4: a pack unpacked by hand (tar xzf), or an installed pack copied into ./domains (under its
    own name, another name, or a built-in's), is someone else's code: no command starts its MCP server
    without --trust, by path or by name, and validate and call say how to trust it. Before the fix a
    name found in ./domains was 'local' without a look inside, and a path to an unpacked pack was a plain
    folder: both started the command."""
    import shutil

    from muactl.spec.library import INSTALLED_MANIFEST

    marker = tmp_path / "command-ran"
    _clinic_with_an_mcp_command(project, marker)
    pack = _pack(project)
    assert runner.invoke(app, ["install", str(pack)]).exit_code == 0
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    with tarfile.open(pack) as tar:
        tar.extractall(unpacked, filter="data")
    shutil.rmtree(project / "domains" / "clinic")
    for name in ("clinic", "clinic-copy", "bank"):  # bank shadows the built-in
        shutil.copytree(user_library() / "clinic", project / "domains" / name)
        assert (project / "domains" / name / INSTALLED_MANIFEST).is_file()
    assert find_domain(str(unpacked / "domain")).tasks_dir == unpacked / "tasks"
    for name in (str(unpacked / "domain"), "clinic", "clinic-copy", "bank", "./domains/bank"):
        assert find_domain(name).untrusted, name
        r = runner.invoke(app, ["validate", name])
        assert r.exit_code == 0, r.output
        assert "not started" in r.output and "re-run with --trust" in r.output, r.output
        for args in (["tools", name], ["call", name, "lookup", "{}"], ["call", name, "list_appointments", '{"patient_id": "p1"}'],
                     ["eval", name, "--agent", "oracle", "--split", "train", "--max-turns", "3"]):
            r = runner.invoke(app, args)
            assert not marker.exists(), f"{args}: the pack's MCP command ran without --trust"
            if args[0] == "tools":
                assert "lookup are shown without their parameters" in r.output and "--trust" in r.output, r.output
            assert r.exit_code == (3 if args[2:3] == ["lookup"] else 0), (args, r.output)
    from muactl.domain.open import open_domain
    from muactl.errors import SpecError

    opened = open_domain("clinic-copy", with_tasks=False)
    refused = new_env(opened.compiled)
    import asyncio

    answer = asyncio.run(opened.compiled.players["mcp"](opened.compiled.tools["lookup"], {}, refused))
    assert answer.error and "--trust" in answer.content and "install record" in answer.content
    assert not marker.exists()
    with pytest.raises(SpecError, match="could not list the server's tools"):  # with trust it starts (and is no server)
        open_domain(str(unpacked / "domain"), with_tasks=False, trust=True)
    assert marker.exists()


@pytest.mark.parametrize("key,value", [
    ("policy", "/etc/hostname.txt"),
    ("policy", "../../../secret.txt"),
    ("seed", "{patients: ../../secret-rows.csv, appointments: data/appointments.csv}"),
    ("seed", "../../"),
])
def test_files_outside_the_domain_folder_are_refused(project, tmp_path, key, value):
    """A local domain gets an error naming the key; a pack referring outside itself is refused at install."""
    from muactl.errors import SpecError
    from muactl.domain.open import open_domain

    (project / "secret.txt").write_text("the secret\n")
    (project / "secret-rows.csv").write_text("patient_id,name,phone\np9,Eve,5550199\n")
    yaml_path = project / "domains" / "clinic" / "domain.yaml"
    text = yaml_path.read_text()
    if key == "policy":
        text = text.replace("policy: policy.md", f"policy: {value}")
    else:
        text = text.replace("  seed: data/", f"  seed: {value}")
    assert text != yaml_path.read_text()
    yaml_path.write_text(text)
    with pytest.raises(SpecError, match="outside the domain's folder") as err:
        open_domain("clinic")
    assert any(p.key.startswith("policy" if key == "policy" else "database.seed") for p in err.value.problems), err.value
    r = runner.invoke(app, ["validate", "clinic"])
    assert r.exit_code == 2 and "outside the domain's folder" in r.output and "the secret" not in r.output


def test_a_pack_whose_policy_points_outside_is_refused_at_install(project, tmp_path):
    files = _good_files(project)
    files["domain/domain.yaml"] = files["domain/domain.yaml"].replace(b"policy: policy.md", b"policy: ../../../../../etc/x.txt")
    pack = _build(tmp_path / "out.muapack", [("manifest.json", _manifest_for(files)), *files.items()])
    r = runner.invoke(app, ["install", str(pack)])
    assert r.exit_code == 2 and "outside the domain's folder" in r.output, r.output
    assert not (user_library() / "clinic").exists()


@pytest.mark.parametrize("kind", ["pax", "gnu"])
def test_oversized_tar_headers_are_refused_before_they_are_read(project, tmp_path, kind, monkeypatch):
    import tracemalloc

    files = _good_files(project)
    pack = tmp_path / f"{kind}.muapack"
    with tarfile.open(pack, "w:gz", format=tarfile.PAX_FORMAT if kind == "pax" else tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("manifest.json")
        data = _manifest_for(files)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        bomb = tarfile.TarInfo("domain/" + "a" * 4_000_000 if kind == "gnu" else "domain/data/x.csv")
        if kind == "pax":
            bomb.pax_headers = {"comment": "x" * 4_000_000}
        tar.addfile(bomb, io.BytesIO(b""))
    tracemalloc.start()
    with pytest.raises(UnsafePack, match=r"header of \d+ bytes is over the 65536-byte limit"):
        packs.install_pack(pack)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2_000_000  # the 4 MB header was never read into memory


def test_a_pack_named_like_a_built_in_needs_force(project, tmp_path):
    files = _good_files(project)
    renamed = {k: v.replace(b"name: clinic", b"name: bank") for k, v in files.items()}
    manifest = _manifest_for(renamed, name="bank")
    pack = _build(tmp_path / "bank-0.1.0.muapack", [("manifest.json", manifest), *renamed.items()])
    r = runner.invoke(app, ["install", str(pack)])
    assert r.exit_code == 2 and "built-in domain bank" in r.output and "--force" in r.output, r.output
    assert not (user_library() / "bank").exists()
    r = runner.invoke(app, ["install", str(pack), "--force"])
    assert r.exit_code == 0 and "hides the built-in domain bank" in r.output, r.output
    assert find_domain("bank").origin == "installed"


def test_install_cleans_staging_folders_an_interrupted_install_left(project):
    staging = user_library().parent / "staging"
    stale = [staging / "clinic-abc123", staging / "clinic.999999999.xyz"]  # old naming; a pid that is gone
    live = staging / f"clinic.{__import__('os').getpid()}.live"  # an install in progress in this process
    for folder in stale + [live]:
        (folder / "clinic").mkdir(parents=True)
    packs.install_pack(_pack(project))
    assert not any(f.exists() for f in stale) and live.exists()


def test_shadowing_order_is_local_then_installed_then_builtin(project, tmp_path):
    """The order the README documents: ./domains beats the installed library, which beats the built-ins."""
    packs.install_pack(_pack(project))  # clinic: local and installed
    bank = project / "bank-pack.muapack"
    assert runner.invoke(app, ["pack", "bank", "-o", str(bank)]).exit_code == 0
    packs.install_pack(bank, force=True)  # bank: installed and built-in (a built-in's name needs force)
    assert find_domain("clinic").origin == "local"
    assert find_domain("bank").origin == "installed"
    assert find_domain("retail").origin == "builtin"
    rows = json.loads(runner.invoke(app, ["domains", "--json"]).output)
    assert [(r["origin"], r["shadowed"]) for r in rows if r["name"] == "clinic"] == [("local", False), ("installed", True)]
    assert [(r["origin"], r["shadowed"]) for r in rows if r["name"] == "bank"] == [("installed", False), ("builtin", True)]


# ---------------------------------------------------------------- packs whose content would hang install (issue 17)

LAUGHS = "".join(f"# x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10) if i else ', '.join(['a'] * 10)}]\n" for i in range(9))
RUNAWAY_TASK = """
- id: runaway-assertion
  user: {reason: Nothing.}
  expect:
    assert:
      - query: WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) > 0 FROM c
"""


@pytest.mark.timeout(120, method="thread")  # before the limits: laughs at 9 levels took 2.2 GB, the runaway never ended
@pytest.mark.parametrize("case, message", [
    ("laughs", "train.yaml:5:45: YAML limit exceeded: the document holds more than 100,000 values"),
    ("runaway", "ran past the budget of 10,000,000 SQLite steps"),
])
def test_a_pack_whose_content_would_hang_install_is_refused(project, tmp_path, case, message):
    files = _good_files(project)
    train = files["tasks/train.yaml"].decode()
    if case == "laughs":  # uncommented, the anchors sit at the top of the task list
        train = LAUGHS.replace("# ", "") + "tasks: *x8\n"
    else:
        train += RUNAWAY_TASK
    files["tasks/train.yaml"] = train.encode()
    pack = _build(tmp_path / f"{case}.muapack", [("manifest.json", _manifest_for(files)), *files.items()])
    result = runner.invoke(app, ["install", str(pack)])
    assert result.exit_code == 2 and message in result.output.replace("\n", " "), result.output
    assert not user_library().exists() or not any(user_library().iterdir())
