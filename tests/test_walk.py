"""The folder walk (analysis/walk.py): .gitignore, symlinks, exclusions; issue 12 item 9."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ddp_lint.analysis.config import Settings, load_settings
from ddp_lint.analysis.walk import collect_files, parse_ignore_lines
from tests.conftest import ROOT

BAD = ("import torch.distributed as dist\n"
       "dist.init_process_group('nccl')\n"
       "dist.all_gather_object([None] * 2, 1)\n")


def run(*args, cwd, env_extra=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(cwd / ".xdg"))
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "ddp_lint", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=120)


def rel(files, root):
    return sorted(os.path.relpath(f, root).replace(os.sep, "/") for f in files)


@pytest.fixture
def repo(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / "src" / "gen").mkdir(parents=True)
    (tmp_path / "src" / "keep").mkdir()
    for p in ("a.py", "src/b.py", "src/gen/c.py", "src/keep/d.py", "src/skip_me.py", "src/keep/important.py"):
        (tmp_path / p).write_text("x = 1\n")
    (tmp_path / ".gitignore").write_text("# generated\ngen/\n*_me.py\n")
    (tmp_path / "src" / "keep" / ".gitignore").write_text("*.py\n!important.py\n")
    return tmp_path


def test_gitignore_is_respected(repo):
    w = collect_files([str(repo)], Settings())
    assert rel(w.files, repo) == ["a.py", "src/b.py", "src/keep/important.py"]
    assert not w.errors and not w.warnings


def test_gitignore_of_parent_folders_applies_to_a_subfolder_walk(repo):
    w = collect_files([str(repo / "src")], Settings())
    assert rel(w.files, repo) == ["src/b.py", "src/keep/important.py"]


def test_no_respect_gitignore(repo):
    w = collect_files([str(repo)], Settings(), respect_gitignore=False)
    assert len(w.files) == 6
    s = Settings()
    s.respect_gitignore = False
    assert len(collect_files([str(repo)], s).files) == 6


def test_gitignore_needs_a_repository_but_dot_ignore_does_not(tmp_path):
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    (tmp_path / ".gitignore").write_text("a.py\n")
    (tmp_path / ".ignore").write_text("b.py\n")
    assert rel(collect_files([str(tmp_path)], Settings()).files, tmp_path) == ["a.py"]


def test_named_files_are_always_checked(repo):
    w = collect_files([str(repo / "src" / "skip_me.py")], Settings())
    assert w.files == [str(repo / "src" / "skip_me.py")]


def test_config_key_and_cli_flag(repo):
    (repo / "pyproject.toml").write_text("[tool.ddp-lint]\nrespect-gitignore = false\n")
    assert load_settings(repo).respect_gitignore is False
    (repo / "pyproject.toml").write_text("[tool.ddp-lint]\nrespect-gitignore = 'no'\n")
    r = run("check", ".", cwd=repo)
    assert r.returncode == 2 and "respect-gitignore" in r.stderr
    (repo / "pyproject.toml").unlink()
    (repo / "src" / "gen" / "c.py").write_text(BAD)
    assert run("check", "--no-cache", ".", cwd=repo).returncode == 0
    r = run("check", "--no-cache", "--no-respect-gitignore", ".", cwd=repo)
    assert r.returncode == 1 and "c.py" in r.stdout


@pytest.mark.parametrize("lines,path,is_dir,ignored", [
    (["*.py"], "a/b.py", False, True),
    (["/b.py"], "a/b.py", False, False),
    (["/b.py"], "b.py", False, True),
    (["a/**/c.py"], "a/x/y/c.py", False, True),
    (["a/**/c.py"], "a/c.py", False, True),
    (["**/gen"], "x/gen", True, True),
    (["build/"], "build", False, False),
    (["build/"], "build", True, True),
    (["*.py", "!keep.py"], "keep.py", False, False),
    (["\\#x.py"], "#x.py", False, True),
    (["x?.py"], "x/.py", False, False),
    (["[ab].py"], "b.py", False, True),
])
def test_gitignore_patterns(lines, path, is_dir, ignored):
    from ddp_lint.analysis.walk import IgnoreStack

    st = IgnoreStack().push("/r", parse_ignore_lines(lines))
    assert st.ignored("/r/" + path, is_dir) is ignored


def test_cache_folder_is_excluded(tmp_path):
    (tmp_path / ".ddp-lint-cache").mkdir()
    (tmp_path / ".ddp-lint-cache" / "x.py").write_text("")
    (tmp_path / "a.py").write_text("")
    s = Settings(exclude=[".ddp-lint-cache"])
    assert ".ddp-lint-cache" in Settings().exclude
    assert rel(collect_files([str(tmp_path)], s).files, tmp_path) == ["a.py"]


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlink_loop_named_py_is_skipped_with_a_warning(tmp_path):
    """Issue 12 item 9: a symlink loop named *.py crashed `check DIR` (RuntimeError, exit 1) and
    the other files were never checked."""
    os.symlink("loop.py", tmp_path / "loop.py")
    os.symlink("b_loop.py", tmp_path / "a_loop.py")
    os.symlink("a_loop.py", tmp_path / "b_loop.py")
    os.symlink("missing.py", tmp_path / "dangling.py")
    os.symlink(".", tmp_path / "self_dir")  # a folder loop: never followed
    (tmp_path / "z_bad.py").write_text(BAD)
    w = collect_files([str(tmp_path)], Settings())
    assert rel(w.files, tmp_path) == ["z_bad.py"]
    assert len(w.warnings) == 3 and all("symlink loop" in m for m in w.warnings)
    r = run("check", "--no-cache", ".", cwd=tmp_path)
    assert "Traceback" not in r.stderr
    assert r.returncode == 1 and "z_bad.py" in r.stdout  # the rest is still checked
    assert "loop.py: symlink loop, skipped" in r.stderr
    r = run("check", "--no-cache", "loop.py", cwd=tmp_path)
    assert r.returncode == 2 and "symlink loop" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="needs symlinks")
def test_symlinked_file_is_checked_and_fifo_is_not(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "t.py").write_text(BAD)
    (tmp_path / "w").mkdir()
    os.symlink(tmp_path / "real" / "t.py", tmp_path / "w" / "link.py")
    if hasattr(os, "mkfifo"):
        os.mkfifo(tmp_path / "w" / "fifo.py")
    assert rel(collect_files([str(tmp_path / "w")], Settings()).files, tmp_path) == ["w/link.py"]
