"""Reading and writing user files without ever losing bytes.

Files are decoded the way Python itself would (PEP 263 coding cookie, BOM), and written back in the
same encoding with the same line endings. Undecodable input raises ``SourceError`` with a clear
message instead of a traceback.

Reading never blocks: a path is opened with ``O_NONBLOCK`` and only a regular file is read (a FIFO,
a socket or a device such as ``/dev/zero`` is refused), for sources and configuration files alike.

Writing a fix (``write_source``) goes through a new temporary file created with
``O_CREAT|O_EXCL|O_NOFOLLOW`` (``tempfile.mkstemp``, mode 0600) in the target's folder, so a
symbolic link planted at any name cannot redirect the write. It gets the source's permissions only
after its content is written, then replaces the source with ``os.replace``. Just before the replace
the source is re-checked (device, inode, size, mtime and a hash of its bytes): a file edited while
it was being analysed is left alone. On any failure the temporary file is removed.
"""
from __future__ import annotations

import io
import os
import stat
import tokenize


class SourceError(Exception):
    pass


class SourceChanged(SourceError):
    """The file changed on disk between reading and writing back a fix."""


class SourceFile:
    __slots__ = ("path", "text", "encoding", "identity", "digest")

    def __init__(self, path: str, text: str, encoding: str, identity: tuple | None = None,
                 digest: bytes | None = None):
        self.path = path
        self.text = text
        self.encoding = encoding
        self.identity = identity  # (st_dev, st_ino, st_size, st_mtime_ns) when read from disk
        self.digest = digest  # hash of the bytes read (read_source_file(..., keep_digest=True))


def _identity(st: os.stat_result) -> tuple:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _digest(data: bytes) -> bytes:
    import hashlib  # lazy: only the --fix path needs it

    return hashlib.blake2b(data, digest_size=32).digest()


def read_regular_file(path, what: str = "file") -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file, never blocking on a FIFO or reading a device.

    Raises ``IsADirectoryError``, ``SourceError`` (not a regular file) or ``OSError``."""
    # O_NONBLOCK: opening a FIFO (or a device) must not block; only regular files are read
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"{path}: not a regular {what} (a FIFO, socket or device is never read)")
        return fh.read(), st


def read_source_file(path: str, keep_digest: bool = False) -> SourceFile:
    try:
        data, st = read_regular_file(path)
    except IsADirectoryError:
        raise SourceError(f"{path}: is a directory") from None
    except OSError as e:
        raise SourceError(f"{path}: cannot read: {e.strerror or e}") from None
    sf = decode_bytes(data, path)
    sf.identity = _identity(st)
    if keep_digest:
        sf.digest = _digest(data)
    return sf


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


def _unchanged(target: str, sf: SourceFile) -> str | None:
    """None when ``target`` still is the file ``sf`` was read from, with the same bytes; else why not."""
    try:
        data, st = read_regular_file(target)
    except (OSError, SourceError) as e:
        return f"it can no longer be read ({getattr(e, 'strerror', None) or e})"
    if sf.identity is not None and _identity(st) != sf.identity:
        return "it changed on disk while it was being checked"
    if sf.digest is not None and _digest(data) != sf.digest:
        return "it changed on disk while it was being checked"
    if sf.identity is None and sf.digest is None and data.decode(sf.encoding, "replace") != sf.text:
        return "it changed on disk while it was being checked"
    return None


def write_source(sf: SourceFile, new_text: str) -> None:
    """Atomically replace the file's content, keeping its encoding and permissions.

    A symbolic link is followed to its target, which is rewritten; the link stays a link. Raises
    ``SourceChanged`` (nothing written) when the file changed since it was read, and
    ``SourceError`` with a one-line reason when the write fails; no temporary file is left behind
    either way."""
    import tempfile

    data = new_text.encode(sf.encoding)
    target = os.path.realpath(sf.path)  # a symlinked source: fix the target, keep the link
    d = os.path.dirname(target)
    try:
        st = os.stat(target)
    except OSError as e:
        raise SourceError(f"{sf.path}: cannot write the fix: {e.strerror or e}") from None
    tmp = None
    try:
        # mkstemp: O_CREAT | O_EXCL | O_NOFOLLOW, mode 0600, a random name: nothing planted in the
        # folder can redirect this write, and the content is never readable by more users than the
        # source's until it replaces the source.
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".ddp-lint.tmp", dir=d)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            try:
                if (st.st_uid, st.st_gid) != (os.fstat(fh.fileno()).st_uid, os.fstat(fh.fileno()).st_gid):
                    os.fchown(fh.fileno(), st.st_uid, st.st_gid)
            except OSError:
                pass  # not permitted: the file gets our ownership, and still the source's mode
            os.fchmod(fh.fileno(), stat.S_IMODE(st.st_mode))
        why = _unchanged(target, sf)
        if why is not None:
            raise SourceChanged(f"{sf.path}: not fixed: {why}; run ddp-lint again")
        os.replace(tmp, target)
        tmp = None
    except SourceError:
        raise
    except OSError as e:
        raise SourceError(f"{sf.path}: cannot write the fix: {e.strerror or e}") from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
