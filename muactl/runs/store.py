"""The run directory: runs/<run-id>/ with config.yaml, runs.sqlite (sqlite-utils) and summary.json.

Every episode is written in one transaction as soon as it ends, so an interrupted run keeps all its
finished work, and a unique index on (task, trial) means a resumed run can never count one twice.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import time
from datetime import datetime, timezone
from pathlib import Path
from contextlib import contextmanager
from typing import Any, Iterator

import sqlite_utils

from .. import locks
from ..errors import RunBusy, RunNotFound, RunUnreadable


def runs_dir() -> Path:
    return Path(os.environ.get("MUACTL_RUNS", "runs"))


def new_run_id(kind: str, domain: str) -> str:
    return f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{kind}-{domain}-{secrets.token_hex(2)}"


RESUME = {"eval": "muactl eval --resume {id}", "synth": "muactl synth --resume {id}",
          "sft": "muactl train sft --resume {id}", "grpo": "muactl train grpo --resume {id}",
          "user": "muactl train user --resume {id}", "train": "muactl train {path}/config.yaml --resume {id}"}


def resume_command(info: dict[str, Any], path: Path) -> str | None:
    """How to continue a run that stopped, for the kinds that resume."""
    template = RESUME.get(info.get("kind", ""))
    return template.format(id=info["id"], path=path) if template else None


class RunStore:
    def __init__(self, path: Path, create: bool = False):
        self.path = path
        self.id = path.name
        self.db = sqlite_utils.Database(path / "runs.sqlite")
        self.db.conn.execute("PRAGMA journal_mode = WAL")
        if create:
            self._ensure_schema()

    # ------------------------------------------------------------ create / open

    @classmethod
    def create(cls, kind: str, domain: str, config: dict[str, Any], run_id: str | None = None,
               path: Path | None = None) -> RunStore:
        """A new run folder: runs/<run_id>, or `path` (a stage's folder inside a pipeline run)."""
        path = path or runs_dir() / (run_id or new_run_id(kind, domain))
        path.mkdir(parents=True, exist_ok=False)
        (path / "config.yaml").write_text(_yaml(config))
        store = cls(path, create=True)
        store.lock()  # held while this process writes the run: a run whose holder died shows as interrupted
        store.db["runs"].insert({"id": store.id, "kind": kind, "domain": domain, "status": "running",
                                 "created": _now(), "updated": _now(), "config": config, "summary": {}}, pk="id")
        return store

    @classmethod
    def open(cls, run_id: str) -> RunStore:
        path = Path(run_id) if Path(run_id).is_dir() else runs_dir() / run_id
        if not (path / "runs.sqlite").is_file():
            known = ", ".join(r["id"] for r in list_runs()[-5:]) or "none"
            raise RunNotFound(f"no run '{run_id}' in {runs_dir()}/ (recent: {known}); `muactl runs` lists them")
        return cls.read(path)

    @classmethod
    def read(cls, path: Path) -> RunStore:
        """An existing run, checked before anything trusts it: a damaged, truncated or foreign
        runs.sqlite is a RunUnreadable naming the file, never a driver error later on."""
        file = path / "runs.sqlite"
        try:
            store = cls(path)
            tables = set(store.db.table_names())
            missing = sorted({"runs", "episodes", "messages"} - tables)
            if missing:
                raise RunUnreadable(f"{file} is not a muactl run (no table {', '.join(missing)})")
            check = store.db.conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise RunUnreadable(f"{file} is damaged ({check}); its episodes cannot be read")
            if store.db["runs"].count_where("id = ?", [store.id]) == 0:
                raise RunUnreadable(f"{file} holds no record of run {store.id} (was the folder renamed? "
                                    "give it back its original name)")
            store._ensure_schema()  # tables added by later muactl versions (traces, metrics)
            return store
        except sqlite3.DatabaseError as e:
            raise RunUnreadable(f"{file} is damaged or not a muactl run ({e})") from None

    def _ensure_schema(self) -> None:
        db = self.db
        if {"traces", "metrics"} <= set(db.table_names()):
            for column in ("fidelity", "interaction", "outcome", "domain"):  # added later: older runs gain the columns
                if column not in db["episodes"].columns_dict:
                    db["episodes"].add_column(column, str)
            if "reasoning" not in db["messages"].columns_dict:
                db["messages"].add_column("reasoning", str)
            return
        db["runs"].create({"id": str, "kind": str, "domain": str, "status": str, "created": str, "updated": str,
                           "config": str, "summary": str}, pk="id", if_not_exists=True)
        db["episodes"].create({
            "id": int, "run_id": str, "task_id": str, "trial": int, "seed": int, "reward": float,
            "termination": str, "outcome": str, "success": int, "turns": int, "tool_calls": int, "tool_errors": int,
            "prompt_tokens": int, "completion_tokens": int, "cost": float, "wall_s": float,
            "breakdown": str, "records": str, "usage": str, "timing": str, "final_hash": str, "error": str,
            "human": int, "rating": int, "note": str, "step": int, "created": str, "fidelity": str, "interaction": str,
            "domain": str,  # the domain of a run over several (GRPO's rollouts); null: the run's one domain
        }, pk="id", if_not_exists=True)
        db["episodes"].create_index(["run_id", "task_id", "trial", "step"], unique=True, if_not_exists=True)
        db["messages"].create({"episode_id": int, "idx": int, "role": str, "content": str, "tool_calls": str,
                               "tool_call_id": str, "name": str, "error": int, "meta": str, "reasoning": str},
                              pk=("episode_id", "idx"), if_not_exists=True)
        db["traces"].create({"episode_id": int, "ids": str, "mask": str, "logprobs": str, "prompt_len": int},
                            pk="episode_id", if_not_exists=True)
        db["metrics"].create({"step": int, "name": str, "value": float, "created": str}, pk=("step", "name"),
                             if_not_exists=True)

    # ------------------------------------------------------------ exclusive use

    def lock(self) -> None:
        """Hold the run until unlock() (or until this process exits): a second process that would
        write episodes into it (two `--resume` of one run) gets RunBusy naming the holder. The OS drops
        the lock when the holder dies, so a run killed with kill -9 resumes without any cleanup.
        Re-entrant within a process (a pipeline's stages resume their own runs)."""
        key = str(self.path.resolve())
        if key in _HELD:
            _HELD[key][1] += 1
            return
        fd = locks.acquire(self.path / LOCK_FILE, wait=False)
        if fd is None:
            raise RunBusy(f"run {self.id} is in use by {locks.holder(self.path / LOCK_FILE)}; wait for it to finish "
                          "(or stop it) before resuming it")
        _HELD[key] = [fd, 1]

    @contextmanager
    def held(self) -> Iterator[RunStore]:
        """lock() for the block."""
        self.lock()
        try:
            yield self
        finally:
            self.unlock()

    def _holds(self) -> bool:
        return str(self.path.resolve()) in _HELD

    def _release(self) -> None:
        held = _HELD.pop(str(self.path.resolve()), None)
        if held is not None:
            locks.release(held[0])

    def unlock(self) -> None:
        key = str(self.path.resolve())
        held = _HELD.get(key)
        if held is None:
            return
        held[1] -= 1
        if held[1] == 0:
            del _HELD[key]
            locks.release(held[0])

    # ------------------------------------------------------------ write

    def save_episode(self, ep, step: int = 0, human: bool = False, keep_trace: bool = True,
                     domain: str | None = None) -> int:
        from ..episode.types import Episode

        assert isinstance(ep, Episode)
        usage = ep.usage or {}
        row = {"run_id": self.id, "task_id": ep.task_id, "trial": ep.trial, "seed": ep.seed, "reward": ep.reward,
               "termination": ep.termination, "outcome": ep.outcome, "success": int(bool(ep.breakdown.get("success"))),
               "turns": ep.turns,
               "tool_calls": ep.tool_calls, "tool_errors": ep.tool_errors,
               "prompt_tokens": int(usage.get("agent_prompt_tokens", 0)),
               "completion_tokens": int(usage.get("agent_completion_tokens", 0)), "cost": float(usage.get("cost", 0.0)),
               "wall_s": ep.timing.get("wall", 0.0), "breakdown": json.dumps(ep.breakdown), "records": json.dumps(ep.records),
               "usage": json.dumps(usage), "timing": json.dumps(ep.timing), "final_hash": ep.final_hash, "error": ep.error,
               "human": int(human), "step": step, "created": _now(), "fidelity": json.dumps(ep.fidelity),
               "interaction": json.dumps(ep.interaction), "domain": domain}
        with self.db.conn:
            eid = self.db["episodes"].insert(row).last_pk
            self.db["messages"].insert_all(
                [{"episode_id": eid, "idx": i, "role": m["role"], "content": m.get("content") or "",
                  "tool_calls": json.dumps(m["tool_calls"], ensure_ascii=False) if m.get("tool_calls") else None,
                  "tool_call_id": m.get("tool_call_id"), "name": m.get("name"), "error": int(bool(m.get("error"))),
                  "meta": json.dumps({k: v for k, v in m.items() if k in ("fixed", "malformed")}) or None,
                  "reasoning": m.get("reasoning")}
                 for i, m in enumerate(ep.messages)])
            if keep_trace and ep.trace is not None:
                t = ep.trace
                self.db["traces"].insert({"episode_id": eid, "ids": json.dumps(t.ids), "mask": json.dumps(t.mask),
                                          "logprobs": json.dumps([round(x, 5) for x in t.logprobs]), "prompt_len": t.prompt_len})
        return eid

    def annotate(self, episode_id: int, rating: int | None = None, note: str | None = None) -> None:
        """A person's rating and note on an episode (chats); both may change after it is saved."""
        self.db["episodes"].update(episode_id, {"rating": rating, "note": note})

    def forget_step(self, step: int) -> None:
        """Drop a training step's episodes and metrics: after a crash the step is redone from the last
        checkpoint, and a figure the crashed run logged (one the redone step may not log) must not outlive it."""
        self._delete_episodes("run_id = ? AND step = ?", [self.id, step])
        self.db["metrics"].delete_where("step = ?", [step])

    def _delete_episodes(self, where: str, args: list) -> int:
        with self.db.conn:
            ids = [r["id"] for r in self.db.query(f"SELECT id FROM episodes WHERE {where}", args)]
            for table in ("messages", "traces"):
                self.db.conn.executemany(f"DELETE FROM {table} WHERE episode_id = ?", [(i,) for i in ids])
            self.db.conn.execute(f"DELETE FROM episodes WHERE {where}", args)
        return len(ids)

    def update(self, **fields: Any) -> None:
        if fields.get("status") == "running" and not self._holds():
            self.lock()
        fields["updated"] = _now()
        self.db["runs"].update(self.id, fields)
        if "summary" in fields:
            (self.path / "summary.json").write_text(json.dumps(fields["summary"], indent=2))
        if fields.get("status") not in (None, "running"):
            self._release()  # done writing: another process may resume or extend it

    def set_config(self, config: dict[str, Any]) -> None:
        """A resumed run that was changed on purpose (eval --resume --n): both copies say what it now plays."""
        self.update(config=config)
        (self.path / "config.yaml").write_text(_yaml(config))

    def log_metrics(self, step: int, values: dict[str, float]) -> None:
        self.db["metrics"].upsert_all([{"step": step, "name": k, "value": float(v), "created": _now()}
                                       for k, v in values.items()], pk=("step", "name"))

    # ------------------------------------------------------------ read

    def info(self) -> dict[str, Any]:
        """The run's row; a run saved as running whose process is gone (killed, crashed, terminal closed)
        is reported as interrupted, with `resume` saying how to continue it."""
        row = self.db["runs"].get(self.id)
        row["config"] = json.loads(row["config"] or "{}")
        row["summary"] = json.loads(row["summary"] or "{}")
        if row["status"] == "running" and not self._holds() and (self.path / LOCK_FILE).is_file():
            probe = locks.acquire(self.path / LOCK_FILE, wait=False)
            if probe is not None:  # nobody holds the lock: the process that ran it is gone
                locks.release(probe)
                row["status"] = "interrupted"
        if row["status"] in ("interrupted", "failed"):
            row["resume"] = resume_command(row, self.path)
        return row

    def finished(self, step: int = 0) -> set[tuple[str, int]]:
        """(task, trial) pairs done for good: excluded episodes (infra_error, user_error) are not."""
        from ..episode.types import EXCLUDED

        marks = ", ".join("?" * len(EXCLUDED))
        return {(r["task_id"], r["trial"]) for r in self.db.query(
            f"SELECT task_id, trial FROM episodes WHERE run_id = ? AND step = ? AND termination NOT IN ({marks})",
            [self.id, step, *EXCLUDED])}

    def forget_excluded(self, step: int = 0) -> int:
        """Drop the excluded episodes of a step, so that a resumed run plays them again; their count."""
        from ..episode.types import EXCLUDED

        marks = ", ".join("?" * len(EXCLUDED))
        return self._delete_episodes(f"run_id = ? AND step = ? AND termination IN ({marks})", [self.id, step, *EXCLUDED])

    def episodes(self, step: int | None = None) -> list[dict[str, Any]]:
        where, args = ("run_id = ?", [self.id]) if step is None else ("run_id = ? AND step = ?", [self.id, step])
        rows = list(self.db["episodes"].rows_where(where, args, order_by="id"))
        from ..episode.types import outcome_of

        for r in rows:
            for k in ("breakdown", "records", "usage", "timing", "fidelity", "interaction"):
                r[k] = json.loads(r[k] or "{}")
            r["outcome"] = r.get("outcome") or outcome_of(r["termination"], bool(r["success"]))
        return rows

    def messages(self, episode_id: int) -> list[dict[str, Any]]:
        rows = list(self.db["messages"].rows_where("episode_id = ?", [episode_id], order_by="idx"))
        for r in rows:
            r["tool_calls"] = json.loads(r["tool_calls"]) if r["tool_calls"] else None
        return rows


LOCK_FILE = ".lock"
_HELD: dict[str, list[int]] = {}  # run folders this process holds: resolved path -> [lock fd, depth]


def list_runs() -> list[dict[str, Any]]:
    out = []
    root = runs_dir()
    if not root.is_dir():
        return out
    for path in sorted(root.iterdir()):
        if (path / "runs.sqlite").is_file():
            try:  # not RunStore.read: its integrity check reads every run whole, too slow for a listing
                out.append(RunStore(path).info())
            except Exception:  # a foreign or broken folder is listed as such, not fatal
                out.append({"id": path.name, "kind": "?", "domain": "?", "status": "unreadable", "summary": {}, "created": ""})
    return out


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _yaml(data: dict[str, Any]) -> str:
    from omegaconf import OmegaConf

    return OmegaConf.to_yaml(OmegaConf.create(data))


__all__ = ["RunStore", "RunNotFound", "list_runs", "runs_dir", "new_run_id", "time"]
