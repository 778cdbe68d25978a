"""A real language-server session for the reliability tests, and an independent document model.

The model keeps the client's idea of each document as a Python ``str`` and converts LSP positions
(UTF-16 code units by default, or the negotiated encoding) with its own code, never the server's.
"""
from __future__ import annotations

import asyncio
import copy
import os
import re
import sys
from pathlib import Path

from lsprotocol import types as t
from pygls.protocol import default_converter
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

ROOT = Path(__file__).resolve().parents[2]
_EOL = re.compile(r"\r\n|\r|\n")
CLIENTS = {"vscode": "visual-studio-code", "neovim": "neovim@v0.7.0", "neovim-0.11": "neovim@v0.11.0",
           "emacs": "emacs"}


# -- the independent model ---------------------------------------------------------------------
def units(s: str, enc) -> int:
    if enc == t.PositionEncodingKind.Utf8:
        return len(s.encode("utf-8", "surrogatepass"))
    if enc == t.PositionEncodingKind.Utf32:
        return len(s)
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


class Model:
    def __init__(self, text: str, enc=t.PositionEncodingKind.Utf16):
        self.text = text
        self.enc = enc

    def starts(self) -> list[int]:
        return [0] + [m.end() for m in _EOL.finditer(self.text)]

    def lines(self) -> list[str]:
        return _EOL.split(self.text)

    def line(self, i: int) -> str:
        ls = self.lines()
        return ls[i] if 0 <= i < len(ls) else ""

    def position(self, offset: int) -> t.Position:
        """str offset -> client position (the offset must not sit inside a \\r\\n)."""
        starts = self.starts()
        line = max(i for i, s in enumerate(starts) if s <= offset)
        return t.Position(line=line, character=units(self.text[starts[line]:offset], self.enc))

    def offset(self, pos: t.Position) -> int:
        """client position -> str offset; it must be exact (on a character boundary, in the line)."""
        starts = self.starts()
        assert 0 <= pos.line < len(starts), f"line {pos.line} outside the document ({len(starts)} lines)"
        line = self.lines()[pos.line]
        n = 0
        for i, ch in enumerate(line):
            if n == pos.character:
                return starts[pos.line] + i
            assert n < pos.character, f"character {pos.character} splits a character on line {pos.line}"
            n += units(ch, self.enc)
        assert n == pos.character, f"character {pos.character} beyond line {pos.line} ({n} units)"
        return starts[pos.line] + len(line)

    def valid_range(self, r: t.Range) -> bool:
        try:
            a, b = self.offset(r.start), self.offset(r.end)
        except AssertionError:
            return False
        return a <= b

    def apply(self, edits) -> str:
        """Apply TextEdits (all against the current text); returns the new text (model unchanged)."""
        spans = sorted(((self.offset(e.range.start), self.offset(e.range.end), e.new_text) for e in edits),
                       key=lambda x: (x[0], x[1]))
        out, last = [], 0
        for a, b, s in spans:
            assert a >= last, "overlapping edits"
            out.append(self.text[last:a])
            out.append(s)
            last = b
        out.append(self.text[last:])
        return "".join(out)

    def to_client_range(self, r) -> t.Range:
        """analysis Range (code points) -> client range, via this model's text."""
        starts = self.starts()

        def pos(p):
            line = self.lines()[p.line]
            return t.Position(line=p.line, character=units(line[:p.column], self.enc))

        del starts
        return t.Range(start=pos(r.start), end=pos(r.end))


# -- a client ----------------------------------------------------------------------------------
def caps(name: str) -> t.ClientCapabilities:
    return copy.deepcopy(client_capabilities(CLIENTS.get(name, name)))


def _record_publish(ls, params: t.PublishDiagnosticsParams):
    ls.publishes.append(params)
    ls.publish_event.set()


def _apply_edit(ls, params: t.ApplyWorkspaceEditParams):
    ls.applied_edits.append(params)
    return t.ApplyWorkspaceEditResult(applied=True)


def _register_capability(ls, params: t.RegistrationParams):
    return None


def _progress_create(ls, params):
    return None


def _progress(ls, params):
    ls.progress.append(params)


def make_client() -> LanguageClient:
    client = LanguageClient(converter_factory=default_converter)
    features = dict(DEFAULT_CLIENT_FEATURES)
    features[t.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = _record_publish
    features[t.WORKSPACE_APPLY_EDIT] = _apply_edit
    features[t.CLIENT_REGISTER_CAPABILITY] = _register_capability
    features[t.WINDOW_WORK_DONE_PROGRESS_CREATE] = _progress_create
    features[t.PROGRESS] = _progress
    register_lsp_features(client, features)
    client.publishes = []
    client.publish_event = asyncio.Event()
    client.applied_edits = []
    client.progress = []
    return client


async def start_session(client_name: str, root: Path, init_options=None, configuration=None, command=None,
                        env=None):
    client = make_client()
    if configuration is not None:
        client._configuration = {"": configuration}
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    await client.start_io(*(command or [sys.executable, "-m", "ddp_lint.lsp_server"]), env=env)
    res = await client.initialize_session(t.InitializeParams(
        capabilities=caps(client_name), root_uri=root.as_uri(),
        workspace_folders=[t.WorkspaceFolder(uri=root.as_uri(), name="ws")],
        initialization_options=init_options))
    client.init_result = res
    return client, res


async def stop_session(client) -> None:
    try:
        await asyncio.wait_for(client.shutdown_session(), 10)
    except Exception:
        pass
    await client.stop()


def server_alive(client) -> bool:
    proc = getattr(client, "_server", None)
    return proc is not None and proc.returncode is None


async def answered(coro, what: str, timeout: float = 15.0):
    """Await a request; a missing answer is a test failure that names the request."""
    try:
        return await asyncio.wait_for(coro, timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"the server did not answer {what} within {timeout}s") from None


async def wait_publish(client, uri: str, version=None, *, after: int = 0, timeout: float = 15.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        for p in client.publishes[after:]:
            if p.uri == uri and (version is None or p.version == version):
                return p
        left = deadline - loop.time()
        if left <= 0:
            raise AssertionError(f"no publishDiagnostics for {uri} v{version} within {timeout}s")
        client.publish_event.clear()
        try:
            await asyncio.wait_for(client.publish_event.wait(), min(left, 0.5))
        except asyncio.TimeoutError:
            pass


def internal_errors(client, since: int = 0) -> list[str]:
    return [m.message for m in client.log_messages[since:]
            if "internal error" in m.message or "Traceback" in m.message]
