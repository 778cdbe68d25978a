"""Issue 28 (``ddp-lint run``, round 3) on real 2-rank gloo jobs (torchrun or self-spawning)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import require_torch
from tests.runtime.test_run import line, marks

SCRIPTS = Path(__file__).resolve().parent / "scripts28"
TIMEOUT = 60.0  # the default; no test below waits for it

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _torch():
    require_torch()


def run(name: str, timeout: float = TIMEOUT, **kw):
    from ddp_lint.analysis.runtime.api import run_script

    return run_script(str(SCRIPTS / name), nproc=2, timeout=timeout, emulate="off", **kw)


def test_a_killed_rank_is_reported_at_its_freshest_position_with_its_age():
    m = marks(SCRIPTS / "killed_after_fast_steps.py")
    res = run("killed_after_fast_steps.py")
    f = next(f for f in res.findings if f.code == "DDP904")
    # not the set-up line the sampler saw last: the loop, where the collective log saw it
    assert f.ranks == (1,) and m["loop"] <= line(f) <= m["killed"], (line(f), f.message)
    assert "killed (SIGKILL; likely the OOM killer)" in f.message
    age = re.search(r"(\d+\.\d) s before it was killed", f.message)
    assert age is not None and float(age.group(1)) < 5.0, f.message


def test_a_mismatch_hang_is_reported_without_waiting_for_the_timeout():
    m = marks(SCRIPTS / "group_mismatch.py")
    res = run("group_mismatch.py")  # the 60 s default
    assert [f.code for f in res.findings] == ["DDP902"], [(f.code, f.message) for f in res.findings]
    f = res.findings[0]
    assert f.ranks == (0, 1) and line(f) == m["reduce"]
    assert [(r.range.start.line + 1, r.ranks) for r in f.related] == [(m["barrier"], (1,))]
    assert not res.timed_out
    assert any("without waiting for the 60 s timeout" in n for n in res.notes), res.notes


def test_a_self_spawning_scripts_slow_start_up_is_not_counted_as_a_hang(monkeypatch):
    """The timeout counts from the moment the ranks run (init_process_group named them), as under
    torchrun: 30 s of start-up against a 25 s timeout is a clean run, not "did not start" or DDP903
    (the timeout is generous for what follows init: the machine may be loaded)."""
    from ddp_lint.analysis.runtime.nodes import free_port

    monkeypatch.setenv("SPAWN_PORT", str(free_port()))
    monkeypatch.setenv("SLOW_START", "30")
    res = run("spawn_slow_start.py", timeout=25.0)
    assert res.launched == "self-spawning"
    assert res.exit_code == 0 and not res.findings and not res.timed_out, (
        [(f.code, f.message) for f in res.findings], res.notes, res.error)
    assert res.output.count("REDUCED") == 2 and [r.status for r in res.ranks] == ["ok", "ok"]


def test_a_self_spawning_script_has_no_ranks_up_before_they_are_named(tmp_path):
    from ddp_lint.analysis.runtime.logs import LogReader

    reader = LogReader(str(tmp_path), 0)
    reader.discover = True
    assert not reader.all_ready()  # nothing named yet: start-up, under the start-up bound
    (tmp_path / "rank-0.jsonl").write_text('{"kind": "start", "rank": 0, "t": 1.0, "pid": 5}\n'
                                           '{"kind": "ready", "rank": 0, "t": 1.1, "pid": 5}\n')
    reader.poll()
    assert reader.all_ready()


def test_no_sync_held_on_every_step_is_ddp907_at_the_no_sync_line():
    m = marks(SCRIPTS / "no_sync_every_step.py")
    res = run("no_sync_every_step.py")
    # one finding: the replicas' divergence (DDP906) is its consequence
    assert [f.code for f in res.findings] == ["DDP907"], [(f.code, f.message) for f in res.findings]
    f = res.findings[0]
    assert line(f) == m["nosync"] and f.ranks == (0, 1)
    assert f"no_sync() here was held around every forward of the DDP model wrapped at line {m['ddp']}" in f.message
    assert [(r.range.start.line + 1, r.ranks) for r in f.related] == [(m["ddp"], (0, 1))]
    assert f.details["no_sync_entered"] == 3
