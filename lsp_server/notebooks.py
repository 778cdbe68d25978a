"""LSP 3.17 notebook document sync: ``notebookDocument/didOpen|didChange|didSave|didClose``.

A notebook's cells are text documents (``DocState`` in ``docs`` under their cell URIs, so quick
fixes, "Disable for this line" and hover work per cell as in a file). Analysis is per notebook:
the code cells, in order, are one module (``analysis.notebook.Notebook``, the mapping the CLI
uses), checked under the notebook's path (so the notebook rules and per-file-ignores apply), and
the findings go back to their cells: a ``set_device`` in cell 2 counts for cell 5. A fix whose
edits reach another cell becomes a workspace edit over those cells; fix-all edits every cell of
the notebook at once (safe fixes only).
"""
from __future__ import annotations

import asyncio
import logging
import traceback

from lsprotocol import types as t

from ..analysis.engine import check_source
from ..analysis.model import Finding
from ..analysis.notebook import Notebook, fix_all as notebook_fix_all

from .convert import uri_to_path
from .documents import Document
from .state import DocState, is_python

log = logging.getLogger("ddp-lint.server")


def sync_options() -> t.NotebookDocumentSyncOptions:
    """Every notebook, its Python cells (Jupyter and VS Code notebooks alike)."""
    return t.NotebookDocumentSyncOptions(
        notebook_selector=[t.NotebookDocumentFilterWithCells(
            cells=[t.NotebookCellLanguage(language="python")], notebook="*")],
        save=True)


class NotebookDoc:
    __slots__ = ("uri", "path", "version", "cells", "task", "inflight", "key", "closed")

    def __init__(self, uri: str, version: int):
        self.uri = uri
        self.path = uri_to_path(uri)
        self.version = version
        self.cells: list[tuple[str, bool]] = []  # (cell URI, is a code cell), in notebook order
        self.task: asyncio.Task | None = None
        self.inflight: asyncio.Future | None = None
        self.key = None  # what the last applied analysis saw: ((uri, version)..., settings generation)
        self.closed = False

    @property
    def filename(self) -> str:
        if self.path:
            return self.path if self.path.lower().endswith(".ipynb") else self.path + ".ipynb"
        return "untitled.ipynb"


class NotebookMixin:
    """The notebook half of ``DdpServer`` (it needs ``docs``, ``settings``, ``executor``,
    ``encoding``, ``pull``, ``publish``, ``request_refresh`` and ``analysis_settings``)."""

    notebooks: dict
    cell_notebook: dict

    # -- sync --------------------------------------------------------------------------------------
    def notebook_did_open(self, params: t.DidOpenNotebookDocumentParams) -> None:
        nd = params.notebook_document
        old = self.notebooks.get(nd.uri)
        if old is not None:
            self._drop_notebook(old)
        nb = self.notebooks[nd.uri] = NotebookDoc(nd.uri, nd.version)
        items = {c.uri: c for c in params.cell_text_documents}
        for cell in nd.cells:
            self._open_cell(nb, cell, items.get(cell.document))
        nb.cells = [(c.document, c.kind == t.NotebookCellKind.Code) for c in nd.cells]
        self.schedule_notebook(nb, 0.0)

    def _open_cell(self, nb: NotebookDoc, cell: t.NotebookCell, item: t.TextDocumentItem | None) -> None:
        uri = cell.document
        text = item.text if item is not None else ""
        lang = item.language_id if item is not None else "python"
        version = item.version if item is not None else 0
        old = self.docs.get(uri)
        if old is not None:
            old.closed = True
        self.docs[uri] = DocState(Document(uri, text, version, lang, None))
        self.cell_notebook[uri] = nb.uri

    def notebook_did_change(self, params: t.DidChangeNotebookDocumentParams) -> None:
        nb = self.notebooks.get(params.notebook_document.uri)
        if nb is None:
            log.warning("notebookDocument/didChange for a notebook that is not open: %s",
                        params.notebook_document.uri)
            return
        nb.version = params.notebook_document.version
        cells = params.change.cells
        if cells is not None:
            if cells.structure is not None:
                s = cells.structure
                opened = {d.uri: d for d in s.did_open or []}
                new = [(c.document, c.kind == t.NotebookCellKind.Code) for c in s.array.cells or []]
                for c in s.array.cells or []:
                    if c.document in opened or c.document not in self.docs:
                        self._open_cell(nb, c, opened.get(c.document))
                nb.cells[s.array.start:s.array.start + s.array.delete_count] = new
                for d in s.did_close or []:
                    if d.uri not in {u for u, _ in nb.cells}:
                        self._close_cell(d.uri)
            for d in cells.data or []:  # a cell's kind changed (code <-> markup)
                nb.cells = [(u, d.kind == t.NotebookCellKind.Code) if u == d.document else (u, k)
                            for u, k in nb.cells]
            for tc in cells.text_content or []:
                st = self.docs.get(tc.document.uri)
                if st is None:
                    continue
                changes = [st.doc.apply_change(c, self.encoding) for c in tc.changes]
                st.doc.version = tc.document.version
                self.move_findings(st, changes)
        if self.pull or self.settings.lint_on_change:
            self.schedule_notebook(nb, self.settings.debounce_ms / 1000)

    def notebook_did_save(self, params: t.DidSaveNotebookDocumentParams) -> None:
        nb = self.notebooks.get(params.notebook_document.uri)
        if nb is not None:
            self.schedule_notebook(nb, 0.0)

    def notebook_did_close(self, params: t.DidCloseNotebookDocumentParams) -> None:
        nb = self.notebooks.pop(params.notebook_document.uri, None)
        if nb is not None:
            self._drop_notebook(nb)
        for d in params.cell_text_documents:
            self._close_cell(d.uri)

    def _drop_notebook(self, nb: NotebookDoc) -> None:
        nb.closed = True
        if nb.task is not None and not nb.task.done():
            nb.task.cancel()
        for uri, _ in nb.cells:
            self._close_cell(uri)

    def _close_cell(self, uri: str) -> None:
        st = self.docs.pop(uri, None)
        self.cell_notebook.pop(uri, None)
        if st is not None:
            st.closed = True
            if not self.pull:
                self.text_document_publish_diagnostics(t.PublishDiagnosticsParams(uri=uri, diagnostics=[]))

    def notebook_of(self, st: DocState) -> NotebookDoc | None:
        nb_uri = self.cell_notebook.get(st.doc.uri)
        return self.notebooks.get(nb_uri) if nb_uri is not None else None

    def notebook_cells(self, nb: NotebookDoc) -> list[tuple[int, DocState]]:
        """(cell number, state) of the notebook's Python code cells; numbers count every cell."""
        out = []
        for i, (uri, is_code) in enumerate(nb.cells):
            st = self.docs.get(uri)
            if is_code and st is not None and is_python(st.doc):
                out.append((i + 1, st))
        return out

    # -- analysis ----------------------------------------------------------------------------------
    def schedule_notebook(self, nb: NotebookDoc, delay: float) -> None:
        if nb.task is not None and not nb.task.done():
            nb.task.cancel()

        async def later():
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                await asyncio.shield(self.analyse_notebook(nb))
            except Exception:
                log.error("analysis of %s failed:\n%s", nb.uri, traceback.format_exc())

        nb.task = asyncio.ensure_future(later())

    async def analyse_notebook(self, nb: NotebookDoc) -> bool:
        """Analyse the notebook's code cells as one module and hand each cell its findings;
        publish them (push) or ask the client to pull again. False when nothing changed or the
        result went stale."""
        while nb.inflight is not None:
            await asyncio.wait([nb.inflight])
        cells = self.notebook_cells(nb)
        key = (tuple((st.doc.uri, st.doc.version) for _, st in cells), self.settings_gen, self.settings.enable)
        if nb.closed or key == nb.key:
            return False
        snapshot = [(n, st.doc.text) for n, st in cells]
        settings = self.analysis_settings(DocState(Document(nb.uri, "", None, "python", nb.path)))
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self.executor, check_notebook_cells, snapshot, nb.filename, settings,
                                   self.settings.enable)
        nb.inflight = fut
        try:
            findings, syntax = await asyncio.shield(fut)
        finally:
            nb.inflight = None
        now = self.notebook_cells(nb)
        if nb.closed or key != (tuple((st.doc.uri, st.doc.version) for _, st in now), self.settings_gen,
                                self.settings.enable):
            return False  # stale: a later analysis follows the edit
        nb.key = key
        gen = self.settings_gen
        for n, st in now:
            st.analyzed_version, st.settings_gen = st.doc.version, gen
            if syntax is not None:
                st.syntax = syntax if syntax.cell == n else None
                continue  # the other cells keep their last good findings
            st.syntax = None
            st.static = [f for f in findings if f.cell == n]
            st.static_version = st.doc.version
        if self.pull:
            self.request_refresh()
        else:
            for _, st in now:
                self.publish(st)
        return True

    def cell_doc_of(self, st: DocState):
        """For a notebook cell: cell number -> that cell's Document (related locations)."""
        nb = self.notebook_of(st)
        if nb is None:
            return None

        def doc(number: int):
            other = self.cell_of_number(nb, number)
            return other.doc if other is not None else None
        return doc

    def cell_of_number(self, nb: NotebookDoc, number: int) -> DocState | None:
        if 1 <= number <= len(nb.cells):
            return self.docs.get(nb.cells[number - 1][0])
        return None

    # -- fixes -------------------------------------------------------------------------------------
    def cell_fix_changes(self, st: DocState, f: Finding) -> list[tuple[Document, list[t.TextEdit]]] | None:
        """A notebook finding's fix as (cell document, its edits) pairs; None when a cell it
        edits is gone."""
        nb = self.notebook_of(st)
        if nb is None or f.fix is None:
            return None
        by: dict[str, tuple[Document, list]] = {}
        for e in f.fix.edits:
            target = self.cell_of_number(nb, e.cell) if e.cell is not None else st
            if target is None:
                return None
            doc = target.doc
            by.setdefault(doc.uri, (doc, []))[1].append(
                t.TextEdit(range=doc.range_to_client(e.range, self.encoding), new_text=e.content))
        return list(by.values())

    def multi_edit(self, changes: list[tuple[Document, list[t.TextEdit]]]) -> t.WorkspaceEdit:
        if self.capability("workspace", "workspace_edit", "document_changes", default=False):
            return t.WorkspaceEdit(document_changes=[t.TextDocumentEdit(
                text_document=t.OptionalVersionedTextDocumentIdentifier(uri=doc.uri, version=doc.version),
                edits=edits) for doc, edits in changes])
        return t.WorkspaceEdit(changes={doc.uri: edits for doc, edits in changes})

    async def notebook_fix_all_edit(self, nb: NotebookDoc) -> t.WorkspaceEdit | None:
        """Every safe fix of the notebook, as one edit per changed cell."""
        from .code_actions import minimal_edit

        cells = self.notebook_cells(nb)
        snapshot = [(n, st.doc.text) for n, st in cells]
        versions = [st.doc.version for _, st in cells]
        settings = self.analysis_settings(DocState(Document(nb.uri, "", None, "python", nb.path)))
        loop = asyncio.get_running_loop()
        new = await loop.run_in_executor(self.executor, fix_notebook_cells, snapshot, nb.filename, settings)
        if new is None or [st.doc.version for _, st in cells] != versions:
            return None
        changes = []
        for (n, st), text in zip(cells, new):
            if text != st.doc.text:
                changes.append((st.doc, [minimal_edit(st.doc, text, self.encoding)]))
        return self.multi_edit(changes) if changes else None


# -- in the analysis threads ---------------------------------------------------------------------
def check_notebook_cells(cells: list[tuple[int, str]], filename: str, settings, enabled: bool = True):
    """-> (findings in cells, the syntax error in its cell or None)."""
    if not enabled:
        return [], None
    nb = Notebook.from_cells(cells)
    res = check_source(nb.source, filename, settings)
    syntax = nb.to_cells([res.syntax_error])[0] if res.syntax_error is not None else None
    return nb.to_cells(res.findings), syntax


def fix_notebook_cells(cells: list[tuple[int, str]], filename: str, settings) -> list[str] | None:
    """The cells' texts after every safe fix (None: nothing to fix)."""
    nb = Notebook.from_cells(cells)
    codes = settings.enabled_codes(filename)
    new, fixed = notebook_fix_all(nb, lambda s: check_source(s, filename, settings, codes=codes).findings)
    return new.texts if fixed else None
