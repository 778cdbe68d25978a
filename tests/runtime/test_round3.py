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
