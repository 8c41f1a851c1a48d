"""MCP both ways: `muactl mcp serve` tested with the SDK's own client (stdio and streamable HTTP), and
tools of kind `mcp` discovered from, and played against, `muactl mcp serve` as the external server."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters

from muactl.cli import app
from muactl.errors import SpecError
from muactl.share.mcp_server import STATE_TOOL, build_server
from muactl.domain.open import open_domain
from tests.fakes import free_port
from muactl.env.sandbox import new_env

runner = CliRunner()


def _serve_cmd(domain: str | Path) -> list[str]:
    return [sys.executable, "-m", "muactl", "mcp", "serve", str(domain)]


def _text(result) -> str:
    return result.content[0].text


# ---------------------------------------------------------------- MCP out


def test_stdio_server_lists_every_agent_tool_with_schema_and_runs_them(project, clinic):
    async def go():
        params = StdioServerParameters(command=sys.executable, args=_serve_cmd("clinic")[1:], cwd=str(project))
        async with Client(params) as c:
            listed = {t.name: t for t in (await c.list_tools()).tools}
            assert set(listed) == {t.name for t in clinic.compiled.agent_tools()} | {STATE_TOOL}
            for tool in clinic.compiled.agent_tools():
                assert listed[tool.name].description == tool.description
                assert listed[tool.name].input_schema == tool.parameters
            before = _text(await c.call_tool(STATE_TOOL, {}))
            assert _text(await c.call_tool("find_patient_by_phone", {"phone": "5550102"})) == "p2"
            bad = await c.call_tool("find_patient_by_phone", {"phone": "12"})
            assert bad.is_error and "invalid arguments" in _text(bad)
            done = await c.call_tool("cancel_appointment", {"appointment_id": "a3"})
            assert not done.is_error and json.loads(_text(done))["status"] == "cancelled"
            after = _text(await c.call_tool(STATE_TOOL, {}))
            # the same hash muactl computes for that state
            env = new_env(clinic.compiled)
            assert before == env.state_hash()
            env.call("cancel_appointment", {"appointment_id": "a3"})
            assert after == env.state_hash() != before

    asyncio.run(go())


def test_http_server_gives_each_session_its_own_sandbox(project):
    port = free_port()
    proc = subprocess.Popen(_serve_cmd("clinic") + ["--http", f"127.0.0.1:{port}"], cwd=project,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(150):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()
                time.sleep(0.1)

        async def go():
            url = f"http://127.0.0.1:{port}/mcp"
            async with Client(url) as a, Client(url) as b:
                fresh = _text(await b.call_tool(STATE_TOOL, {}))
                await a.call_tool("cancel_appointment", {"appointment_id": "a3"})
                changed = _text(await a.call_tool(STATE_TOOL, {}))
                assert changed != fresh
                assert _text(await b.call_tool(STATE_TOOL, {})) == fresh  # b never sees a's write
                again = await a.call_tool("cancel_appointment", {"appointment_id": "a3"})
                assert again.is_error and "not scheduled" in _text(again)  # a's state persists in its session
            async with Client(url) as c:  # a new session starts from the seed data
                assert _text(await c.call_tool(STATE_TOOL, {})) == fresh

        asyncio.run(go())
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.slow  # two processes start: ~25 s on a loaded 2-core machine
def test_the_readmes_client_snippet_runs_against_muactls_http_server(in_tmp):
    """README "MCP, both ways": its Python client (the installed SDK's streamable_http_client and is_error),
    run as it is printed but for the port, against `muactl mcp serve retail --http`."""
    import re

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("### MCP, both ways", 1)[1].split("\n### ", 1)[0]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    port = free_port()
    (in_tmp / "client.py").write_text(snippet.replace("127.0.0.1:8765", f"127.0.0.1:{port}"))
    proc = subprocess.Popen(_serve_cmd("retail") + ["--http", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    try:
        _wait_for(port, proc)
        out = subprocess.run([sys.executable, "client.py"], capture_output=True, text=True, timeout=120)
    finally:
        proc.terminate()
        proc.wait(10)
    assert out.returncode == 0, out.stderr
    listed, found, wrong, digest = out.stdout.splitlines()
    assert "find_user_id_by_email" in listed and STATE_TOOL in listed
    assert found == "False maya_novak_5934"
    assert wrong.startswith("True Error: invalid arguments for get_order_details")
    assert digest == new_env(open_domain("retail", with_tasks=False).compiled).state_hash()  # a fresh sandbox's


def _wait_for(port: int, proc) -> None:
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port}")


def test_in_process_sessions_are_isolated(clinic):
    server = build_server(clinic)

    async def go():
        async with Client(server, mode="legacy") as a, Client(server, mode="legacy") as b:
            await a.call_tool("cancel_appointment", {"appointment_id": "a3"})
            assert _text(await a.call_tool(STATE_TOOL, {})) != _text(await b.call_tool(STATE_TOOL, {}))
            unknown = await a.call_tool("drop_tables", {})
            assert unknown.is_error and "unknown tool" in _text(unknown)

    asyncio.run(go())


def test_serve_bad_bind_is_a_clean_error(project):
    result = runner.invoke(app, ["mcp", "serve", "clinic", "--http", "nonsense"])
    assert result.exit_code == 2 and "HOST:PORT" in result.output


# ---------------------------------------------------------------- MCP in


def write_frontdesk(project: Path, command: list[str], tool: str = "find_patient_by_phone") -> Path:
    """A domain whose lookups are MCP tools served by `muactl mcp serve clinic`, plus one local write."""
    root = project / "domains" / "frontdesk"
    root.mkdir(parents=True)
    domain = {
        "name": "frontdesk", "description": "A call centre that looks patients up in the clinic's system.",
        "policy": "Look the caller up before answering. Log every call with log_call.",
        "database": {"tables": {"calls": {"columns": {"call_id": "text", "patient_id": "text"}, "primary_key": "call_id"}},
                     "seed": {"calls": []}},
        "tools": {
            "lookup_patient": {"mcp": {"command": command, "tool": tool}},
            "patient_appointments": {"mcp": {"command": command, "tool": "list_appointments"},
                                     "description": "The caller's appointments."},
            "log_call": {"description": "Log a call.", "params": {"call_id": {"type": "string"}, "patient_id": {"type": "string"}},
                         "writes": ["INSERT INTO calls VALUES (:call_id, :patient_id)"], "message": "Logged."},
        },
    }
    (root / "domain.yaml").write_text(yaml.safe_dump(domain, sort_keys=False))
    tasks = project / "tasks" / "frontdesk"
    tasks.mkdir(parents=True)
    (tasks / "test.yaml").write_text(yaml.safe_dump([{
        "id": "which-doctor",
        "user": {"reason": "You want to know which doctor your appointment is with.", "known": "Your phone is 5550102."},
        "expect": {"actions": [{"lookup_patient": {"phone": "5550102"}}, {"patient_appointments": {"patient_id": "p2"}},
                               {"log_call": {"call_id": "c1", "patient_id": "p2"}}],
                   "outputs": ["Dr. Lind"],
                   "assert": [{"query": "SELECT count(*) FROM calls", "equals": 1}]},
    }], sort_keys=False))
    return root


def test_mcp_tools_take_name_schema_and_description_from_the_server(project):
    write_frontdesk(project, _serve_cmd(project / "domains" / "clinic"))
    result = runner.invoke(app, ["validate", "frontdesk"])
    assert result.exit_code == 0, result.output
    opened = open_domain("frontdesk")
    lookup = opened.compiled.tools["lookup_patient"]
    assert lookup.parameters["properties"]["phone"]["pattern"] == "^\\d{7}$"
    assert lookup.description == "Find a patient's id from their phone number."  # from the server
    assert opened.compiled.tools["patient_appointments"].description == "The caller's appointments."  # overridden
    assert lookup.argument_errors({"phone": "1"})  # the server's schema is enforced before any call


def test_validate_reports_a_tool_the_server_does_not_have(project):
    write_frontdesk(project, _serve_cmd(project / "domains" / "clinic"), tool="find_patient_by_fone")
    with pytest.raises(SpecError) as e:
        open_domain("frontdesk")
    (problem,) = e.value.problems
    assert problem.file.endswith("domain.yaml") and problem.key == "tools.lookup_patient.mcp.tool"
    assert "did you mean 'find_patient_by_phone'" in problem.message


def test_validate_reports_a_server_that_does_not_start(project):
    write_frontdesk(project, [sys.executable, "-c", "import sys; sys.exit(3)"])
    with pytest.raises(SpecError) as e:
        open_domain("frontdesk")
    assert {p.key for p in e.value.problems} == {"tools.lookup_patient.mcp.command", "tools.patient_appointments.mcp.command"}
    assert all("could not list the server's tools" in p.message for p in e.value.problems)


def test_eval_and_synth_play_mcp_tools_through_the_server(project, tmp_path, monkeypatch):
    monkeypatch.setenv("MUACTL_RUNS", str(tmp_path / "runs"))
    write_frontdesk(project, _serve_cmd(project / "domains" / "clinic"))
    from muactl.eval.config import EvalConfig
    from muactl.eval.evaluate import run_eval
    from muactl.train.synth_config import SynthConfig
    from muactl.train.synth import run_synth

    store, summary = run_eval(EvalConfig(domain="frontdesk", trials=2))
    assert summary["pass^1"] == 1.0 and summary["tool_error_rate"] == 0.0
    (ep, _) = store.episodes()
    tool_msgs = [m for m in store.messages(ep["id"]) if m["role"] == "tool"]
    assert tool_msgs[0]["content"] == "p2"  # answered by the clinic's MCP server
    assert json.loads(tool_msgs[1]["content"])[0]["doctor"] == "Dr. Lind"
    _, stats = run_synth(SynthConfig(domain="frontdesk", split="test", trials=1, output=str(tmp_path / "sft.jsonl")))
    assert stats["kept"] == 1
    record = json.loads((tmp_path / "sft.jsonl").read_text().splitlines()[0])
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in record["tools"]}
    assert schemas["lookup_patient"]["properties"]["phone"]["type"] == "string"
