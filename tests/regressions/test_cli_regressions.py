"""Reproducers for CLI / file-reading bugs found by tests/reliability/test_cli_hostile.py."""
from __future__ import annotations

import os
import shutil
import threading

import pytest

from ddp_lint.cli import iter_python_files
from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.io import SourceError, decode_bytes, read_source_file
from tests.conftest import EXAMPLES


def test_fifo_in_a_folder_walk_is_skipped(tmp_path):
    """`ddp-lint check DIR` hung forever when DIR held a FIFO named *.py (open() blocks)."""
    os.mkfifo(tmp_path / "pipe.py")
    shutil.copy(EXAMPLES / "seed_problem2_invalid_usage.py", tmp_path / "p2.py")
    files, errors = iter_python_files([str(tmp_path)], Settings())
    assert [os.path.basename(f) for f in files] == ["p2.py"] and not errors
    files, errors = iter_python_files([str(tmp_path / "pipe.py")], Settings())
    assert not files and errors == [f"{tmp_path / 'pipe.py'}: not a regular file or folder"]


def test_reading_a_fifo_never_blocks(tmp_path):
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    got = []
    t = threading.Thread(target=lambda: got.append(pytest.raises(SourceError, read_source_file, str(fifo))))
    t.start()
    t.join(10)
    assert not t.is_alive(), "read_source_file blocked on a FIFO"
    assert "not a regular file" in str(got[0].value)
    with pytest.raises(SourceError, match="is a directory"):
        read_source_file(str(tmp_path))


@pytest.mark.parametrize("data", [b"\x80abc\n", b"\xff\xfe\x00i\x00", bytes(range(256))],
                         ids=["bad-first-byte", "utf16", "all-bytes"])
def test_undecodable_first_line_says_utf8(data):
    """tokenize's 'invalid or missing encoding declaration' is now a message a user can act on."""
    with pytest.raises(SourceError, match="not valid utf-8"):
        decode_bytes(data, "x.py")
