"""Issue 30, point 8: the project lints itself with Ruff ([tool.ruff] in pyproject.toml), with no
finding and no warning, and never with a file-wide ``# ruff: noqa`` (per-line codes with a reason)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

from tests.conftest import ROOT, require


def _ruff() -> str | None:
    here = os.path.join(os.path.dirname(sys.executable), "ruff")
    return here if os.path.exists(here) else shutil.which("ruff")


def test_ruff_check_is_clean():
    ruff = _ruff()
    require(ruff is not None, "ruff is not installed (it is in the test extra)")
    r = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning" not in r.stderr.lower(), r.stderr  # an invalid noqa directive, a bad setting


def test_no_file_wide_ruff_noqa():
    marker = re.compile(r"^#\s*(ruff|flake8)\s*:\s*noqa\s*$", re.I | re.M)
    offenders = []
    for folder in ("analysis", "ddp_lint", "lsp_server", "tests", "bench", "vscode-client"):
        for dirpath, dirnames, filenames in os.walk(ROOT / folder):
            dirnames[:] = [d for d in dirnames if d not in ("node_modules", "__pycache__", "fixtures")]
            for n in filenames:
                if n.endswith(".py"):
                    p = os.path.join(dirpath, n)
                    with open(p, encoding="utf-8", errors="replace") as fh:
                        if marker.search(fh.read()):
                            offenders.append(p)
    assert not offenders, offenders
