"""Bad requests get LSP errors (or an empty answer where the protocol says so), never a crash:
unknown URIs, out-of-range and mid-character positions, malformed settings, wrong parameter shapes,
broken JSON, and ``workspace/executeCommand`` with wrong or hostile arguments. After each, the
server still answers and still lints; nothing is logged as an internal error; nothing runs."""
from __future__ import annotations

import asyncio
import json
import os

import pytest
import pytest_asyncio
from lsprotocol import types as t
from pygls.exceptions import JsonRpcException

from tests.conftest import EXAMPLES
from tests.lsp.lsp_helpers import (Model, answered, internal_errors, server_alive, start_session,
                                           stop_session, wait_publish)

pytestmark = pytest.mark.asyncio
SEED2 = (EXAMPLES / "seed_problem2_invalid_usage.py").read_text(encoding="utf-8")


@pytest_asyncio.fixture
async def session(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    clients = []

    async def start(name="vscode", **kw):
        client, init = await start_session(name, ws, **kw)
        clients.append(client)
        return client, init, ws

    yield start
    for c in clients:
        await stop_session(c)


def open_doc(client, ws, name: str, text: str, version: int = 1) -> str:
    path = ws / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    uri = path.as_uri()
    client.text_document_did_open(t.DidOpenTextDocumentParams(text_document=t.TextDocumentItem(
        uri=uri, language_id="python", version=version, text=text)))
    return uri


async def still_works(client, ws, tag: str, since: int = 0) -> None:
    """The server answers, lints a fresh document correctly, and logged no internal error."""
    n = len(client.publishes)
    uri = open_doc(client, ws, f"check_{tag}.py", SEED2)
    if client.init_result.capabilities.diagnostic_provider is not None:
        rep = await answered(client.text_document_diagnostic_async(t.DocumentDiagnosticParams(
            text_document=t.TextDocumentIdentifier(uri=uri))), "textDocument/diagnostic")
        diags = rep.items
    else:
        diags = (await wait_publish(client, uri, 1, after=n)).diagnostics
    assert {"DDP001", "DDP101"} <= {d.code for d in diags}, [d.code for d in diags]
    assert server_alive(client)
    assert not internal_errors(client, since), internal_errors(client, since)


async def lsp_error(coro, what: str) -> JsonRpcException:
    try:
        res = await answered(coro, what)
    except JsonRpcException as e:
        return e
    raise AssertionError(f"{what}: expected an LSP error, got {res!r}")


async def test_unknown_uris_and_unopened_documents(session):
    client, init, ws = await session()
    for uri in ("file:///nonexistent/x.py", "untitled:Untitled-1", "https://example.com/x.py", "file:///",
                "not a uri at all", "file:///%00%zz.py", "vscode-notebook-cell:/x.ipynb#W0sZmlsZQ%3D%3D"):
        td = t.TextDocumentIdentifier(uri=uri)
        z = t.Range(start=t.Position(line=0, character=0), end=t.Position(line=0, character=0))
        acts = await answered(client.text_document_code_action_async(t.CodeActionParams(
            text_document=td, range=z, context=t.CodeActionContext(diagnostics=[]))), f"codeAction {uri}")
        assert not acts
        assert await answered(client.text_document_hover_async(t.HoverParams(
            text_document=td, position=z.start)), f"hover {uri}") is None
        if init.capabilities.diagnostic_provider is not None:
            rep = await answered(client.text_document_diagnostic_async(t.DocumentDiagnosticParams(
                text_document=td)), f"diagnostic {uri}")
            assert not rep.items
        client.text_document_did_change(t.DidChangeTextDocumentParams(
            text_document=t.VersionedTextDocumentIdentifier(uri=uri, version=7),
            content_changes=[t.TextDocumentContentChangePartial(range=z, text="x")]))
        client.text_document_did_close(t.DidCloseTextDocumentParams(text_document=td))
        client.text_document_did_save(t.DidSaveTextDocumentParams(text_document=td))
    await still_works(client, ws, "uris")


@pytest.mark.parametrize("client_name", ["vscode", "neovim-0.11"])
async def test_out_of_range_and_mid_character_positions(session, client_name):
    """LSP: a character past the line end means the line end; a line past the end means the end of
    the document. A column inside a surrogate pair / UTF-8 sequence rounds down to the character."""
    client, init, ws = await session(client_name, init_options={"debounceMs": 0})
    enc = init.capabilities.position_encoding or t.PositionEncodingKind.Utf16
    text = "import torch\nx = '😀😀'  # é\r\ny = 1\rz = 2\n"
    uri = open_doc(client, ws, "pos.py", text)
    model = Model(text, enc)
    version = 1
    P = lambda line, ch: t.Position(line=line, character=ch)  # noqa: E731
    cases = [
        (P(0, 500), P(0, 900), "A"),  # past the end of line 0
        (P(1, 6), P(1, 6), "B"),  # inside the first emoji in UTF-16 (and UTF-8)
        (P(1, 5), P(1, 7), ""),
        (P(50, 0), P(99, 3), "\n# tail"),  # lines past the end of the document
        (P(3, 10), P(1, 0), "C"),  # start after end: treated as the swapped range
        (P(2, 1), P(2, 1), "\n"),  # splits the lone-CR line
        (P(1, 2**31 - 1), P(1, 2**31 - 1), "D"),
    ]
    for start, end, new in cases:
        version += 1
        client.text_document_did_change(t.DidChangeTextDocumentParams(
            text_document=t.VersionedTextDocumentIdentifier(uri=uri, version=version),
            content_changes=[t.TextDocumentContentChangePartial(
                range=t.Range(start=start, end=end), text=new)]))
        a, b = _clamped(model, start), _clamped(model, end)
        a, b = min(a, b), max(a, b)
        model.text = model.text[:a] + new + model.text[b:]
        # code actions, hover and diagnostics at hostile positions are answered
        for pos in (start, end, P(10**6, 10**6)):
            await answered(client.text_document_hover_async(t.HoverParams(
                text_document=t.TextDocumentIdentifier(uri=uri), position=pos)), "hover")
            await answered(client.text_document_code_action_async(t.CodeActionParams(
                text_document=t.TextDocumentIdentifier(uri=uri), range=t.Range(start=pos, end=pos),
                context=t.CodeActionContext(diagnostics=[t.Diagnostic(
                    range=t.Range(start=pos, end=pos), message="x", source="ddp-lint", code="DDP001")]))),
                "codeAction")
    # the server's text equals the model: the fix-all/noqa probes of test_lsp_stream, in short
    for line in range(len(model.lines())):
        probe = t.Diagnostic(range=t.Range(start=P(line, 0), end=P(line, 0)), message="p", source="ddp-lint",
                             code="DDP999")
        acts = await answered(client.text_document_code_action_async(t.CodeActionParams(
            text_document=t.TextDocumentIdentifier(uri=uri), range=probe.range,
            context=t.CodeActionContext(diagnostics=[probe]))), "codeAction")
        (a,) = [a for a in acts if a.title.startswith("Disable DDP999")]
        edits = a.edit.document_changes[0].edits if a.edit.document_changes else a.edit.changes[uri]
        body = model.line(line).rstrip()
        assert edits[0].range.start == P(line, len(body.encode("utf-16-le")) // 2 if enc == "utf-16"
                                         else len(body.encode()) if enc == "utf-8" else len(body)), (line, model.line(line))
    await still_works(client, ws, f"pos_{client_name}")


def _clamped(model: Model, pos: t.Position) -> int:
    starts = model.starts()
    if pos.line >= len(starts):
        return len(model.text)
    line = model.lines()[pos.line]
    n = 0
    for i, ch in enumerate(line):
        w = len(ch.encode("utf-16-le")) // 2 if model.enc == "utf-16" else len(ch.encode()) if model.enc == "utf-8" else 1
        if n + w > pos.character:
            return starts[pos.line] + i
        n += w
    return starts[pos.line] + len(line)


@pytest.mark.parametrize("options", [
    {"debounceMs": "fast", "select": 5, "severity": [1, 2], "run": "x", "enable": "yes", "logLevel": 7},
    {"ddp-lint": {"select": ["NOPE999"], "ignore": {"a": 1}, "severity": {"DDP001": "catastrophic"}}},
    {"run": {"nproc": -3, "timeoutSeconds": "never", "python": ["/bin/sh", "-c", "touch PWNED"], "args": "$(id)"}},
    ["not", "a", "dict"],
    "a string",
    {"debounceMs": -5, "lintOnChange": None, "select": "DDP0,,,DDP1", "severity": {"": ""}},
])
async def test_malformed_settings(session, options):
    client, init, ws = await session(init_options=options, configuration=options)
    await still_works(client, ws, "init")
    for bad in (options, None, [], 42, {"ddp-lint": None}, {"settings": {"ddp-lint": {"debounceMs": -1}}}):
        client.workspace_did_change_configuration(t.DidChangeConfigurationParams(settings=bad))
    await asyncio.sleep(0.3)
    await still_works(client, ws, "changed")
    assert not (ws / "PWNED").exists() and not os.path.exists("PWNED")


HOSTILE_RUN_ARGS = [
    [], [None], [1], [[]], [{}], [{"uri": 5}], ["", ""], ["x" * 100_000],
    ["file:///etc/passwd"],
    ["http://example.com/evil.py"],
    ["file://remote-host/ws/a.py"],
    ["vscode-notebook-cell:/ws/a.ipynb#cell"],
    ["untitled:Untitled-1"],
    ["file:///ws/a.py%00.txt"],
    ["{ws}/../outside/evil.py"],
    ["{ws}/sub/../../outside/evil.py"],
    ["{ws_path}/a.py"],  # a bare path, not a URI
    ["{ws}/does-not-exist.py"],
    ["{ws}/notes.txt"],
    ["{ws}/folder.py"],
    ["{ws}/link_to_outside.py"],
    ["{outside}/evil.py"],
    ["{ws}/%24%28touch%20PWNED%29.py"],  # "$(touch PWNED).py", percent-encoded, not on disk
    ["{ws}/a.py; touch PWNED"],
    ["{ws}/a.py", "--", "-c", "touch PWNED"],
]


async def test_execute_command_with_hostile_arguments(session, tmp_path):
    client, init, ws = await session()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "evil.py").write_text("open('PWNED_BY_RUN', 'w')\nimport torch.distributed\n")
    (ws / "a.py").write_text("import torch.distributed as dist\n")
    (ws / "notes.txt").write_text("hello\n")
    (ws / "folder.py").mkdir()
    (ws / "link_to_outside.py").symlink_to(outside / "evil.py")
    subst = {"ws": ws.as_uri(), "ws_path": str(ws), "outside": outside.as_uri()}
    for args in HOSTILE_RUN_ARGS:
        args = [a.format(**subst) if isinstance(a, str) else a for a in args]
        for cmd in ("ddp-lint.run", "ddp-lint.fixAll"):
            e = await lsp_error(client.workspace_execute_command_async(t.ExecuteCommandParams(
                command=cmd, arguments=args)), f"{cmd} {json.dumps(args)[:80]}")
            assert e.code in (-32602, -32600, -32601), (cmd, args, e.code, e.message)
            assert "internal error" not in e.message, e.message
        # ddp-lint.explain reads a folder (or file) of artefacts: an existing path is a result
        # (with its own error when nothing in it is an artefact), anything else a clear LSP error
        try:
            res = await answered(client.workspace_execute_command_async(t.ExecuteCommandParams(
                command="ddp-lint.explain", arguments=args)), f"explain {json.dumps(args)[:80]}")
            assert isinstance(res, dict) and "findings" in res, res
        except JsonRpcException as e:
            assert e.code in (-32602, -32600, -32601) and "internal error" not in e.message, (args, e.message)
    e = await lsp_error(client.workspace_execute_command_async(t.ExecuteCommandParams(
        command="ddp-lint.nope", arguments=[])), "unknown command")
    assert e.code in (-32601, -32602, -32603)
    assert not list(tmp_path.rglob("PWNED*")) and not os.path.exists("PWNED") and not os.path.exists("PWNED_BY_RUN")
    await still_works(client, ws, "exec")


def raw_request(client, method: str, params) -> asyncio.Future:
    """Send a request whose params are arbitrary JSON (the typed client API would refuse them)."""
    proto = client.protocol
    msg_id = f"raw-{len(proto._request_futures)}-{id(params)}"
    fut = asyncio.get_running_loop().create_future()
    proto._request_futures[msg_id] = fut
    raw_write(client, {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
    return fut


def raw_write(client, obj) -> None:
    body = (json.dumps(obj) if not isinstance(obj, (bytes, str)) else obj)
    body = body.encode() if isinstance(body, str) else body
    client.protocol.writer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)


async def test_wrong_shapes_and_broken_json(session):
    client, init, ws = await session()
    for method, params in [
        ("textDocument/codeAction", {"textDocument": 5}),
        ("textDocument/codeAction", {"textDocument": {"uri": "file:///x.py"}, "range": "everything"}),
        ("textDocument/hover", {"textDocument": {"uri": None}, "position": {"line": -1, "character": -5}}),
        ("textDocument/hover", {"textDocument": {"uri": "file:///x.py"}, "position": {"line": 1e300, "character": 0}}),
        ("textDocument/diagnostic", {"textDocument": {}}),
        ("workspace/executeCommand", {"command": 42}),
        ("workspace/executeCommand", {"command": "ddp-lint.run", "arguments": {"not": "a list"}}),
        ("codeAction/resolve", {"title": "x", "data": {"action": "fixAll", "uri": ["nope"]}}),
        ("codeAction/resolve", {"title": "x", "data": "garbage"}),
        ("ddp-lint/unknownMethod", {"a": 1}),
        ("textDocument/codeAction", None),
    ]:
        try:
            await answered(raw_request(client, method, params), f"{method} {params}")
        except JsonRpcException:
            pass
    for obj in [{"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {"uri": 1}}},
                {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {"contentChanges": "x"}},
                {"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
                    "textDocument": {"uri": "file:///x.py", "version": "v"}, "contentChanges": [{"range": 1}]}},
                {"jsonrpc": "2.0", "method": "$/unknownNotification"},
                {"jsonrpc": "2.0", "method": "textDocument/didClose", "params": []},
                {"jsonrpc": "2.0", "id": 999999, "result": "a response to nothing"}]:
        raw_write(client, obj)
    await asyncio.sleep(0.3)
    await still_works(client, ws, "shapes")
    # frames that are not JSON-RPC at all: logged (one line each, no traceback), then ignored
    n = len(client.log_messages)
    for frame in (b"{not json", b"[]", b"null", "\u00e9\u0000".encode(), b"\xff\xfe"):
        raw_write(client, frame)
    await asyncio.sleep(0.3)
    assert not [m.message for m in client.log_messages[n:] if "Traceback" in m.message]
    await still_works(client, ws, "frames", since=len(client.log_messages))
