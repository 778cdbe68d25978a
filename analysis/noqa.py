"""``# noqa`` suppression, as in Ruff: a bare ``# noqa`` silences every finding reported on that
line, ``# noqa: DDP001, DDP101`` only those codes."""
from __future__ import annotations

import re

from .model import Edit, Position, Range

NOQA_RE = re.compile(
    r"#\s*noqa(?::[\s]?(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?",
    re.IGNORECASE,
)
_CODE_RE = re.compile(r"[A-Z]+[0-9]+", re.IGNORECASE)


def parse_noqa(line: str):
    """None when the line has no noqa; "all" for a bare noqa; else the set of codes."""
    if "#" not in line:
        return None
    m = NOQA_RE.search(line)
    if m is None:
        return None
    codes = m.group("codes")
    if not codes:
        return "all"
    return {c.upper() for c in _CODE_RE.findall(codes)}


def is_suppressed(code: str, line: str) -> bool:
    got = parse_noqa(line)
    return got is not None and (got == "all" or code in got)


def add_noqa_edit(line_text: str, lineno0: int, code: str) -> Edit | None:
    """Edit that adds ``code`` to the line's noqa comment (or appends ``  # noqa: CODE``).
    None when the line is already suppressed for that code."""
    m = NOQA_RE.search(line_text) if "#" in line_text else None
    if m is None:
        body = line_text.rstrip()
        start = Position(lineno0, len(body))
        end = Position(lineno0, len(line_text))
        return Edit(Range(start, end), f"  # noqa: {code}")
    codes = m.group("codes")
    if not codes:
        return None  # bare noqa already silences everything
    existing = [c.upper() for c in _CODE_RE.findall(codes)]
    if code in existing:
        return None
    s, e = m.span("codes")
    new = ", ".join(existing + [code])
    return Edit(Range(Position(lineno0, s), Position(lineno0, e)), new)
