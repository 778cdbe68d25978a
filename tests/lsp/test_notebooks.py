"""LSP 3.17 notebook document sync, end to end (pytest-lsp, a real server process): the code cells
are one module, diagnostics and quick fixes per cell, cross-cell analysis, fix-all per notebook."""
from __future__ import annotations

import pytest
from lsp_helpers import apply_text_edits, caps, edits_of, rng, wait_publish
from lsprotocol import types as t

pytestmark = pytest.mark.asyncio

NB_URI_NAME = "train.ipynb"


def nb_caps(name="vscode"):
    c = caps(name)
    c.notebook_document = t.NotebookDocumentClientCapabilities(
        synchronization=t.NotebookDocumentSyncClientCapabilities(dynamic_registration=False,
                                                                 execution_summary_support=True))
    return c


class NotebookSession:
    """The client side of one open notebook: its cells' URIs and texts, and the sync messages."""

    def __init__(self, s, name, cells):
        self.s = s
        self.uri = s.uri(name)
        (s.root / name).write_text("{}")
        self.version = 1
        self.cells = []  # [uri, kind, text, version]
        items = []
        for i, (kind, text) in enumerate(cells):
            u = f"vscode-notebook-cell:{s.root / name}#C{i}"
            self.cells.append([u, kind, text, 1])
            items.append(t.TextDocumentItem(uri=u, language_id="python" if kind == "code" else "markdown",
                                            version=1, text=text))
        s.client.notebook_document_did_open(t.DidOpenNotebookDocumentParams(
            notebook_document=t.NotebookDocument(
                uri=self.uri, notebook_type="jupyter-notebook", version=1,
                cells=[t.NotebookCell(kind=t.NotebookCellKind.Code if c[1] == "code" else t.NotebookCellKind.Markup,
                                      document=c[0]) for c in self.cells]),
            cell_text_documents=items))

    def cell_uri(self, i):
        return self.cells[i][0]

    def edit(self, i, range_, text):
        c = self.cells[i]
        c[3] += 1
        self.version += 1
        c[2] = apply_text_edits(c[2], [t.TextEdit(range=range_, new_text=text)], self.s.encoding)
        self.s.client.notebook_document_did_change(t.DidChangeNotebookDocumentParams(
            notebook_document=t.VersionedNotebookDocumentIdentifier(uri=self.uri, version=self.version),
            change=t.NotebookDocumentChangeEvent(cells=t.NotebookDocumentCellChanges(text_content=[
                t.NotebookDocumentCellContentChanges(
                    document=t.VersionedTextDocumentIdentifier(uri=c[0], version=c[3]),
                    changes=[t.TextDocumentContentChangePartial(range=range_, text=text)])]))))
        return c[3]

    def apply(self, edit: t.WorkspaceEdit):
        """Apply a workspace edit to the cells (as the editor would), sending the changes."""
        for i, c in enumerate(self.cells):
            edits = edits_of(edit, c[0])
            if edits:
                # one full replacement per cell keeps the test's own model simple
                new = apply_text_edits(c[2], edits, self.s.encoding)
                lines = c[2].split("\n")
                self.edit(i, rng(0, 0, len(lines) - 1, len(lines[-1])), new)


CELLS = [
    ("markdown", "# Training"),
    ("code", "import os\nimport torch\nimport torch.distributed as dist\nos.environ.setdefault('RANK', '0')"),
    ("code", "dist.init_process_group('nccl')"),
    ("code", "model = torch.nn.Linear(2, 2).cuda()\nx = torch.zeros(2).cuda()"),
    ("code", "dist.all_reduce(x)"),
]


async def test_cell_diagnostics_quick_fix_and_cross_cell(lsp_session):
    s = await lsp_session(nb_caps())
    assert s.init.capabilities.notebook_document_sync is not None
    nb = NotebookSession(s, NB_URI_NAME, CELLS)
    init_cell = nb.cell_uri(2)
    p = await wait_publish(s.client, init_cell, pred=lambda p: any(d.code == "DDP001" for d in p.diagnostics))
    d = next(d for d in p.diagnostics if d.code == "DDP001")
    assert d.range.start.line == 0  # line 1 of its cell
    # related locations point into the other cells
    rel_uris = {r.location.uri for r in d.related_information or []}
    assert nb.cell_uri(3) in rel_uris and nb.cell_uri(4) in rel_uris
    # the other cells got their own (empty here) publishes, never the notebook's URI
    await wait_publish(s.client, nb.cell_uri(4))
    assert not any(p.uri == nb.uri for p in s.client.publishes)

    # the quick fix (unsafe: assumes LOCAL_RANK) inserts set_device into the init's cell
    acts = await s.client.text_document_code_action_async(t.CodeActionParams(
        text_document=t.TextDocumentIdentifier(uri=init_cell), range=d.range,
        context=t.CodeActionContext(diagnostics=[d])))
    fixes = [a for a in acts if isinstance(a, t.CodeAction) and a.title.startswith("Insert")]
    assert fixes, [a.title for a in acts]
    nb.apply(fixes[0].edit)
    assert "torch.cuda.set_device" in nb.cells[2][2]

    # cross-cell: the set_device in cell 3 now counts for cells 4 and 5
    n = len(s.client.publishes)
    p = await wait_publish(s.client, init_cell, after=n, pred=lambda p: True)
    assert not any(d.code == "DDP001" for d in p.diagnostics), [d.message for d in p.diagnostics]


async def test_set_device_in_an_earlier_cell_counts(lsp_session):
    s = await lsp_session(nb_caps())
    cells = list(CELLS)
    cells[2] = ("code", "dist.init_process_group('nccl')\ntorch.cuda.set_device(int(os.environ['LOCAL_RANK']))")
    nb = NotebookSession(s, NB_URI_NAME, cells)
    for i in (2, 3, 4):
        p = await wait_publish(s.client, nb.cell_uri(i))
        assert not any(d.code == "DDP001" for d in p.diagnostics)
    # removing the pin from cell 3 brings DDP001 back on cell 3
    n = len(s.client.publishes)
    nb.edit(2, rng(0, 31, 1, 52), "")
    p = await wait_publish(s.client, nb.cell_uri(2), after=n,
                           pred=lambda p: any(d.code == "DDP001" for d in p.diagnostics))
    assert p.diagnostics


async def test_notebook_rule_in_its_cell(lsp_session):
    s = await lsp_session(nb_caps())
    cells = [("code", "import torch\nimport torch.distributed as dist"),
             ("code", "x = 1\ndist.init_process_group('gloo')")]
    nb = NotebookSession(s, NB_URI_NAME, cells)
    p = await wait_publish(s.client, nb.cell_uri(1), pred=lambda p: any(d.code == "DDP603" for d in p.diagnostics))
    assert next(d for d in p.diagnostics if d.code == "DDP603").range.start.line == 1


async def test_fix_all_edits_the_notebook(lsp_session):
    s = await lsp_session(nb_caps())
    nb = NotebookSession(s, NB_URI_NAME, CELLS)
    await wait_publish(s.client, nb.cell_uri(2), pred=lambda p: any(d.code == "DDP004" for d in p.diagnostics))
    # asked from the first code cell, fix-all fixes the whole notebook: the safe DDP004 fix
    # appends destroy_process_group() to the last cell
    acts = await s.client.text_document_code_action_async(t.CodeActionParams(
        text_document=t.TextDocumentIdentifier(uri=nb.cell_uri(1)), range=rng(0, 0),
        context=t.CodeActionContext(diagnostics=[], only=["source.fixAll"])))
    (fix_all,) = [a for a in acts or [] if isinstance(a, t.CodeAction) and a.kind == "source.fixAll.ddp-lint"]
    edit = fix_all.edit
    assert edit is not None and not edits_of(edit, nb.cell_uri(1))
    nb.apply(edit)
    assert nb.cells[4][2] == "dist.all_reduce(x)\ndist.destroy_process_group()"
    assert "set_device" not in nb.cells[2][2]  # DDP001's fix is unsafe: never in fix-all


async def test_closing_clears_cells(lsp_session):
    s = await lsp_session(nb_caps())
    nb = NotebookSession(s, NB_URI_NAME, CELLS)
    await wait_publish(s.client, nb.cell_uri(2), pred=lambda p: bool(p.diagnostics))
    n = len(s.client.publishes)
    s.client.notebook_document_did_close(t.DidCloseNotebookDocumentParams(
        notebook_document=t.NotebookDocumentIdentifier(uri=nb.uri),
        cell_text_documents=[t.TextDocumentIdentifier(uri=c[0]) for c in nb.cells]))
    p = await wait_publish(s.client, nb.cell_uri(2), after=n)
    assert not p.diagnostics


async def test_pull_diagnostics_per_cell(lsp_session):
    """A pull client (Neovim 0.11's capabilities, with notebook sync): each cell's report holds its
    own findings, computed over the whole notebook; an edit in one cell changes another's report."""
    s = await lsp_session(nb_caps("neovim-0.11"))
    assert s.init.capabilities.diagnostic_provider is not None
    nb = NotebookSession(s, NB_URI_NAME, CELLS)

    async def pull(i):
        r = await s.client.text_document_diagnostic_async(t.DocumentDiagnosticParams(
            text_document=t.TextDocumentIdentifier(uri=nb.cell_uri(i))))
        return [(d.code, d.range.start.line) for d in r.items]

    assert ("DDP001", 0) in await pull(2)
    assert await pull(4) == []  # its all_reduce is related information of cell 3's DDP001
    # set_device added in cell 2 (before the init in cell 3, after imports): DDP001 goes from cell 3
    nb.edit(1, rng(3, 34), "\ntorch.cuda.set_device(int(os.environ['LOCAL_RANK']))")
    for _ in range(50):
        got = await pull(2)
        if not any(c == "DDP001" for c, _ in got):
            break
    assert not any(c == "DDP001" for c, _ in got), got
    assert s.client.publishes == []  # a pull client never gets pushed diagnostics
