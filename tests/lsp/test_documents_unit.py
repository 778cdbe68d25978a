"""Position encodings, LSP line breaks and moving findings with edits (no server process)."""
from __future__ import annotations

from lsprotocol import types as t

from analysis.model import Position, Range
from lsp_server.documents import (
    UTF8,
    UTF16,
    UTF32,
    Document,
    LineChange,
    cp_to_units,
    shift_range,
    units_to_cp,
)


def test_columns_in_each_encoding():
    line = 'a = "数据🚀"; b'
    col = line.index("; b")  # code points
    assert cp_to_units(line, col, UTF32) == col
    assert cp_to_units(line, col, UTF16) == col + 1  # the emoji is a surrogate pair
    assert cp_to_units(line, col, UTF8) == len(line[:col].encode("utf-8"))
    for enc in (UTF8, UTF16, UTF32):
        assert units_to_cp(line, cp_to_units(line, col, enc), enc) == col
    # inside the emoji (half a surrogate pair, the middle of a UTF-8 sequence): its start
    e = line.index("🚀")
    assert units_to_cp(line, cp_to_units(line, e, UTF16) + 1, UTF16) == e
    assert units_to_cp(line, cp_to_units(line, e, UTF8) + 2, UTF8) == e
    # past the end: clamped to the line
    assert units_to_cp(line, 999, UTF16) == len(line)


def test_lines_break_only_where_lsp_says():
    doc = Document("file:///x.py", "a\x0cb\u2028c\r\nd\re\nf")
    assert [doc.line(i) for i in range(doc.line_count)] == ["a\x0cb\u2028c", "d", "e", "f"]
    p = doc.to_client(Position(1, 1), UTF16)
    assert (p.line, p.character) == (1, 1)


def test_incremental_changes_and_line_moves():
    doc = Document("file:///x.py", "one\ntwo\nthree\n", 1)
    ch = doc.apply_change(t.TextDocumentContentChangePartial(range=t.Range(
        start=t.Position(line=1, character=0), end=t.Position(line=1, character=0)), text="new\n"), UTF16)
    assert doc.text == "one\nnew\ntwo\nthree\n"
    assert ch == LineChange(1, 0, 1)  # whole line inserted: no old line touched
    r = Range(Position(1, 0), Position(1, 3))  # "two" in the old text
    assert shift_range(r, ch) == Range(Position(2, 0), Position(2, 3))
    # typing inside a line drops what was on it and keeps the rest
    ch = doc.apply_change(t.TextDocumentContentChangePartial(range=t.Range(
        start=t.Position(line=2, character=1), end=t.Position(line=2, character=2)), text="W"), UTF16)
    assert doc.line(2) == "tWo"
    assert shift_range(Range(Position(2, 0), Position(2, 3)), ch) is None
    assert shift_range(Range(Position(3, 0), Position(3, 5)), ch) == Range(Position(3, 0), Position(3, 5))
    # deleting whole lines moves the lines below up
    ch = doc.apply_change(t.TextDocumentContentChangePartial(range=t.Range(
        start=t.Position(line=0, character=0), end=t.Position(line=2, character=0)), text=""), UTF16)
    assert doc.text == "tWo\nthree\n"
    assert shift_range(Range(Position(3, 0), Position(3, 5)), ch) == Range(Position(1, 0), Position(1, 5))
    # a full replacement
    assert doc.apply_change(t.TextDocumentContentChangeWholeDocument(text="x"), UTF16) is None
    assert doc.text == "x"


def test_incremental_change_in_utf16_after_emoji():
    doc = Document("file:///x.py", "s = '🚀'; x = 1\n", 1)
    col = cp_to_units(doc.line(0), doc.line(0).index("1"), UTF16)
    doc.apply_change(t.TextDocumentContentChangePartial(range=t.Range(
        start=t.Position(line=0, character=col), end=t.Position(line=0, character=col + 1)), text="2"), UTF16)
    assert doc.text == "s = '🚀'; x = 2\n"


def test_incremental_line_starts_match_a_full_rescan():
    import random

    rnd = random.Random(1234)
    pieces = ["a", "bc", "\n", "\r", "\r\n", "é", "🚀", "\x0c", " "]
    text = "".join(rnd.choice(pieces) for _ in range(200))
    doc = Document("file:///x.py", text, 1)
    for step in range(600):
        n = doc.line_count
        sl = rnd.randrange(n)
        el = min(n - 1, sl + rnd.choice([0, 0, 1, 2]))
        sc = rnd.randrange(len(doc.line(sl)) + 2)
        ec = rnd.randrange(len(doc.line(el)) + 2)
        if el == sl and ec < sc:
            sc, ec = ec, sc
        new = "".join(rnd.choice(pieces) for _ in range(rnd.choice([0, 1, 1, 3])))
        enc = rnd.choice([UTF8, UTF16, UTF32])
        a = doc.offset_of(t.Position(line=sl, character=sc), enc)
        b = doc.offset_of(t.Position(line=el, character=ec), enc)
        expected = doc.text[:min(a, b)] + new + doc.text[max(a, b):]
        doc.apply_change(t.TextDocumentContentChangePartial(range=t.Range(
            start=t.Position(line=sl, character=sc), end=t.Position(line=el, character=ec)), text=new), enc)
        assert doc.text == expected
        fresh = Document("file:///y.py", doc.text)
        assert doc.line_starts() == fresh.line_starts(), step
