"""Issue 28, point 8: hints that teach. A FileNotFoundError on another node than the one whose
rank 0 wrote the file says `local_rank == 0` or a shared path; a hint names a static rule when that
rule, run on the script, reports it (each case below is checked both ways)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from tests.conftest import require_torch
from tests.runtime.test_run import line, marks

HERE = Path(__file__).resolve().parent
SCRIPTS = HERE / "hints28"
TIMEOUT = 60.0  # nothing here waits for it


def static_codes(path: Path, code: str) -> list[int]:
    res = check_source(path.read_text(encoding="utf-8"), str(path), Settings(select=[code]))
    return [f.range.start.line + 1 for f in res.findings if f.code == code]


def run(path: Path, **kw):
    require_torch()
    from ddp_lint.analysis.runtime.api import run_script

    return run_script(str(path), nproc=2, timeout=TIMEOUT, emulate=kw.pop("emulate", "off"), **kw)


# -- the multi-node hazard: a file written under `rank == 0`, read on another node -------------------
@pytest.mark.torch
def test_a_file_written_by_rank_0_and_missing_on_the_second_node_says_local_rank_or_a_shared_path(
        tmp_path, monkeypatch):
    from ddp_lint.analysis.runtime.nodes import NodeOptions

    monkeypatch.setenv("CACHE_DIR", str(tmp_path))
    path = SCRIPTS / "rank0_cache.py"
    m = marks(path)
    res = run(path, nodes=NodeOptions(nnodes=2))
    (f,) = res.findings
    assert f.code == "DDP901" and f.ranks == (2, 3) and line(f) == m["read"], f.message
    hint = f.details["hint"]
    assert "`if local_rank == 0:`" in hint and "a path that every node shares" in hint, hint
    assert "rank 0 (node 0, local 0) wrote it under `rank == 0` on another node" in hint, hint
    assert [(r.range.start.line + 1, r.ranks) for r in f.related] == [(m["write"], (0,))]


def _per_node_logs(tmp_path, script: Path, ranks, local_of, missing: str):
    """This node's ranks only (a per-node run of a cluster job): each failed reading ``missing``."""
    from ddp_lint.analysis.runtime.findings import analyse
    from ddp_lint.analysis.runtime.launcher import SHIM_PATH
    from ddp_lint.analysis.runtime.logs import LogReader
    from ddp_lint.analysis.runtime.states import UserCode

    read = marks(script)["read"]
    for r in ranks:
        with open(tmp_path / f"rank-{r}.jsonl", "w") as fh:
            fh.write(json.dumps({"kind": "start", "rank": r, "t": 1.0, "pid": 10 + r, "main_thread": 7,
                                 "script": str(script), "world_size": 4, "group_rank": 1 if r >= 2 else 0,
                                 "local_rank": local_of(r)}) + "\n")
            fh.write(json.dumps({"kind": "exception", "rank": r, "t": 2.0, "type": "FileNotFoundError",
                                 "message": f"[Errno 2] No such file or directory: '{missing}'", "exit_code": 1,
                                 "frames": [{"file": str(script), "line": read, "function": "<module>"}]}) + "\n")
    reader = LogReader(str(tmp_path), 0)
    reader.discover = True
    reader.poll()
    reader.read_stacks()
    return analyse(reader.ranks, user=UserCode([str(script.parent)], [], SHIM_PATH), timed_out=False,
                   timeout=30.0, emulated=False)


def test_on_a_node_without_rank_0_the_scripts_own_guarded_write_explains_the_missing_file(tmp_path):
    script = SCRIPTS / "rank0_cache.py"
    a = _per_node_logs(tmp_path, script, [2, 3], lambda r: r - 2, "/tmp/node1/vocab.pt")
    (f,) = a.findings
    hint = f.details["hint"]
    assert f"the script writes it under `rank == 0` (line {marks(script)['write']})" in hint, hint
    assert "`if local_rank == 0:`" in hint and "a path that every node shares" in hint


def test_a_missing_file_on_the_node_of_rank_0_is_not_called_a_multi_node_hazard(tmp_path):
    script = SCRIPTS / "rank0_cache.py"
    a = _per_node_logs(tmp_path, script, [0, 1], lambda r: r, "/tmp/node0/vocab.pt")
    (f,) = a.findings
    assert "local_rank" not in (f.details.get("hint") or ""), f.details


# -- a static rule would have caught it: the hint names it (and only then) ----------------------------
@pytest.mark.torch
def test_unused_parameter_hint_names_ddp209_which_reports_the_script():
    path = HERE / "scripts16" / "unused_param.py"
    assert static_codes(path, "DDP209")
    res = run(path)
    f = next(f for f in res.findings if f.code == "DDP901")
    assert f.details["static_rule"] == "DDP209" and "static rule DDP209" in f.details["hint"], f.details


@pytest.mark.torch
def test_a_conditionally_unused_parameter_names_no_rule_the_static_check_cannot_see():
    path = SCRIPTS / "unused_conditional.py"
    assert not static_codes(path, "DDP209")
    res = run(path)
    f = next(f for f in res.findings if f.code == "DDP901")
    assert "find_unused_parameters=True" in f.details["hint"] and "static rule" not in f.details["hint"]
    assert "static_rule" not in f.details


@pytest.mark.torch
def test_every_rank_saving_one_checkpoint_names_ddp202(tmp_path):
    path = SCRIPTS / "save_every_rank.py"
    assert static_codes(path, "DDP202") == [marks(path)["save"]]
    res = run(path, script_args=[str(tmp_path)])
    (f,) = [f for f in res.findings if f.code == "DDP908"]
    assert f.details["static_rule"] == "DDP202" and "static rule DDP202" in f.details["hint"], f.details


@pytest.mark.torch
def test_the_global_rank_as_a_device_names_ddp003_on_the_second_node():
    from ddp_lint.analysis.runtime.nodes import NodeOptions

    path = HERE / "node_scripts" / "global_rank_device.py"
    assert static_codes(path, "DDP003") == [marks(path)["set_device"]]
    res = run(path, nodes=NodeOptions(nnodes=2), emulate="on")
    f = next(f for f in res.findings if f.code == "DDP901")
    assert f.details["static_rule"] == "DDP003" and "static rule DDP003" in f.details["hint"], f.details
