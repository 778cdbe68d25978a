"""Diagnostics: analyse a document (debounced, in the analysis threads), publish (push) or
answer ``textDocument/diagnostic`` (pull), and move the kept findings with the user's edits.

A result for a version that is no longer current is never published. Runtime findings (from
``ddp-lint.run``, kept in ``runtime.RuntimeResults``) travel with the static ones.
"""
from __future__ import annotations

import asyncio
import os
import logging
import time
import traceback

from lsprotocol import types as t

from ..analysis.engine import SYNTAX_CODE, check_source
from ..analysis.flow import project

from .convert import path_to_uri, shift_finding, to_diagnostic, uri_to_path
from .documents import Document
from .state import DocState, is_python

log = logging.getLogger("ddp-lint.server")


class DiagnosticsMixin:
    """The diagnostics half of ``DdpServer`` (it needs ``docs``, ``settings``, ``results``,
    ``executor``, ``encoding``, ``pull`` and ``capability`` from the server)."""

    def relint_all(self) -> None:
        for st in list(self.docs.values()):
            st.analyzed_version = None
            if self.pull:
                continue
            self.schedule(st, 0.0)
        if self.pull:
            self.request_refresh()

    # -- other files' helpers ------------------------------------------------------------------------
    def share_text(self, st: DocState, open_: bool = True) -> None:
        """Let the cross-file analysis of the other documents see this document's current (maybe
        unsaved) text instead of the file on disk; ``open_=False`` stops that (closed)."""
        if st.doc.path and is_python(st.doc):
            project.set_overlay(st.doc.path, st.doc.text if open_ else None)

    def refresh_dependents(self, path: str | None, delay: float) -> None:
        """Analyse again the open documents whose last analysis read ``path`` (a helper that
        changed in the editor or on disk), or looked for it and found it absent (a module created
        or opened since)."""
        if not path:
            return
        p = os.path.abspath(path)
        # ``p`` itself, or a folder above it that an import found missing (a negative dependency)
        keys = [p]
        while os.path.dirname(keys[-1]) != keys[-1]:
            keys.append(os.path.dirname(keys[-1]))
        hit = False
        for other in list(self.docs.values()):
            if any(k in other.deps for k in keys) and not other.closed \
                    and os.path.abspath(other.doc.path or "") != p:
                other.analyzed_version = None
                hit = True
                if not self.pull:
                    self.schedule(other, delay)
        if hit and self.pull:
            self.request_refresh()

    def request_refresh(self) -> None:
        if self.capability("workspace", "diagnostics", "refresh_support", default=False):
            try:
                self.workspace_diagnostic_refresh(None)
            except Exception as e:  # pragma: no cover
                log.debug("diagnostic refresh failed: %s", e)

    # -- analysis ------------------------------------------------------------------------------------
    def schedule(self, st: DocState, delay: float) -> None:
        if st.task is not None and not st.task.done():
            st.task.cancel()  # a pending debounce; an analysis already running is shielded
        st.task = asyncio.ensure_future(self._lint_after(st, delay))

    async def _lint_after(self, st: DocState, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        await asyncio.shield(self._analyse_and_publish(st))

    async def _analyse_and_publish(self, st: DocState) -> None:
        try:
            fresh = await self.analyse(st)
            if (not self.pull and not st.closed and st.analyzed_version == st.doc.version
                    and (fresh or st.published_version != st.doc.version)):
                self.publish(st)
        except Exception:
            log.error("analysis of %s failed:\n%s", st.doc.uri, traceback.format_exc())

    async def analyse(self, st: DocState) -> bool:
        """Bring ``st`` up to date with its document's current version. Returns True when this
        call applied a new result; False when there was nothing to do or the result went stale."""
        nb = self.notebook_of(st)
        if nb is not None:  # a notebook cell: the notebook is analysed as one module
            await self.analyse_notebook(nb)
            return False  # analyse_notebook published (push) or asked for a pull of every cell
        while st.inflight is not None:
            await asyncio.wait([st.inflight])
        doc = st.doc
        if st.closed or (st.analyzed_version == doc.version and st.settings_gen == self.settings_gen
                         and doc.version is not None):
            return False
        if not self.settings.enable or not is_python(doc):
            st.static, st.syntax, st.static_version = [], None, doc.version
            st.analyzed_version, st.settings_gen = doc.version, self.settings_gen
            return True
        version, text, gen = doc.version, doc.text, self.settings_gen
        settings = self.analysis_settings(st)
        filename = doc.path or doc.uri
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self.executor, timed_check, text, filename, settings)
        st.inflight = fut
        try:
            res, elapsed = await asyncio.shield(fut)
        finally:
            st.inflight = None
        st.analyses += 1
        if st.closed or doc.version != version or gen != self.settings_gen:
            log.debug("analysis of %s v%s dropped: stale (now v%s)", doc.uri, version, doc.version)
            return False
        for e in res.errors:
            log.error("internal error in a rule (other rules still reported):\n%s", e)
        if res.syntax_error is not None:
            st.syntax = res.syntax_error
            # keep the last good parse's findings (already moved with the edits since)
        else:
            st.syntax = None
            st.static = res.findings
            st.static_version = version
            st.deps = frozenset(p for p, _ in res.dependencies)
        st.analyzed_version, st.settings_gen = version, gen
        log.debug("analysed %s v%s in %.1f ms: %d finding(s)%s", doc.uri, version, elapsed * 1000,
                  len(res.findings), " (syntax error)" if res.syntax_error else "")
        return True

    # -- diagnostics -------------------------------------------------------------------------------
    def diagnostics_for(self, st: DocState) -> list[t.Diagnostic]:
        doc, enc = st.doc, self.encoding
        exact = st.static_version == doc.version and st.syntax is None
        related = self.capability("text_document", "publish_diagnostics", "related_information", default=True)
        out: list[t.Diagnostic] = []
        if st.syntax is not None:
            out.append(to_diagnostic(st.syntax, doc, enc))
        if self.settings.enable:
            for f in st.static:
                if f.code == SYNTAX_CODE:
                    continue
                # a notebook fix that edits other cells is built when asked (code_actions.current_fix)
                in_doc = f.fix is None or all(e.cell in (None, f.cell) for e in f.fix.edits)
                out.append(to_diagnostic(f, doc, enc, with_fix=exact and in_doc, related_support=related,
                                         cell_doc=self.cell_doc_of(st)))
        else:
            out.clear()
        if not self.runtime_side_push:
            out.extend(self.runtime_diagnostics(doc.uri, doc, related))
        return out

    @property
    def runtime_side_push(self) -> bool:
        """Runtime results travel by push, apart from the pulled static report: for a pull client
        that cannot be asked to re-pull (no ``workspace.diagnostics.refreshSupport``), since a run
        ends without any edit that would make it pull. Every other client gets them in the same
        list as the static diagnostics (pushed together, or in the pulled report + a refresh)."""
        return self.pull and not self.capability("workspace", "diagnostics", "refresh_support", default=False)

    def runtime_diagnostics(self, uri: str, doc: Document | None, related=True) -> list[t.Diagnostic]:
        findings = self.results.for_uri(uri)
        if not findings:
            return []
        if doc is None:
            doc = self.disk_document(uri)
        return [to_diagnostic(f, doc, self.encoding, runtime=True, related_support=related,
                              lines_of=self.document_for_path) for f in findings]

    def document_for_path(self, path: str) -> Document | None:
        uri = path_to_uri(path)
        st = self.docs.get(uri)
        return st.doc if st is not None else self.disk_document(uri)

    def disk_document(self, uri: str) -> Document:
        path = uri_to_path(uri)
        text = ""
        if path:
            try:
                from ..analysis.io import read_source

                text = read_source(path)
            except Exception:
                text = ""
        return Document(uri, text, None, path=path)

    def publish(self, st: DocState) -> None:
        st.published_version = st.doc.version
        self.text_document_publish_diagnostics(t.PublishDiagnosticsParams(
            uri=st.doc.uri, version=st.doc.version, diagnostics=self.diagnostics_for(st)))

    def publish_uri(self, uri: str) -> None:
        """Send the current diagnostics of ``uri`` (open or not) where they travel by push: all of
        them to a push client, the runtime ones to a pull client without refresh support."""
        st = self.docs.get(uri)
        if self.pull:
            if self.runtime_side_push:
                self.text_document_publish_diagnostics(t.PublishDiagnosticsParams(
                    uri=uri, version=st.doc.version if st is not None else None,
                    diagnostics=self.runtime_diagnostics(uri, st.doc if st is not None else None)))
            return
        if st is not None:
            self.publish(st)
        else:
            self.text_document_publish_diagnostics(t.PublishDiagnosticsParams(
                uri=uri, diagnostics=self.runtime_diagnostics(uri, None)))

    async def pull_report(self, params: t.DocumentDiagnosticParams):
        uri = params.text_document.uri
        st = self.docs.get(uri)
        if st is None:  # not open: runtime findings only
            diags = [] if self.runtime_side_push else self.runtime_diagnostics(uri, None)
            return t.RelatedFullDocumentDiagnosticReport(items=diags, result_id=None)
        nb = self.notebook_of(st)
        if nb is not None:  # a cell: up to date when the whole notebook is (another cell may have changed)
            await self.analyse_notebook(nb)
        for _ in range(50 if nb is None else 0):
            if st.closed:
                break
            needs = st.analyzed_version != st.doc.version or st.settings_gen != self.settings_gen
            if not needs or (not self.settings.lint_on_change and st.analyzed_version is not None
                             and st.settings_gen == self.settings_gen):
                break
            if st.task is None or st.task.done():
                delay = self.settings.debounce_ms / 1000 if st.analyzed_version is not None else 0.0
                self.schedule(st, delay)
            await asyncio.wait([st.task])
        diags = self.diagnostics_for(st)
        prev = st.pull_ids
        if prev is not None and prev[1] == diags:
            rid = prev[0]
        else:
            st.result_seq += 1
            rid = f"{st.doc.version}.{st.result_seq}"
            st.pull_ids = (rid, diags)
        if params.previous_result_id is not None and params.previous_result_id == rid:
            return t.RelatedUnchangedDocumentDiagnosticReport(result_id=rid)
        return t.RelatedFullDocumentDiagnosticReport(items=diags, result_id=rid)

    # -- edits moving findings -----------------------------------------------------------------------
    def move_findings(self, st: DocState, changes) -> bool:
        """Move the kept findings with the edits; returns True when a runtime finding was dropped
        because the user edited its lines."""
        for ch in changes:
            if ch is None:
                continue
            st.static = [g for g in (shift_finding(f, ch) for f in st.static) if g is not None]
            if st.syntax is not None:
                st.syntax = shift_finding(st.syntax, ch)
        return self.results.shift(st.doc.uri, changes)


# -- run in the analysis threads ------------------------------------------------------------
def timed_check(text: str, filename: str, settings):
    t0 = time.perf_counter()
    res = check_source(text, filename, settings)
    return res, time.perf_counter() - t0
