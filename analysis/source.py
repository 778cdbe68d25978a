"""Source text with cheap position conversions.

``ast`` reports columns as UTF-8 byte offsets; findings use code-point columns. Conversion is free
for ASCII lines (the common case) and done per line otherwise.
"""
from __future__ import annotations

import ast

from .model import Position, Range

# -- what the gates ask of one file's whole text -----------------------------------------------------
_per_text: tuple = ()  # ((kind, text, value), ...), the most recent first


def per_text(kind: str, text: str, make):
    """``make(text)``, memoised by the text's identity for the last few (kind, text) pairs: the text
    gate and the rules' ``reach`` ask the same derived text (NFKC, lower case, the names it defines)
    of one file several times, each a scan of the whole text."""
    global _per_text
    for k, t, v in _per_text:
        if t is text and k == kind:
            return v
    v = make(text)
    _per_text = ((kind, text, v), *_per_text[:7])  # a new tuple: readers on other threads see one or the other
    return v


def _nfkc(text: str) -> str:
    import unicodedata

    return unicodedata.normalize("NFKC", text)


def nfkc(text: str) -> str:
    """``text`` with identifiers as the parser reads them (NFKC-normalised; an ASCII text as is)."""
    return text if text.isascii() else per_text("nfkc", text, _nfkc)


def lowered(text: str) -> str:
    """``text.lower()``, memoised (``per_text``)."""
    return per_text("lower", text, str.lower)


class SourceText:
    __slots__ = ("text", "lines", "bom", "_ascii", "_line_offsets")

    def __init__(self, text: str):
        self.text = text
        # ast sees the text without a leading BOM; columns on line 0 shift by one.
        self.bom = text.startswith("\ufeff")
        # keepends=False; splitlines() also splits on \x0c, \x1c... which ast does not treat as line
        # breaks, so split only on the three real line endings.
        self.lines = _split_lines(text)
        self._ascii: dict[int, bool] = {}
        self._line_offsets: list[int] | None = None

    # -- conversions -------------------------------------------------------------------------
    def line(self, lineno0: int) -> str:
        if 0 <= lineno0 < len(self.lines):
            return self.lines[lineno0]
        return ""

    def char_col(self, lineno0: int, byte_col: int) -> int:
        line = self.line(lineno0)
        if lineno0 == 0 and self.bom:
            line = line[1:]
            return 1 + (min(byte_col, len(line)) if line.isascii()
                        else len(line.encode("utf-8")[:byte_col].decode("utf-8", "replace")))
        is_ascii = self._ascii.get(lineno0)
        if is_ascii is None:
            is_ascii = self._ascii[lineno0] = line.isascii()
        if is_ascii:
            return min(byte_col, len(line))
        return len(line.encode("utf-8")[:byte_col].decode("utf-8", "replace"))

    def node_range(self, node: ast.AST) -> Range:
        sl = node.lineno - 1
        el = (getattr(node, "end_lineno", None) or node.lineno) - 1
        ec = getattr(node, "end_col_offset", None)
        start = Position(sl, self.char_col(sl, node.col_offset))
        end = Position(el, self.char_col(el, ec if ec is not None else node.col_offset))
        return Range(start, end)

    def node_start(self, node: ast.AST) -> Position:
        sl = node.lineno - 1
        return Position(sl, self.char_col(sl, node.col_offset))

    def node_end(self, node: ast.AST) -> Position:
        el = node.end_lineno - 1
        return Position(el, self.char_col(el, node.end_col_offset))

    def segment(self, node: ast.AST) -> str:
        sl = node.lineno - 1
        if sl == (getattr(node, "end_lineno", None) or node.lineno) - 1 and 0 <= sl < len(self.lines):
            # one line (most): the slice of that line, what ``slice`` of its range gives, without
            # the line offsets of the whole text
            ec = getattr(node, "end_col_offset", None)
            return self.lines[sl][self.char_col(sl, node.col_offset):
                                  self.char_col(sl, ec if ec is not None else node.col_offset)]
        return self.slice(self.node_range(node))

    def slice(self, r: Range) -> str:
        return self.text[self.offset(r.start) : self.offset(r.end)]

    def offset(self, pos: Position) -> int:
        """Absolute str offset of a position (clamped into the document)."""
        offs = self._offsets()
        if pos.line >= len(offs):
            return len(self.text)
        if pos.line < 0:
            return 0
        return offs[pos.line] + min(max(pos.column, 0), len(self.lines[pos.line]))

    def position_at(self, offset: int) -> Position:
        import bisect

        offs = self._offsets()
        line = max(bisect.bisect_right(offs, offset) - 1, 0)
        return Position(line, offset - offs[line])

    def _offsets(self) -> list[int]:
        if self._line_offsets is None and "\r" not in self.text:
            # the common case: one pass in C over the "\n"s
            from itertools import accumulate

            self._line_offsets = [0, *accumulate(len(ln) + 1 for ln in self.lines[:-1])]
        if self._line_offsets is None:
            offs = [0]
            text = self.text
            n = len(text)
            i = 0
            for ln in self.lines[:-1]:
                i += len(ln)
                # skip the line terminator (\r\n, \n or \r)
                if i < n and text[i] == "\r" and i + 1 < n and text[i + 1] == "\n":
                    i += 2
                else:
                    i += 1
                offs.append(i)
            self._line_offsets = offs
        return self._line_offsets

    def indent_of(self, lineno0: int) -> str:
        line = self.line(lineno0)
        return line[: len(line) - len(line.lstrip(" \t"))]

    @property
    def newline(self) -> str:
        i = self.text.find("\n")
        if i > 0 and self.text[i - 1] == "\r":
            return "\r\n"
        if i < 0 and "\r" in self.text:
            return "\r"
        return "\n"

    def end_position(self) -> Position:
        return Position(len(self.lines) - 1, len(self.lines[-1]))


def _split_lines(text: str) -> list[str]:
    if "\r" not in text:
        return text.split("\n")
    out: list[str] = []
    start = 0
    i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            out.append(text[start:i])
            start = i + 1
        elif c == "\r":
            out.append(text[start:i])
            if i + 1 < n and text[i + 1] == "\n":
                i += 1
            start = i + 1
        i += 1
    out.append(text[start:])
    return out
