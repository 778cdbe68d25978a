"""``ddp-lint explain`` on hand-made artefacts (issue 27): older dump versions (2.2, 2.4, 2.7),
missing ranks, truncated ring buffers (record_id gaps), mixed versions, garbage, torchelastic error
files and torchrun's summary, paths from a container (/workspace/...). No torch needed."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.runtime.explain import PathMapper, explain
from analysis.runtime.frdump import DumpError, read_dump, safe_loads
from tests.runtime.fr_fixtures import dump, entry, write

ROOT = Path(__file__).resolve().parents[2]

TRAIN = """import torch
import torch.distributed as dist
from utils import sync


def step(x, rank):
    dist.all_reduce(x)
    if rank == 0:
        dist.broadcast(x, 0)
    sync(x)
"""
UTILS = """import torch.distributed as dist


def sync(x):
    dist.barrier()
"""


@pytest.fixture
def checkout(tmp_path):
    co = tmp_path / "repo"
    (co / "src").mkdir(parents=True)
    (co / "src" / "train.py").write_text(TRAIN)
    (co / "src" / "utils.py").write_text(UTILS)
    return co


W = "/workspace/repo/src"  # where the job ran: a container mount


def ar(v, rid, seq, state="completed", sizes=([4],), line=7):
    return entry(v, rid, seq, "all_reduce", list(sizes), [(f"{W}/train.py", line, "step")], state=state)


def bc(v, rid, seq, state="scheduled"):
    return entry(v, rid, seq, "broadcast", [[4]], [(f"{W}/train.py", 9, "step")], state=state)


def barrier(v, rid, seq, state="scheduled"):
    return entry(v, rid, seq, "barrier", [[1]], [(f"{W}/utils.py", 5, "sync"), (f"{W}/train.py", 10, "step")],
                 state=state)


@pytest.mark.parametrize("version", ["2.2", "2.4", "2.7", "2.10"])
def test_versions_mismatch_pinned_per_rank(tmp_path, checkout, version):
    d = tmp_path / "dumps"
    # rank 0 broadcasts under `if rank == 0`, rank 1 goes on to the barrier in utils.sync
    write(d, 0, dump(version, [ar(version, 0, 1), bc(version, 1, 2)], 2))
    write(d, 1, dump(version, [ar(version, 0, 1), barrier(version, 1, 2)], 2))
    res = explain([str(d)], root=str(checkout))
    assert res.exit_code == 1, res.notes
    [f] = res.findings
    assert f.code == "DDP902" and f.ranks == (0, 1)
    assert f.filename == str(checkout / "src" / "train.py") and f.range.start.line == 8
    assert "broadcast()" in f.message and "barrier()" in f.message
    rel = {(Path(r.filename).name, r.range.start.line + 1) for r in f.related}
    assert ("utils.py", 5) in rel and ("train.py", 10) in rel  # rank 1's line and its caller
    texts = {rs.rank: rs.text for rs in res.ranks}
    assert "last completed all_reduce() at " in texts[0] and "train.py:7" in texts[0] and "first pending broadcast()" in texts[0]
    assert "first pending barrier() at " in texts[1] and "utils.py:5" in texts[1]


def test_hang_culprit_never_enqueued_v24(tmp_path, checkout):
    d = tmp_path / "dumps"
    for r in (0, 1, 2):
        write(d, r, dump("2.4", [ar("2.4", 0, 1), ar("2.4", 1, 2, state="started", line=7)], 4))
    write(d, 3, dump("2.4", [ar("2.4", 0, 1)], 4))
    res = explain([str(d)], root=str(checkout))
    [f] = res.findings
    assert f.code == "DDP903" and f.details["culprits"] == [3] and f.range.start.line == 6
    assert "rank 3 never enqueued it" in f.message
    assert res.verdicts[0].kind == "never-enqueued"


def test_all_ranks_pending(tmp_path, checkout):
    d = tmp_path / "dumps"
    for r in (0, 1):
        write(d, r, dump("2.10", [ar("2.10", 0, 1), ar("2.10", 1, 2, state="started")], 2))
    [f] = explain([str(d)], root=str(checkout)).findings
    assert f.code == "DDP903" and "never completed" in f.message and f.ranks == (0, 1)


def test_missing_rank_dump(tmp_path, checkout):
    d = tmp_path / "dumps"
    for r in (0, 1, 2):
        write(d, r, dump("2.7", [ar("2.7", 0, 1), ar("2.7", 1, 2, state="scheduled")], 4))
    res = explain([str(d)], root=str(checkout))
    [f] = res.findings
    assert f.code == "DDP903" and f.details["missing_dumps"] == [3] and "no dump of rank 3" in f.message
    assert "TORCH_FR_DUMP_TEMP_FILE" in f.details["hint"]


def test_missing_rank_that_exited_per_torchrun_summary(tmp_path, checkout):
    d = tmp_path / "dumps"
    write(d, 0, dump("2.10", [ar("2.10", 0, 1), ar("2.10", 1, 2, state="scheduled")], 2))
    (d / "torchrun.log").write_text(
        "Root Cause (first observed failure):\n[0]:\n  time      : 2026-01-01_00:00:00\n  host      : node7\n"
        "  rank      : 1 (local_rank: 0)\n  exitcode  : 1 (pid: 4242)\n  error_file: <N/A>\n")
    [f] = explain([str(d)], root=str(checkout)).findings
    assert f.code == "DDP904" and f.ranks == (1,) and f.details["exit_code"] == 1


def test_truncated_ring_buffer(tmp_path, checkout):
    d = tmp_path / "dumps"
    # rank 0's buffer lost record ids 2-3; rank 1's buffer starts later (it wrapped): matching starts
    # where every rank still has its records
    e0 = [ar("2.10", 0, 1), ar("2.10", 1, 2), ar("2.10", 4, 5), ar("2.10", 5, 6), bc("2.10", 6, 7)]
    e1 = [ar("2.10", 3, 4), ar("2.10", 4, 5), ar("2.10", 5, 6), barrier("2.10", 6, 7)]
    write(d, 0, dump("2.10", e0, 2))
    write(d, 1, dump("2.10", e1, 2))
    res = explain([str(d)], root=str(checkout))
    assert any("misses 2 entries (record ids 2-3)" in n and "TORCH_FR_BUFFER_SIZE" in n for n in res.notes)
    [f] = res.findings
    assert f.code == "DDP902" and f.details["collective_seq_id"] == 7


def test_mixed_versions_are_noted(tmp_path, checkout):
    d = tmp_path / "dumps"
    write(d, 0, dump("2.4", [ar("2.4", 0, 1), bc("2.4", 1, 2)], 2))
    write(d, 1, dump("2.7", [ar("2.7", 0, 1), barrier("2.7", 1, 2)], 2))
    res = explain([str(d)], root=str(checkout))
    assert any("different versions" in n for n in res.notes) and res.findings[0].code == "DDP902"


def test_error_file_ddp901(tmp_path, checkout):
    d = tmp_path / "job" / "attempt_0" / "1"
    d.mkdir(parents=True)
    tb = ("Traceback (most recent call last):\n"
          f'  File "{W}/train.py", line 10, in step\n    sync(x)\n'
          f'  File "{W}/utils.py", line 5, in sync\n    dist.barrier()\n'
          '  File "/usr/lib/python3/site-packages/torch/distributed/c10d_logger.py", line 83, in wrapper\n'
          "RuntimeError: NCCL communicator was aborted\n")
    (d / "error.json").write_text(json.dumps({"message": {"message": "RuntimeError: NCCL communicator was aborted",
                                                          "extraInfo": {"py_callstack": tb, "timestamp": "1700000000"}}}))
    res = explain([str(tmp_path / "job")], root=str(checkout))
    [f] = res.findings
    assert f.code == "DDP901" and f.filename == str(checkout / "src" / "utils.py") and f.range.start.line == 4
    assert f.ranks == (1,) and "RuntimeError" in f.message
    assert [r.range.start.line + 1 for r in f.related] == [10]


def _error_json(root, rank, text, tb_lines):
    d = root / "job" / "attempt_0" / str(rank)
    d.mkdir(parents=True)
    tb = "Traceback (most recent call last):\n" + "".join(tb_lines) + text + "\n"
    (d / "error.json").write_text(json.dumps({"message": {"message": text,
                                                          "extraInfo": {"py_callstack": tb, "timestamp": "1700000000"}}}))


def test_peer_loss_after_another_ranks_exit_is_its_consequence(tmp_path, checkout):
    """Rank 1 exits in user code; rank 0's torch call then fails because its peer is gone (Gloo's
    connectFullMesh): one finding, rank 1's exit, with rank 0's error as its consequence (as ``run``
    reads it). Alone, the same peer error is still a DDP901."""
    _error_json(tmp_path, 1, "SystemExit: 0", [f'  File "{W}/train.py", line 10, in step\n    sync(x)\n'])
    _error_json(tmp_path, 0, "RuntimeError: Gloo connectFullMesh failed with peer 1",
                [f'  File "{W}/train.py", line 10, in step\n    sync(x)\n',
                 f'  File "{W}/utils.py", line 5, in sync\n    dist.barrier()\n',
                 '  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 9, in barrier\n'])
    res = explain([str(tmp_path / "job")], root=str(checkout))
    [f] = res.findings
    assert f.code == "DDP904" and f.ranks == (1,)
    assert "connectFullMesh" in f.details["exceptions"]["0"]


def test_a_peer_loss_alone_is_still_reported(tmp_path, checkout):
    _error_json(tmp_path, 0, "RuntimeError: Gloo connectFullMesh failed with peer 1",
                [f'  File "{W}/utils.py", line 5, in sync\n    dist.barrier()\n',
                 '  File "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", line 9, in barrier\n'])
    [f] = explain([str(tmp_path / "job")], root=str(checkout)).findings
    assert f.code == "DDP901" and f.ranks == (0,)


def test_path_mapper_longest_suffix_and_override(tmp_path, checkout):
    m = PathMapper(str(checkout))
    assert m.map(f"{W}/train.py") == str(checkout / "src" / "train.py")
    (checkout / "train.py").write_text("x = 1\n")  # a shorter suffix exists too: the longest wins
    assert PathMapper(str(checkout)).map(f"{W}/train.py") == str(checkout / "src" / "train.py")
    assert m.map("/elsewhere/nothing.py") is None
    other = tmp_path / "other"
    other.mkdir()
    (other / "train.py").write_text("x = 1\n")
    assert PathMapper(str(checkout), [(W, str(other))]).map(f"{W}/train.py") == str(other / "train.py")


def _nested(n):
    x = 1
    for _ in range(n):
        x = [x]
    return x


@pytest.mark.parametrize("content,needle", [
    (b"\x80\x04garbage that is not a pickle", "truncated or not a pickle"),
    (pickle.dumps({"hello": 1}), "no 'entries' and 'version'"),
    (pickle.dumps({"version": "1.0", "entries": []}), "older than 2.2"),
    (pickle.dumps({"version": 2, "entries": []}), "not a string"),
    (pickle.dumps({"version": "2.10", "entries": 5}), "'entries' is not a list"),
    (pickle.dumps({"version": "2.10", "entries": []})[:-5], "truncated or not a pickle"),
    (pickle.dumps(Path("/x")), "refused to load"),
    (pickle.dumps(_nested(40)), "nested deeper"),
])
def test_garbage_gives_a_clear_message(tmp_path, content, needle):
    d = tmp_path / "dumps"
    d.mkdir()
    (d / "trace_rank_0").write_bytes(content)
    with pytest.raises(DumpError) as e:
        read_dump(str(d / "trace_rank_0"))
    assert needle in str(e.value) and "trace_rank_0" in str(e.value)
    res = explain([str(d)])
    assert res.exit_code == 2 and needle in res.error


def test_bad_entries_are_left_out_with_a_note(tmp_path, checkout):
    d = tmp_path / "dumps"
    good = dump("2.10", [ar("2.10", 0, 1), "junk", {"profiling_name": 3}], 2)
    write(d, 0, good)
    write(d, 1, dump("2.10", [ar("2.10", 0, 1)], 2))
    res = explain([str(d)], root=str(checkout))
    assert res.exit_code == 0 and sum("left out" in n for n in res.notes) == 2


def test_malicious_pickle_never_runs(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    d = tmp_path / "dumps"
    d.mkdir()
    (d / "nccl_trace_rank_0").write_bytes(pickle.dumps({"version": "2.10", "entries": [Evil()]}))
    res = explain([str(d)])
    assert res.exit_code == 2 and "refused to load" in res.error and not marker.exists()


def test_object_bomb_is_bounded():
    # one list shared 2**40 times over: loads in microseconds, walking it must stop early
    data = b"\x80\x02]q\x00" + b"(h\x00h\x00tq\x00" * 40 + b"."
    with pytest.raises(DumpError):
        safe_loads(data, max_objects=100_000)


def _cli(*args, cwd):
    p = subprocess.run([sys.executable, "-m", "ddp_lint", "explain", *map(str, args)], cwd=cwd, capture_output=True,
                       text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return p.returncode, p.stdout, p.stderr


def test_cli_nothing_found_and_bad_path_map(tmp_path):
    (tmp_path / "notes.txt").write_text("hello\n")
    rc, out, err = _cli(tmp_path, cwd=tmp_path)
    assert rc == 2 and "no Flight Recorder dump or torchelastic error file found" in err and "Traceback" not in err
    rc, out, err = _cli(tmp_path / "missing", cwd=tmp_path)
    assert rc == 2 and "no such file or folder" in err
    rc, out, err = _cli(tmp_path, "--path-map", "nonsense", cwd=tmp_path)
    assert rc == 2 and "expected FROM=TO" in err


def test_cli_formats(tmp_path, checkout):
    d = tmp_path / "dumps"
    write(d, 0, dump("2.10", [ar("2.10", 0, 1), bc("2.10", 1, 2)], 2))
    write(d, 1, dump("2.10", [ar("2.10", 0, 1), barrier("2.10", 1, 2)], 2))
    rc, out, err = _cli(d, cwd=checkout)
    assert rc == 1 and "src/train.py:9:" in out and "DDP902" in out and out.startswith("ddp-lint explain:")
    rc, out, err = _cli(d, "--output-format", "json", cwd=checkout)
    assert json.loads(out)[0]["code"] == "DDP902"
    rc, out, err = _cli(d, "--output-format", "sarif", cwd=checkout)
    assert json.loads(out)["runs"][0]["results"][0]["ruleId"] == "DDP902"
    rc, out, err = _cli(d, "--output-format", "concise", cwd=checkout)
    assert out.startswith(str(checkout / "src" / "train.py") + ":9:")


def test_subgroups_are_matched_on_their_own(tmp_path, checkout):
    """NCCL-style config: the default group of 4 and a data-parallel group {0, 2}. Rank 2 never
    enqueued the subgroup's collective #2; ranks 1 and 3 are not in it and are not blamed."""
    d = tmp_path / "dumps"
    dp = ("5", "dp")

    def sub(rid, seq, state="completed"):
        return entry("2.10", rid, seq, "all_gather", [[2]], [(f"{W}/train.py", 5, "step")], state=state, pg=dp)

    for r in range(4):
        es = [ar("2.10", 0, 1)]
        if r in (0, 2):
            es.append(sub(1, 1))
            if r == 0:
                es.append(sub(2, 2, state="scheduled"))
        data = dump("2.10", es, 4)
        data["pg_config"]["5"] = {"name": "5", "desc": "dp", "ranks": "[0, 2]"}
        data["pg_status"]["5"] = {"last_completed_collective": 1}
        write(d, r, data)
    res = explain([str(d)], root=str(checkout))
    [f] = res.findings
    assert f.code == "DDP903" and f.details["culprits"] == [2] and f.ranks == (0, 2)
    assert "process group dp's collective #2" in f.message


def test_lazily_completed_entries_are_not_where_a_rank_waits(tmp_path, checkout):
    """gloo marks completion lazily: a dump taken right after a collective returned may still say
    'scheduled' for it. A rank that went on to later collectives is not stuck in it: the mismatch
    at #2 is found, and with a missing rank the wait is placed at the last entry."""
    d = tmp_path / "dumps"
    write(d, 0, dump("2.10", [ar("2.10", 0, 1, state="scheduled"), bc("2.10", 1, 2)], 2))
    write(d, 1, dump("2.10", [ar("2.10", 0, 1, state="scheduled"), barrier("2.10", 1, 2)], 2))
    [f] = explain([str(d)], root=str(checkout)).findings
    assert f.code == "DDP902" and f.details["collective_seq_id"] == 2
    d2 = tmp_path / "d2"
    write(d2, 0, dump("2.10", [ar("2.10", 0, 1, state="scheduled"), bc("2.10", 1, 2)], 2))
    [f] = explain([str(d2)], root=str(checkout)).findings
    assert f.code == "DDP903" and f.details["collective_seq_id"] == 2 and f.range.start.line == 8


def test_fifos_and_devices_are_never_opened(tmp_path, checkout):
    d = tmp_path / "dumps"
    d.mkdir()
    os.mkfifo(d / "trace_rank_0")  # opening it would block forever
    (d / "trace_rank_1").symlink_to("/dev/zero")
    res = explain([str(d)], root=str(checkout))
    assert res.exit_code == 2 and "not a regular file" in res.error
