"""Regression tests of issue 29 ("Security and reliability, round 3"): R1, R5, R7, R8, R11.

Each test failed on the code before its fix (see the issue's breaks)."""
from __future__ import annotations

import ast
import json
import os
import stat
from pathlib import Path

import pytest

from tests.conftest import ROOT


# -- R1: every write goes through the one atomic writer --------------------------------------------
def _run_result():
    from ddp_lint.analysis.runtime.api import RunResult

    res = RunResult()
    res.script = "train.py"
    return res


def test_run_report_is_0600_and_never_written_through_a_planted_temp_link(tmp_path):
    """R1: the report used to go to ``PATH.tmp<pid>`` (a predictable name, opened with a plain
    ``open(..., "w")``, so a link planted there redirected the write) and was created 0644."""
    from ddp_lint.analysis.runtime.merge import write_report

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    report = tmp_path / "out" / "node.json"
    report.parent.mkdir()
    os.symlink(victim, f"{report}.tmp{os.getpid()}")
    old_umask = os.umask(0o022)
    try:
        assert write_report(str(report), _run_result()) == str(report)
    finally:
        os.umask(old_umask)
    assert victim.read_text() == "precious\n"
    assert not report.is_symlink()
    assert stat.S_IMODE(report.stat().st_mode) == 0o600
    assert json.loads(report.read_text())["ddp_lint_report"] == 1
    leftovers = [p.name for p in report.parent.iterdir() if p.name.endswith(".ddp-lint.tmp")]
    assert leftovers == []


def test_run_report_refuses_a_final_path_that_is_a_symlink(tmp_path):
    """R1: a symbolic link at PATH is refused (it used to be replaced silently by the report)."""
    from ddp_lint.analysis.io import SymlinkRefused
    from ddp_lint.analysis.runtime.merge import write_report

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = tmp_path / "node.json"
    os.symlink(victim, link)
    with pytest.raises(OSError) as e:  # SymlinkRefused
        write_report(str(link), _run_result())
    assert isinstance(e.value, SymlinkRefused) and "symbolic link" in e.value.strerror
    assert link.is_symlink() and os.readlink(link) == str(victim)
    assert victim.read_text() == "precious\n"
    assert [p.name for p in tmp_path.iterdir()] and all(
        not p.name.endswith(".ddp-lint.tmp") for p in tmp_path.iterdir())


_ALLOWED_WRITERS = {
    # the one writer (mkstemp + os.replace)
    "analysis/io.py",
    # moves files written by io.write_temp into place (os.replace / os.link of its own temp files)
    "analysis/cache.py",
}
_SHIM = "analysis/runtime/shim"  # runs in the user's interpreter, never imports ddp-lint: O_NOFOLLOW
_WRITE_ATTRS = {"write_text", "write_bytes", "replace", "rename", "renames", "link", "symlink"}


def _writes_in(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn = node.func
        if isinstance(fn, ast.Name) and fn.id == "open" and node.args and ast.unparse(node.args[0]) == "os.devnull":
            continue
        if isinstance(fn, ast.Name) and fn.id == "open" and len(node.args) >= 2:
            mode = node.args[1]
            if not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)) or set(mode.value) & set("wax+"):
                found.append(f"line {node.lineno}: open(..., {ast.unparse(mode)})")
        elif isinstance(fn, ast.Name) and fn.id == "open":
            for kw in node.keywords:
                if kw.arg == "mode":
                    found.append(f"line {node.lineno}: open(mode=...)")
        elif isinstance(fn, ast.Attribute) and fn.attr in _WRITE_ATTRS:
            base = ast.unparse(fn.value)
            if fn.attr in ("write_text", "write_bytes") or base in ("os", "shutil"):
                found.append(f"line {node.lineno}: {base}.{fn.attr}(...)")
        elif isinstance(fn, ast.Attribute) and fn.attr == "open" and ast.unparse(fn.value) == "os":
            flags = ast.unparse(node.args[1]) if len(node.args) > 1 else ""
            if "O_WRONLY" in flags or "O_RDWR" in flags or "O_CREAT" in flags:
                found.append(f"line {node.lineno}: os.open(..., {flags})")
    return found


def test_every_file_write_goes_through_the_atomic_writer():
    """R1's audit: outside analysis/io.py (and the cache, which moves io.write_temp's files), the
    product opens no file for writing and renames nothing itself; the rank shim (which cannot import
    ddp-lint) writes only in the run's private 0700 folder, never through a link."""
    offenders = []
    for pkg in ("analysis", "lsp_server", "ddp_lint"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in _ALLOWED_WRITERS:
                continue
            writes = _writes_in(ast.parse(path.read_text(encoding="utf-8")))
            if rel.startswith(_SHIM):
                writes = [w for w in writes if w.startswith("line") and "os.open" in w and "NOFOLLOW" not in w]
            offenders += [f"{rel} {w}" for w in writes]
    assert offenders == []
