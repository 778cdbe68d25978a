"""Applying fixes: non-overlapping text edits, in rounds (as Ruff does), re-checking between rounds.

Edits are plain range replacements, so everything outside a fix's ranges (comments, blank lines,
formatting) is kept byte for byte.
"""
from __future__ import annotations

from typing import Callable, Iterable

from .model import Applicability, Edit, Finding, Fix
from .source import SourceText

MAX_ROUNDS = 10


def allowed(fix: Fix | None, unsafe: bool) -> bool:
    if fix is None:
        return False
    if fix.applicability is Applicability.SAFE:
        return True
    return unsafe and fix.applicability is Applicability.UNSAFE


def apply_edits(text: str, edits: Iterable[Edit], src: SourceText | None = None) -> str:
    """Apply edits (must not overlap) to ``text``."""
    src = src or SourceText(text)
    spans = []
    for e in edits:
        s = src.offset(e.range.start)
        t = src.offset(e.range.end)
        spans.append((s, t, e.content))
    spans.sort(key=lambda x: (x[0], x[1]))
    out = []
    last = 0
    for s, t, content in spans:
        if s < last:
            raise ValueError("overlapping edits")
        out.append(text[last:s])
        out.append(content)
        last = t
    out.append(text[last:])
    return "".join(out)


def _fix_spans(fix: Fix, src: SourceText):
    return [(src.offset(e.range.start), src.offset(e.range.end)) for e in fix.edits]


def apply_fix_round(text: str, findings: list[Finding], unsafe: bool = False,
                    only: Callable[[Finding], bool] | None = None) -> tuple[str, list[Finding]]:
    """Apply every applicable fix whose edits do not overlap an earlier one (or insert at the same
    spot). Returns the new text and the findings whose fixes were applied."""
    src = SourceText(text)
    taken: list[tuple[int, int]] = []
    chosen: list[Edit] = []
    applied: list[Finding] = []
    seen_fixes: set = set()
    for f in findings:
        if not allowed(f.fix, unsafe) or (only is not None and not only(f)):
            continue
        if f.fix in seen_fixes:  # identical fix reported twice (e.g. on two calls)
            applied.append(f)
            continue
        spans = _fix_spans(f.fix, src)
        if any(_overlaps(a, b) for a in spans for b in taken):
            continue
        taken.extend(spans)
        chosen.extend(f.fix.edits)
        applied.append(f)
        seen_fixes.add(f.fix)
    if not chosen:
        return text, []
    return apply_edits(text, chosen, src), applied


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    if a[0] == a[1] or b[0] == b[1]:  # insertions: clash when at the same point or inside
        return b[0] <= a[0] <= b[1] or a[0] <= b[0] <= a[1]
    return a[0] < b[1] and b[0] < a[1]


def fix_all(text: str, check: Callable[[str], list[Finding]], unsafe: bool = False,
            findings: list[Finding] | None = None) -> tuple[str, list[Finding]]:
    """Apply fixes until nothing changes (at most MAX_ROUNDS rounds). ``check`` re-analyses a
    text. Returns the final text and every finding fixed on the way."""
    fixed: list[Finding] = []
    current = text
    if findings is None:
        findings = check(current)
    for _ in range(MAX_ROUNDS):
        new, applied = apply_fix_round(current, findings, unsafe)
        if not applied or new == current:
            break
        fixed.extend(applied)
        current = new
        findings = check(current)
    return current, fixed
