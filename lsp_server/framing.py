"""LSP base-protocol framing, read leniently and with a size cap, in front of pygls' message loop.

pygls' loop (``pygls.io_.run_async``) only understands the byte-exact header
``Content-Length: N\\r\\n`` followed by ``\\r\\n``: a lower-case name, an LF-only line end or two
spaces left the server deaf to every later message, and a ``Content-Length`` of 10^12 ended in a
MemoryError. ``FrameReader`` sits between the byte stream and that loop (it has the
``readline``/``readexactly`` pair the loop calls) and hands it only canonical frames:

* header names are case-insensitive, line ends may be CRLF or LF, spaces around names and values
  are ignored, other headers (``Content-Type``) are skipped;
* a header block without a usable ``Content-Length`` is logged and skipped (the reader resyncs on
  the next header block);
* a message over ``max_message`` bytes is answered with an ``InvalidRequest`` error (id null),
  its body is read and discarded in chunks, and the server goes on with the next message;
* header lines are capped too (``MAX_HEADER_LINE``): a newline-less flood cannot grow memory.

pygls itself is not changed: the loop, the protocol and the writers are its own.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("ddp-lint.server")

MAX_MESSAGE = 64 * 1024 * 1024  # bytes of one message's body (a 64 MiB didOpen is already absurd)
MAX_HEADER_LINE = 8 * 1024
MAX_HEADERS = 64
CHUNK = 64 * 1024


class FrameReader:
    """``readline()``/``readexactly(n)`` for ``pygls.io_.run_async`` over ``read_some(n)``, an
    awaitable that returns up to ``n`` bytes (``b""`` at the end of the stream).

    ``on_oversize(size)`` is called for a message over the cap (the server answers it)."""

    def __init__(self, read_some: Callable[[int], Awaitable[bytes]], *, max_message: int = MAX_MESSAGE,
                 on_oversize: Callable[[int], None] | None = None):
        self._read_some = read_some
        self._buf = bytearray()
        self._eof = False
        self.max_message = max_message
        self.on_oversize = on_oversize
        self._pending: list[bytes] = []  # canonical header lines still to hand to the loop
        self._body: int | None = None  # size of the body the loop will ask for next

    # -- the byte stream -----------------------------------------------------------------------
    async def _fill(self) -> bool:
        if self._eof:
            return False
        data = await self._read_some(CHUNK)
        if not data:
            self._eof = True
            return False
        self._buf += data
        return True

    async def _line(self) -> bytes | None:
        """One raw line without its line end; None at the end of the stream. An over-long line
        is consumed up to its newline and returned as a marker that no header matches."""
        too_long = False
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 1]
                if too_long or len(line) > MAX_HEADER_LINE:
                    return b"\x00(over-long header line)"
                return line[:-1] if line.endswith(b"\r") else line
            if len(self._buf) > MAX_HEADER_LINE:
                too_long = True
                self._buf.clear()
            if not await self._fill():
                if self._buf and not too_long:
                    log.warning("LSP stream ended inside a header line (%d bytes); ignored", len(self._buf))
                self._buf.clear()
                return None

    async def _exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            if not await self._fill():
                raise asyncio.IncompleteReadError(bytes(self._buf), n)
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    async def _discard(self, n: int) -> bool:
        while n > 0:
            if not self._buf and not await self._fill():
                return False
            k = min(n, len(self._buf))
            del self._buf[:k]
            n -= k
        return True

    # -- headers -------------------------------------------------------------------------------
    async def _next_frame(self) -> int | None:
        """Read header blocks until one announces a usable body; its size, or None at the end."""
        while True:
            length: int | None = None
            problem: str | None = None
            count = 0
            started = False
            while True:
                line = await self._line()
                if line is None:
                    if started:
                        log.warning("LSP stream ended inside a header block; ignored")
                    return None
                text = line.strip()
                if not text:
                    if started:
                        break
                    continue  # blank lines between messages
                started = True
                count += 1
                if count > MAX_HEADERS:
                    problem = problem or f"more than {MAX_HEADERS} header lines"
                    continue
                name, sep, value = text.partition(b":")
                if not sep:
                    problem = problem or f"header line without ':' ({_show(text)})"
                    continue
                if name.strip().lower() != b"content-length":
                    continue
                value = value.strip()
                if not value.isdigit() or len(value) > 20:
                    problem = problem or f"Content-Length is not a number ({_show(value)})"
                    continue
                length = int(value)
            if problem is not None or length is None or length == 0:
                log.error("ddp-lint: skipped an LSP message with a bad header: %s",
                          problem or ("no Content-Length" if length is None else "Content-Length 0"))
                continue
            if length > self.max_message:
                log.error("ddp-lint: skipped an LSP message of %d bytes (the limit is %d bytes)",
                          length, self.max_message)
                if self.on_oversize is not None:
                    try:
                        self.on_oversize(length)
                    except Exception:  # answering is best effort
                        log.debug("answering an oversize message failed", exc_info=True)
                if not await self._discard(length):
                    return None
                continue
            return length

    # -- what pygls' loop calls ----------------------------------------------------------------
    async def readline(self) -> bytes:
        if not self._pending:
            n = await self._next_frame()
            if n is None:
                return b""
            self._body = n
            self._pending = [b"Content-Length: %d\r\n" % n, b"\r\n"]
        return self._pending.pop(0)

    async def readexactly(self, n: int) -> bytes:
        if self._body is not None and n != self._body:  # pragma: no cover - pygls asks for what we said
            log.debug("pygls asked for %d bytes, the frame has %d", n, self._body)
        self._body = None
        try:
            return await self._exactly(n)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                log.warning("LSP stream ended inside a message (%d of %d bytes); ignored", len(e.partial), n)
            return b""


def _show(b: bytes) -> str:
    s = b[:60].decode("latin-1")
    return repr(s + ("..." if len(b) > 60 else ""))


def stdin_source(stdin, executor) -> Callable[[int], Awaitable[bytes]]:
    """``read_some`` over a binary file (stdin), read in ``executor``'s threads."""
    read = getattr(stdin, "read1", None) or stdin.read

    def read_some(n: int) -> Awaitable[bytes]:
        return asyncio.get_running_loop().run_in_executor(executor, read, n)

    return read_some


def stream_source(reader: asyncio.StreamReader) -> Callable[[int], Awaitable[bytes]]:
    """``read_some`` over an asyncio stream (a TCP or Unix-socket connection)."""
    return reader.read
