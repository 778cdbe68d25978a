"""Reading and writing user files without ever losing bytes.

Files are decoded the way Python itself would (PEP 263 coding cookie, BOM), and written back in the
same encoding with the same line endings. Undecodable input raises ``SourceError`` with a clear
message instead of a traceback.
"""
from __future__ import annotations

import io
import os
import stat
import tokenize


class SourceError(Exception):
    pass


class SourceFile:
    __slots__ = ("path", "text", "encoding")

    def __init__(self, path: str, text: str, encoding: str):
        self.path = path
        self.text = text
        self.encoding = encoding


def read_source_file(path: str) -> SourceFile:
    try:
        # O_NONBLOCK: opening a FIFO (or a device) must not block; only regular files are read
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError
            if not stat.S_ISREG(mode):
                raise SourceError(f"{path}: not a regular file")
            data = fh.read()
    except IsADirectoryError:
        raise SourceError(f"{path}: is a directory") from None
    except OSError as e:
        raise SourceError(f"{path}: cannot read: {e.strerror or e}") from None
    return decode_bytes(data, path)


def decode_bytes(data: bytes, path: str = "<stdin>") -> SourceFile:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    except SyntaxError as e:
        msg = e.msg if hasattr(e, "msg") else str(e)
        if msg.startswith("invalid or missing encoding declaration"):  # undecodable first lines
            msg = ("not valid utf-8 text and no coding cookie; save it as UTF-8 or declare its encoding "
                   "with a coding cookie")
        raise SourceError(f"{path}: {msg}") from None
    try:
        # keep a BOM in the text (utf-8-sig would drop it) so that writing back is lossless
        codec = "utf-8" if encoding == "utf-8-sig" else encoding
        text = data.decode(codec)
    except (UnicodeDecodeError, LookupError) as e:
        raise SourceError(f"{path}: not valid {encoding} text ({e.reason if hasattr(e, 'reason') else e}); "
                          "save it as UTF-8 or declare its encoding with a coding cookie") from None
    return SourceFile(path, text, "utf-8" if encoding == "utf-8-sig" else encoding)


def read_source(path: str) -> str:
    return read_source_file(path).text


def write_source(sf: SourceFile, new_text: str) -> None:
    """Atomically replace the file's content, keeping its encoding and permissions."""
    data = new_text.encode(sf.encoding)
    d = os.path.dirname(os.path.abspath(sf.path))
    tmp = os.path.join(d, f".{os.path.basename(sf.path)}.ddp-lint.tmp")
    try:
        mode = os.stat(sf.path).st_mode & 0o7777
    except OSError:
        mode = None
    with open(tmp, "wb") as fh:
        fh.write(data)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, sf.path)
