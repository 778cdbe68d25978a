"""Open documents, incremental edits and LSP position encodings.

The server keeps its own document store instead of pygls' workspace documents, for two reasons:

* Lines. LSP (and Python's parser) break lines only at ``\\n``, ``\\r\\n`` and ``\\r``.
  ``str.splitlines`` also breaks at ``\\x0c``, ``\\x1c``-``\\x1e``, ``\\x85``, ``\\u2028`` and
  ``\\u2029``; a form feed or a Unicode line separator in a comment would shift every position
  below it. Here lines are split exactly as ``analysis.source.SourceText`` splits them.
* Speed. An incremental change is applied by slicing the text at two offsets; line starts are
  recomputed lazily, once per version, not per access.

Columns inside the server are Unicode code points (Python ``str`` indices), the unit that
``analysis`` reports in. They are converted to and from the negotiated ``positionEncoding``
(UTF-8 bytes, UTF-16 code units or UTF-32 code points) only at the protocol boundary.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

from lsprotocol import types as t

from ..analysis.model import Position, Range

_EOL = re.compile(r"\r\n|\r|\n")

UTF8 = t.PositionEncodingKind.Utf8
UTF16 = t.PositionEncodingKind.Utf16
UTF32 = t.PositionEncodingKind.Utf32


# -- column conversion -----------------------------------------------------------------------
def cp_to_units(line: str, col: int, encoding) -> int:
    """Code-point column -> column in ``encoding`` units, for one line of text."""
    col = max(0, min(col, len(line)))
    if encoding == UTF32 or line.isascii():
        return col
    head = line[:col]
    if encoding == UTF8:
        return len(head.encode("utf-8", "surrogatepass"))
    return col + sum(1 for c in head if ord(c) > 0xFFFF)  # UTF-16: astral chars take 2 units


def units_to_cp(line: str, units: int, encoding) -> int:
    """Column in ``encoding`` units -> code-point column (clamped to the line, as LSP says).

    A column that falls inside a character (half a surrogate pair, the middle of a UTF-8
    sequence) is rounded down to that character's start."""
    if units <= 0:
        return 0
    if encoding == UTF32 or line.isascii():
        return min(units, len(line))
    n = 0
    for i, c in enumerate(line):
        o = ord(c)
        if encoding == UTF8:
            w = 1 if o < 0x80 else 2 if o < 0x800 else 3 if o < 0x10000 else 4
        else:
            w = 2 if o > 0xFFFF else 1
        if n + w > units:
            return i
        n += w
    return len(line)


# -- line edits (for keeping findings attached to their lines) -------------------------------
@dataclass(frozen=True, slots=True)
class LineChange:
    """An edit, seen line by line: old lines ``start..end`` (inclusive) were touched, and every
    line after ``end`` moved by ``delta``. ``end == start - 1`` when no existing line was touched
    (whole lines inserted before line ``start``)."""

    start: int
    end: int
    delta: int


class Document:
    __slots__ = ("uri", "path", "text", "version", "language_id", "_starts")

    def __init__(self, uri: str, text: str, version: int | None = None, language_id: str = "python",
                 path: str | None = None):
        self.uri = uri
        self.path = path
        self.text = text
        self.version = version
        self.language_id = language_id
        self._starts: list[int] | None = None

    # -- lines ---------------------------------------------------------------------------------
    def line_starts(self) -> list[int]:
        s = self._starts
        if s is None:
            s = [0]
            s.extend(m.end() for m in _EOL.finditer(self.text))
            self._starts = s
        return s

    @property
    def line_count(self) -> int:
        return len(self.line_starts())

    def line(self, i: int) -> str:
        starts = self.line_starts()
        if i < 0 or i >= len(starts):
            return ""
        a = starts[i]
        b = starts[i + 1] if i + 1 < len(starts) else len(self.text)
        seg = self.text[a:b]
        if seg.endswith("\n"):
            seg = seg[:-2] if seg.endswith("\r\n") else seg[:-1]
        elif seg.endswith("\r"):
            seg = seg[:-1]
        return seg

    # -- positions -----------------------------------------------------------------------------
    def offset_of(self, pos: t.Position, encoding) -> int:
        """Client position -> str offset (clamped into the document)."""
        starts = self.line_starts()
        if pos.line >= len(starts):
            return len(self.text)
        if pos.line < 0:
            return 0
        line = self.line(pos.line)
        return starts[pos.line] + units_to_cp(line, pos.character, encoding)

    def to_cp(self, pos: t.Position, encoding) -> Position:
        """Client position -> analysis position (code points)."""
        if pos.line >= self.line_count:
            last = self.line_count - 1
            return Position(last, len(self.line(last)))
        return Position(pos.line, units_to_cp(self.line(pos.line), pos.character, encoding))

    def to_client(self, pos: Position, encoding) -> t.Position:
        """Analysis position (code points) -> client position."""
        line = max(pos.line, 0)
        if line >= self.line_count:
            last = self.line_count - 1
            return t.Position(line=last, character=cp_to_units(self.line(last), 1 << 30, encoding))
        return t.Position(line=line, character=cp_to_units(self.line(line), pos.column, encoding))

    def range_to_client(self, r: Range, encoding) -> t.Range:
        return t.Range(start=self.to_client(r.start, encoding), end=self.to_client(r.end, encoding))

    # -- edits -----------------------------------------------------------------------------------
    def apply_change(self, change, encoding) -> LineChange | None:
        """Apply one ``TextDocumentContentChangeEvent``. Returns the lines it touched (None for a
        full-text replacement)."""
        rng = getattr(change, "range", None)
        if rng is None:
            self.text = change.text
            self._starts = None
            return None
        starts = self.line_starts()
        old_lines = len(starts)
        lo, hi = rng.start, rng.end
        if (hi.line, hi.character) < (lo.line, lo.character):
            lo, hi = hi, lo  # a reversed range: the same edit as the forward one
        a = self.offset_of(lo, encoding)
        b = self.offset_of(hi, encoding)
        if b < a:
            a, b = b, a
        new_text = change.text
        text = self.text[:a] + new_text + self.text[b:]
        self.text = text
        # Update the line starts around the edit only (a burst of keystrokes in a 7,000-line file
        # must not rescan it each time). The window starts one line before the edit, so that a
        # "\r" before it and a "\n" typed after it are seen as one break, and ends at the first
        # old line start after the edit, whose break is unchanged text.
        sl = bisect.bisect_right(starts, a) - 1
        el = bisect.bisect_right(starts, b) - 1
        i0 = max(sl - 1, 0)
        ws = starts[i0]
        d = len(new_text) - (b - a)
        we = starts[el + 1] + d if el + 1 < old_lines else len(text)
        new_starts = starts[: i0 + 1]
        new_starts.extend(m.end() for m in _EOL.finditer(text, ws, we))
        if el + 2 < old_lines:
            new_starts.extend([x + d for x in starts[el + 2:]] if d else starts[el + 2:])
        self._starts = new_starts
        start = max(min(lo.line, old_lines - 1), 0)
        end = min(max(hi.line, start), old_lines - 1)
        # the exact line delta (an edit can also join a "\r" and a "\n" into one break)
        delta = self.line_count - old_lines
        if (lo.character == 0 and hi.character == 0 and 0 <= lo.line and hi.line < old_lines
                and (new_text == "" or new_text.endswith(("\n", "\r")))):
            end = hi.line - 1  # whole lines inserted/removed: line ``hi.line`` is intact
        return LineChange(start, end, delta)


# -- moving findings with edits ----------------------------------------------------------------
def shift_range(r: Range, ch: LineChange) -> Range | None:
    """The range after ``ch``; None when ``ch`` touched one of its lines."""
    if r.end.line < ch.start:
        return r
    if r.start.line > ch.end:
        d = ch.delta
        if d == 0:
            return r
        return Range(Position(r.start.line + d, r.start.column), Position(r.end.line + d, r.end.column))
    return None
