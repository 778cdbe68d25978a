"""Golden fixtures, one folder per rule code: tests/fixtures/<CODE>/

- ``bad_*.py``: every line where a finding of CODE must start ends with ``# expect: CODE`` (several
  codes comma-separated). Findings on other lines, or missing ones, fail.
- ``good_*.py``: correct code that must produce no finding of CODE.
- ``fix_*.py`` + ``fix_*.py.fixed``: applying CODE's fixes (safe and unsafe) must give exactly the
  ``.fixed`` text; the result parses, re-checks silent for CODE, and a second application is a no-op.

Each fixture is checked with only its own code selected, so other rules cannot interfere.

A ``*.ipynb.py`` fixture is a notebook's module (its code cells joined, ``# %%`` between cells):
it is checked under the notebook's name (``bad_x.ipynb``), as the notebook itself is
(tests/test_notebook.py runs each one as a real notebook too).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.fixes import fix_all
from ddp_lint.analysis.registry import all_rules

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXPECT_RE = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")


def _cases(prefix: str, suffix: str = ".py"):
    out = []
    for d in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        for f in sorted(d.glob(f"{prefix}*{suffix}")):
            out.append(pytest.param(d.name, f, id=f"{d.name}/{f.name}"))
    return out


def checked_name(path: Path) -> str:
    """The file name a fixture is checked under: ``x.ipynb.py`` is the module of ``x.ipynb``."""
    return str(path)[:-3] if path.name.endswith(".ipynb.py") else str(path)


def _check(code: str, text: str, path: Path):
    res = check_source(text, checked_name(path), Settings(select=[code]))
    # a rule that raises is dropped from the result (the others go on): on a fixture that is a bug,
    # never a pass (a good fixture would read clean)
    assert not res.errors, res.errors
    return [f for f in res.findings if f.code == code]


@pytest.mark.parametrize("code,path", _cases("bad_"))
def test_bad_fixture(code, path):
    text = path.read_text(encoding="utf-8")
    expected = []
    for i, line in enumerate(text.split("\n")):
        m = EXPECT_RE.search(line)
        if m:
            for c in m.group(1).replace(" ", "").split(","):
                if c == code:
                    expected.append(i)
    assert expected, f"{path} has no `# expect: {code}` marker"
    got = sorted(f.range.start.line for f in _check(code, text, path))
    assert got == sorted(expected), f"{path}: findings on lines {[g + 1 for g in got]}, expected {[e + 1 for e in expected]}"


@pytest.mark.parametrize("code,path", _cases("good_"))
def test_good_fixture(code, path):
    text = path.read_text(encoding="utf-8")
    got = _check(code, text, path)
    assert not got, f"{path}: false positives: " + "; ".join(f"{f.range.start.line + 1}: {f.message}" for f in got)


@pytest.mark.parametrize("code,path", _cases("fix_"))
def test_fix_fixture(code, path):
    text = path.read_text(encoding="utf-8")
    expected_path = path.with_name(path.name + ".fixed")
    assert expected_path.exists(), f"missing {expected_path.name}"
    settings = Settings(select=[code])
    check = lambda t: [f for f in check_source(t, checked_name(path), settings).findings if f.code == code]  # noqa: E731
    before = check(text)
    assert before and any(f.fix for f in before), f"{path}: expected a fixable {code} finding"
    fixed, applied = fix_all(text, check, unsafe=True)
    assert applied
    assert fixed == expected_path.read_text(encoding="utf-8")
    ast.parse(fixed)
    assert not [f for f in check(fixed) if f.fix], f"{path}: still fixable findings after the fix"
    again, applied2 = fix_all(fixed, check, unsafe=True)
    assert again == fixed and not applied2


def test_every_rule_has_fixtures_and_docs():
    rules = all_rules()
    for code, rule in rules.items():
        docs = rule.docs()
        for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## Fix safety"):
            assert heading in docs, f"{code} docs lack {heading!r}"
        if not rule.static:
            continue
        d = FIXTURES / code
        assert d.is_dir(), f"{code} has no fixtures folder"
        assert list(d.glob("bad_*.py")), f"{code} has no bad fixture"
        assert list(d.glob("good_*.py")), f"{code} has no good fixture"
        if rule.fix_availability != "never":
            assert list(d.glob("fix_*.py")), f"{code} has a fix but no fix fixture"


def test_codes_unique_and_well_formed():
    rules = all_rules()
    names = [r.name for r in rules.values()]
    assert len(names) == len(set(names)), "duplicate rule names"
    for code, r in rules.items():
        assert re.fullmatch(r"DDP\d{3}", code), code
        assert r.code == code
        assert re.fullmatch(r"[a-z0-9-]+", r.name), r.name
