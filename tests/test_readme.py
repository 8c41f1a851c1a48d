"""The README, executed: every command in its ```bash blocks is either run here, in a scratch project
folder with its own HOME, library and runs (offline: no API key, no model hub), or named in SKIPPED with
the reason it cannot run offline or in seconds. A README command that is neither fails
`test_every_readme_command_is_run_or_skipped_for_a_reason`, so the README cannot drift from what runs.

The tour runs in order (later commands use what earlier ones made). Placeholders (RUN_ID, [--json],
[--episode N]) get real values; the one command that needs an OpenAI-compatible server gets the local
fake one (tests/fakes/openai_server.py: real HTTP, fake model)."""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from muactl.cli import app
from tests.fakes.openai_server import FakeOpenAI, Reply

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()

# README command (its start) -> why it does not run here
SKIPPED = {
    "make demo": "the 15-minute quickstart (timed by hand, see the README)",
    "make test": "this suite",
    "make lint": "ruff, not muactl",
    "make bench": "benchmarks",
    "source .venv/bin/activate": "the test runs muactl in-process",
    "mkdir -p ~/my-project && cd ~/my-project": "the scratch project folder is the test's working directory",
    "muactl eval bank --agent hf:tiny": "runs in the slow test_readme_local_model_eval",
    "muactl train sft model=smollm2-135m": "downloads SmolLM2 from the package index and trains for minutes",
    "muactl train grpo": "trains from a checkpoint for minutes (tests/test_grpo.py runs GRPO on tiny)",
    "muactl train examples/quickstart.yaml": "the quickstart (make demo)",
    "muactl chat": "needs an interactive terminal (tests/test_chat.py drives the app)",
    "muactl synth --from-chats": "needs a chat run (tests/test_chat.py)",
    "muactl mcp serve": "runs in the slow test_readme_mcp",
    "muactl serve openenv": "a server that runs until stopped (tests/test_openenv.py drives it with OpenEnv's client)",
    "python examples/gym_loop.py": "tests/test_gym.py runs the example's main()",
    "cd out/verl-retail && MODEL=Qwen/Qwen3-8B ./launch.sh": "submits to a Ray cluster",
}


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = re.sub(r"\s+#\s.*$", "", line).strip()
            if line:
                out.append(line)
    return out


def _skipped(line: str) -> bool:
    return any(line.startswith(prefix) for prefix in SKIPPED)


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """An empty project folder as the working directory, with its own HOME, library, cache and runs."""
    project = tmp_path / "my-project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MUACTL_HOME", str(tmp_path / "home" / "muactl"))
    monkeypatch.delenv("MUACTL_RUNS", raising=False)
    monkeypatch.setenv("MUACTL_NO_PROGRESS", "1")
    for key in ("OPENAI_API_KEY", "HOSTED_VLLM_API_BASE"):
        monkeypatch.delenv(key, raising=False)
    return project


def run(line: str, project: Path, expect_exit: int = 0) -> str:
    """One README line: `muactl ...` commands joined by &&, an optional `> file` on the last one."""
    output = ""
    for part in line.split("&&"):
        args = shlex.split(part)
        target = None
        if ">" in args:
            args, target = args[: args.index(">")], args[args.index(">") + 1]
        assert args[0] == "muactl", line
        r = runner.invoke(app, args[1:], env={"COLUMNS": "200"})
        output += r.output
        if r.exit_code != 0:
            break
        if target:
            (project / target).write_text(r.stdout)
    assert r.exit_code == expect_exit, f"{line}\nexit {r.exit_code}:\n{output[-3000:]}"
    return output


def _latest_run(project: Path, kind: str) -> str:
    return sorted(p.name for p in (project / "runs").iterdir() if f"-{kind}-" in p.name)[-1]


def test_every_readme_command_is_run_or_skipped_for_a_reason():
    handled = set(TOUR) | set(DYNAMIC) | set(SHARING) | {SEEDS, EXPORT}
    missing = [line for line in readme_commands() if not _skipped(line) and line not in handled]
    assert not missing, "README commands neither run by tests/test_readme.py nor in SKIPPED:\n" + "\n".join(missing)
    stale = [line for line in handled if line not in readme_commands()]
    assert not stale, "commands this test runs that the README no longer has:\n" + "\n".join(stale)


# README line -> (expected exit code, text the output must contain). In README order.
TOUR = {
    "muactl init clinic": (0, "wrote domains/clinic/domain.yaml"),
    "muactl validate clinic": (0, "ok: clinic 0.1.0 (local"),
    "muactl domains": (0, "clinic"),
    "muactl tools retail [--json]": (0, "find_user_id_by_email"),
    "muactl call retail find_user_id_by_email '{\"email\": \"maya.novak34@example.com\"}'": (0, "maya_novak_5934"),
    "muactl schema > domain.schema.json": (0, ""),
    "muactl eval retail --agent oracle --user scripted": (0, "1.000"),
    # offline there is no key: the command stops before any episode and says why
    "muactl eval retail --agent openai/gpt-4o-mini --user openai/gpt-4o-mini --trials 4 --concurrency 16":
        (2, "OPENAI_API_KEY is not set"),
    "muactl eval bank --agent hosted_vllm/my-ckpt --api-base http://127.0.0.1:8000/v1 --user scripted": (0, "pass^1"),
    "muactl eval --resume RUN_ID": (0, "pass^1"),
    "muactl runs": (0, "finished"),
    "muactl runs show RUN_ID [--episode N]": (0, "reward breakdown"),
    "muactl synth bank --agent oracle --user scripted --trials 8 -o data/bank-sft.jsonl": (0, "duplicates dropped"),
    "muactl data show data/bank-sft.jsonl --index 3": (0, "agent:"),
    "muactl report RUN_ID": (0, "report: "),
    "muactl train sft model=Qwen/Qwen3-8B model.thinking=true --cfg": (0, "thinking: true"),  # Models: thinking
}


def test_readme_tour(scratch):
    run_id = None
    with FakeOpenAI(lambda body: Reply(content="I cannot help with that. ###STOP###")) as server:
        for line, (code, needle) in TOUR.items():
            cmd = line.replace("http://127.0.0.1:8000/v1", server.base)  # the local server the README means
            if "RUN_ID" in cmd:
                cmd = cmd.replace("RUN_ID", run_id).replace("[--episode N]", "--episode 1")
            if "[--json]" in cmd:
                run(cmd.replace(" [--json]", ""), scratch)
                cmd = cmd.replace("[--json]", "--json")
            out = run(cmd, scratch, code)
            assert needle in out, f"{line}: {needle!r} not in:\n{out[-2000:]}"
            if line.startswith("muactl eval retail --agent oracle"):
                run_id = _latest_run(scratch, "eval")
    schema = json.loads((scratch / "domain.schema.json").read_text())
    assert "tools" in schema["properties"]
    assert (scratch / "runs" / run_id / "report" / "index.html").is_file()
    # the tour wrote only into the project: the built-in folders are as the checkout has them
    assert sorted(p.name for p in (ROOT / "domains").iterdir()) == ["bank", "retail"]


DYNAMIC = {
    "muactl synth bank --tasks template:refuse-overdraft,refuse-close-nonempty --contrast --n 20 --db random --trials 1 -o "
    "data/bank-pairs.jsonl": (0, "kept 20 of 20"),
    "muactl tasks generate retail --template cancel-pending --n 100 --seed 1 -o tasks/retail/gen-train.yaml":
        (0, "wrote 100 tasks to tasks/retail/gen-train.yaml"),
    "muactl tasks generate bank --all-templates --n 200 --seed 9000 --db-seed 9000 --split test -o tasks/bank/gen-test.yaml":
        (0, "tasks to tasks/bank/gen-test.yaml"),
    "muactl validate retail": (0, "templates checked"),
    "muactl eval bank --tasks template:all --n 100 --db random --seed 7 --agent oracle --user scripted": (0, "1.000"),
    "muactl eval --resume RUN_ID --n 200": (0, "1.000"),  # the run above
}


@pytest.mark.slow
def test_readme_dynamic_data(scratch):
    before = sorted(p.name for p in (ROOT / "tasks" / "bank").iterdir())
    for line, (code, needle) in DYNAMIC.items():
        out = run(line.replace("RUN_ID", _latest_run(scratch, "eval")) if "RUN_ID" in line else line, scratch, code)
        assert needle in out, f"{line}: {needle!r} not in:\n{out[-2000:]}"
    with sqlite3.connect(scratch / "runs" / _latest_run(scratch, "eval") / "runs.sqlite") as db:
        assert db.execute("SELECT count(*) FROM episodes").fetchone()[0] == 200  # grown, not a second run
    assert (scratch / "tasks" / "bank" / "gen-test.yaml").is_file()  # in the project...
    assert sorted(p.name for p in (ROOT / "tasks" / "bank").iterdir()) == before  # ...not in the built-ins


SHARING = {
    "muactl pack domains/clinic -o clinic-0.1.0.muapack": (0, "packed clinic 0.1.0"),
    "muactl install clinic-0.1.0.muapack": (0, "installed clinic 0.1.0"),
    "muactl domains": (0, "clinic-0.1.0.muapack"),
    "muactl validate clinic && muactl eval clinic --agent oracle": (0, "1.000"),
    "muactl uninstall clinic": (0, "removed"),
}


def test_readme_sharing(scratch):
    run("muactl init clinic", scratch)
    for line, (code, needle) in SHARING.items():
        out = run(line, scratch, code)
        assert needle in out, f"{line}: {needle!r} not in:\n{out[-2000:]}"
        if line.startswith("muactl validate clinic"):
            assert "(local" in out  # the project's copy shadows the installed one, as documented


EXPORT = "muactl export verl retail -o out/verl-retail --user openai/gpt-4o-mini --nnodes 2"
SEEDS = "python -m muactl.seeds retail --scale 10 -o /tmp/retail10"


@pytest.mark.slow
def test_readme_export_and_seeds(scratch):
    pytest.importorskip("pyarrow")
    out = run(EXPORT, scratch)
    assert "train.parquet" in out and (scratch / "out" / "verl-retail" / "launch.sh").is_file()
    import subprocess
    import sys

    args = shlex.split(SEEDS.replace("/tmp/retail10", str(scratch / "retail10")))
    res = subprocess.run([sys.executable, *args[1:]], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert (scratch / "retail10" / "users.jsonl").is_file()


@pytest.mark.slow
def test_readme_local_model_eval(scratch):
    [line] = [c for c in readme_commands() if c.startswith("muactl eval bank --agent hf:tiny")]
    out = run(line, scratch)
    assert "pass^1" in out


@pytest.mark.slow
def test_readme_mcp(scratch):
    """`muactl mcp serve retail` (stdio) answers an MCP client's tool listing."""
    pytest.importorskip("mcp")
    import asyncio
    import sys

    from mcp import Client, StdioServerParameters

    [line] = [c for c in readme_commands() if c == "muactl mcp serve retail"]

    async def go():
        params = StdioServerParameters(command=sys.executable, args=["-m", *shlex.split(line)], cwd=str(scratch))
        async with Client(params) as c:
            return {t.name for t in (await c.list_tools()).tools}

    assert "find_user_id_by_email" in asyncio.run(go())
