"""Issue 17.2: the distributions a user installs. Builds the sdist and, from it, the wheel
(`python -m build`), installs the wheel into a brand-new virtual environment and runs `ddp-lint
check` from a folder outside the repository, so that nothing from the checkout can stand in for
what the wheel lacks. One test: it takes a while (a venv, pip), and CI runs it (it is not skipped)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from tests.conftest import EXAMPLES, ROOT

pytestmark = [pytest.mark.packaging, pytest.mark.slow]

IGNORE = shutil.ignore_patterns(".git", "node_modules", ".venv", "venv", "build", "dist", "*.egg-info",
                                "__pycache__", ".pytest_cache", "*.vsix", ".hypothesis")


def _run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r


@pytest.mark.timeout(900)
def test_wheel_from_sdist_installs_and_checks_outside_the_repository(tmp_path):
    pytest.importorskip("build")
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)  # build outside the checkout: no egg-info left in it
    dist = tmp_path / "dist"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # sdist first, then the wheel built from the unpacked sdist: the sdist must hold what the
    # wheel build needs
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)], env=env)
    sdists, wheels = sorted(dist.glob("*.tar.gz")), sorted(dist.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, os.listdir(dist)

    with tarfile.open(sdists[0]) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    for needed in ("pyproject.toml", "README.md", "ddp_lint/__init__.py", "ddp_lint/cli.py",
                   "analysis/__init__.py", "analysis/rules/ddp001_nccl_without_set_device.py",
                   "analysis/runtime/shim.py", "lsp_server/server.py"):
        assert needed in names, needed
    with zipfile.ZipFile(wheels[0]) as zf:
        wnames = zf.namelist()
    tops = {n.split("/", 1)[0] for n in wnames}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"ddp_lint"}, tops  # no `analysis` at top level
    for needed in ("ddp_lint/analysis/engine.py", "ddp_lint/analysis/runtime/shim.py",
                   "ddp_lint/lsp_server/server.py", "ddp_lint/__main__.py"):
        assert needed in wnames, needed

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], env=env)
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    py = bindir / "python"
    _run([str(py), "-m", "pip", "install", "--disable-pip-version-check", "-q", str(wheels[0])], env=env)

    outside = tmp_path / "user-project"
    outside.mkdir()
    for n in ("seed_problem1_hang.py", "seed_problem2_invalid_usage.py"):
        shutil.copy(EXAMPLES / n, outside / n)
    r = subprocess.run([str(bindir / "ddp-lint"), "check", "."], capture_output=True, text=True,
                       cwd=outside, env=env, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "seed_problem2_invalid_usage.py:28:5: DDP001" in r.stdout, r.stdout
    r = _run([str(py), "-c", "import ddp_lint, ddp_lint.analysis.engine, ddp_lint.lsp_server.server, "
              "importlib.util as u; print(ddp_lint.__file__); "
              "print(u.find_spec('analysis'), u.find_spec('lsp_server'))"], cwd=outside, env=env)
    first, second = r.stdout.splitlines()
    assert str(venv) in first and second == "None None", r.stdout
    r = _run([str(py), "-m", "ddp_lint", "rule", "nccl-without-set-device"], cwd=outside, env=env)
    assert "## What it does" in r.stdout
