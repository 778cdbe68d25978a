"""`run --python OTHER/bin/python` asks OTHER, never ddp-lint's own process (issue 28, point 6).

A virtual environment's ``python`` is a link to the same base binary as ddp-lint's own venv, so
comparing resolved paths said "same interpreter" and answered from ddp-lint's site-packages."""
from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

from tests.conftest import require_torch
from ddp_lint.analysis.runtime.api import _probe_modules

ROOT = Path(__file__).resolve().parents[2]


def _bare_venv(tmp_path: Path) -> Path:
    venv.create(tmp_path / "other", with_pip=False, symlinks=True)
    return tmp_path / "other" / "bin" / "python"


def test_the_probe_asks_the_target_interpreter_even_when_it_resolves_to_ours(tmp_path):
    require_torch()
    other = _bare_venv(tmp_path)
    # the situation of the bug: both resolve to one binary, yet only ours has torch
    assert os.path.realpath(other) == os.path.realpath(sys.executable)
    found, why = _probe_modules(str(other), ("torch", "numpy", "json"))
    assert why == ""
    assert found == {"torch": False, "numpy": False, "json": True}
    ours, _ = _probe_modules(sys.executable, ("torch",))
    assert ours == {"torch": True}


def test_run_with_a_venv_without_torch_says_so_for_that_interpreter(tmp_path):
    require_torch()
    other = _bare_venv(tmp_path)
    script = tmp_path / "train.py"
    script.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, "-m", "ddp_lint", "run", "--python", str(other), str(script)],
                       capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert "torch is not installed" in out and str(other) in out
    assert "Traceback" not in out


def test_an_interpreter_that_cannot_run_gives_a_reason(tmp_path):
    found, why = _probe_modules(str(tmp_path / "no-such-python"), ("torch",))
    assert found == {} and "cannot run" in why
