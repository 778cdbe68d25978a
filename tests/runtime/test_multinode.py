"""Multi-node ``ddp-lint run`` (issue 19): 2 simulated nodes x 2 ranks on this machine (real
torchrun agents meeting in a c10d rendezvous), a real pass-through job of two ``ddp-lint run``
processes that write per-node reports, and ``ddp-lint merge`` over them.

Each test starts 4 ranks and 2 torchrun agents (10-20 s on a busy 2-core machine).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import require_torch

SCRIPTS = Path(__file__).resolve().parent / "node_scripts"
TIMEOUT = 45.0  # no test waits for it: the failures are detected by errors
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _torch():
    require_torch()


@pytest.fixture
def shared_dir():
    """A folder outside the node-local ones (/tmp, $TMPDIR): a file there is one file for every node."""
    base = Path.home() / ".cache" / "ddp-lint-tests"
    base.mkdir(parents=True, exist_ok=True)
    d = Path(tempfile.mkdtemp(prefix="shared-", dir=base))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def marks(path: Path) -> dict[str, int]:
    import re

    out = {}
    for i, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = re.search(r"#\s*\[(\w+)\]", text)
        if m:
            out[m.group(1)] = i
    return out


def run_nodes(name: str, *args, **kw):
    from ddp_lint.analysis.runtime.api import run_script
    from ddp_lint.analysis.runtime.nodes import NodeOptions

    return run_script(str(SCRIPTS / name), nproc=2, timeout=TIMEOUT, nodes=NodeOptions(nnodes=2),
                      script_args=[str(a) for a in args], **kw)


def summary(res):
    return [(f.code, f.ranks, f.range.start.line + 1, f.message) for f in res.findings]


def places(res):
    return {rs.rank: (rs.node, rs.local_rank) for rs in res.ranks}


def test_global_rank_as_device_fails_on_the_second_node():
    res = run_nodes("global_rank_device.py")
    m = marks(SCRIPTS / "global_rank_device.py")
    assert res.multinode == "simulated" and res.nnodes == 2 and res.emulated, res.notes
    assert places(res) == {0: (0, 0), 1: (0, 1), 2: (1, 0), 3: (1, 1)}
    assert [f.code for f in res.findings] == ["DDP901"], summary(res)
    f = res.findings[0]
    assert f.ranks == (2, 3) and f.range.start.line + 1 == m["set_device"]
    assert "invalid device ordinal" in f.message and "cuda:2, cuda:3 do not exist" in f.message
    assert "LOCAL_RANK" in f.details["hint"]
    assert [(r.range.start.line + 1, r.ranks) for r in f.related if r.ranks == (0, 1)] == [(m["all_reduce"], (0, 1))]
    assert any("each simulated node has its own 2 emulated GPUs" in n for n in res.notes)


def test_correct_script_is_clean_on_two_nodes(shared_dir):
    res = run_nodes("clean_nodes.py", shared_dir / "model.pt")
    assert res.exit_code == 0 and res.findings == [], (summary(res), res.notes, res.output[-3000:])
    assert [rs.status for rs in res.ranks] == ["ok"] * 4
    # every node sees its own 2 GPUs (the script asserts device_count() == LOCAL_WORLD_SIZE)
    assert "placement [('0', 0), ('0', 1), ('1', 0), ('1', 1)]" in res.output


def test_local_rank_guarded_barrier_names_ranks_0_and_2_against_1_and_3():
    res = run_nodes("local_guard_barrier.py")
    m = marks(SCRIPTS / "local_guard_barrier.py")
    assert [f.code for f in res.findings] == ["DDP902"], summary(res)
    f = res.findings[0]
    assert f.range.start.line + 1 == m["barrier"] and f.ranks == (0, 1, 2, 3)
    assert f.message.startswith(f"ranks 0, 2 are in barrier() here, ranks 1, 3 are in all_reduce() at line {m['all_reduce']}")
    assert [(r.range.start.line + 1, r.ranks) for r in f.related] == [(m["all_reduce"], (1, 3))]
    assert "once per job" in f.details["hint"] and f.details["static_rule"] == "DDP104"


def test_two_nodes_saving_one_checkpoint_path(shared_dir):
    res = run_nodes("shared_checkpoint.py", shared_dir / "ckpt.pt")
    m = marks(SCRIPTS / "shared_checkpoint.py")
    assert [f.code for f in res.findings] == ["DDP908"], summary(res)
    f = res.findings[0]
    assert f.ranks == (0, 2) and f.range.start.line + 1 == m["save"]
    assert "ranks 0 (node 0, local 0) and 2 (node 1, local 0) both write" in f.message
    assert str(shared_dir / "ckpt.pt") in f.message and "2 nodes" in f.message
    assert f.severity.value == "warning"
    assert f.details["writers"]["2"] == {"node": 1, "local_rank": 0, "via": "torch.save", "line": m["save"]}
    assert "local_rank == 0" in f.details["hint"]
    assert res.exit_code == 1


def test_node_local_tmp_path_is_not_shared_across_nodes(tmp_path):
    """/tmp is node-local on a cluster: node 0 and node 1 writing /tmp/x write two files."""
    res = run_nodes("shared_checkpoint.py", tmp_path / "ckpt.pt")
    assert res.findings == [], summary(res)


def test_text_report_names_the_node_of_each_rank(shared_dir):
    p = subprocess.run([sys.executable, "-m", "ddp_lint", "run", str(SCRIPTS / "shared_checkpoint.py"),
                        "--nnodes", "2", "--nproc", "2", "--timeout", str(TIMEOUT), "--", str(shared_dir / "c.pt")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert p.returncode == 1, p.stderr[-3000:]
    assert "on 2 simulated nodes x 2 ranks" in p.stdout
    assert "rank 2 (node 1, local 0): finished cleanly" in p.stdout
    assert "DDP908" in p.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_real_pass_through_job_and_merge(tmp_path):
    """Two `ddp-lint run` processes, one per node, joined by torchrun's rendezvous as on a cluster;
    each sees only its own ranks and writes its report; merge tells the whole story. Node 1 starts
    20 s after node 0: the start-up bound (15 s here) counts from the rendezvous, not each start."""
    import time

    endpoint = f"127.0.0.1:{_free_port()}"
    procs = []
    for node in (0, 1):
        code = ("import sys; from ddp_lint.analysis.runtime import api, cli, merge, nodes; "
                f"res = api.run_script({str(SCRIPTS / 'local_guard_barrier.py')!r}, nproc=2, timeout={TIMEOUT}, "
                f"startup_timeout=15.0, nodes=nodes.NodeOptions(nnodes=2, rdzv_endpoint={endpoint!r}, rdzv_id='t19')); "
                f"merge.write_report({str(tmp_path / 'node-{node}.json')!r}, res); sys.stdout.write(cli.format_text(res))")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        procs.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, cwd=ROOT, env=env))
        if node == 0:
            time.sleep(20)
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert "did not start" not in out and "DDP902" in out, (out, err[-2000:])
    reports = sorted(tmp_path.glob("node-*.json"))
    assert [r.name for r in reports] == ["node-0.json", "node-1.json"]
    per_node = [json.loads(r.read_text()) for r in reports]
    assert sorted(sorted(rs["rank"] for rs in d["ranks"]) for d in per_node) == [[0, 1], [2, 3]]
    assert all(d["multinode"] == "cluster" and d["nnodes"] == 2 for d in per_node)
    m = marks(SCRIPTS / "local_guard_barrier.py")
    p = subprocess.run([sys.executable, "-m", "ddp_lint", "merge", *map(str, reports), "--output-format", "json"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert p.returncode == 1, p.stderr
    merged = json.loads(p.stdout)
    assert [(f["code"], f["ranks"], f["location"]["row"]) for f in merged] == [("DDP902", [0, 1, 2, 3], m["barrier"])]
    assert merged[0]["message"].startswith("ranks 0, 2 are in barrier() here, ranks 1, 3 are in all_reduce()")
    p = subprocess.run([sys.executable, "-m", "ddp_lint", "merge", *map(str, reports)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert "rank 3 (node 1, local 1)" in p.stdout and "4 ranks on 2 nodes" in p.stdout


def test_every_rank_opening_one_file_for_writing_on_one_node(tmp_path):
    """One node, no guard: ranks 0 and 1 both open metrics.json with "w" (under /tmp: one node, one
    file). Per-rank names and appends to a shared log are not findings."""
    from ddp_lint.analysis.runtime.api import run_script

    path = SCRIPTS / "every_rank_writes.py"
    res = run_script(str(path), nproc=2, timeout=TIMEOUT, emulate="off", script_args=[str(tmp_path)])
    assert [f.code for f in res.findings] == ["DDP908"], summary(res)
    f = res.findings[0]
    assert f.ranks == (0, 1) and f.range.start.line + 1 == marks(path)["write"]
    assert f.message.startswith(f"ranks 0 and 1 both write {tmp_path / 'metrics.json'} (open() for writing)")
    assert "(node" not in f.message  # one machine, no simulated nodes: no node names
