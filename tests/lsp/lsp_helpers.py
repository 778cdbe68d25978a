"""Helpers for the end-to-end language-server tests (pytest-lsp, real server subprocess), shared by
tests/lsp and tests/reliability (import it as ``lsp_helpers`` there, ``tests.lsp.lsp_helpers``
elsewhere).

* ``lsp_session`` (a fixture) and ``start_session`` start ``python -m ddp_lint.lsp_server`` (or a
  wrapper command) and initialize it with one of the client capability sets that pytest-lsp
  recorded from real editors. The client records every ``publishDiagnostics`` (so that tests can
  count publishes and check versions), and every applied edit (pytest-lsp keeps ``$/progress`` in
  ``progress_reports``).
* ``Model`` keeps the client's idea of a document as a Python ``str`` and converts LSP positions
  (UTF-16 code units by default, or the negotiated encoding) with its own code, never the server's.
"""
from __future__ import annotations

import asyncio
import copy
import os
import re
import sys
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types as t
from pygls.protocol import default_converter
from pytest_lsp import LanguageClient, client_capabilities
from pytest_lsp.client import DEFAULT_CLIENT_FEATURES, register_lsp_features

from tests.conftest import scaled  # every deadline scales with the machine's load

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
HERE = Path(__file__).resolve().parent
_EOL = re.compile(r"\r\n|\r|\n")

CLIENTS = {
    "vscode": "visual-studio-code",
    "neovim": "neovim@v0.7.0",
    "neovim-0.11": "neovim@v0.11.0",
    "emacs": "emacs",
}


def caps(name, encodings: list[str] | None = None) -> t.ClientCapabilities:
    if isinstance(name, t.ClientCapabilities):
        c = name
    else:
        c = copy.deepcopy(client_capabilities(CLIENTS.get(name, name)))
    if encodings is not None:
        if c.general is None:
            c.general = t.GeneralClientCapabilities()
        c.general.position_encodings = encodings
    return c


# (pygls passes the client only to a first parameter named ``ls`` or annotated with its type)
def _record_publish(ls, params: t.PublishDiagnosticsParams):
    ls.diagnostics[params.uri] = params.diagnostics
    ls.publishes.append(params)
    ls.publish_event.set()


def _apply_edit(ls, params: t.ApplyWorkspaceEditParams):
    ls.applied_edits.append(params)
    return t.ApplyWorkspaceEditResult(applied=True)


def _register_capability(ls, params: t.RegistrationParams):
    ls.registrations.extend(params.registrations)


def make_client() -> LanguageClient:
    client = LanguageClient(converter_factory=default_converter)
    features = dict(DEFAULT_CLIENT_FEATURES)
    features[t.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS] = _record_publish
    features[t.WORKSPACE_APPLY_EDIT] = _apply_edit
    features[t.CLIENT_REGISTER_CAPABILITY] = _register_capability
    register_lsp_features(client, features)
    client.publishes = []
    client.publish_event = asyncio.Event()
    client.applied_edits = []
    client.registrations = []
    return client


async def wait_publish(client, uri: str, version=None, *, after: int = 0, timeout: float = 15.0,
                       pred=None) -> t.PublishDiagnosticsParams:
    """The first publish for ``uri`` at index >= ``after`` (with ``version`` if given)."""
    loop = asyncio.get_running_loop()
    timeout = scaled(timeout)
    deadline = loop.time() + timeout
    while True:
        for p in client.publishes[after:]:
            if p.uri == uri and (version is None or p.version == version) and (pred is None or pred(p)):
                return p
        left = deadline - loop.time()
        if left <= 0:
            got = [(p.uri.rsplit("/", 1)[-1], p.version, [d.code for d in p.diagnostics]) for p in client.publishes]
            raise AssertionError(f"no publishDiagnostics for {uri} v{version} within {timeout}s; got {got}")
        client.publish_event.clear()
        try:
            await asyncio.wait_for(client.publish_event.wait(), min(left, 0.5))
        except asyncio.TimeoutError:
            pass


# -- an independent document model ------------------------------------------------------------
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


# -- sessions --------------------------------------------------------------------------------
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
        await asyncio.wait_for(client.shutdown_session(), scaled(10))
    except Exception:
        pass
    await client.stop()


def server_alive(client) -> bool:
    proc = getattr(client, "_server", None)
    return proc is not None and proc.returncode is None


async def answered(coro, what: str, timeout: float = 15.0):
    """Await a request; a missing answer is a test failure that names the request."""
    timeout = scaled(timeout)
    try:
        return await asyncio.wait_for(coro, timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"the server did not answer {what} within {timeout}s") from None


def internal_errors(client, since: int = 0) -> list[str]:
    return [m.message for m in client.log_messages[since:]
            if "internal error" in m.message or "Traceback" in m.message]


class Session:
    def __init__(self, client: LanguageClient, root: Path, init: t.InitializeResult):
        self.client = client
        self.root = root
        self.init = init
        self.versions: dict[str, int] = {}

    @property
    def encoding(self):
        return self.init.capabilities.position_encoding or t.PositionEncodingKind.Utf16

    def uri(self, name: str) -> str:
        return (self.root / name).as_uri()

    def open(self, name: str, text: str | None = None) -> str:
        path = self.root / name
        if text is None:
            text = path.read_text(encoding="utf-8")
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        uri = path.as_uri()
        self.versions[uri] = 1
        self.client.text_document_did_open(t.DidOpenTextDocumentParams(
            text_document=t.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
        return uri

    def change(self, uri: str, edits: list[tuple[t.Range, str]]) -> int:
        self.versions[uri] += 1
        v = self.versions[uri]
        self.client.text_document_did_change(t.DidChangeTextDocumentParams(
            text_document=t.VersionedTextDocumentIdentifier(uri=uri, version=v),
            content_changes=[t.TextDocumentContentChangePartial(range=r, text=s) for r, s in edits]))
        return v

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(t.DidCloseTextDocumentParams(
            text_document=t.TextDocumentIdentifier(uri=uri)))


def rng(sl, sc, el=None, ec=None) -> t.Range:
    return t.Range(start=t.Position(line=sl, character=sc),
                   end=t.Position(line=sl if el is None else el, character=sc if ec is None else ec))


def units(s: str, encoding) -> int:
    """Length of ``s`` in the units of ``encoding`` (computed independently of the server)."""
    if encoding == t.PositionEncodingKind.Utf8:
        return len(s.encode("utf-8", "surrogatepass"))
    if encoding == t.PositionEncodingKind.Utf32:
        return len(s)
    return len(s.encode("utf-16-le", "surrogatepass")) // 2


def offset(text: str, pos: t.Position, encoding) -> int:
    lines = text.split("\n")  # tests use \n only
    off = sum(len(ln) + 1 for ln in lines[: pos.line])
    line = lines[pos.line] if pos.line < len(lines) else ""
    n = 0
    for i, ch in enumerate(line):
        if n >= pos.character:
            return off + i
        n += units(ch, encoding)
    return off + len(line)


def apply_text_edits(text: str, edits: list[t.TextEdit], encoding) -> str:
    spans = sorted(((offset(text, e.range.start, encoding), offset(text, e.range.end, encoding), e.new_text)
                    for e in edits), reverse=True)
    for a, b, s in spans:
        text = text[:a] + s + text[b:]
    return text


def edits_of(edit: t.WorkspaceEdit, uri: str) -> list[t.TextEdit]:
    if edit.document_changes:
        out = []
        for dc in edit.document_changes:
            if isinstance(dc, t.TextDocumentEdit) and dc.text_document.uri == uri:
                out.extend(dc.edits)
        return out
    return list((edit.changes or {}).get(uri, []))


@pytest_asyncio.fixture
async def lsp_session(tmp_path):
    """``await lsp_session(client_name, init_options=None, encodings=None, command=None)``."""
    started: list[LanguageClient] = []

    async def start(name: str = "vscode", init_options=None, encodings=None, command=None,
                    configuration=None, root: Path | None = None, env: dict | None = None) -> Session:
        client = make_client()
        if configuration is not None:
            client._configuration = {"": configuration}
        cmd = command or [sys.executable, "-m", "ddp_lint.lsp_server"]
        env = {**os.environ, **(env or {})}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        await client.start_io(*cmd, env=env)
        started.append(client)
        ws = root or tmp_path
        res = await client.initialize_session(t.InitializeParams(
            capabilities=caps(name, encodings),
            root_uri=ws.as_uri(),
            workspace_folders=[t.WorkspaceFolder(uri=ws.as_uri(), name="ws")],
            initialization_options=init_options,
        ))
        return Session(client, ws, res)

    yield start
    problems = []
    for c in started:
        # a server that fails ``shutdown`` or outlives ``exit`` is a bug the test reports (it once
        # hung CI for 300 s: the failed shutdown meant no ``exit``, and stop() waited forever)
        srv = getattr(c, "_server", None)
        if srv is not None and srv.returncode is not None:  # the test itself ended the server
            await c.stop()
            continue
        try:
            await asyncio.wait_for(c.shutdown_session(), scaled(10))
        except Exception as e:
            problems.append(f"shutdown failed: {e!r}")
            try:
                c.exit(None)
            except Exception:
                pass
        if srv is not None and srv.returncode is None:
            try:
                await asyncio.wait_for(srv.wait(), scaled(10))
            except asyncio.TimeoutError:
                srv.kill()
                problems.append("the server was still running 10 s (scaled by the load) after exit; killed")
        await c.stop()
    if problems:
        pytest.fail("; ".join(problems))


def seed_text() -> str:
    return (EXAMPLES / "seed_problem2_invalid_usage.py").read_text(encoding="utf-8")
