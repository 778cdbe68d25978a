"""Issue 28, point 7: static DDP001 and the emulated run agree on the device of ``barrier()``.

torch 2.13 (ProcessGroupNCCL::barrier; distributed_c10d.barrier's docstring says the same) runs
the barrier's all-reduce on ``device_ids[0]``, else the group's bound ``device_id``, else the first
device the group's earlier collectives used, else GPU ``global rank % device count`` (with a
warning). Each script below is checked both ways: the static rule (no torch) and a real 2-rank run
with CUDA/NCCL emulated on the CPU (docs/emulation.md).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from tests.conftest import require_torch
from tests.runtime.test_emulation import describe, marks

SCRIPTS = Path(__file__).resolve().parent / "barrier28"
TIMEOUT = 60.0  # nothing waits for it: a clash fails at once, the clean runs end on their own

# script -> (static DDP001 expected, emulated finding code or None)
CASES = {
    "barrier_first.py": (False, None),
    "barrier_after_ddp.py": (False, None),
    "barrier_device_ids.py": (False, None),
    "barrier_init_device_id.py": (False, None),
    "barrier_after_cuda0.py": (True, "DDP905"),
}


def static_ddp001(path: Path):
    text = path.read_text(encoding="utf-8")
    return [f for f in check_source(text, str(path), Settings(select=["DDP001"])).findings if f.code == "DDP001"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_static_ddp001_on_the_barrier_scripts(name):
    want, _ = CASES[name]
    got = static_ddp001(SCRIPTS / name)
    assert bool(got) == want, [(f.range.start.line + 1, f.message) for f in got]
    m = marks(SCRIPTS / name)
    # never at, nor about, the barrier: it runs where the group's earlier collectives ran
    for f in got:
        assert f.range.start.line + 1 != m.get("barrier")
        assert "barrier" not in f.message, f.message


@pytest.mark.torch
@pytest.mark.parametrize("name", sorted(CASES))
def test_emulated_run_on_the_barrier_scripts(name):
    require_torch()
    from ddp_lint.analysis.runtime.api import run_script

    _, want = CASES[name]
    path = SCRIPTS / name
    res = run_script(str(path), nproc=2, timeout=TIMEOUT, emulate="on", script_args=[])
    assert res.emulated, describe(res)
    if want is None:
        assert res.exit_code == 0 and not res.findings, describe(res)
        return
    codes = [f.code for f in res.findings]
    assert codes == [want], describe(res)
    f = res.findings[0]
    assert f.range.start.line + 1 == marks(path)["reduce"] and set(f.ranks) == {0, 1}, describe(res)
    assert "cuda:0" in f.message, f.message


def test_the_static_finding_names_the_call_the_run_stops_at():
    """barrier_after_cuda0.py: both ways the culprit is the `.cuda()` all-reduce, not the barrier."""
    path = SCRIPTS / "barrier_after_cuda0.py"
    (f,) = static_ddp001(path)
    assert f.range.start.line + 1 == marks(path)["init"]
    assert "torch.ones(2).cuda()" in f.message, f.message
