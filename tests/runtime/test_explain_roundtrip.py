"""``ddp-lint run --dump DIR`` writes a local run's artefacts in the cluster formats (Flight
Recorder dumps, torchelastic error files, torchrun's summary); ``ddp-lint explain DIR`` reads them
back to the same findings (code, line, ranks) as the run itself (issue 27).

The real runs (torch, gloo, torchrun) start three jobs at once (~30-60 s on a busy machine); the
records-only tests need no torch."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.runtime.api import RankSummary, RunResult
from analysis.runtime.explain import explain
from analysis.runtime.frwrite import write_dumps
from tests.conftest import require_torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def key(f: dict) -> tuple:
    return f["code"], os.path.basename(f["filename"]), f["location"]["row"], tuple(f["ranks"])


@pytest.mark.torch
def test_run_dump_round_trips_through_explain(tmp_path):
    require_torch()
    names = ["guard_mismatch", "early_exit", "exc_one_rank"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = {}
    for n in names:
        shutil.copy(SCRIPTS / f"{n}.py", tmp_path / f"{n}.py")
        procs[n] = subprocess.Popen([sys.executable, "-m", "ddp_lint", "run", f"{n}.py", "--timeout", "30",
                                     "--output-format", "json", "--dump", f"dump_{n}"], cwd=tmp_path, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for n, p in procs.items():
        out, err = p.communicate(timeout=240)
        ran = [key(f) for f in json.loads(out)]
        assert ran, (n, err[-2000:])
        assert f"written to dump_{n}" in err
        ex = subprocess.run([sys.executable, "-m", "ddp_lint", "explain", f"dump_{n}", "--output-format", "json"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert "Traceback" not in ex.stderr, ex.stderr
        assert [key(f) for f in json.loads(ex.stdout)] == ran, (n, ex.stdout)


def _raw(events_by_rank: dict) -> dict:
    return {"roots": [], "lib_dirs": [], "ranks": {str(r): d for r, d in events_by_rank.items()}}


def test_records_to_dumps_and_back(tmp_path):
    """A mismatch and an early exit from hand-written run records (no torch)."""
    src = tmp_path / "train.py"
    src.write_text("import torch.distributed as dist\nimport sys\n\nif rank == 1:\n    sys.exit(2)\ndist.barrier()\n"
                   "dist.all_reduce(t)\ndist.broadcast(t, 0)\n")
    def call(seq, op, line):
        return {"seq": seq, "op": op, "file": str(src), "line": line, "function": "<module>"}

    res = RunResult(nproc=3)
    res.raw = _raw({
        0: {"events": [{"kind": "init", "backend": "gloo"}], "pending": {"4": call(4, "all_reduce", 7)},
            "raised": {}, "logged_returns": 0, "quiet": 3},
        1: {"events": [], "pending": {}, "raised": {}, "logged_returns": 3, "quiet": 0,
            "end_event": {"kind": "exit", "via": "SystemExit", "code": 2,
                          "frames": [{"file": str(src), "line": 5, "function": "<module>"}]}},
        2: {"events": [], "pending": {"4": call(4, "broadcast", 8)}, "raised": {}, "logged_returns": 3, "quiet": 0},
    })
    res.ranks = [RankSummary(0, "hung", ""), RankSummary(1, "exited", "", exit_code=2), RankSummary(2, "hung", "")]
    written = write_dumps(str(tmp_path / "d"), res)
    assert sorted(os.path.basename(p) for p in written) == [
        "ddp_lint_trace_rank_0", "ddp_lint_trace_rank_1", "ddp_lint_trace_rank_2", "error.json", "torchrun_summary.txt"]
    out = explain([str(tmp_path / "d")], root=str(tmp_path))
    f, g = out.findings  # the mismatch of ranks 0 and 2, and where rank 1 left
    assert (g.code, g.range.start.line + 1, g.ranks) == ("DDP904", 5, (1,))
    assert f.code == "DDP902" and {f.range.start.line + 1, *(r.range.start.line + 1 for r in f.related)} == {7, 8}
    # the same with rank 2 in step: rank 1's exit is the finding, at its sys.exit line
    res.raw["ranks"]["2"]["pending"] = {"4": call(4, "all_reduce", 7)}
    shutil.rmtree(tmp_path / "d")
    write_dumps(str(tmp_path / "d"), res)
    [f] = explain([str(tmp_path / "d")], root=str(tmp_path)).findings
    assert (f.code, f.range.start.line + 1, f.ranks, f.details["exit_code"]) == ("DDP904", 5, (1,), 2)


def test_ddp_lint_reports_are_merged(tmp_path):
    """`ddp-lint run --report` files among explain's inputs are read as `ddp-lint merge` reads them."""
    from analysis.runtime.merge import write_report

    src = tmp_path / "train.py"
    src.write_text("import torch.distributed as dist\nx = 1\ndist.barrier()\ndist.all_reduce(t)\n")
    for node, (op, line) in enumerate([("barrier", 3), ("all_reduce", 4)]):
        res = RunResult(nproc=1, script=str(src), node_rank=node, nnodes=2, multinode="cluster", timed_out=True,
                        timeout=5.0)
        res.raw = _raw({node: {"events": [{"kind": "start", "world_size": 2, "rank": node}],
                               "pending": {"1": {"seq": 1, "op": op, "file": str(src), "line": line, "function": "<module>"}},
                               "raised": {}, "hung": True, "logged_returns": 0, "quiet": 0}})
        res.raw["roots"] = [str(tmp_path)]
        write_report(str(tmp_path / "reports" / "node-{node}.json"), res)
    out = explain([str(tmp_path / "reports")], root=str(tmp_path))
    assert out.exit_code == 1 and out.findings and any("merge" in n for n in out.notes)
    assert [(f.code, f.range.start.line + 1, f.ranks) for f in out.findings] == [("DDP902", 3, (0, 1))]
