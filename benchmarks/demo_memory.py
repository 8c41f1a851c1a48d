"""Peak memory of the quickstart recipe, stage by stage: `muactl train examples/quickstart.yaml` with one stage
per process (the first with stages=[synth], then `--resume` with the stages so far, of which the finished ones
are skipped), so that each stage's peak RSS
is its own. Prints, per stage: wall and CPU seconds, the process's peak RSS (its VmHWM, what /usr/bin/time -v
calls maximum resident set size) and the phase of the stage whose output was last printed when that peak was
reached (sampled every --every seconds from /proc). A stage whose resident set grows past --limit-gb is stopped
(the figure then says so). Asserts nothing.

    .venv/bin/python benchmarks/demo_memory.py [--recipe examples/quickstart.yaml] [--stages synth,sft,grpo,eval]
                                               [--dir DIR] [--limit-gb 9] [--timeline FILE] [override ...]

Overrides are passed to every stage (e.g. sft.max_steps=2 grpo.steps=1 for a short check). With --dir, the
run is kept in DIR/runs/ (a stage already finished there is skipped by the pipeline).
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rss_kb(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in kB; (0, 0) once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if line.startswith(("VmRSS", "VmHWM")))
    except OSError:
        return 0, 0
    return tuple(int(fields.get(k, "0 kB").split()[0]) for k in ("VmRSS", "VmHWM"))  # type: ignore[return-value]


def run_stage(cmd: list[str], cwd: Path, limit_kb: int, every: float, timeline) -> dict:
    """Run one stage's command, echoing its output; its wall and CPU seconds, peak RSS and where the peak was."""
    env = dict(os.environ, MUACTL_NO_PROGRESS="1")
    t0 = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    last = {"line": "(start)", "peak": 0, "at": "(start)", "killed": False}

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            sys.stdout.write("    | " + line)
            if line.strip():
                last["line"] = line.strip()[:100]

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while proc.poll() is None:
        rss, _ = rss_kb(proc.pid)
        if rss > last["peak"]:
            last["peak"], last["at"] = rss, last["line"]
        if timeline:
            timeline.write(f"{time.perf_counter() - t0:.1f}\t{rss / 2**20:.2f}\t{last['line']}\n")
            timeline.flush()
        if rss > limit_kb and not last["killed"]:
            last["killed"] = True
            os.killpg(proc.pid, signal.SIGKILL)
        time.sleep(every)
    reader.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"rc": proc.returncode, "wall_s": time.perf_counter() - t0,
            "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            # ru_maxrss of the children is the largest of any child so far: the stages run in order, so a stage's
            # own peak is the sampled one unless it is the largest yet (then both agree up to the sampling)
            "maxrss_kb": after.ru_maxrss, "sampled_kb": last["peak"], "peak_at": last["at"], "killed": last["killed"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--recipe", default=str(ROOT / "examples" / "quickstart.yaml"))
    ap.add_argument("--stages", default="synth,sft,grpo,eval")
    ap.add_argument("--dir", help="work folder (default: a temporary one, removed after)")
    ap.add_argument("--run-id", default="memory")
    ap.add_argument("--limit-gb", type=float, default=9.0, help="stop a stage whose RSS grows past this")
    ap.add_argument("--every", type=float, default=0.2, help="seconds between RSS samples")
    ap.add_argument("--timeline", help="write 'seconds<TAB>RSS GB<TAB>last output line' samples to this file")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    muactl = [sys.executable, "-m", "muactl"]
    timeline = open(args.timeline, "w") if args.timeline else None
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(args.dir or tmp)
        cwd.mkdir(parents=True, exist_ok=True)
        results = []
        stages = args.stages.split(",")
        for i, stage in enumerate(stages):
            head = ["train", args.recipe, f"run_id={args.run_id}"] if i == 0 and not (cwd / "runs" / args.run_id).exists() \
                else ["train", "--resume", args.run_id]
            # the stages so far: the finished ones are skipped (runs/<id>/stages.json), and the next one reads their
            # outputs (synth's data, sft's checkpoint) as in one run
            cmd = muactl + head + [f"stages=[{','.join(stages[:i + 1])}]", *args.overrides]
            print(f"== {stage}: {' '.join(cmd[2:])}", flush=True)
            if timeline:
                timeline.write(f"# {stage}\n")
            r = run_stage(cmd, cwd, int(args.limit_gb * 2**20), args.every, timeline)
            results.append((stage, r))
            if r["rc"] != 0:
                break
    print(f"\n{'stage':6s} {'wall s':>8s} {'CPU s':>8s} {'peak RSS':>9s}  peak reached after the line")
    for stage, r in results:
        note = f" (stopped past {args.limit_gb} GB)" if r["killed"] else ("" if r["rc"] == 0 else f" (exit {r['rc']})")
        print(f"{stage:6s} {r['wall_s']:8.1f} {r['cpu_s']:8.1f} {r['sampled_kb'] / 2**20:7.2f} GB  "
              f"{r['peak_at']}{note}")
    print(f"largest process's maximum RSS (getrusage): {max(r['maxrss_kb'] for _, r in results) / 2**20:.2f} GB")


if __name__ == "__main__":
    main()
