"""Quick fixes, noqa, fix-all, the run action and hover, end to end."""
from __future__ import annotations

import subprocess
import sys

import pytest
from lsp_helpers import apply_text_edits, edits_of, rng, seed_text, wait_publish
from lsprotocol import types as t

from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.fixes import apply_edits

pytestmark = pytest.mark.asyncio


async def code_actions(s, uri, range_, diagnostics=(), only=None):
    """Code actions, without the run action: lsprotocol's client-side converter turns any
    CodeAction that has a ``command`` into a ``Command`` (real editors tell them apart)."""
    acts = await s.client.text_document_code_action_async(t.CodeActionParams(
        text_document=t.TextDocumentIdentifier(uri=uri), range=range_,
        context=t.CodeActionContext(diagnostics=list(diagnostics), only=only)))
    return [a for a in acts or [] if isinstance(a, t.CodeAction)], [a for a in acts or [] if isinstance(a, t.Command)]


async def actions_for(s, uri, diag, only=None):
    return (await code_actions(s, uri, diag.range, [diag], only))[0]


def diag_of(p, code):
    return next(d for d in p.diagnostics if d.code == code)


def engine_fixed(text: str, code: str) -> str:
    (f,) = [f for f in check_source(text, "seed2.py").findings if f.code == code]
    return apply_edits(text, f.fix.edits)


@pytest.mark.parametrize("client", ["vscode", "neovim", "emacs"])
async def test_each_quick_fix_gives_the_expected_text(lsp_session, client):
    s = await lsp_session(client)
    text = seed_text()
    uri = s.open("seed2.py", text)
    p = await wait_publish(s.client, uri, 1)
    for code in ("DDP001", "DDP101"):
        d = diag_of(p, code)
        acts = await actions_for(s, uri, d)
        fixes = [a for a in acts if a.kind == t.CodeActionKind.QuickFix and a.edit is not None
                 and not a.title.startswith("Disable")]
        assert len(fixes) == 1, [a.title for a in acts]
        a = fixes[0]
        assert a.is_preferred is True and "unsafe" not in a.title and code in a.title
        assert list(a.diagnostics) == [d]
        got = apply_text_edits(text, edits_of(a.edit, uri), s.encoding)
        assert got == engine_fixed(text, code)

    # apply both, one after the other, as an editor does: the result is the seed's fixed file
    cur = text
    for code in ("DDP001", "DDP101"):
        p = await wait_publish(s.client, uri, s.versions[uri])
        d = diag_of(p, code)
        a = next(a for a in await actions_for(s, uri, d) if a.is_preferred)
        edits = edits_of(a.edit, uri)
        cur = apply_text_edits(cur, edits, s.encoding)
        s.change(uri, [(e.range, e.new_text) for e in sorted(edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True)])
    p = await wait_publish(s.client, uri, s.versions[uri])
    assert cur == engine_fixed(engine_fixed(text, "DDP001"), "DDP101")
    assert "    torch.cuda.set_device(device_id)\n" in cur
    assert "output = [None for _ in range(dist.get_world_size())]" in cur
    assert not [d for d in p.diagnostics if d.code in ("DDP001", "DDP101")]


async def test_quick_fix_without_data_and_stale_data(lsp_session):
    """A client that drops ``Diagnostic.data`` (or sends an old version's) still gets the fix."""
    s = await lsp_session("neovim")
    text = seed_text()
    uri = s.open("seed2.py", text)
    p = await wait_publish(s.client, uri, 1)
    d = diag_of(p, "DDP101")
    bare = t.Diagnostic(range=d.range, message=d.message, code=d.code, source=d.source)
    a = next(a for a in await actions_for(s, uri, bare) if a.is_preferred)
    assert apply_text_edits(text, edits_of(a.edit, uri), s.encoding) == engine_fixed(text, "DDP101")
    # the document moves on (a line inserted at the top); the old diagnostic's data is stale
    v = s.change(uri, [(rng(0, 0), "# header\n")])
    moved = t.Diagnostic(range=rng(d.range.start.line + 1, d.range.start.character, d.range.end.line + 1,
                                   d.range.end.character), message=d.message, code=d.code, source=d.source, data=d.data)
    a = next(a for a in await actions_for(s, uri, moved) if a.is_preferred)
    new_text = "# header\n" + text
    assert apply_text_edits(new_text, edits_of(a.edit, uri), s.encoding) == engine_fixed(new_text, "DDP101")
    await wait_publish(s.client, uri, v)


async def test_unsafe_fix_is_titled_and_not_preferred(lsp_session):
    s = await lsp_session("vscode")
    src = (
        "import torch.distributed as dist\n"
        "\n"
        "def main():\n"
        "    dist.init_process_group('nccl')\n"
        "    out = [None] * dist.get_world_size()\n"
        "    dist.all_gather_object(out, 1)\n"
    )
    uri = s.open("unsafe.py", src)
    p = await wait_publish(s.client, uri, 1)
    d = diag_of(p, "DDP001")
    (a,) = [a for a in await actions_for(s, uri, d) if a.edit is not None and not a.title.startswith("Disable")]
    assert "unsafe" in a.title and "LOCAL_RANK" in a.title
    assert not a.is_preferred
    got = apply_text_edits(src, edits_of(a.edit, uri), s.encoding)
    assert 'torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))' in got and "import os" in got


async def test_noqa_action_adds_and_extends(lsp_session):
    s = await lsp_session("vscode")
    text = seed_text()
    uri = s.open("seed2.py", text)
    p = await wait_publish(s.client, uri, 1)
    d = diag_of(p, "DDP101")
    (a,) = [a for a in await actions_for(s, uri, d) if a.title == "Disable DDP101 for this line"]
    assert a.kind == t.CodeActionKind.QuickFix
    edits = edits_of(a.edit, uri)
    new = apply_text_edits(text, edits, s.encoding)
    line = new.splitlines()[d.range.start.line]
    assert line.endswith("  # noqa: DDP101") and "# any picklable" not in line or line.count("#") >= 1
    v = s.change(uri, [(e.range, e.new_text) for e in edits])
    p = await wait_publish(s.client, uri, v)
    assert "DDP101" not in [x.code for x in p.diagnostics]
    assert "DDP001" in [x.code for x in p.diagnostics]
    # a second code on a line that already has a noqa comment extends it
    d1 = diag_of(p, "DDP001")
    (a,) = [a for a in await actions_for(s, uri, d1) if a.title == "Disable DDP001 for this line"]
    new2 = apply_text_edits(new, edits_of(a.edit, uri), s.encoding)
    assert new2.splitlines()[d1.range.start.line].endswith("  # noqa: DDP001")
    src = "import torch.distributed as dist\nx = [None] * 3; dist.all_gather_object(x, 1)  # noqa: DDP103\n"
    uri2 = s.open("ext.py", src)
    p = await wait_publish(s.client, uri2, 1)
    d = diag_of(p, "DDP101")
    (a,) = [a for a in await actions_for(s, uri2, d) if a.title == "Disable DDP101 for this line"]
    got = apply_text_edits(src, edits_of(a.edit, uri2), s.encoding)
    assert got.splitlines()[1].endswith("# noqa: DDP103, DDP101")


def cli_fix(text: str, tmp_path) -> str:
    r = subprocess.run([sys.executable, "-m", "ddp_lint", "check", "--fix", "--stdin-filename", "seed2.py", "-"],
                       input=text, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    return r.stdout


@pytest.mark.parametrize("client", ["vscode", "neovim"])
async def test_fix_all(lsp_session, client, tmp_path):
    s = await lsp_session(client)
    text = seed_text()
    uri = s.open("seed2.py", text)
    p = await wait_publish(s.client, uri, 1)
    expected = cli_fix(text, tmp_path)
    assert "torch.cuda.set_device(device_id)" in expected
    # explicitly requested (as on save): the edit comes at once
    acts, _ = await code_actions(s, uri, rng(0, 0), only=["source.fixAll"])
    (a,) = acts
    assert a.kind == "source.fixAll.ddp-lint" and a.edit is not None
    got = apply_text_edits(text, edits_of(a.edit, uri), s.encoding)
    assert got == expected
    # in the lightbulb list: resolved lazily when the client supports codeAction/resolve
    acts, _ = await code_actions(s, uri, p.diagnostics[0].range, p.diagnostics)
    (fa,) = [a for a in acts if a.kind == "source.fixAll.ddp-lint"]
    if fa.edit is None:
        fa = await s.client.code_action_resolve_async(fa)
    assert apply_text_edits(text, edits_of(fa.edit, uri), s.encoding) == expected
    # and as a command: the server asks the client to apply the edit
    res = await s.client.workspace_execute_command_async(t.ExecuteCommandParams(
        command="ddp-lint.fixAll", arguments=[uri]))
    assert res == {"applied": True}
    (applied,) = s.client.applied_edits
    assert apply_text_edits(text, edits_of(applied.edit, uri), s.encoding) == expected


async def test_run_action_only_on_files_importing_torch_distributed(lsp_session):
    s = await lsp_session("vscode", env={"CUDA_VISIBLE_DEVICES": ""})  # no GPUs: emulated on CPU
    uri = s.open("seed2.py", seed_text())
    await wait_publish(s.client, uri, 1)
    raw = await s.client.protocol.send_request_async(t.TEXT_DOCUMENT_CODE_ACTION, t.CodeActionParams(
        text_document=t.TextDocumentIdentifier(uri=uri), range=rng(0, 0),
        context=t.CodeActionContext(diagnostics=[])))
    runs = [a for a in raw if a.title.startswith("Run with torchrun on local GPUs")]
    assert len(runs) == 1
    _, cmds = await code_actions(s, uri, rng(0, 0))
    (run,) = cmds
    # the title says so when there are no GPUs (counted once, without importing torch)
    assert run.title == "Run with torchrun on local GPUs (emulated on CPU) (ddp-lint)"
    other = s.open("plain.py", "import torch\nprint(torch.ones(2))\n")
    await wait_publish(s.client, other, 1)
    _, cmds = await code_actions(s, other, rng(0, 0))
    assert cmds == []


async def test_hover_on_noqa_code_shows_the_rule(lsp_session):
    s = await lsp_session("vscode")
    src = "import torch.distributed as dist\nx = 1  # noqa: DDP004, DDP101\n"
    uri = s.open("h.py", src)
    await wait_publish(s.client, uri, 1)
    col = src.splitlines()[1].index("DDP101") + 2
    h = await s.client.text_document_hover_async(t.HoverParams(
        text_document=t.TextDocumentIdentifier(uri=uri), position=t.Position(line=1, character=col)))
    assert h is not None and h.contents.kind == t.MarkupKind.Markdown
    assert "gather-list-size (DDP101)" in h.contents.value and "## What it does" in h.contents.value
    assert h.range.start.character == col - 2
    none = await s.client.text_document_hover_async(t.HoverParams(
        text_document=t.TextDocumentIdentifier(uri=uri), position=t.Position(line=1, character=1)))
    assert none is None

