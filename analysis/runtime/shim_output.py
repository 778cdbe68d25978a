"""ddp-lint rank shim, part 5: ``[rank N] `` before every line the rank prints (``ddp-lint run`` in
text mode sets DDP_LINT_RANK_PREFIX=1; JSON mode and the language server keep the raw output).

Loaded by path by shim.py; stdlib only, never imports ddp-lint. sys.stdout and sys.stderr are
wrapped: complete lines go out prefixed, several at once in one write of the line-buffered stream
under them, so a line stays whole (two ranks never interleave inside one). A partial line is held
until its newline; an explicit flush() sends it (prefixed if it starts a line) so prompts and
progress output still appear. What bypasses sys.stdout/sys.stderr (C++ output from torch or gloo,
writes to the file descriptor, child processes) is not prefixed.
"""
from __future__ import annotations

import sys


class RankPrefixed:
    """A text stream that writes ``prefix`` before each line to the stream it wraps."""

    def __init__(self, stream, prefix: str):
        self._stream = stream
        self._prefix = prefix
        self._pending = ""  # the current line's text not yet written
        self._at_start = True  # the next character written starts a line

    def write(self, s):
        if not isinstance(s, str):
            return self._stream.write(s)  # let the stream raise its own TypeError
        text = self._pending + s
        cut = text.rfind("\n") + 1
        self._pending = text[cut:]
        if cut:
            self._emit(text[:cut])
        return len(s)

    def _emit(self, text):
        lines = text.splitlines(keepends=True)
        out = []
        for ln in lines:
            out.append((self._prefix if self._at_start else "") + ln)
            self._at_start = ln.endswith("\n")
        self._stream.write("".join(out))

    def writelines(self, lines):
        for ln in lines:
            self.write(ln)

    def flush(self):
        if self._pending:
            pending, self._pending = self._pending, ""
            self._emit(pending)
        self._stream.flush()

    def __getattr__(self, name):  # encoding, fileno, isatty, buffer, reconfigure, ...
        return getattr(self._stream, name)


def install(rank: int) -> None:
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        if stream is not None and not isinstance(stream, RankPrefixed):
            setattr(sys, name, RankPrefixed(stream, f"[rank {rank}] "))
