"""Issue 28, point 3b: manual data parallelism. A module never wrapped in DDP whose gradients the
script all-reduces by hand is checked across ranks as a DDP model is (DDP906): with a per-rank
seed and no initial broadcast its parameters diverge. Model-parallel shards, whose gradients are
never all-reduced, are not compared. Real 2-rank gloo jobs on the CPU."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import require_torch
from tests.runtime.test_run import line, marks

SCRIPTS = Path(__file__).resolve().parent / "scripts28"
TIMEOUT = 60.0  # nothing here waits for it

pytestmark = pytest.mark.torch


def run(name: str):
    require_torch()
    from ddp_lint.analysis.runtime.api import run_script

    return run_script(str(SCRIPTS / name), nproc=2, timeout=TIMEOUT, emulate="off", keep_records=True)


def manual_states(res) -> dict[int, list[dict]]:
    """Each rank's fingerprints of modules whose gradients it all-reduced by hand."""
    out = {}
    for r, d in (res.raw.get("ranks") or {}).items():
        out[int(r)] = [e for e in d.get("events") or [] if e.get("kind") == "ddp_state" and e.get("manual")]
    return out


def test_manual_data_parallelism_with_a_per_rank_seed_diverges():
    m = marks(SCRIPTS / "manual_dp_seeded_per_rank.py")
    res = run("manual_dp_seeded_per_rank.py")
    (f,) = res.findings
    assert f.code == "DDP906" and f.ranks == (0, 1), f.message
    assert line(f) == m["reduce"]  # the by-hand gradient all-reduce: there is no DDP wrap to point at
    assert "by hand" in f.message and "'0.weight'" in f.message, f.message
    assert f.details["manual"] is True and "broadcast" in f.details["hint"]


def test_manual_data_parallelism_with_a_broadcast_is_clean_and_was_checked():
    res = run("manual_dp_broadcast.py")
    assert res.exit_code == 0 and not res.findings, [(f.code, f.message) for f in res.findings]
    states = manual_states(res)
    # the module was found (through `p.grad.data`) and compared: clean because equal, not unseen
    for r in (0, 1):
        (st,) = states[r]
        assert [n for n, _ in st["params"]] == ["0.weight", "0.bias", "2.weight", "2.bias"], st
    assert states[0][0]["params"] == states[1][0]["params"]


def test_model_parallel_shards_that_differ_by_design_stay_clean():
    res = run("model_parallel_shards.py")
    assert res.exit_code == 0 and not res.findings, [(f.code, f.message) for f in res.findings]
    states = manual_states(res)
    for r in (0, 1):
        (st,) = states[r]
        # only the replicated head, whose gradients were averaged; the shard is left alone
        assert [n for n, _ in st["params"]] == ["head.weight", "head.bias"], st
