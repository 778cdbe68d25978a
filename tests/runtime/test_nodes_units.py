"""Multi-node planning without torch: SLURM node lists, SLURM environment derivation, option
checks, a cluster node's log discovery, report merging (issue 19)."""
from __future__ import annotations

import json
import os
import stat

import pytest
from ddp_lint.analysis.runtime import nodes
from ddp_lint.analysis.runtime.nodes import (
    NodeError,
    NodeOptions,
    expand_nodelist,
    plan,
    slurm_options,
)


@pytest.mark.parametrize("nodelist, hosts", [
    ("gpu[01-03,07]", ["gpu01", "gpu02", "gpu03", "gpu07"]),
    ("a1,b[2-3]", ["a1", "b2", "b3"]),
    ("node[001-003]", ["node001", "node002", "node003"]),
    ("node[09-11]", ["node09", "node10", "node11"]),
    ("n[8-11]", ["n8", "n9", "n10", "n11"]),
    ("rack[1-2]-gpu[01-02]", ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]),
    ("cn[1,3],login1,gpu-a[0-1].cluster", ["cn1", "cn3", "login1", "gpu-a0.cluster", "gpu-a1.cluster"]),
    ("localhost", ["localhost"]),
    ("x[1-5:2]", ["x1", "x3", "x5"]),
])
def test_expand_nodelist(nodelist, hosts):
    assert expand_nodelist(nodelist) == hosts


@pytest.mark.parametrize("bad", ["", "gpu[01-03", "gpu]1[", "gpu[3-1]", "gpu[a-b]", "gpu[]"])
def test_expand_nodelist_rejects(bad):
    with pytest.raises(NodeError):
        expand_nodelist(bad)


SLURM = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "3", "SLURM_NODEID": "2",
         "SLURM_JOB_NODELIST": "gpu[07-08],gpu11", "SLURM_STEP_ID": "0"}


def test_slurm_step_values_win_and_batch_script_is_not_a_step():
    step = {**SLURM, "SLURM_NNODES": "8", "SLURM_JOB_NODELIST": "gpu[01-08]", "SLURM_STEP_NUM_NODES": "2",
            "SLURM_STEP_NODELIST": "gpu[05-06]", "SLURM_STEP_NUM_TASKS": "2", "SLURMD_NODENAME": "gpu06",
            "SLURM_NODEID": "5"}
    o = slurm_options(step, scontrol="")
    assert (o.nnodes, o.node_rank, o.rdzv_endpoint) == (2, 1, "gpu05:29400")
    batch = {k: v for k, v in SLURM.items() if k != "SLURM_STEP_ID"}  # sbatch's script, not srun
    assert slurm_options(batch, scontrol="") is None
    with pytest.raises(NodeError, match="one task per node"):
        slurm_options({**step, "SLURM_STEP_NUM_TASKS": "16"}, scontrol="")


def test_slurm_env_parsed_without_scontrol():
    o = slurm_options(SLURM, scontrol="")
    assert (o.nnodes, o.node_rank, o.rdzv_endpoint, o.rdzv_backend) == (3, 2, "gpu07:29400", "c10d")
    assert o.rdzv_id == "ddp-lint-slurm-4242.0"


def test_slurm_env_through_scontrol(tmp_path):
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\n[ \"$1 $2\" = 'show hostnames' ] && printf 'head-a\\nhead-b\\n'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    o = slurm_options({**SLURM, "SLURM_JOB_NODELIST": "weird-list-only-scontrol-knows"}, scontrol=str(fake))
    assert o.rdzv_endpoint == "head-a:29400"


def test_slurm_env_scontrol_fails_falls_back(tmp_path):
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert slurm_options(SLURM, scontrol=str(fake)).rdzv_endpoint == "gpu07:29400"


def test_slurm_port_override_and_single_node():
    assert slurm_options({**SLURM, "DDP_LINT_RDZV_PORT": "31000"}, scontrol="").rdzv_endpoint == "gpu07:31000"
    assert slurm_options({**SLURM, "SLURM_NNODES": "1"}, scontrol="") is None
    assert slurm_options({}, scontrol="") is None
    with pytest.raises(NodeError):
        slurm_options({k: v for k, v in SLURM.items() if k != "SLURM_NODEID"}, scontrol="")
    hosts_known = {**{k: v for k, v in SLURM.items() if k != "SLURM_NODEID"}, "SLURMD_NODENAME": "gpu08"}
    assert slurm_options(hosts_known, scontrol="").node_rank == 1


def test_plan_under_slurm_passes_through():
    p = plan(NodeOptions(), 4, environ=SLURM, scontrol="")
    assert p.mode == "cluster" and p.slurm and p.nnodes == 3 and p.node_rank == 2
    assert p.torchrun_opts[:8] == ["--nnodes", "3", "--node-rank", "2", "--rdzv-backend", "c10d",
                                   "--rdzv-endpoint", "gpu07:29400"]
    argv = p.argv("py", "/s/shim.py", "/tmp/x", "train.py", ["--lr", "1"])
    assert argv[:2] == ["py", "/s/shim.py"] and argv[-4:] == ["/s/shim.py", "train.py", "--lr", "1"]
    assert "--standalone" not in argv and "--nproc-per-node" in argv


def test_plan_explicit_options_win_over_slurm():
    p = plan(NodeOptions(nnodes=2, rdzv_endpoint="h:1234", rdzv_id="job"), 2, environ=SLURM, scontrol="")
    assert p.mode == "cluster" and p.torchrun_opts == [
        "--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1234", "--rdzv-id", "job",
        "--max-restarts", "0"]
    assert plan(NodeOptions(nnodes=1), 2, environ=SLURM).mode == "single"


def test_plan_simulated_and_errors():
    p = plan(NodeOptions(nnodes=2), 2, environ={})
    assert (p.mode, p.world) == ("simulated", 4)
    argv = p.argv("py", "/s/shim.py", "/tmp/ddp-lint-run-x", "t.py", ["{node}"])
    assert argv[1] == nodes.NODES_SHIM and argv[2] == "2"
    assert argv[argv.index("--") + 1:] == ["/s/shim.py", "t.py", "{node}"]  # the script's args stay as they are
    assert "{is_host}" in " ".join(argv) and "--rdzv-endpoint" in argv
    assert plan(NodeOptions(), 2, environ={}).mode == "single"
    for bad in (NodeOptions(nnodes=0), NodeOptions(nnodes=2, node_rank=1), NodeOptions(nnodes=40),
                NodeOptions(nnodes=2, rdzv_endpoint="h:notaport"), NodeOptions(nnodes=2, node_rank=5, rdzv_endpoint="h:1")):
        with pytest.raises(NodeError):
            plan(bad, 2, environ={})


def test_node_log_reader_discovers_global_ranks(tmp_path):
    r = nodes.NodeLogReader(str(tmp_path), 2)
    assert not r.all_ready()
    for rank in (2, 3):
        (tmp_path / f"rank-{rank}.jsonl").write_text(
            json.dumps({"kind": "start", "rank": rank, "t": 1, "pid": 1, "group_rank": "1", "local_rank": str(rank - 2)})
            + "\n" + json.dumps({"kind": "ready", "rank": rank, "t": 2, "pid": 1}) + "\n")
    r.poll()
    assert sorted(r.ranks) == [2, 3] and r.all_ready()
    assert nodes.rank_places(r.ranks) == {2: (1, 0), 3: (1, 1)}
    assert nodes.place_text(3, nodes.rank_places(r.ranks)) == "rank 3 (node 1, local 1)"


def _finding(code, line, ranks, message):
    return {"code": code, "name": "rank-exception", "message": message, "severity": "error",
            "filename": "/w/train.py", "location": {"row": line, "column": 1},
            "end_location": {"row": line, "column": 9}, "fix": None, "url": None, "noqa_row": line,
            "related": [], "ranks": ranks, "emulated": True, "details": {"static_rule": "DDP001"}}


def test_merge_findings_only_reports(tmp_path, capsys):
    from ddp_lint.cli import main

    a, b = tmp_path / "node0.json", tmp_path / "node1.json"
    a.write_text(json.dumps([_finding("DDP901", 7, [0], "boom")]))
    b.write_text(json.dumps({"ddp_lint_report": 1, "script": "/w/train.py", "findings": [
        _finding("DDP901", 7, [2, 3], "boom"), _finding("DDP903", 9, [2], "hang")],
        "ranks": [{"rank": 2, "status": "exception", "text": "rank 2: x", "node": 1, "local_rank": 0}], "notes": []}))
    assert main(["merge", str(a), str(b), "--output-format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [(f["code"], f["ranks"]) for f in out] == [("DDP901", [0, 2, 3]), ("DDP903", [2])]
    assert out[0]["message"] == "boom (see DDP001) (emulated on CPU)"  # not doubled
    assert main(["merge", str(a), str(b)]) == 1
    text = capsys.readouterr().out
    assert "rank 2 (node 1, local 0): x" in text and "Found 2 runtime problems." in text


def test_merge_bad_input(tmp_path, capsys):
    from ddp_lint.cli import main

    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    other = tmp_path / "other.json"
    other.write_text('{"some": "thing"}')
    for p in (bad, other, tmp_path / "missing.json"):
        assert main(["merge", str(p)]) == 2
        assert "ddp-lint: error:" in capsys.readouterr().err


def test_gpu_slices_give_each_simulated_node_its_own_gpus():
    assert nodes.gpu_slices(4, 2, 2) == ["0,1", "2,3"]
    assert nodes.gpu_slices(8, 2, 2) == ["0,1", "2,3"]
    assert nodes.gpu_slices(4, 2, 2, visible="3,2,1,0") == ["3,2", "1,0"]
    assert nodes.gpu_slices(3, 2, 2) is None and nodes.gpu_slices(0, 2, 1) is None


def test_shim_nodes_starts_one_agent_per_node(tmp_path):
    """shim_nodes.py with a stand-in for the shim: each agent gets its node's options and GPUs."""
    import subprocess
    import sys

    fake = tmp_path / "fake_shim.py"
    fake.write_text("import json, os, sys\n"
                    "node = sys.argv[sys.argv.index('--log-dir') + 1].rsplit('-', 1)[1]\n"
                    f"open(os.path.join({str(tmp_path)!r}, 'agent-' + node), 'w').write(json.dumps("
                    "[sys.argv[1:], os.environ.get('CUDA_VISIBLE_DEVICES'), os.environ.get('DDP_LINT_SHIM_ROLE')]))\n")
    env = {**os.environ, "DDP_LINT_NODE_GPUS": "0,1;2,3", "DDP_LINT_PARENT_PID": str(os.getpid())}
    p = subprocess.run([sys.executable, nodes.NODES_SHIM, "2", sys.executable, str(fake), "--rdzv-conf", "is_host={is_host}",
                        "--log-dir", "x-{node}", "--", "SHIM", "script.py", "{node}"],
                       env=env, capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 0, p.stderr
    got = {i: json.loads((tmp_path / f"agent-{i}").read_text()) for i in (0, 1)}
    assert got[0] == [["--rdzv-conf", "is_host=1", "--log-dir", "x-0", "SHIM", "script.py", "{node}"], "0,1", "torchrun"]
    assert got[1] == [["--rdzv-conf", "is_host=0", "--log-dir", "x-1", "SHIM", "script.py", "{node}"], "2,3", "torchrun"]
