"""Issue 28, point 1 (the new_group case): one rank hangs in new_group() because an earlier
new_group() ran on some ranks only, under a rank condition. The run finding names that earlier
call and the condition around it, and the hint names DDP104 (which finds it statically). Real
2-rank gloo jobs on the CPU; the mismatch is found without waiting for the timeout."""
from __future__ import annotations

from pathlib import Path

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from tests.conftest import require_torch
from tests.runtime.test_run import line, marks

SCRIPTS = Path(__file__).resolve().parent / "scripts28"
TIMEOUT = 60.0  # the default; no test below waits for it

pytestmark = pytest.mark.torch


def run(name: str):
    require_torch()
    from ddp_lint.analysis.runtime.api import run_script

    return run_script(str(SCRIPTS / name), nproc=2, timeout=TIMEOUT, emulate="off")


def _rel_lines(f):
    return {(r.range.start.line + 1, r.ranks) for r in f.related}


def test_new_group_after_a_guarded_new_group_names_the_earlier_call_and_its_guard():
    m = marks(SCRIPTS / "new_group_subset.py")
    res = run("new_group_subset.py")
    assert not res.timed_out
    (f,) = res.findings
    assert f.code == "DDP902" and line(f) == m["hang"] and f.ranks == (0, 1), f.message
    assert f"rank 0 also called new_group() at line {m['early']} under `rank == 0`, which rank 1 did not enter" \
        in f.message, f.message
    assert (m["early"], (0,)) in _rel_lines(f) and (m["guard"], (1,)) in _rel_lines(f), f.related
    assert f.details["static_rule"] == "DDP104" and "DDP104" in f.details["hint"]


def test_both_ranks_in_new_group_with_different_call_counts_is_an_early_verdict():
    """Both ranks wait at the same line, in calls of different order: not one collective. Rank 1's
    new_group() pairs with rank 0's first one (the store barrier counts calls), so rank 1 may also
    get through it and finish before the monitor looks: then the verdict is DDP904 (rank 1 left
    while rank 0 waits) at the same line, naming the same earlier call. Which one a run sees is a
    matter of scheduling; neither waits for the timeout."""
    m = marks(SCRIPTS / "new_group_subset_then_exit.py")
    res = run("new_group_subset_then_exit.py")
    assert not res.timed_out, res.notes
    (f,) = res.findings
    assert f.code in ("DDP903", "DDP904") and line(f) == m["hang"], f.message
    if f.code == "DDP903":
        assert f.ranks == (0, 1), f.message
        assert "found without waiting for the 60 s timeout" in f.message
        assert f"line {m['early']} under `rank == 0`" in f.message, f.message
    assert "new_group" in f.message and "rank == 0" in f.message, f.message
    assert (m["early"], (0,)) in _rel_lines(f) and (m["guard"], (1,)) in _rel_lines(f), f.related
    assert f.details["static_rule"] == "DDP104"


def test_a_members_only_new_group_is_not_a_mismatch():
    """new_group(use_local_synchronization=True) is named from its ranks: only members call it."""
    res = run("new_group_local_sync.py")
    assert res.exit_code == 0 and not res.findings, [(f.code, f.message) for f in res.findings]


@pytest.mark.parametrize("name", ["new_group_subset.py", "new_group_subset_then_exit.py"])
def test_ddp104_finds_the_guarded_new_group_without_running(name):
    path = SCRIPTS / name
    got = [f.range.start.line + 1 for f in check_source(path.read_text(), str(path), Settings(select=["DDP104"])).findings
           if f.code == "DDP104"]
    assert marks(path)["early"] in got, got
