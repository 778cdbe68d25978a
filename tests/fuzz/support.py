"""Invariants every analysis result must satisfy, checked independently of the engine's own helpers.

``check_invariants(text)`` runs the engine with every rule selected and asserts:

- analysis returns (never raises) and no rule crashed (``CheckResult.errors`` is empty);
- every range (finding, related location, fix edit) lies inside the document, start <= end;
- for every safe or unsafe fix: its edits do not overlap each other, applying them (by an
  implementation independent of ``analysis.fixes``) gives the same text as ``apply_edits``, only the
  stated ranges change, the result parses whenever the input parsed, it keeps the file's line
  endings, and re-checking finds no new finding of the same code at that spot;
- fix-all (safe, then safe+unsafe) gives text that parses, and applying it a second time changes
  nothing.

Line splitting here follows the LSP and Python's tokenizer: ``\\r\\n``, ``\\r`` and ``\\n`` only.
"""
from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.fixes import apply_edits, fix_all
from ddp_lint.analysis.model import Applicability, Finding, Fix, Range

ALL = Settings(select=["ALL"])
_EOL = re.compile(r"\r\n|\r|\n")


@dataclass
class Doc:
    """An independent line model of a text."""

    text: str

    def __post_init__(self):
        self.starts = [0]
        self.lengths = []
        last = 0
        for m in _EOL.finditer(self.text):
            self.lengths.append(m.start() - last)
            last = m.end()
            self.starts.append(last)
        self.lengths.append(len(self.text) - last)

    @property
    def nlines(self) -> int:
        return len(self.starts)

    def valid(self, line: int, col: int) -> bool:
        return 0 <= line < self.nlines and 0 <= col <= self.lengths[line]

    def offset(self, line: int, col: int) -> int:
        assert self.valid(line, col), (line, col)
        return self.starts[line] + col


def parses(text: str) -> bool:
    src = text[1:] if text.startswith("\ufeff") else text
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(src)
        return True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def eol_style(text: str) -> set[str]:
    return {m.group() for m in _EOL.finditer(text)}


def assert_range(doc: Doc, r: Range, what: str) -> None:
    s, e = r.start, r.end
    assert doc.valid(s.line, s.column), f"{what}: start {s} outside the document ({doc.nlines} lines)"
    assert doc.valid(e.line, e.column), f"{what}: end {e} outside the document ({doc.nlines} lines)"
    assert (s.line, s.column) <= (e.line, e.column), f"{what}: start {s} after end {e}"


def apply_independently(doc: Doc, fix: Fix) -> tuple[str, list[tuple[int, int, str]]]:
    spans = sorted((doc.offset(e.range.start.line, e.range.start.column),
                    doc.offset(e.range.end.line, e.range.end.column), e.content) for e in fix.edits)
    for (s1, t1, _), (s2, t2, _) in zip(spans, spans[1:]):
        assert t1 <= s2, f"fix {fix.message!r} has overlapping edits"
        assert not (s1 == t1 == s2 == t2), f"fix {fix.message!r} inserts twice at one spot"
    out, last = [], 0
    for s, t, content in spans:
        out.append(doc.text[last:s])
        out.append(content)
        last = t
    out.append(doc.text[last:])
    return "".join(out), spans


def map_offset(offset: int, spans: list[tuple[int, int, str]]) -> int:
    """Where ``offset`` of the old text lands after the edits (an edited spot maps to its start)."""
    delta = 0
    for s, t, content in spans:
        if t <= offset and not (s == t == offset):
            delta += len(content) - (t - s)
        elif s <= offset < t:
            return s + delta
    return offset + delta


def check(text: str, settings: Settings = ALL, filename: str = "fuzz.py") -> list[Finding]:
    res = check_source(text, filename, settings)
    assert not res.errors, "a rule crashed:\n" + "\n".join(res.errors)
    return res.findings


def check_invariants(text: str, *, fixes: bool = True, settings: Settings = ALL,
                     filename: str = "fuzz.py") -> list[Finding]:
    findings = check(text, settings, filename)
    doc = Doc(text)
    syntax = [f for f in findings if f.code == "DDP000"]
    assert len(syntax) <= 1, "more than one DDP000"
    if syntax:
        assert len(findings) == 1, "other findings reported next to a syntax error"
    for f in findings:
        assert f.code and f.message, f
        assert_range(doc, f.range, f"{f.code} {f.message!r}")
        for rel in f.related:
            assert_range(doc, rel.range, f"{f.code} related {rel.message!r}")
        if f.fix is not None:
            assert f.fix.edits, f"{f.code}: a fix without edits"
            for e in f.fix.edits:
                assert_range(doc, e.range, f"{f.code} fix edit")
    if not fixes:
        return findings
    parsed = parses(text)
    eols = eol_style(text)
    for f in findings:
        fx = f.fix
        if fx is None or fx.applicability is Applicability.DISPLAY_ONLY:
            continue
        assert parsed, f"{f.code}: a fix offered on text that does not parse"
        new, spans = apply_independently(doc, fx)
        assert apply_edits(text, fx.edits) == new, f"{f.code}: apply_edits disagrees with the stated edits"
        assert new != text, f"{f.code}: fix {fx.message!r} changes nothing"
        assert parses(new), f"{f.code}: fix {fx.message!r} gives text that does not parse:\n{new}"
        assert eol_style(new) <= (eols or {"\n"}), f"{f.code}: fix mixes line endings {eol_style(new)} into {eols}"
        spot = map_offset(doc.offset(f.range.start.line, f.range.start.column), spans)
        ndoc = Doc(new)
        for g in check(new, settings, filename):
            if g.code != f.code:
                continue
            gs = ndoc.offset(g.range.start.line, g.range.start.column)
            assert gs != spot, (
                f"{f.code}: fix {fx.message!r} leaves the same finding at the same spot: {g.message}\n{new}")
    for unsafe in (False, True):
        chk = lambda t: check(t, settings, filename)  # noqa: E731
        once, _ = fix_all(text, chk, unsafe=unsafe)
        if once != text:
            assert parsed and parses(once), f"fix-all (unsafe={unsafe}) gives text that does not parse:\n{once}"
            assert eol_style(once) <= (eols or {"\n"}), "fix-all mixes line endings"
            for g in check(once, settings, filename):
                assert_range(Doc(once), g.range, f"{g.code} after fix-all")
        twice, applied = fix_all(once, chk, unsafe=unsafe)
        assert twice == once, f"fix-all (unsafe={unsafe}) is not idempotent:\n--- once\n{once}\n--- twice\n{twice}"
        assert not applied
    return findings


def corpus_files():
    """Python files shipped with the project: examples and every rule fixture (incl. .fixed)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    files = sorted((root / "examples").glob("*.py"))
    files += sorted(p for p in (root / "tests" / "fixtures").rglob("*") if p.is_file() and p.suffix in (".py", ".fixed"))
    files += sorted((root / "tests" / "regressions" / "cases").glob("*.py"))
    return files


def read(path) -> str:
    with open(path, encoding="utf-8", newline="") as fh:  # keep line endings as they are on disk
        return fh.read()


def examples(n: int, **kw):
    """``@examples(n)``: n examples under the "ci" profile, 20x that under "long" (or any other)."""
    from hypothesis import settings

    factor = 1 if settings.get_current_profile_name() == "ci" else 20
    return settings(max_examples=n * factor, **kw)
