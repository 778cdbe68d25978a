"""Code actions: quick fixes (from ``Diagnostic.data``, or the current finding), "Disable for this
line", fix-all (``analysis.fixes``, safe fixes only) as one minimal edit, and "Run with torchrun"."""
from __future__ import annotations

import asyncio
import re

from lsprotocol import types as t

from ..analysis.engine import SYNTAX_CODE, check_source
from ..analysis.model import Applicability, Range
from ..analysis.noqa import add_noqa_edit
from ..analysis.source import SourceText

from .commands import RUN_COMMAND
from .convert import SOURCE, fix_from_data, fix_of
from .documents import Document
from .runtime import run_title
from .state import DocState

FIX_ALL_KIND = "source.fixAll.ddp-lint"
RUN_KIND = "source.run.ddp-lint"
_IMPORTS_DIST = re.compile(
    r"^[ \t]*(?:import[ \t]+torch\.distributed|from[ \t]+torch\.distributed[ \t.]|"
    r"from[ \t]+torch[ \t]+import[ \t(][^\n]*\bdistributed\b)", re.MULTILINE)


class CodeActionsMixin:
    """The code-action half of ``DdpServer`` (it needs ``docs``, ``settings``, ``executor``,
    ``encoding``, ``capability``, ``analyse`` and ``analysis_settings`` from the server)."""

    def supports_kind(self, only, kind: str) -> bool:
        if not only:
            return True
        return any(kind == o or kind.startswith(o + ".") for o in only)

    def workspace_edit(self, doc: Document, edits: list[t.TextEdit], version=None) -> t.WorkspaceEdit:
        if self.capability("workspace", "workspace_edit", "document_changes", default=False):
            return t.WorkspaceEdit(document_changes=[t.TextDocumentEdit(
                text_document=t.OptionalVersionedTextDocumentIdentifier(
                    uri=doc.uri, version=version if version is not None else doc.version),
                edits=edits)])
        return t.WorkspaceEdit(changes={doc.uri: edits})

    async def code_actions(self, params: t.CodeActionParams):
        uri = params.text_document.uri
        st = self.docs.get(uri)
        if st is None:
            return None
        doc = st.doc
        only = params.context.only
        actions: list[t.CodeAction] = []
        disabled_ok = self.capability("text_document", "code_action", "disabled_support", default=False)
        if self.supports_kind(only, t.CodeActionKind.QuickFix):
            noqa_seen: set[tuple[int, str]] = set()
            for d in params.context.diagnostics:
                if d.source != SOURCE or not isinstance(d.code, str):
                    continue
                fix = fix_from_data(d.data)
                if fix is None or fix["version"] != doc.version:
                    # stale, or a client that does not send ``data`` back: look the finding up
                    fix = await self.current_fix(st, d)
                if fix is not None:
                    a = self.quick_fix(doc, d, fix, disabled_ok)
                    if a is not None:
                        actions.append(a)
            for d in params.context.diagnostics:
                if d.source != SOURCE or not isinstance(d.code, str) or d.code == SYNTAX_CODE:
                    continue
                line = d.range.start.line
                if (line, d.code) in noqa_seen or not 0 <= line < doc.line_count:
                    continue  # a diagnostic beyond the end of the text: no line to put the noqa on
                noqa_seen.add((line, d.code))
                e = add_noqa_edit(doc.line(line), line, d.code)
                if e is None:
                    continue
                te = t.TextEdit(range=doc.range_to_client(e.range, self.encoding), new_text=e.content)
                actions.append(t.CodeAction(
                    title=f"Disable {d.code} for this line", kind=t.CodeActionKind.QuickFix,
                    diagnostics=[d], edit=self.workspace_edit(doc, [te])))
        if self.settings.enable and self.supports_kind(only, FIX_ALL_KIND) and (only or self.has_safe_fix(st)):
            a = t.CodeAction(title="Fix all auto-fixable ddp-lint problems", kind=FIX_ALL_KIND,
                             data={"uri": uri, "version": doc.version, "action": "fixAll"})
            if not self.capability("text_document", "code_action", "resolve_support", default=None) or only:
                a = await self.resolve_fix_all(a)
            if a is not None:
                actions.append(a)
        if (only and self.supports_kind(only, RUN_KIND)) or (not only):
            if doc.path and self.trusted and _IMPORTS_DIST.search(doc.text):
                if self.gpus is None and self.gpu_probe is not None and not self.gpu_probe.done():
                    await asyncio.wait([self.gpu_probe], timeout=1.0)  # the first count only
                title = run_title(self.gpus, self.settings.run.emulate)
                actions.append(t.CodeAction(
                    title=title, kind=RUN_KIND,
                    command=t.Command(title=title, command=RUN_COMMAND, arguments=[uri])))
        return actions

    def quick_fix(self, doc: Document, d: t.Diagnostic, fix: dict, disabled_ok: bool):
        app = fix["applicability"]
        code = d.code
        if app is Applicability.DISPLAY_ONLY:
            if not disabled_ok:
                return None
            return t.CodeAction(title=f"{fix['title']} ({code}, display only: apply it by hand)",
                                kind=t.CodeActionKind.QuickFix, diagnostics=[d],
                                disabled=t.CodeActionDisabled(reason="display-only fix: review it and apply it by hand"))
        if app is Applicability.UNSAFE:
            title = f"{fix['title']} ({code}, unsafe fix: review the change)"
        else:
            title = f"{fix['title']} ({code})"
        edit = self.multi_edit(fix["changes"]) if fix.get("changes") else \
            self.workspace_edit(doc, fix["edits"], fix["version"])
        return t.CodeAction(title=title, kind=t.CodeActionKind.QuickFix, diagnostics=[d],
                            is_preferred=app is Applicability.SAFE, edit=edit)

    async def current_fix(self, st: DocState, d: t.Diagnostic) -> dict | None:
        """The fix of the current version's finding with ``d``'s code on ``d``'s line."""
        if st.analyzed_version != st.doc.version and (self.settings.lint_on_change or st.analyzed_version is None):
            await self.analyse(st)
        if st.static_version != st.doc.version or st.syntax is not None:
            return None
        for f in st.static:
            if f.code == d.code and f.range.start.line == d.range.start.line and f.fix is not None:
                got = fix_of(f, st.doc, self.encoding)
                if got is not None and f.cell is not None:  # a notebook: the edits may reach other cells
                    got["changes"] = self.cell_fix_changes(st, f)
                    if got["changes"] is None:
                        return None
                return got
        return None

    def has_safe_fix(self, st: DocState) -> bool:
        nb = self.notebook_of(st)
        if nb is not None:  # fix-all fixes the whole notebook
            return any(self.has_safe_fix_here(c) for _, c in self.notebook_cells(nb))
        return self.has_safe_fix_here(st)

    def has_safe_fix_here(self, st: DocState) -> bool:
        return any(f.fix is not None and f.fix.applicability is Applicability.SAFE for f in st.static)

    async def resolve_fix_all(self, action: t.CodeAction) -> t.CodeAction | None:
        data = action.data if isinstance(action.data, dict) else {}
        st = self.docs.get(str(data.get("uri")))
        if st is None:
            return action
        edit = await self.fix_all_edit(st)
        if edit is None:
            return None if action.edit is None and data.get("drop_empty", True) else action
        action.edit = edit
        return action

    async def fix_all_edit(self, st: DocState) -> t.WorkspaceEdit | None:
        nb = self.notebook_of(st)
        if nb is not None:  # a notebook cell: fix the whole notebook
            return await self.notebook_fix_all_edit(nb)
        doc = st.doc
        text, version = doc.text, doc.version
        settings = self.analysis_settings(st)
        exact = st.static_version == version and st.syntax is None
        findings = list(st.static) if exact else None
        filename = doc.path or doc.uri
        loop = asyncio.get_running_loop()
        new = await loop.run_in_executor(self.executor, fix_all_text, text, filename, settings, findings)
        if doc.version != version or new == text:
            return None
        return self.workspace_edit(doc, [minimal_edit(doc, new, self.encoding)], version)


def fix_all_text(text: str, filename: str, settings, findings):
    from ..analysis.fixes import fix_all

    codes = settings.enabled_codes(filename)
    new, _ = fix_all(text, lambda s: check_source(s, filename, settings, codes=codes).findings,
                     unsafe=False, findings=findings)
    return new


def minimal_edit(doc: Document, new: str, enc) -> t.TextEdit:
    """One TextEdit that turns ``doc.text`` into ``new``, covering only the part that differs
    (so cursors and folds outside it stay put)."""
    old = doc.text
    n = min(len(old), len(new))
    a = 0
    while a < n and old[a] == new[a]:
        a += 1
    b = 0
    while b < n - a and old[len(old) - 1 - b] == new[len(new) - 1 - b]:
        b += 1
    # never split a "\r\n" pair
    while a > 0 and old[a - 1] == "\r":
        a -= 1
    src = SourceText(old)
    start = src.position_at(a)
    end = src.position_at(len(old) - b)
    return t.TextEdit(range=doc.range_to_client(Range(start, end), enc), new_text=new[a:len(new) - b])
