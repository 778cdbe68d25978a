"""Diagnostics end to end: push and pull, versions, stale results, bursts, syntax errors."""
from __future__ import annotations

import asyncio

import pytest
from lsp_helpers import rng, seed_text, wait_publish
from lsprotocol import types as t

pytestmark = pytest.mark.asyncio

# seed problem 2 (0-based lines): init_process_group on 27, the output list on 31, the
# all_gather_object call on 32
INIT_LINE, LIST_LINE, GATHER_LINE = 27, 31, 32


FOCUS = {"DDP000", "DDP001", "DDP101"}  # other catalogue rules may fire on the seed too


def codes(p):
    items = p.items if hasattr(p, "items") and not hasattr(p, "diagnostics") else p.diagnostics
    return sorted((d.code, d.range.start.line) for d in items if d.code in FOCUS)


@pytest.mark.parametrize("client", ["vscode", "neovim", "emacs"])
async def test_open_edit_close(lsp_session, client):
    s = await lsp_session(client)
    assert s.init.capabilities.diagnostic_provider is None  # push clients are never offered pull
    uri = s.open("seed2.py", seed_text())
    p = await wait_publish(s.client, uri, 1)
    assert codes(p) == [("DDP001", INIT_LINE), ("DDP101", LIST_LINE)]
    d1 = next(d for d in p.diagnostics if d.code == "DDP001")
    assert d1.source == "ddp-lint"
    assert d1.severity == t.DiagnosticSeverity.Error
    assert d1.code_description.href.endswith("/DDP001.md")
    assert d1.range.start.character == 4 and d1.range.end.character == 35
    rel = d1.related_information
    pd = s.client.capabilities.text_document.publish_diagnostics
    if pd is not None and pd.related_information is False:
        assert rel is None  # the client said it cannot show them
        rel = [t.DiagnosticRelatedInformation(location=t.Location(uri=uri, range=rng(GATHER_LINE, 4)),
                                              message="all_gather_object")]
    assert rel and rel[0].location.uri == uri and rel[0].location.range.start.line == GATHER_LINE
    assert "all_gather_object" in rel[0].message

    # edit: size the list correctly -> DDP101 goes, DDP001 stays (published with the new version)
    line = seed_text().splitlines()[LIST_LINE]
    a = line.index("[None")
    v = s.change(uri, [(rng(LIST_LINE, a, LIST_LINE, len(line)), "[None for _ in range(dist.get_world_size())]")])
    p = await wait_publish(s.client, uri, v)
    assert codes(p) == [("DDP001", INIT_LINE)]

    n = len(s.client.publishes)
    s.close(uri)
    p = await wait_publish(s.client, uri, after=n)
    assert list(p.diagnostics) == []


async def test_pull_diagnostics_and_unchanged(lsp_session):
    s = await lsp_session("neovim-0.11")
    assert s.init.capabilities.diagnostic_provider is not None
    uri = s.open("seed2.py", seed_text())
    r1 = await s.client.text_document_diagnostic_async(t.DocumentDiagnosticParams(
        text_document=t.TextDocumentIdentifier(uri=uri)))
    assert r1.kind == "full" and r1.result_id
    assert codes(r1) == [("DDP001", INIT_LINE), ("DDP101", LIST_LINE)]
    r2 = await s.client.text_document_diagnostic_async(t.DocumentDiagnosticParams(
        text_document=t.TextDocumentIdentifier(uri=uri), previous_result_id=r1.result_id))
    assert r2.kind == "unchanged" and r2.result_id == r1.result_id
    # an edit that changes nothing the linter sees still answers "unchanged"... after re-analysis
    s.change(uri, [(rng(0, 0), "# a comment\n")])
    r3 = await s.client.text_document_diagnostic_async(t.DocumentDiagnosticParams(
        text_document=t.TextDocumentIdentifier(uri=uri), previous_result_id=r1.result_id))
    assert r3.kind == "full" and r3.result_id != r1.result_id  # every line moved down by one
    assert codes(r3) == [("DDP001", INIT_LINE + 1), ("DDP101", LIST_LINE + 1)]
    await asyncio.sleep(0.3)
    assert s.client.publishes == []  # a pull client never gets pushed diagnostics


async def test_burst_of_200_changes_is_one_analysis_and_one_publish(lsp_session):
    # 500 ms rather than the default 150: on a loaded CI machine the server can be descheduled
    # for longer than 150 ms in the middle of the burst, which would (rightly) end the debounce
    s = await lsp_session("vscode", init_options={"logLevel": "debug", "debounceMs": 500})
    text = seed_text()
    uri = s.open("seed2.py", text)
    await wait_publish(s.client, uri, 1)
    n_pub = len(s.client.publishes)
    n_log = len(s.client.log_messages)
    # type 200 characters into a new comment line above the init call, one keystroke each
    s.change(uri, [(rng(INIT_LINE, 0), "    # \n")])
    typed = "abcdefghij" * 20
    for i, ch in enumerate(typed[:199]):
        s.change(uri, [(rng(INIT_LINE, 6 + i), ch)])
    last = s.versions[uri]
    assert last == 201
    p = await wait_publish(s.client, uri, last, after=n_pub)
    await asyncio.sleep(0.5)  # anything else would arrive now
    after = s.client.publishes[n_pub:]
    assert [q.version for q in after] == [last], "exactly one publish, for the last version"
    assert codes(p) == [("DDP001", INIT_LINE + 1), ("DDP101", LIST_LINE + 1)]
    analysed = [m.message for m in s.client.log_messages[n_log:] if m.message.startswith("analysed ")]
    assert len(analysed) == 1 and f"v{last} " in analysed[0], analysed


async def test_syntax_error_mid_edit_keeps_other_findings(lsp_session):
    s = await lsp_session("vscode")
    text = seed_text()
    uri = s.open("seed2.py", text)
    await wait_publish(s.client, uri, 1)
    # start typing a call above the init line: the file no longer parses
    v = s.change(uri, [(rng(INIT_LINE, 0), "    dist.barrier(\n")])
    p = await wait_publish(s.client, uri, v)
    got = codes(p)
    assert [c for c, _ in got].count("DDP000") == 1
    # the last good parse's findings are kept, moved down with the inserted line
    assert ("DDP001", INIT_LINE + 1) in got and ("DDP101", LIST_LINE + 1) in got
    ddp000 = next(d for d in p.diagnostics if d.code == "DDP000")
    assert ddp000.severity == t.DiagnosticSeverity.Error and "syntax error" in ddp000.message
    # kept findings carry no quick fix while the file does not parse (their edits would be stale)
    assert all(d.data is None for d in p.diagnostics if d.code != "DDP000")
    # keep typing on that line: still one DDP000
    v = s.change(uri, [(rng(INIT_LINE, 17), "device_ids=[0]")])
    p = await wait_publish(s.client, uri, v)
    assert [c for c, _ in codes(p)].count("DDP000") == 1
    # finish the line: it parses again, fresh findings with fixes
    v = s.change(uri, [(rng(INIT_LINE, 31), ")")])
    p = await wait_publish(s.client, uri, v)
    assert codes(p) == [("DDP001", INIT_LINE + 1), ("DDP101", LIST_LINE + 1)]
    assert all(d.data and d.data.get("fix") for d in p.diagnostics if d.code in FOCUS)


async def test_stale_results_are_never_published(lsp_session):
    # debounce 0: every change starts an analysis at once; a result for an old version must be
    # dropped, and every publish must carry the version it was computed for
    s = await lsp_session("vscode", init_options={"debounceMs": 0})
    text = seed_text()
    uri = s.open("seed2.py", text)
    await wait_publish(s.client, uri, 1)
    n = len(s.client.publishes)
    for i in range(30):
        s.change(uri, [(rng(0, 0), "#\n")])
    last = s.versions[uri]
    await wait_publish(s.client, uri, last, after=n)
    seen = s.client.publishes[n:]
    assert [p.version for p in seen] == sorted(p.version for p in seen)
    for p in seen:  # each publish is exactly right for its own version
        shift = p.version - 1
        assert codes(p) == [("DDP001", INIT_LINE + shift), ("DDP101", LIST_LINE + shift)]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-8", "utf-32"])
async def test_non_ascii_positions(lsp_session, encoding):
    s = await lsp_session("emacs", encodings=[encoding])
    assert s.encoding == encoding
    from lsp_helpers import units

    prefix = '    meta = "数据并行🚀"; dist.all_gather_object('
    src = (
        "import torch.distributed as dist\n"
        "# 分布式训练 — emoji 🚀🔥 before the flagged code\n"
        "def f(obj):\n"
        f"{prefix}[None, None, None], obj)  # 注释 😀\n"
    )
    uri = s.open("cjk.py", src)
    p = await wait_publish(s.client, uri, 1)
    (d,) = p.diagnostics
    assert d.code == "DDP101" and d.range.start.line == 3
    assert d.range.start.character == units(prefix, encoding)
    assert d.range.end.character == units(prefix + "[None, None, None]", encoding)
    # the quick fix edit lands on the same characters in this encoding
    (edit,) = d.data["fix"]["edits"]
    assert edit["range"] == [3, units(prefix, encoding), 3, units(prefix + "[None, None, None]", encoding)]
    # an incremental edit after the emoji, in this encoding, is applied at the right spot
    line = src.splitlines()[3]
    col = units(line[: line.index("[None")], encoding)
    end = units(line[: line.index(", obj)")], encoding)
    v = s.change(uri, [(rng(3, col, 3, end), "[None] * dist.get_world_size()")])
    p = await wait_publish(s.client, uri, v)
    assert list(p.diagnostics) == []


async def test_only_python_is_linted(lsp_session):
    s = await lsp_session("neovim")
    uri = s.uri("notes.md")
    (s.root / "notes.md").write_text("x")
    s.versions[uri] = 1
    s.client.text_document_did_open(t.DidOpenTextDocumentParams(text_document=t.TextDocumentItem(
        uri=uri, language_id="markdown", version=1, text="import torch.distributed as dist\n(((")))
    p = await wait_publish(s.client, uri, 1)
    assert list(p.diagnostics) == []  # no DDP000 for a file that is not Python


_HELPER = """import torch.distributed as dist


def gather_metrics(m):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, m)
    return out
"""
_USER = """import torch
from helpers import gather_metrics


def main(rank, m):
    if rank == 0:
        gather_metrics(m)
"""


async def test_editing_a_helper_refreshes_its_open_dependents(lsp_session):
    """DDP104 through a helper in another file: an unsaved edit of the helper (and then closing
    it, back to the file on disk) re-publishes the dependent document's diagnostics."""
    s = await lsp_session("vscode")
    (s.root / "helpers.py").write_text(_HELPER)
    user = s.open("user.py", _USER)
    p = await wait_publish(s.client, user, 1)
    assert [d.code for d in p.diagnostics] == ["DDP104"]
    helper = s.open("helpers.py", _HELPER)
    await wait_publish(s.client, helper, 1)
    n = len(s.client.publishes)
    line = _HELPER.splitlines().index("    dist.all_gather_object(out, m)")
    s.change(helper, [(rng(line, 4, line, 34), "out[0] = m")])  # unsaved: no collective any more
    p = await wait_publish(s.client, user, after=n)
    assert [d.code for d in p.diagnostics] == []
    n = len(s.client.publishes)
    s.close(helper)  # the file on disk still has the collective
    p = await wait_publish(s.client, user, after=n)
    assert [d.code for d in p.diagnostics] == ["DDP104"]


async def test_editing_a_helper_asks_a_pull_client_to_pull_its_dependents_again(lsp_session):
    """The same in pull mode: the server declares inter-file dependencies, asks a client that
    supports it to re-pull (workspace/diagnostic/refresh) when a helper changes, and the pulled
    report of the dependent document follows the helper's unsaved text."""
    from lsp_helpers import caps

    c = caps("neovim-0.11")
    c.workspace.diagnostics = t.DiagnosticWorkspaceClientCapabilities(refresh_support=True)
    s = await lsp_session(c)
    assert s.init.capabilities.diagnostic_provider.inter_file_dependencies is True
    (s.root / "helpers.py").write_text(_HELPER)
    user = s.open("user.py", _USER)

    async def pull(uri):
        return await s.client.text_document_diagnostic_async(t.DocumentDiagnosticParams(
            text_document=t.TextDocumentIdentifier(uri=uri)))

    assert [d.code for d in (await pull(user)).items] == ["DDP104"]
    helper = s.open("helpers.py", _HELPER)
    await pull(helper)
    refreshes = s.client.diagnostic_refresh_count
    line = _HELPER.splitlines().index("    dist.all_gather_object(out, m)")
    s.change(helper, [(rng(line, 4, line, 34), "out[0] = m")])
    for _ in range(100):  # the refresh request follows the (debounced) edit
        if s.client.diagnostic_refresh_count > refreshes:
            break
        await asyncio.sleep(0.05)
    assert s.client.diagnostic_refresh_count > refreshes
    assert [d.code for d in (await pull(user)).items] == []
    s.close(helper)
    assert [d.code for d in (await pull(user)).items] == ["DDP104"]
    assert s.client.publishes == []


async def test_a_helper_changed_on_disk_refreshes_its_open_dependents(lsp_session):
    """A helper that is not open changes on disk (a checkout, another editor): the server watches
    ``**/*.py`` and re-checks the open documents whose analysis read it."""
    from lsp_helpers import caps

    c = caps("vscode")
    c.workspace.did_change_watched_files = t.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True)
    s = await lsp_session(c)
    (s.root / "helpers.py").write_text(_HELPER)
    user = s.open("user.py", _USER)
    p = await wait_publish(s.client, user, 1)
    assert [d.code for d in p.diagnostics] == ["DDP104"]
    def watched():
        return [str(r.register_options) for r in s.client.registrations
                if r.method == t.WORKSPACE_DID_CHANGE_WATCHED_FILES]

    for _ in range(100):
        if watched():
            break
        await asyncio.sleep(0.05)
    assert any("**/*.py" in w for w in watched()), s.client.registrations
    n = len(s.client.publishes)
    (s.root / "helpers.py").write_text(_HELPER.replace("    dist.all_gather_object(out, m)", "    out[0] = m"))
    s.client.workspace_did_change_watched_files(t.DidChangeWatchedFilesParams(changes=[
        t.FileEvent(uri=(s.root / "helpers.py").as_uri(), type=t.FileChangeType.Changed)]))
    p = await wait_publish(s.client, user, after=n)
    assert [d.code for d in p.diagnostics] == []
