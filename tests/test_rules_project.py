"""Project fixtures: tests/fixtures/<CODE>/project_*/ are small multi-file projects for the rules
that follow a helper or a class into another file of the project (DDP203, DDP207, DDP209).

Every ``.py`` file of such a folder is checked with only CODE selected, at its real path (so the
other files are found); a finding must start on exactly the lines marked ``# expect: CODE``.
A folder without any marker is a near-miss project: it must stay silent."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow import project

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXPECT_RE = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")


def _projects():
    out = []
    for d in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        for proj in sorted(p for p in d.glob("project_*") if p.is_dir()):
            out.append(pytest.param(d.name, proj, id=f"{d.name}/{proj.name}"))
    return out


@pytest.mark.parametrize("code,folder", _projects())
def test_project_fixture(code, folder):
    project.clear()
    expected, got = [], []
    for path in sorted(folder.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(folder)
        for i, line in enumerate(text.split("\n")):
            m = EXPECT_RE.search(line)
            if m and code in m.group(1).replace(" ", "").split(","):
                expected.append((str(rel), i + 1))
        res = check_source(text, str(path), Settings(select=[code]))
        got += [(str(rel), f.range.start.line + 1) for f in res.findings if f.code == code]
    assert sorted(got) == sorted(expected)


def test_there_are_project_fixtures():
    codes = {p.values[0] for p in _projects()}
    assert {"DDP203", "DDP207", "DDP209"} <= codes, codes


def test_caller_is_a_dependency_of_the_helper_check():
    """The helper's findings depend on the caller's file: editing it re-checks the helper."""
    project.clear()
    helper = FIXTURES / "DDP203" / "project_helper" / "utils" / "io.py"
    res = check_source(helper.read_text(encoding="utf-8"), str(helper), Settings(select=["DDP203"]))
    assert str(helper.parent.parent / "train.py") in [p for p, _ in res.dependencies]
