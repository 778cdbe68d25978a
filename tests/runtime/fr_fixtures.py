"""Hand-made Flight Recorder dumps of older versions (2.2, 2.4, 2.7; torch 2.13 writes 2.10), built
field by field as those versions wrote them: 2.2 has no dtypes, no pg_status and no is_p2p; 2.4
adds the dtypes, pg_status and timeout_ms; 2.7 adds is_p2p and the thread fields."""
from __future__ import annotations

import pickle
from pathlib import Path

TORCH = "/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py"


def frames(user: list[tuple[str, int, str]], op: str) -> list[dict]:
    out = [{"filename": TORCH, "line": 2200, "name": op},
           {"filename": "/opt/conda/lib/python3.10/site-packages/torch/distributed/c10d_logger.py", "line": 83,
            "name": "wrapper"}]
    out += [{"filename": f, "line": ln, "name": n} for f, ln, n in user]
    out.append({"filename": "/opt/conda/lib/python3.10/runpy.py", "line": 86, "name": "_run_code"})
    return out


def entry(version: str, record_id: int, seq: int, op: str, sizes, user, *, state="completed", pg=("0", "default_pg"),
          dtype="Float", backend="nccl"):
    e = {"record_id": record_id, "pg_id": int(pg[0]) if pg[0].isdigit() else 0, "process_group": pg,
         "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "profiling_name": f"{backend}:{op}",
         "time_created_ns": 1_700_000_000_000_000_000 + record_id, "input_sizes": sizes, "output_sizes": sizes,
         "state": state, "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
         "retired": state == "completed", "frames": frames(user, op)}
    v = tuple(map(int, version.split(".")))
    if v >= (2, 4):
        e["input_dtypes"] = [dtype] * len(sizes)
        e["output_dtypes"] = [dtype] * len(sizes)
        e["timeout_ms"] = 600000
    if v >= (2, 7):
        e["is_p2p"] = False
        e["thread_id"] = "1"
        e["thread_name"] = "pt_main_thread"
    return e


def dump(version: str, entries: list[dict], world: int, *, pg_name="0") -> dict:
    d = {"version": version, "entries": entries,
         "pg_config": {pg_name: {"name": pg_name, "desc": "default_pg", "ranks": str(list(range(world)))}}}
    if tuple(map(int, version.split("."))) >= (2, 4):
        entries = [e for e in entries if isinstance(e, dict) and "collective_seq_id" in e]
        done = [e["collective_seq_id"] for e in entries if e["state"] == "completed"]
        d["pg_status"] = {"0": {"last_enqueued_collective": max((e["collective_seq_id"] for e in entries), default=-1),
                                "last_started_collective": -1, "last_completed_collective": max(done, default=-1)}}
        d["nccl_version"] = "2.18.1"
    return d


def write(folder: Path, rank: int, data, prefix="nccl_trace_rank_") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / f"{prefix}{rank}"
    p.write_bytes(pickle.dumps(data, protocol=2))
    return p
