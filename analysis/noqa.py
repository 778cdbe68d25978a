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


# -- comments, file-level directives -------------------------------------------------------------
# ``# ddp-lint: noqa`` (every finding in the file) or ``# ddp-lint: noqa: DDP001, DDP101`` (those
# codes), like the file-level directive of Ruff; only in a real comment, never in a string.
FILE_NOQA_RE = re.compile(
    r"#\s*ddp-lint\s*:\s*noqa(?:\s*:\s*(?P<codes>[A-Z]+[0-9]+(?:[,\s]+[A-Z]+[0-9]+)*))?",
    re.IGNORECASE,
)


def comments(text: str) -> list[tuple[int, int, str]]:
    """The comments of ``text`` as (0-based line, column in code points, text from ``#``), from the
    tokenizer, so a ``#`` inside a string is not a comment. Text the tokenizer rejects falls back to
    lines whose first non-blank character is ``#``."""
    import io
    import tokenize

    bom = text.startswith("\ufeff")
    body = text[1:] if bom else text
    out = []
    try:
        # universal newlines: rows split on \r, \n and \r\n, as SourceText and ast split them
        for tok in tokenize.generate_tokens(io.StringIO(body, newline=None).readline):
            if tok.type == tokenize.COMMENT:
                row, col = tok.start[0] - 1, tok.start[1]
                out.append((row, col + (1 if bom and row == 0 else 0), tok.string))
    except (tokenize.TokenError, SyntaxError, ValueError):
        out = []
        for row, line in enumerate(re.split(r"\r\n|\r|\n", body)):
            stripped = line.lstrip()
            if stripped.startswith("#"):
                col = len(line) - len(stripped)
                out.append((row, col + (1 if bom and row == 0 else 0), stripped.rstrip("\r")))
    return out


def file_exemption(text: str):
    """None (no file-level directive), "all" (``# ddp-lint: noqa``) or the set of exempted codes."""
    if "ddp-lint" not in text.lower():
        return None
    got: set[str] | None = None
    for _, _, c in comments(text):
        m = FILE_NOQA_RE.match(c)
        if m is None:
            continue
        if not m.group("codes"):
            return "all"
        got = (got or set()) | {x.upper() for x in _CODE_RE.findall(m.group("codes"))}
    return got


def may_list(text: str, prefix: str) -> bool:
    """False when no ``# noqa: CODES`` of ``text`` can list a code whose upper-case spelling holds
    ``prefix`` (upper case), so ``line_directives`` need not run the tokenizer for such a code.
    Decided on the raw text, strings included: a comment's directive is the same match at the same
    ``#`` (a match holds no other ``#``, so no earlier one overlaps it), and its code list is a
    prefix of this one's (here the separators may run on past the line's end): a superset."""
    for m in NOQA_RE.finditer(text):
        codes = m.group("codes")
        if codes and prefix in codes.upper():
            return True
    return False


def line_directives(text: str):
    """Every ``# noqa: CODES`` in a real comment: (0-based line, column of ``#``, column where the
    directive ends, [(code, start column, end column), ...]); bare ``# noqa`` is left out (it may
    be meant for another tool). File-level ``# ddp-lint: noqa`` comments are not line directives."""
    out = []
    for row, col, c in comments(text):
        if FILE_NOQA_RE.match(c):
            continue
        m = NOQA_RE.search(c)
        if m is None or not m.group("codes"):
            continue
        base = col + m.start("codes")
        codes = [(cm.group(0).upper(), base + cm.start(), base + cm.end())
                 for cm in _CODE_RE.finditer(m.group("codes"))]
        out.append((row, col + m.start(), col + m.end(), codes))
    return out
