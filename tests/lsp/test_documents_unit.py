"""Position encodings, LSP line breaks and moving findings with edits (no server process)."""
from __future__ import annotations

from lsprotocol import types as t

from ddp_lint.analysis.model import Position, Range
from ddp_lint.lsp_server.documents import (
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


def test_quick_fix_titles_by_applicability():
    """Safe: preferred; unsafe: titled, not preferred; display-only: disabled, or not offered."""
    from ddp_lint.analysis.model import Applicability
    from ddp_lint.lsp_server.server import create_server

    server = create_server()
    doc = Document("file:///x.py", "x = 1\n", 3)
    d = t.Diagnostic(range=t.Range(start=t.Position(line=0, character=0), end=t.Position(line=0, character=1)),
                     message="m", code="DDP999", source="ddp-lint")
    edits = [t.TextEdit(range=d.range, new_text="y")]

    def fix(app):
        return {"applicability": app, "title": "Do it", "edits": edits, "version": 3}

    safe = server.quick_fix(doc, d, fix(Applicability.SAFE), False)
    assert safe.is_preferred and safe.title == "Do it (DDP999)" and safe.edit is not None
    unsafe = server.quick_fix(doc, d, fix(Applicability.UNSAFE), False)
    assert not unsafe.is_preferred and "unsafe fix" in unsafe.title and unsafe.edit is not None
    assert server.quick_fix(doc, d, fix(Applicability.DISPLAY_ONLY), False) is None
    shown = server.quick_fix(doc, d, fix(Applicability.DISPLAY_ONLY), True)
    assert shown.edit is None and shown.disabled is not None and "display only" in shown.title


def test_reversed_range_is_the_same_edit_as_the_forward_one():
    """A reversed-range delete (end before start) used the unsorted lines: the deleted line was
    not seen as touched, and a finding on it (kept through a syntax error) stayed, stale."""
    text = "a\nb\nc\nd\n"
    for (sl, sc, el, ec, new) in [(3, 0, 2, 0, ""), (2, 1, 1, 0, "X"), (3, 0, 1, 0, "q\n"), (2, 0, 0, 1, "")]:
        fwd, rev = Document("file:///f.py", text), Document("file:///r.py", text)
        a = fwd.apply_change(t.TextDocumentContentChangePartial(range=t.Range(
            start=t.Position(line=el, character=ec), end=t.Position(line=sl, character=sc)), text=new), UTF16)
        b = rev.apply_change(t.TextDocumentContentChangePartial(range=t.Range(
            start=t.Position(line=sl, character=sc), end=t.Position(line=el, character=ec)), text=new), UTF16)
        assert fwd.text == rev.text and a == b, (sl, sc, el, ec, a, b)
    # the finding on the deleted line 2 goes
    doc = Document("file:///x.py", text)
    ch = doc.apply_change(t.TextDocumentContentChangePartial(range=t.Range(
        start=t.Position(line=3, character=0), end=t.Position(line=2, character=0)), text=""), UTF16)
    assert shift_range(Range(Position(2, 0), Position(2, 1)), ch) is None
    assert shift_range(Range(Position(3, 0), Position(3, 1)), ch) == Range(Position(2, 0), Position(2, 1))


def test_run_title_says_when_the_run_is_emulated():
    from ddp_lint.lsp_server.runtime import run_title

    assert run_title(None, "auto") == "Run with torchrun on local GPUs (ddp-lint)"  # not counted yet
    assert run_title(2, "auto") == "Run with torchrun on local GPUs (ddp-lint)"
    assert run_title(0, "auto") == "Run with torchrun on local GPUs (emulated on CPU) (ddp-lint)"
    assert run_title(4, "on") == "Run with torchrun on local GPUs (emulated on CPU) (ddp-lint)"
    assert run_title(0, "off") == "Run with torchrun on CPU (ddp-lint)"


def test_fix_of_a_finding_is_what_the_diagnostic_carries():
    """``current_fix`` takes the fix straight from the Finding (``convert.fix_of``); it must be the
    same fix a client gets back from ``Diagnostic.data``."""
    from ddp_lint.analysis.config import Settings
    from ddp_lint.analysis.engine import check_source
    from ddp_lint.lsp_server.convert import fix_from_data, fix_of, to_diagnostic

    text = "import torch.distributed as dist\n\ndist.init_process_group(backend='nccl')\nprint('数据🚀', dist.get_rank())\n"
    doc = Document("file:///x.py", text, 4)
    found = [f for f in check_source(text, "x.py", Settings(select=["ALL"])).findings if f.fix is not None]
    assert found
    for enc in (UTF8, UTF16, UTF32):
        for f in found:
            assert fix_of(f, doc, enc) == fix_from_data(to_diagnostic(f, doc, enc, with_fix=True).data)
