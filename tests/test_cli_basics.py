import json
import subprocess
import sys
import time

import pytest

from typer.testing import CliRunner

from muactl.cli import app

runner = CliRunner()


def test_help_is_fast_and_imports_no_heavy_library():
    code = ("import sys, time; t=time.perf_counter(); from muactl.cli import app; "
            "heavy=[m for m in ('torch','transformers','trl','litellm','peft') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "muactl", "--help"], capture_output=True, check=True)
    assert time.perf_counter() - start < 5  # generous for a loaded CI box; the benchmark prints the real figure


def test_init_validate_tools_call(project):
    r = runner.invoke(app, ["validate", "clinic"])
    assert r.exit_code == 0, r.output
    assert "4 tasks" in r.output
    r = runner.invoke(app, ["tools", "clinic", "--json"])
    schemas = json.loads(r.output)
    assert [s["function"]["name"] for s in schemas] == ["find_patient_by_phone", "list_appointments", "cancel_appointment"]
    r = runner.invoke(app, ["call", "clinic", "find_patient_by_phone", '{"phone": "5550101"}'])
    assert r.exit_code == 0 and r.output.strip() == "p1"


def test_init_other_names_get_a_neutral_starter(in_tmp):
    r = runner.invoke(app, ["init", "library"])
    assert r.exit_code == 0, r.output
    written = [p for p in (in_tmp / "domains" / "library").rglob("*") if p.is_file()]
    written += [p for p in (in_tmp / "tasks" / "library").rglob("*") if p.is_file()]
    assert not [p for p in written if "clinic" in p.read_text().lower() or "appointment" in p.read_text().lower()]
    assert "library:" in (in_tmp / "domains" / "library" / "domain.yaml").read_text()  # the description names it
    r = runner.invoke(app, ["validate", "library"])
    assert r.exit_code == 0 and "3 tools, 4 tasks" in r.output, r.output
    r = runner.invoke(app, ["eval", "library", "--agent", "oracle", "--split", "all"])
    assert r.exit_code == 0 and "1.000" in r.output, r.output


@pytest.mark.parametrize("name", ["clinic", "library"])
def test_init_starters_keep_the_users_steering_out_of_what_it_says(in_tmp, name):
    """The starters' refusal task says its "if the agent says ..., accept that" in `instructions:`, as the
    built-in tasks do: the scripted user's opening is the want alone, validate warns of nothing, and the
    oracle says why it refuses (the value and the rule) instead of "Your request is complete."."""
    import asyncio

    from muactl.domain.open import open_domain
    from muactl.episode.agents.oracle import OracleAgent
    from muactl.episode.rollout import RolloutConfig, run_episode
    from muactl.episode.user import ScriptedUser

    assert runner.invoke(app, ["init", name]).exit_code == 0
    r = runner.invoke(app, ["validate", name])
    assert r.exit_code == 0 and "warning" not in r.output, r.output
    opened = open_domain(name)
    refusal = next(t for t in opened.tasks if t.task.id.startswith("refuse-"))
    ep = asyncio.run(run_episode(refusal, opened.compiled, OracleAgent(), ScriptedUser(), RolloutConfig()))
    said = [m["content"] for m in ep.messages if m["role"] == "user"]
    told = [m["content"] for m in ep.messages if m["role"] == "assistant" and not m.get("tool_calls")]
    assert "agent" not in said[0] and "conversation" not in said[0], said
    assert refusal.task.expect.refusal and told[-1].endswith(refusal.task.expect.refusal.strip()), told
    assert "Your request is complete" not in told[-1]
    assert ep.reward == 1.0 and ep.termination == "user_stop", ep.breakdown


def test_validate_warns_when_a_reason_reads_like_an_instruction_to_the_user(project):
    tasks = project / "tasks" / "clinic" / "test.yaml"
    text = tasks.read_text()
    text = text.replace("    reason: You want to cancel your appointment with Dr. Park.\n",
                        "    reason: >-\n      You want to cancel your appointment with Dr. Park. If the agent says it "
                        "cannot be\n      cancelled, accept that and end the conversation.\n")
    tasks.write_text(text)
    line = text.splitlines().index("- id: refuse-cancel-completed") + 4  # the reason's line
    r = runner.invoke(app, ["validate", "clinic"])
    assert r.exit_code == 0 and "ok: clinic" in r.output, r.output  # a warning, not an error
    warned = [ln for ln in r.output.splitlines() if ln.startswith("warning:")]
    assert len(warned) == 1, r.output
    assert f"test.yaml:{line}:" in warned[0] and "user.reason" in warned[0] and "user.instructions" in warned[0]
    assert "If the agent says it cannot be cancelled, accept that and end the conversation." in warned[0]


def test_init_refuses_to_overwrite(project):
    r = runner.invoke(app, ["init", "clinic"])
    assert r.exit_code == 2 and "--force" in r.output
    r = runner.invoke(app, ["init", "clinic", "--force"])
    assert r.exit_code == 0


def test_call_reports_a_tools_refusal_with_exit_3(project):
    # before issue 27.4: exit 1, which the README keeps for a bug in muactl
    r = runner.invoke(app, ["call", "clinic", "cancel_appointment", '{"appointment_id": "a2"}'])
    assert r.exit_code == 3 and "not scheduled" in r.output


@pytest.mark.parametrize("arguments, message", [('{"appointment_id": 7}', "7 is not of type 'string'"),
                                                ("{}", "'appointment_id' is a required property"),
                                                ('{"appointment_id": "a1", "why": "x"}', "why")])
def test_call_with_arguments_that_break_the_schema_is_bad_input(project, arguments, message):
    r = runner.invoke(app, ["call", "clinic", "cancel_appointment", arguments])
    assert r.exit_code == 2 and "arguments break cancel_appointment's schema" in r.output and message in r.output, r.output


def test_unknown_domain_is_a_clean_error(project):
    r = runner.invoke(app, ["validate", "nope"])
    assert r.exit_code == 2 and "no domain named 'nope'" in r.output and "Traceback" not in r.output


# ---------------------------------------------------------------- every command answers bad input cleanly

# One bad invocation per command; the test below fails when a command is missing here, so a new command
# gets its entry (and its check) the day it is added.
BAD = {
    "init": ["init", "Bad Name"],
    "validate": ["validate", "nope"],
    "domains": ["domains", "--bogus"],
    "tools": ["tools", "nope"],
    "call": ["call", "bank", "find_customer", "{not json"],
    "schema": ["schema", "extra"],
    "eval": ["eval", "bank", "--opening", "sideways"],
    "synth": ["synth", "bank", "-o", "/proc/nope/x.jsonl"],
    "data show": ["data", "show", "missing.jsonl"],
    "train": ["train", "notes.txt"],
    "report": ["report", "no-such-run"],
    "runs": ["runs", "--bogus"],
    "runs show": ["runs", "show", "no-such-run"],
    "pack": ["pack", "nope"],
    "install": ["install", "missing.muapack"],
    "uninstall": ["uninstall", "nope"],
    "mcp serve": ["mcp", "serve", "bank", "--http", "127.0.0.1:99999"],
    "chat": ["chat", "nope"],
    "export verl": ["export", "verl", "bank", "-o", "/proc/x"],
    "tasks generate": ["tasks", "generate", "bank", "--all-templates", "-o", "/proc/x/y.yaml"],
    "import tau2": ["import", "tau2", "no-such-checkout", "--domain", "retail"],
    "import acebench": ["import", "acebench", "no-such-checkout"],
    "import bfcl": ["import", "bfcl", "no-such-checkout"],
    "serve openenv": ["serve", "openenv", "nope"],
}


def _leaf_commands(group, prefix=()):
    for name, cmd in group.commands.items():
        if hasattr(cmd, "commands"):  # a group (typer vendors its own click, so no isinstance check)
            if cmd.invoke_without_command:
                yield " ".join(prefix + (name,))
            yield from _leaf_commands(cmd, prefix + (name,))
        else:
            yield " ".join(prefix + (name,))


def test_the_bad_input_table_covers_every_command():
    import typer.main

    assert sorted(_leaf_commands(typer.main.get_command(app))) == sorted(BAD)


@pytest.mark.parametrize("name", sorted(BAD))
def test_every_command_answers_bad_input_without_a_traceback(name, in_tmp):
    r = runner.invoke(app, BAD[name])
    assert r.exit_code == 2, (name, r.output)
    assert isinstance(r.exception, SystemExit), (name, repr(r.exception))  # anything else was a traceback
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    assert r.output.lstrip().startswith(("error:", "Usage:")), r.output
    assert not (in_tmp / "runs").exists()  # a refused start leaves no run folder behind


def test_sub_app_commands_share_the_error_wrapper(in_tmp, monkeypatch):
    """Internal errors are one line with exit 1 and Ctrl-C is exit 130 in sub-app commands too."""
    import muactl.train.synth as synth

    def boom(path):
        raise RuntimeError("kaput")

    monkeypatch.setattr(synth, "read_jsonl", boom)
    r = runner.invoke(app, ["data", "show", "x.jsonl"])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit)
    assert r.output.strip() == ("error: internal error: RuntimeError: kaput (set MUACTL_DEBUG=1 for the traceback "
                                "and please report it)")

    def interrupted(path):
        raise KeyboardInterrupt

    monkeypatch.setattr(synth, "read_jsonl", interrupted)
    r = runner.invoke(app, ["data", "show", "x.jsonl"])
    assert r.exit_code == 130 and r.output.strip() == "error: interrupted"


def test_version_alone_prints_the_version():
    from muactl import __version__

    r = subprocess.run([sys.executable, "-m", "muactl", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == f"muactl {__version__}", r.stderr


def test_synth_checks_its_output_path_before_making_a_run(in_tmp):
    (in_tmp / "a-file").write_text("")  # the -o folder is a file
    r = runner.invoke(app, ["synth", "bank", "--trials", "1", "-o", str(in_tmp / "a-file" / "x.jsonl")])
    assert r.exit_code == 2 and "cannot write -o" in r.output and "a-file" in r.output, r.output
    assert not (in_tmp / "runs").exists()


def test_mcp_serve_on_a_port_in_use_is_one_line(in_tmp):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = runner.invoke(app, ["mcp", "serve", "bank", "--http", f"127.0.0.1:{port}"])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert f"error: cannot serve on 127.0.0.1:{port}:" in r.output and "in use" in r.output
