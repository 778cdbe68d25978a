"""The findings (messages and related locations included) do not depend on the interpreter's hash
seed: a set or frozenset joined into a message must be sorted first. Stop 46 found three DDP107
messages ("passes `a` (this rank's data) and `b` ...") whose order flipped from run to run."""
from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import FIXTURES, ROOT, scaled

# fixture folders whose messages join several names, the ones most exposed to set order
FOLDERS = ["DDP107", "DDP104", "DDP110", "DDP210"]


def _check(seed: str) -> str:
    env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-m", "ddp_lint", "check", "--select", "ALL", "--isolated", "--no-cache",
                        "--output-format", "json", *(str(FIXTURES / f) for f in FOLDERS)],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=scaled(300))
    assert p.returncode in (0, 1), p.stderr
    return p.stdout


def test_findings_do_not_depend_on_the_hash_seed():
    first = _check("0")
    assert '"DDP107"' in first
    for seed in ("1", "12345"):
        assert _check(seed) == first, f"findings differ between PYTHONHASHSEED=0 and {seed}"
