"""Reading and writing user files without ever losing bytes.

Files are decoded the way Python itself would (PEP 263 coding cookie, BOM), and written back in the
same encoding with the same line endings. Undecodable input raises ``SourceError`` with a clear
message instead of a traceback.

Reading never blocks: a path is opened with ``O_NONBLOCK`` and only a regular file is read (a FIFO,
a socket or a device such as ``/dev/zero`` is refused, and so is a file of /proc or /sys), with a
size cap, for sources, imported modules and configuration files alike (``read_regular_file``, the
one reader of every file the checker reads).

Every file ddp-lint writes (a fix, a ``run --report``, the cache, a run's ``sitecustomize.py``)
goes through ``write_temp`` / ``atomic_write``: a new temporary file created with
``O_CREAT|O_EXCL|O_NOFOLLOW`` (``tempfile.mkstemp``, mode 0600) in the target's folder, so a
symbolic link planted at any name cannot redirect the write, then ``os.replace``. A final path that
is a symbolic link is refused, except for a fix (``write_source``), which rewrites the link's target.
A fix's temporary file gets the source's permissions only after its content is written; just before
the replace the source is re-checked (device, inode, size, mtime and a hash of its bytes): a file
edited while it was being analysed is left alone. On any failure the temporary file is removed.
"""
from __future__ import annotations

import errno
import io
import os
import stat
import tokenize


NOTEBOOK_SUFFIX = ".ipynb"


def is_notebook(path) -> bool:
    """A Jupyter notebook, by its name (here, not in ``notebook``, so a run without notebooks never
    imports that module)."""
    return str(path).lower().endswith(NOTEBOOK_SUFFIX)


class SourceError(Exception):
    pass


class SourceChanged(SourceError):
    """The file changed on disk between reading and writing back a fix."""


class OutsideTree(SourceError):
    """A fix not written: the file found in a folder walk is a symbolic link that leaves the folder."""


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


# the largest file any reader of the checker takes (a source, an imported module, a configuration
# file); callers pass a smaller ``limit`` where they want one
MAX_FILE_BYTES = 256 * 1024 * 1024
_kernel_devs: frozenset | None = None


def _kernel_fs(st: os.stat_result) -> bool:
    """The file lives on /proc or /sys: kernel interfaces that look like regular files (``st_size``
    0) but may block (``/proc/kmsg``), never end, or be consumed by reading."""
    global _kernel_devs
    if _kernel_devs is None:
        devs = set()
        for d in ("/proc", "/sys"):
            try:
                devs.add(os.stat(d).st_dev)
            except OSError:
                pass
        _kernel_devs = frozenset(devs)
    return st.st_dev in _kernel_devs


def read_regular_file(path, what: str = "file", limit: int = MAX_FILE_BYTES,
                      nofollow: bool = False) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most ``limit`` bytes, never blocking on a FIFO, reading a
    device, a /proc or /sys file, or more than ``limit + 1`` bytes (a file that grows while read).

    Raises ``IsADirectoryError``, ``SourceError`` (why the file is not read: not a regular file, a
    kernel file, too large) or ``OSError``. ``nofollow``: a symbolic link is refused (``ELOOP``)."""
    # O_NONBLOCK: opening a FIFO (or a device) must not block; only regular files are read
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if nofollow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise SourceError(f"{path}: not a regular {what} (a FIFO, socket or device is never read)")
        if _kernel_fs(st):
            raise SourceError(f"{path}: not read: a /proc or /sys file (a kernel interface, never read)")
        if st.st_size > limit:
            raise SourceError(f"{path}: too large to read ({st.st_size} bytes; the limit is {limit})")
        chunks, total = [], 0
        while True:
            try:
                b = os.read(fd, min(1 << 20, limit + 1 - total))
            except BlockingIOError:
                raise SourceError(f"{path}: not read: reading it would block") from None
            if not b:
                break
            chunks.append(b)
            total += len(b)
            if total > limit:
                raise SourceError(f"{path}: too large to read (over {limit} bytes)")
        return b"".join(chunks), st
    finally:
        os.close(fd)


def read_text_lenient(path, limit: int = MAX_FILE_BYTES) -> str | None:
    """The text of a regular file (UTF-8, undecodable bytes replaced), None when it is not read
    (not a regular file, too large, unreadable): for reading source lines into a report."""
    try:
        return read_regular_file(path, limit=limit)[0].decode("utf-8", "replace")
    except (OSError, SourceError, ValueError):
        return None


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


class SymlinkRefused(OSError):
    """``atomic_write`` was asked to write a path that is a symbolic link."""


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def write_temp(folder: str, data: bytes, *, mode: int = 0o600, owner: tuple | None = None,
               sync: bool = False, prefix: str = ".ddp-lint.", suffix: str = ".tmp") -> str:
    """A **new** file holding ``data`` in ``folder``; returns its path.

    ``tempfile.mkstemp``: ``O_CREAT|O_EXCL|O_NOFOLLOW``, mode 0600 and a random name, so nothing
    planted in the folder (a symbolic link, a file, a FIFO) can redirect the write. ``owner``
    ((uid, gid), best effort) and ``mode`` are applied only once the content is written, so the
    bytes are never readable by more users than ``mode`` allows. On any failure the file is removed.
    Every file ddp-lint writes goes through here (``atomic_write``, and the cache's ``os.link``)."""
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
            if owner is not None:
                try:
                    fst = os.fstat(fh.fileno())
                    if (fst.st_uid, fst.st_gid) != tuple(owner):
                        os.fchown(fh.fileno(), *owner)
                except OSError:
                    pass  # not permitted: the file keeps our ownership, and still gets ``mode``
            if mode != 0o600:
                os.fchmod(fh.fileno(), mode)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    return tmp


def atomic_write(path: str, data: bytes, *, mode: int = 0o600, follow_symlink: bool = False,
                 owner: tuple | None = None, sync: bool = False, check=None) -> str:
    """Replace ``path`` with ``data`` atomically: a new temporary file in the same folder
    (``write_temp``), then ``os.replace``. Returns the path written.

    A ``path`` that is a symbolic link is refused (``SymlinkRefused``, an ``OSError``) unless
    ``follow_symlink`` (a fix of a symlinked source: its target is rewritten, the link stays).
    ``check()`` runs just before the replace; whatever it raises aborts the write. Readers never
    see a half-written file, and no temporary file is left behind on failure."""
    if follow_symlink:
        target = os.path.realpath(path)
    else:
        target = path
        if os.path.islink(path):
            raise SymlinkRefused(errno.ELOOP, "is a symbolic link; ddp-lint never writes through or replaces one",
                                 path)
    folder = os.path.dirname(os.path.abspath(target))
    tmp = write_temp(folder, data, mode=mode, owner=owner, sync=sync,
                     prefix=f".{os.path.basename(target)}.", suffix=".ddp-lint.tmp")
    try:
        if check is not None:
            check()
        os.replace(tmp, target)
        tmp = None
    finally:
        if tmp is not None:
            _unlink_quietly(tmp)
    return target


def write_source(sf: SourceFile, new_text: str, inside: str | None = None) -> None:
    """Atomically replace the file's content, keeping its encoding and permissions.

    A symbolic link is followed to its target, which is rewritten; the link stays a link. With
    ``inside`` (a real folder: the folder a walk found the file in), a target outside it is not
    written (``SourceError``): a repository's symlinked ``*.py`` never makes a fix leave the tree.
    Raises ``SourceChanged`` (nothing written) when the file changed since it was read, and
    ``SourceError`` with a one-line reason when the write fails; no temporary file is left behind
    either way."""
    data = new_text.encode(sf.encoding)
    target = os.path.realpath(sf.path)  # a symlinked source: fix the target, keep the link
    if inside is not None and os.path.commonpath([target, inside]) != inside:
        raise OutsideTree(f"{sf.path}: not fixed: it is a symbolic link to {target}, outside {inside}; "
                          "fix that file itself, or name it on the command line")
    try:
        st = os.stat(target)
    except OSError as e:
        raise SourceError(f"{sf.path}: cannot write the fix: {e.strerror or e}") from None

    def unchanged():
        why = _unchanged(target, sf)
        if why is not None:
            raise SourceChanged(f"{sf.path}: not fixed: {why}; run ddp-lint again")

    try:
        # the temporary file gets the source's owner and mode only once its content is written
        atomic_write(target, data, mode=stat.S_IMODE(st.st_mode), owner=(st.st_uid, st.st_gid), sync=True,
                     check=unchanged)
    except SourceError:
        raise
    except OSError as e:
        raise SourceError(f"{sf.path}: cannot write the fix: {e.strerror or e}") from None
