"""``ddp-lint run`` on FSDP2 / DTensor / DCP programs, CPU over gloo (2 ranks): a rank blocked in a
collective hidden inside an API of the modern stack (a functional collective's ``wait_tensor``
under DTensor's redistribute, a state-dict gather, DCP's plan exchange, FSDP2's forward
all-gather) is reported in that API, with its collective, at the user's line; errors that DTensor
and DeviceMesh raise land on their line on every rank."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.conftest import require_torch

SCRIPTS = Path(__file__).resolve().parent / "modern_scripts"
# DTensor's first dispatch is slow on a loaded CPU: the hang timeout leaves it room
HANG_TIMEOUT = float(os.environ.get("DDP_LINT_TEST_MODERN_HANG_TIMEOUT", "12"))

pytestmark = pytest.mark.torch


@pytest.fixture(autouse=True)
def _torch():
    require_torch()


def marks(path: Path) -> dict[str, int]:
    out = {}
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = re.search(r"#\s*\[(\w+)\]", line)
        if m:
            out[m.group(1)] = i
    return out


def run(name: str, timeout: float = HANG_TIMEOUT, args=()):
    from ddp_lint.analysis.runtime.api import run_script

    return run_script(str(SCRIPTS / name), nproc=2, timeout=timeout, emulate="off", script_args=list(args))


def hidden_finding(res, line: int, api: str, op: str):
    """The finding at ``line`` that names ``api`` and its collective ``op``."""
    got = [f for f in res.findings if f.range.start.line + 1 == line and f.code in ("DDP902", "DDP903")]
    assert got, [(f.code, f.range.start.line + 1, f.message) for f in res.findings]
    f = got[0]
    assert f"{api}() (its {op})" in f.message, f.message
    assert "outside any collective" not in f.message
    return f


def test_dtensor_full_tensor_on_one_rank():
    m = marks(SCRIPTS / "dtensor_full_tensor_hang.py")
    res = run("dtensor_full_tensor_hang.py")
    f = hidden_finding(res, m["gather"], "DTensor.full_tensor", "all_gather")
    assert 0 in f.ranks
    assert any(r.range.start.line + 1 == m["barrier"] for r in f.related)


def test_full_state_dict_gather_on_one_rank():
    m = marks(SCRIPTS / "state_dict_gather_hang.py")
    res = run("state_dict_gather_hang.py")
    hidden_finding(res, m["gather"], "get_model_state_dict", "all_gather")


def test_dcp_save_on_one_rank(tmp_path):
    m = marks(SCRIPTS / "dcp_save_hang.py")
    res = run("dcp_save_hang.py", args=[str(tmp_path / "ckpt")])
    hidden_finding(res, m["save"], "dcp.save", "gather_object")


def test_fsdp2_forward_on_one_rank():
    m = marks(SCRIPTS / "fsdp_forward_hang.py")
    res = run("fsdp_forward_hang.py")
    hidden_finding(res, m["forward"], "FSDPModule.forward", "all_gather")


def test_redistribute_in_helper_on_one_rank():
    m = marks(SCRIPTS / "redistribute_one_rank.py")
    res = run("redistribute_one_rank.py")
    f = hidden_finding(res, m["redistribute"], "DTensor.redistribute", "all_gather")
    assert 1 in f.ranks


@pytest.mark.parametrize("script,mark,words", [
    ("dtensor_mixed.py", "mixed", "mixed torch.Tensor and DTensor"),
    ("mesh_dim_name.py", "dim", "tp"),
])
def test_errors_land_on_their_line(script, mark, words):
    m = marks(SCRIPTS / script)
    res = run(script, timeout=45)
    got = [f for f in res.findings if f.code == "DDP901"]
    assert got, [(f.code, f.message) for f in res.findings]
    f = got[0]
    assert f.range.start.line + 1 == m[mark]
    assert words in f.message
    assert sorted(f.ranks) == [0, 1]


def test_fsdp2_on_emulated_gpus():
    """A "cuda" FSDP2 program on a machine without GPUs: the emulation runs its mesh on the CPU
    (gloo) and the hidden all-gather of the forward is pinned like on real GPUs."""
    from ddp_lint.analysis.runtime.api import run_script

    m = marks(SCRIPTS / "emulated_fsdp_forward_hang.py")
    res = run_script(str(SCRIPTS / "emulated_fsdp_forward_hang.py"), nproc=2, timeout=HANG_TIMEOUT, emulate="on")
    f = hidden_finding(res, m["forward"], "FSDPModule.forward", "all_gather")
    assert f.emulated
