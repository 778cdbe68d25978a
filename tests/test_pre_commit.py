"""Issue 30, point 6: the README's ``.pre-commit-config.yaml`` snippet works as written.

A new user pastes the snippet into their project. Here the only change is the repository URL, which
points at a local repository made from this working tree (the files as they are, committed on a
``main`` branch as upstream's), so the hook that runs is this tree's. pre-commit then clones it at the
README's ``rev``, builds the hook's environment (pip) and runs it. Slow (a virtual environment and
an install): marked ``packaging``; ``bash .ci/run`` runs it."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import EXAMPLES, ROOT, require

pytestmark = [pytest.mark.packaging, pytest.mark.slow]

IGNORE = shutil.ignore_patterns(".git", "node_modules", ".venv", "venv", "build", "dist", "*.egg-info",
                                "__pycache__", ".pytest_cache", "*.vsix", ".hypothesis", ".ddp-lint-cache")


def readme_snippet() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"```yaml\n(# \.pre-commit-config\.yaml\n.*?)```", text, re.S)
    assert m, "README.md has no ```yaml block starting with `# .pre-commit-config.yaml`"
    return m.group(1)


def _git(*args, cwd):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.com",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.com")
    r = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, f"git {args}: {r.stderr}"
    return r


@pytest.mark.timeout(900)
def test_readme_pre_commit_snippet_runs_the_hook(tmp_path):
    require(shutil.which("git") is not None, "git is not on PATH")
    pre_commit = shutil.which("pre-commit", path=os.path.dirname(sys.executable)) or shutil.which("pre-commit")
    require(pre_commit is not None, "pre-commit is not installed (it is in the test extra)")

    upstream = tmp_path / "upstream"
    shutil.copytree(ROOT, upstream, ignore=IGNORE)
    _git("init", "-q", "-b", "main", cwd=upstream)
    _git("add", "-A", cwd=upstream)
    _git("commit", "-q", "-m", "upstream", cwd=upstream)

    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(EXAMPLES / "seed_problem2_invalid_usage.py", project / "train.py")
    (project / "clean.py").write_text("print('no torch here')\n")
    snippet = readme_snippet()
    config = re.sub(r"(- repo:\s*)\S+", lambda m: m.group(1) + upstream.as_posix(), snippet, count=1)
    assert config != snippet
    (project / ".pre-commit-config.yaml").write_text(config)
    _git("init", "-q", cwd=project)
    _git("add", "-A", cwd=project)

    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PRE_COMMIT_HOME"] = str(tmp_path / "pre-commit-home")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    r = subprocess.run([pre_commit, "run", "--all-files", "--color", "never"], cwd=project,
                       capture_output=True, text=True, env=env, timeout=840)
    out = r.stdout + r.stderr
    # the hook ran, failed on the seed (a finding), and reported it at its line
    assert r.returncode == 1, out
    assert "ddp-lint" in out and "Failed" in out, out
    assert "train.py:28:5: DDP001" in out, out

    # fixing the file makes the hook pass
    (project / "train.py").write_text("import torch\nprint(torch.__name__)\n")
    _git("add", "-A", cwd=project)
    r = subprocess.run([pre_commit, "run", "--all-files", "--color", "never"], cwd=project,
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Passed" in r.stdout
