"""``ddp-lint run --dump DIR``: a local run's artefacts in the formats of a cluster job, so that
``ddp-lint explain DIR`` reads local and cluster failures alike.

From the run's per-rank records (api.RunResult.raw, the same records ``--report`` keeps):

* ``DIR/ddp_lint_trace_rank_<R>``: a Flight Recorder dump (version 2.10, pickle of plain data) per
  rank that started. Its entries are the collectives the shim recorded as still running or as
  having raised, with their call sites; every collective that returned is only counted by the
  shim, so it is summed up in ``pg_status.last_completed_collective`` (which explain reads as "done
  up to here"), as torch's own dump does for entries its ring buffer dropped.
* ``DIR/attempt_0/<R>/error.json``: torchelastic's error file for a rank that raised
  (``message.extraInfo.py_callstack``), as ``@record`` writes it.
* ``DIR/torchrun_summary.txt``: torchrun's root-cause summary (rank, exit code, error file) for
  every rank that did not end cleanly.

Every file is written atomically (mkstemp + os.replace) into a folder this creates; nothing of
the user's is changed.
"""
from __future__ import annotations

import json
import os
import pickle

from ..io import atomic_write
from .frdump import FrFrame  # noqa: F401  (the format's reader lives beside it)

PREFIX = "ddp_lint_trace_rank_"
VERSION = "2.10"


def _atomic_write(path: str, data: bytes) -> None:
    """The dumps go through the one writer (``io.atomic_write``: mkstemp in the folder, mode 0600,
    ``os.replace``; a final path that is a symbolic link is refused)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_write(path, data)


def _pg(rec: dict) -> tuple[str, str, list | None]:
    g = rec.get("group")
    if isinstance(g, dict) and g.get("ranks") is not None:
        return str(g.get("name") or g["ranks"]), "", list(g["ranks"])
    return "0", "default_pg", None


def _entry(rec: dict, record_id: int, backend: str, *, state: str) -> dict:
    name, desc, _ = _pg(rec)
    frames = []
    if rec.get("file") and isinstance(rec.get("line"), int):
        frames.append({"filename": rec["file"], "line": rec["line"], "name": rec.get("function") or ""})
    return {"record_id": record_id, "pg_id": 0 if name == "0" else abs(hash(name)) % 10**6,
            "process_group": (name, desc), "collective_seq_id": int(rec.get("seq") or 0), "p2p_seq_id": 0,
            "op_id": int(rec.get("seq") or 0), "profiling_name": f"{backend}:{rec.get('op') or 'unknown'}",
            "time_created_ns": None, "input_sizes": None, "output_sizes": None, "input_dtypes": None,
            "output_dtypes": None, "state": state, "time_discovered_started_ns": None,
            "time_discovered_completed_ns": None, "retired": False, "is_p2p": rec.get("op") in ("send", "recv"),
            "frames": frames, "timeout_ms": None, "thread_id": "", "thread_name": "MainThread"}


def rank_dump(rank: int, d: dict, world: int, backend: str) -> dict:
    """One rank's records (logs.raw_ranks' form) as a Flight Recorder dump."""
    calls = []
    for _k, rec in sorted((d.get("pending") or {}).items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0):
        if isinstance(rec, dict):
            calls.append((rec, "started"))
    for _k, v in (d.get("raised") or {}).items():
        if isinstance(v, list) and len(v) == 2 and isinstance(v[0], dict):
            calls.append((v[0], "started"))
    calls.sort(key=lambda c: int(c[0].get("seq") or 0))
    entries = [_entry(rec, i, backend, state=st) for i, (rec, st) in enumerate(calls)]
    done = int(d.get("logged_returns") or 0) + int(d.get("quiet") or 0)
    first_open = min((e["collective_seq_id"] for e in entries), default=done + 1)
    last_done = min(done, first_open - 1)
    cfg = {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}}
    for rec, _ in calls:
        name, desc, ranks = _pg(rec)
        if ranks is not None:
            cfg.setdefault(name, {"name": name, "desc": desc, "ranks": str(ranks)})
    return {"version": VERSION, "entries": entries, "pg_config": cfg, "comm_lib_version": "",
            "pg_status": {"0": {"last_enqueued_collective": max([last_done, *(e["collective_seq_id"] for e in entries)]),
                                "last_started_collective": -1, "last_completed_collective": last_done}}}


_HERE = os.path.dirname(os.path.abspath(__file__))


def _is_shim(path: str) -> bool:
    a = os.path.abspath(path)
    return os.path.dirname(a) == _HERE and os.path.basename(a).startswith("shim")


def _py_callstack(ex: dict) -> str:
    lines = ["Traceback (most recent call last):"]
    for fr in ex.get("frames") or []:
        if isinstance(fr, dict) and fr.get("file") and not _is_shim(fr["file"]):
            lines.append(f'  File "{fr["file"]}", line {fr.get("line")}, in {fr.get("function") or "<module>"}')
    lines.append(f"{ex.get('type') or 'Exception'}: {ex.get('message') or ''}")
    return "\n".join(lines) + "\n"


def write_dumps(folder: str, res) -> list[str]:
    """Write the run's artefacts (dumps, error files, summary) under ``folder``; their paths."""
    raw = (res.raw or {}).get("ranks") or {}
    world = max([res.nproc or 0, *(int(k) + 1 for k in raw if str(k).isdigit())])
    backend = "gloo"
    for d in raw.values():
        for ev in d.get("events") or []:
            if isinstance(ev, dict) and ev.get("kind") == "init" and ev.get("backend"):
                backend = "nccl" if "nccl" in str(ev["backend"]).lower() else "gloo"
    out = []
    folder = os.path.abspath(folder)
    for key, d in sorted(raw.items(), key=lambda kv: int(kv[0])):
        r = int(key)
        p = os.path.join(folder, f"{PREFIX}{r}")
        _atomic_write(p, pickle.dumps(rank_dump(r, d, world, backend), protocol=2))
        out.append(p)
    summary = []
    for rs in res.ranks:
        if rs.status in ("hung", "terminated", "not-started"):
            continue  # still running when the run ended, or never ran: no exit of its own
        d = raw.get(str(rs.rank)) or {}
        end = d.get("end_event") or {}
        ef = "<N/A>"
        if end.get("kind") == "exit" and end.get("via") in ("SystemExit", "os._exit") and end.get("frames"):
            end = {"kind": "exception", "type": "SystemExit", "message": str(end.get("code", "")),
                   "frames": end["frames"]}
        if end.get("kind") == "exception":
            ef = os.path.join(folder, "attempt_0", str(rs.rank), "error.json")
            data = {"message": {"message": f"{end.get('type') or 'Exception'}: {end.get('message') or ''}",
                                "extraInfo": {"py_callstack": _py_callstack(end), "timestamp": "0"}}}
            _atomic_write(ef, json.dumps(data).encode())
            out.append(ef)
        code = rs.exit_code if rs.exit_code is not None else 1
        summary.append(f"[{len(summary)}]:\n  time      : -\n  host      : localhost\n"
                       f"  rank      : {rs.rank} (local_rank: {rs.local_rank if rs.local_rank is not None else rs.rank})\n"
                       f"  exitcode  : {code} (pid: 0)\n  error_file: {ef}\n")
    if summary:
        p = os.path.join(folder, "torchrun_summary.txt")
        _atomic_write(p, ("Root Cause (first observed failure):\n" + "".join(summary)).encode())
        out.append(p)
    return out
