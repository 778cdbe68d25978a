"""Reproducers of bugs found by the fuzz and reliability suites, kept so they stay fixed.

Each test names the bug it pins. Whole-file reproducers live in ``cases/`` and are also part of
the fuzz corpus (tests/fuzz/support.corpus_files)."""
from __future__ import annotations

import pytest

from ddp_lint.analysis.engine import check_source
from tests.fuzz.support import check_invariants


@pytest.mark.parametrize("text,line,col", [
    ("import torch\nx=1\0\n", 1, 3),
    ("\ufeffab\0", 0, 3),  # the BOM is a code point of line 0
    ("a\r\nb\rcc\0d", 2, 2),  # CRLF and a lone CR are both line breaks
    ("\0", 0, 0),
])
def test_nul_byte_is_reported_where_it_is(text, line, col):
    """Python 3.11.4+ raises SyntaxError (not ValueError) for a NUL byte, without a position:
    DDP000 used to land on 1:1 whatever the NUL's line."""
    (f,) = check_source(text, gate=False).findings  # positions, whatever the text gate says
    assert f.code == "DDP000" and "null bytes" in f.message
    assert (f.range.start.line, f.range.start.column) == (line, col)
    check_invariants(text)
