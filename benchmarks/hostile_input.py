"""Time and peak memory of muactl refusing hostile input (issue 17): each case runs a real `muactl`
command in its own process, so its peak RSS is its own.

Cases:
- yaml-laughs / yaml-deep / yaml-tag: a 1 MB task file (a list of ordinary tasks, then an alias bomb of
  10 aliases per level and 9 levels, a 1 MB run of '[' , or a `!!python/object/apply` tag) -> `muactl validate`
- sql-call / sql-validate: a domain whose tool query and task assertion are an endless recursive CTE ->
  `muactl call`, `muactl validate`
- heavy-call / heavy-printf / heavy-1m-call / heavy-validate / heavy-draw / heavy-episode: few SQL steps, each building an
  8 MB (or, under the value cap, 0.5 MB) string (issue 25) -> `muactl call`, `muactl validate`,
  `muactl eval --tasks template:...`, an oracle episode with `--episode-timeout 5`
- pack-pax-bomb / pack-gnu-longname: a .muapack whose tar stream holds a PAX extended header, or a GNU
  long-name header, of --bomb-mib MiB of zeros (a few hundred KB gzipped) -> `muactl install`
- tau2-*: tests/data/tau2/checkout (an invented τ²-shaped checkout) with one file broken, linked from
  outside or oversized as in issue 25 -> `muactl import tau2 ... --domain retail`; tau2-ok is the
  unbroken checkout, tau2-tools-dense, tau2-100k-users and tau2-10k-tasks the costliest inputs within the limits
- openenv-*: one `muactl serve openenv bank` (issue 25) sent misuse over HTTP (step before reset, unknown
  and integer task ids, bad seeds) and over one WebSocket session (an integer task id, frames that are
  not JSON objects, seeds "x" and -1, step before reset), each followed by a good reset on the same
  session; then sessions abandoned mid-episode. Shows the HTTP status or error frame code, whether the
  session still worked, and the server's peak RSS so far; at the end the server's exit status and the
  lines of its log that report an exception (there should be none)

A case that is not refused is stopped at --timeout seconds or at --max-mem-mib of address space and shows
as such. Prints a table; asserts nothing.

    .venv/bin/python benchmarks/hostile_input.py [--bomb-mib 256] [--timeout 60]
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FOREVER = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
RUNAWAY_DOMAIN = f"""\
name: runaway
description: A tool whose query never ends.
policy: None.
database:
  tables:
    n: {{columns: {{x: integer}}, primary_key: x}}
  seed:
    n: [{{x: 1}}]
tools:
  count_forever:
    description: Counts forever.
    query: {FOREVER}
    returns: value
"""
RUNAWAY_TASKS = f"""\
- id: endless-assertion
  user: {{reason: Nothing.}}
  expect:
    assert:
      - query: {FOREVER}
"""


# ---------------------------------------------------------------- inputs


def one_mb_of_tasks(project: Path) -> str:
    """Ordinary tasks (the scaffold's, with fresh ids) up to ~0.95 MB: the bomb comes after real work."""
    import re

    base = (project / "tasks" / "clinic" / "train.yaml").read_text()
    out, k = [], 0
    while sum(map(len, out)) < 950_000:
        out.append(re.sub(r"- id: (\S+)", lambda m: f"- id: {m[1]}-{k}", base))
        k += 1
    return "".join(out)


def yaml_cases(project: Path) -> dict[str, str]:
    tasks = one_mb_of_tasks(project)
    laughs = "- &x0 [a, a, a, a, a, a, a, a, a, a]\n" + "".join(
        f"- &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]\n" for i in range(1, 9))
    return {
        "yaml-laughs": tasks + laughs,
        "yaml-deep": "- " + "[" * 500_000 + "]" * 500_000 + "\n",
        "yaml-tag": tasks + "- !!python/object/apply:os.system [echo owned]\n",
    }


def write_pack(path: Path, project: Path, bomb: str, mib: int) -> None:
    """The scaffold's files as a pack, preceded by a header of `mib` MiB of zeros, gzipped as it is written."""
    files = {}
    for top, folder in (("domain", project / "domains" / "clinic"), ("tasks", project / "tasks" / "clinic")):
        for p in sorted(folder.rglob("*")):
            if p.is_file():
                files[f"{top}/{p.relative_to(folder).as_posix()}"] = p.read_bytes()
    manifest = {"format": 1, "name": "clinic", "version": "0.1.0", "spec_version": 1, "has_python": False,
                "files": [{"path": k, "sha256": hashlib.sha256(v).hexdigest(), "size": len(v)} for k, v in files.items()]}
    size = mib * 1024 * 1024
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        header = tarfile.TarInfo("././@PaxHeader" if bomb == "pax" else "././@LongLink")
        header.type = tarfile.XHDTYPE if bomb == "pax" else tarfile.GNUTYPE_LONGNAME
        header.size = size
        gz.write(header.tobuf(format=tarfile.USTAR_FORMAT if bomb == "pax" else tarfile.GNU_FORMAT))
        if bomb == "pax":  # one record "<len> comment=000...\n" filling the header
            body = b" comment="
            digits = len(str(size))
            gz.write(f"{size}".encode() + body)
            left = size - digits - len(body) - 1
        else:
            left = size - 1
        chunk = b"0" * (1 << 20)
        while left > 0:
            gz.write(chunk[:min(left, len(chunk))])
            left -= min(left, len(chunk))
        gz.write(b"\n" if bomb == "pax" else b"\0")
        gz.write(b"\0" * (-size % 512))
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for name, data in [("manifest.json", json.dumps(manifest).encode()), *files.items()]:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        gz.write(buf.getvalue())


def tau2_cases(tmp: Path) -> dict[str, tuple[list[str], Path, int]]:
    """`muactl import tau2` of the invented checkout, each case with one file of it replaced:
    name -> argv, cwd (an empty project), size of the replaced file."""
    import shutil

    retail, tools = "data/tau2/domains/retail", "src/tau2/domains/retail/tools.py"
    db, tasks, splits, policy = (f"{retail}/{n}" for n in ("db.json", "tasks.json", "split_tasks.json", "policy.md"))
    secret = tmp / "secret.txt"
    secret.write_text("a file outside the checkout\n")
    fake = json.loads((ROOT / "tests/data/tau2/checkout" / tasks).read_text())
    no_scenario = [fake[0], {k: v for k, v in fake[1].items() if k != "user_scenario"}, fake[2]]
    collide = [{**fake[0], "id": "a b"}, {**fake[1], "id": "a_b"}]
    users = ", ".join(f'"u{i}": {{"user_id": "u{i}"}}' for i in range(100_000))
    cases: dict[str, dict[str, bytes | str | None]] = {  # name -> file -> new content (str: a link to it; None: a FIFO)
        "tau2-ok": {policy: (ROOT / "tests/data/tau2/checkout" / policy).read_bytes()},
        "tau2-link-policy": {policy: str(secret)},
        "tau2-link-db": {db: str(secret)},
        "tau2-fifo-db": {db: None},
        "tau2-tools-syntax": {tools: b"def f(:\n"},
        "tau2-tools-nul": {tools: b"x = 1\n\0\n"},
        "tau2-tools-utf8": {tools: b'"""\xff"""\n'},
        "tau2-tools-deep": {tools: b"x = a" + b".b" * 60_000 + b"\n"},
        "tau2-tools-15mb": {tools: b"def f():\n    'doc'\n" * 780_000},
        "tau2-tools-dense": {tools: b"a;" * (64 * 1024)},
        "tau2-db-not-json": {db: b'{"users": {,}}'},
        "tau2-db-list": {db: b"[]"},
        "tau2-db-deep": {db: b"[" * 1_000_000 + b"]" * 1_000_000},
        "tau2-db-70mb": {db: b'{"users": {' + b'"u": {}, ' * 7_800_000 + b'"v": {}}}'},
        "tau2-db-values": {db: b'{"x": [' + b"[]," * 999_990 + b"[]]}"},
        "tau2-100k-users": {db: f'{{"products": {{}}, "orders": {{}}, "users": {{{users}}}}}'.encode()},
        "tau2-tasks-dict": {tasks: b'{"0": {}}'},
        "tau2-no-scenario": {tasks: json.dumps(no_scenario).encode()},
        "tau2-ids-collide": {tasks: json.dumps(collide).encode()},
        "tau2-split-list": {splits: b'["0"]'},
        "tau2-10k-tasks": {tasks: json.dumps([{"id": str(i), "user_scenario": {"instructions": "Hi."}}
                                              for i in range(10_000)]).encode(), splits: b"{}"},
    }
    out = {}
    for name, files in cases.items():
        checkout, project = tmp / name / "tau2-bench", tmp / name / "project"
        shutil.copytree(ROOT / "tests/data/tau2/checkout", checkout)
        project.mkdir()
        for file, content in files.items():
            path = checkout / file
            path.unlink()
            if content is None:
                os.mkfifo(path)
            elif isinstance(content, str):
                path.symlink_to(content)
            else:
                path.write_bytes(content)
        size = sum(len(c) for c in files.values() if isinstance(c, bytes))
        out[name] = (["import", "tau2", "../tau2-bench", "--domain", "retail"], project, size)
    return out


# issue 25: 200 rows that each build an 8 MB string and double it with replace(): a few thousand SQLite steps,
# far under the step budget, that ran for minutes to hours before budgets had a wall time and values a cap.
# Past the 1 MiB cap printf() gives NULL at once, so the cases that test the wall time use 5,000 rows of
# 0.5 MB instead (~30 s of work in ~60,000 steps)
HEAVY_ROWS = ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 200) "
              "SELECT sum(length(replace(printf('%.*c', 8000000 + n, 'x'), 'x', 'yy'))) AS v FROM c")
HEAVY_UNDER_CAP = ("WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 5000) "
                   "SELECT sum(length(replace(printf('%.*c', 500000 + n, 'x'), 'x', 'yy'))) AS v FROM c")


def heavy_row_cases(project: Path) -> dict[str, tuple[list[str], Path, int]]:
    """heavy-call: the issue's query as a tool (`muactl call`); heavy-printf: printf('%.*c', 2000000000, 'x'),
    one step; heavy-1m-call / heavy-validate / heavy-draw /
    heavy-episode: the one under the value cap as a tool, a task assertion and a template derive
    (`muactl validate`), drawing instances (`muactl eval --tasks template:...`) and an oracle episode whose
    gold action is the tool, with `--episode-timeout 5`."""
    domain, tasks = project / "domains" / "heavy", project / "tasks" / "heavy"
    domain.mkdir(parents=True)
    tasks.mkdir(parents=True)
    (domain / "domain.yaml").write_text(f"""\
name: heavy
description: A tool whose every row does an 8 MB string operation.
policy: None.
database:
  tables:
    n: {{columns: {{x: integer}}, primary_key: x}}
  seed:
    n: [{{x: 1}}]
tools:
  heavy:
    description: Heavy rows.
    query: {HEAVY_ROWS}
    returns: value
  heavy_1m:
    description: Heavy rows under the value cap.
    query: {HEAVY_UNDER_CAP}
    returns: value
  repeat:
    description: One character two billion times (one SQLite step).
    query: SELECT printf('%.*c', 2000000000, 'x') AS v
    returns: value
""")
    (tasks / "train.yaml").write_text(f"""\
- id: heavy-assertion
  user: {{reason: Nothing.}}
  expect:
    assert:
      - query: {HEAVY_UNDER_CAP}
""")
    (tasks / "test.yaml").write_text("- id: heavy-gold\n  user: {reason: Count.}\n  expect:\n    actions:\n      - heavy_1m: {}\n")
    (tasks / "templates.yaml").write_text(f"""\
- id: heavy-derive
  sample: SELECT x FROM n
  derive:
    y: SELECT ({HEAVY_UNDER_CAP}) + :x
  user: {{reason: "Nothing {{y}}."}}
""")
    return {"heavy-call": (["call", "heavy", "heavy", "{}"], project, 0),
            "heavy-1m-call": (["call", "heavy", "heavy_1m", "{}"], project, 0),
            "heavy-printf": (["call", "heavy", "repeat", "{}"], project, 0),
            "heavy-validate": (["validate", "heavy"], project, 0),
            "heavy-draw": (["eval", "heavy", "--tasks", "template:heavy-derive", "--n", "5"], project, 0),
            "heavy-episode": (["eval", "heavy", "--agent", "oracle", "--split", "test", "--episode-timeout", "5"],
                              project, 0)}


# ---------------------------------------------------------------- running one case


def run_case(argv: list[str], cwd: Path, env: dict, timeout: float, max_mem: int) -> dict:
    """Run `muactl argv` in a child process: wall and CPU seconds, peak RSS (MB), exit status, first output line."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (max_mem, max_mem))

    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "muactl", *argv], cwd=cwd, env=env, preexec_fn=cap,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    status, usage, how = None, None, ""
    while status is None:
        pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status, usage = st, ru
        elif time.perf_counter() - start > timeout:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            how = f"NOT REFUSED: killed after {timeout:.0f} s"
        else:
            time.sleep(0.02)
    took = time.perf_counter() - start
    out = proc.stdout.read().decode(errors="replace")
    proc.returncode = os.waitstatus_to_exitcode(status)
    lines = [ln for ln in out.splitlines() if ln.strip() and not ln.startswith("error: 1 problem")]
    if not how:
        how = lines[0] if lines else "(no output)"
        if "MemoryError" in out or proc.returncode < 0:
            how = f"NOT REFUSED: out of memory at the {max_mem >> 20} MiB cap ({how[:60]})"
    return {"seconds": took, "cpu": usage.ru_utime + usage.ru_stime, "peak_mb": usage.ru_maxrss / 1024,
            "exit": proc.returncode, "how": how}


# ---------------------------------------------------------------- OpenEnv misuse (one server, many requests)


OPENENV_HTTP = [  # (case, path, body)
    ("openenv-http-step-first", "/step", {"action": {"message": "hi"}}),
    ("openenv-http-unknown-task", "/reset", {"task_id": "no-such-task"}),
    ("openenv-http-int-task", "/reset", {"task_id": 5}),
    ("openenv-http-seed-x", "/reset", {"seed": "x"}),
    ("openenv-http-seed-neg", "/reset", {"seed": -1}),
]
OPENENV_WS = [  # (case, frame): each on the same session
    ("openenv-ws-step-first", {"type": "step", "data": {"message": "hi"}}),
    ("openenv-ws-int-task", {"type": "reset", "data": {"task_id": 5}}),
    ("openenv-ws-list-frame", "[1, 2, 3]"),
    ("openenv-ws-string-frame", '"reset"'),
    ("openenv-ws-binary-frame", b"\x00\x01"),
    ("openenv-ws-seed-x", {"type": "reset", "data": {"seed": "x"}}),
    ("openenv-ws-seed-neg", {"type": "reset", "data": {"seed": -1}}),
]
GOOD_RESET = {"type": "reset", "data": {"task_id": "move-mia"}}


def peak_rss_mb(pid: int) -> float:
    """A live process's peak resident memory (Linux's VmHWM); 0 where /proc has none."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")), 0.0)


def openenv_cases(project: Path, env: dict, timeout: float, max_mem: int, abandon: int) -> list[tuple]:
    """Rows (case, seconds, server peak MB, code, what it said) of misuse sent to one real
    `muactl serve openenv bank` on 127.0.0.1, and a last row for the server's log and exit."""
    import httpx
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    sys.path.insert(0, str(ROOT))
    from tests.fakes import free_port

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (max_mem, max_mem))

    port = free_port()
    log = project / "openenv-server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "muactl", "serve", "openenv", "bank", "--split", "test",
                                   "--port", str(port)], cwd=project, env=env, preexec_fn=cap, stdout=out, stderr=out)
    rows, base, ws_url = [], f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/ws"
    try:
        deadline = time.perf_counter() + timeout
        while True:
            try:
                httpx.get(f"{base}/health", timeout=2)
                break
            except httpx.TransportError:
                if server.poll() is not None or time.perf_counter() > deadline:
                    return [("openenv-server", 0.0, 0.0, server.poll(), "NOT STARTED: " + log.read_text()[-200:])]
                time.sleep(0.25)
        for case, path, body in OPENENV_HTTP:
            t0 = time.perf_counter()
            r = httpx.post(base + path, json=body, timeout=timeout)
            rows.append((case, time.perf_counter() - t0, peak_rss_mb(server.pid), f"HTTP {r.status_code}", r.text))
        sessions = contextlib.ExitStack()
        ws = sessions.enter_context(connect(ws_url, open_timeout=timeout))
        for case, frame in OPENENV_WS:  # one session, while the server keeps it (a new one where it did not)
            t0 = time.perf_counter()
            ws.send(frame if isinstance(frame, (str, bytes)) else json.dumps(frame))
            answer = json.loads(ws.recv(timeout=timeout))
            took = time.perf_counter() - t0
            try:
                ws.send(json.dumps(GOOD_RESET))
                usable = "session usable" if json.loads(ws.recv(timeout=timeout))["type"] == "observation" else "RESET FAILED"
            except ConnectionClosed:
                usable = "SESSION CLOSED"
                ws = sessions.enter_context(connect(ws_url, open_timeout=timeout))
            data = answer.get("data", {})
            said = " ".join([data.get("message", ""), *(e["msg"] for e in data.get("errors", [])[:1])])
            rows.append((case, took, peak_rss_mb(server.pid), data.get("code", answer["type"]), f"{usable}: {said}"))
        sessions.close()
        t0 = time.perf_counter()
        for i in range(abandon):  # reset, one tool call, then gone (half without a close frame)
            with connect(ws_url, open_timeout=timeout) as ws:
                ws.send(json.dumps(GOOD_RESET))
                ws.recv(timeout=timeout)
                ws.send(json.dumps({"type": "step", "data": {"tool_calls": [
                    {"name": "find_customer", "arguments": {"name": "Mia"}}]}}))
                ws.recv(timeout=timeout)
                if i % 2:
                    ws.socket.shutdown(socket.SHUT_RDWR)
        rows.append((f"openenv-abandon-{abandon}", time.perf_counter() - t0, peak_rss_mb(server.pid), "-",
                     f"{abandon} sessions left mid-episode"))
        time.sleep(1.0)  # cancelled episodes finish their cleanup
    finally:
        server.send_signal(signal.SIGINT)  # Ctrl-C: how the server is stopped
        try:
            code = server.wait(timeout)
        except subprocess.TimeoutExpired:
            server.kill()
            code = server.wait()
    text = log.read_text(errors="replace")
    bad = [ln for ln in text.splitlines() if re.search(r"Traceback|never retrieved|Error:|ERROR", ln)]
    lost = text.count("Task exception was never retrieved")
    rows.append(("openenv-server-log", 0.0, 0.0, f"exit {code}", f"{len(bad)} log lines report an exception, "
                 f"{lost} a task exception never retrieved" + (f"; first: {bad[0]}" if bad else "")))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bomb-mib", type=int, default=64, help="size of the tar header bombs (the issue's: 256)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as not refused")
    ap.add_argument("--max-mem-mib", type=int, default=2048, help="address-space cap of each case")
    ap.add_argument("--only", default="", help="comma-separated case names ('openenv' for the OpenEnv ones)")
    ap.add_argument("--abandon", type=int, default=50, help="OpenEnv sessions abandoned mid-episode")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="muactl-hostile-") as tmp:
        tmp = Path(tmp)
        env = dict(os.environ, PYTHONPATH=str(ROOT), MUACTL_HOME=str(tmp / "home"), MUACTL_CACHE=str(tmp / "cache"),
                   MUACTL_RUNS=str(tmp / "runs"))
        project = tmp / "project"
        project.mkdir()
        subprocess.run([sys.executable, "-m", "muactl", "init", "clinic"], cwd=project, env=env, check=True,
                       capture_output=True)
        runaway = project / "domains" / "runaway"
        runaway.mkdir(parents=True)
        (runaway / "domain.yaml").write_text(RUNAWAY_DOMAIN)
        (project / "tasks" / "runaway").mkdir(parents=True)
        (project / "tasks" / "runaway" / "train.yaml").write_text(RUNAWAY_TASKS)

        cases: dict[str, tuple[list[str], Path, int]] = {}  # name -> argv, cwd, input size
        train = project / "tasks" / "clinic" / "train.yaml"
        for name, text in yaml_cases(project).items():
            folder = tmp / name
            (folder / "tasks" / "clinic").mkdir(parents=True)
            (folder / "tasks" / "clinic" / "train.yaml").write_text(text)
            os.symlink(project / "domains", folder / "domains")
            cases[name] = (["validate", "clinic"], folder, len(text.encode()))
        cases["sql-call"] = (["call", "runaway", "count_forever", "{}"], project, 0)
        cases["sql-validate"] = (["validate", "runaway"], project, 0)
        cases.update(heavy_row_cases(project))
        for bomb in ("pax", "gnu-longname"):
            path = tmp / f"{bomb}.muapack"
            write_pack(path, project, "pax" if bomb == "pax" else "gnu", args.bomb_mib)
            cases[f"pack-{bomb}" if bomb != "pax" else "pack-pax-bomb"] = (["install", str(path)], project, path.stat().st_size)
        assert train.exists()
        cases.update(tau2_cases(tmp))

        only = set(filter(None, args.only.split(",")))
        print(f"{'case':<19}{'input':>10}{'wall s':>8}{'CPU s':>7}{'peak MB':>9}{'exit':>6}  what it said")
        for name, (argv, cwd, size) in cases.items():
            if only and name not in only:
                continue
            r = run_case(argv, cwd, env, args.timeout, args.max_mem_mib << 20)
            shown = f"{size / 1e6:.2f} MB" if size else "-"
            how = r["how"].replace(str(tmp), "$TMP")
            print(f"{name:<19}{shown:>10}{r['seconds']:>8.2f}{r['cpu']:>7.2f}{r['peak_mb']:>9.0f}{r['exit']:>6}  {how[:140]}",
                  flush=True)
        if not only or any(name.startswith("openenv") for name in only):
            print(f"\n{'OpenEnv case':<27}{'wall s':>8}{'peak MB':>9}  {'answer':<17} what it said (peak MB: the server's so far)")
            for name, took, peak, code, how in openenv_cases(project, env, args.timeout, args.max_mem_mib << 20,
                                                            args.abandon):
                print(f"{name:<27}{took:>8.2f}{peak:>9.0f}  {code!s:<17} {how[:120]}", flush=True)
        print(f"(tar header bombs: {args.bomb_mib} MiB uncompressed; peak MB is the child's max RSS, most of it "
              "the interpreter and muactl's imports: compare with the sql cases, which load nothing big)")


if __name__ == "__main__":
    main()
