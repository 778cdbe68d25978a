"""The ddp-lint language server: a thin pygls 2.x adapter over ``analysis``.

* Documents live in ``lsp_server.documents`` (incremental sync, LSP line breaks).
* Analysis (``analysis.engine.check_source``) runs in a thread pool, debounced per URI. A result
  for a version that is no longer current is never published.
* Diagnostics are pushed (``textDocument/publishDiagnostics`` with the version) or pulled
  (``textDocument/diagnostic`` with ``resultId``), chosen once from the client's capabilities.
* Quick fixes come from ``Diagnostic.data`` (no re-analysis); fix-all uses ``analysis.fixes``.
* ``ddp-lint.run`` (``lsp_server.runtime``) runs the file under torchrun on explicit request and
  publishes what happened as ``ddp-lint (runtime)`` diagnostics.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import os
import re
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from lsprotocol import types as t
from pygls.exceptions import (
    JsonRpcException,
    JsonRpcInternalError,
    JsonRpcInvalidParams,
)
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from ..analysis import __version__
from ..analysis.engine import SYNTAX_CODE, check_source
from ..analysis.model import Applicability, Finding
from ..analysis.noqa import _CODE_RE, NOQA_RE, add_noqa_edit
from ..analysis.registry import get_rule

from . import settings as cfg
from .convert import (
    SOURCE,
    fix_from_data,
    path_to_uri,
    shift_finding,
    to_diagnostic,
    uri_to_path,
)
from .documents import UTF16, Document

log = logging.getLogger("ddp-lint.server")

FIX_ALL_KIND = "source.fixAll.ddp-lint"
RUN_KIND = "source.run.ddp-lint"
RUN_COMMAND = "ddp-lint.run"
FIX_ALL_COMMAND = "ddp-lint.fixAll"
RUN_TITLE = "Run with torchrun on local GPUs (ddp-lint)"
_IMPORTS_DIST = re.compile(
    r"^[ \t]*(?:import[ \t]+torch\.distributed|from[ \t]+torch\.distributed[ \t.]|"
    r"from[ \t]+torch[ \t]+import[ \t(][^\n]*\bdistributed\b)", re.MULTILINE)


class DocState:
    """Everything the server knows about one open document."""

    __slots__ = ("doc", "static", "static_version", "syntax", "analyzed_version", "task", "inflight",
                 "closed", "pull_ids", "result_seq", "settings_gen", "analyses", "published_version")

    def __init__(self, doc: Document):
        self.doc = doc
        self.static: list[Finding] = []  # last good parse's findings, moved with the edits since
        self.static_version: int | None = None  # version at which ``static`` is exact (fixes valid)
        self.syntax: Finding | None = None  # DDP000 of the latest analysis, if any
        self.analyzed_version: int | None = None
        self.task: asyncio.Task | None = None
        self.inflight: asyncio.Future | None = None
        self.closed = False
        self.pull_ids: tuple[str, list] | None = None  # (resultId, diagnostics) of the last pull
        self.result_seq = 0
        self.settings_gen = -1
        self.analyses = 0
        self.published_version: int | None = None


class DdpProtocol(LanguageServerProtocol):
    """pygls' protocol without its own copy of the documents (the server keeps them), and with
    the pull-diagnostics capability advertised only to clients that pull."""

    def structure_message(self, data):
        try:
            return super().structure_message(data)
        except JsonRpcException as e:
            # A message whose params do not fit its method is the client's error (InvalidParams).
            # pygls only logs it, so a request would never be answered and the client would wait
            # forever: answer it here (tests/regressions/test_lsp_regressions.py).
            err = JsonRpcInvalidParams(f"invalid params for {data.get('method')!r}: {e.__cause__ or e}"[:500])
            if "method" in data and isinstance(data.get("id"), (int, str)):
                self._send_response(data["id"], error=err.to_response_error())
            raise err from None

    def _check_handler_result(self, future):
        # pygls 2.1 files the future of every notification whose handler is a generator or a
        # coroutine (didOpen, didChange, didClose...) in _request_futures and never removes it:
        # ~4 objects per keystroke, forever. Drop it once the notification is handled
        # (tests/regressions/test_lsp_regressions.py::test_notifications_do_not_accumulate).
        for k, v in list(self._request_futures.items()):
            if v is future:
                del self._request_futures[k]
                break
        super()._check_handler_result(future)

    @lsp_method(t.SHUTDOWN)
    def lsp_shutdown(self, *args):
        # pygls cancels every pending future while iterating _request_futures itself; cancelling a
        # handler still running (``initialized`` waiting on the client's workspace/configuration
        # answer) runs its done-callbacks at once, and they remove it from that dict: "dictionary
        # changed size during iteration", shutdown answered with an error, and a client that then
        # never sends ``exit`` (tests/regressions/test_lsp_regressions.py). Iterate a snapshot.
        if (h := self.fm.features.get(t.SHUTDOWN)) is not None:
            yield h, args, None
        current_id = self.msg_id
        for msg_id, future in list(self._request_futures.items()):
            if msg_id != current_id and not future.done():
                try:
                    future.cancel()
                except Exception:  # a done-callback failed: the rest still get cancelled
                    log.debug("cancelling %r at shutdown:\n%s", msg_id, traceback.format_exc())
        self._shutdown = True
        return None

    @lsp_method(t.INITIALIZE)
    def lsp_initialize(self, params: t.InitializeParams):
        result = yield from super().lsp_initialize(params)
        if not getattr(self._server, "pull", False):
            result.capabilities.diagnostic_provider = None
        return result

    @lsp_method(t.TEXT_DOCUMENT_DID_OPEN)
    def lsp_text_document__did_open(self, params):
        if (h := self.fm.features.get(t.TEXT_DOCUMENT_DID_OPEN)) is not None:
            yield h, (params,), None

    @lsp_method(t.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params):
        if (h := self.fm.features.get(t.TEXT_DOCUMENT_DID_CHANGE)) is not None:
            yield h, (params,), None

    @lsp_method(t.TEXT_DOCUMENT_DID_CLOSE)
    def lsp_text_document__did_close(self, params):
        if (h := self.fm.features.get(t.TEXT_DOCUMENT_DID_CLOSE)) is not None:
            yield h, (params,), None


class LspLogHandler(logging.Handler):
    """Forwards log records to the client as ``window/logMessage`` (from any thread)."""

    TYPES = {logging.ERROR: t.MessageType.Error, logging.WARNING: t.MessageType.Warning,
             logging.INFO: t.MessageType.Info, logging.DEBUG: t.MessageType.Log}

    def __init__(self, server: DdpServer):
        super().__init__()
        self.server = server

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            lvl = max((k for k in self.TYPES if k <= record.levelno), default=logging.DEBUG)
            self.server.send_log(self.TYPES[lvl], msg)
        except Exception:  # pragma: no cover - logging must never raise
            pass


class DdpServer(LanguageServer):
    def __init__(self, log_level: str | None = None):
        super().__init__("ddp-lint", __version__, protocol_cls=DdpProtocol,
                         text_document_sync_kind=t.TextDocumentSyncKind.Incremental)
        self.docs: dict[str, DocState] = {}
        self.encoding = UTF16
        self.pull = False
        self.caps: t.ClientCapabilities | None = None
        self.init_layer: dict = {}
        self.config_layer: dict = {}
        self.settings = cfg.ServerSettings()
        self.settings_gen = 0
        self.cli_log_level = log_level
        self.projects = cfg.ProjectSettings()
        self.reported_config_errors: set[str] = set()
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ddp-lint-analysis")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: int | None = None
        # runtime results: uri -> findings (moved with edits, dropped when their lines change)
        self.runtime: dict[str, list[Finding]] = {}
        self.run_targets: dict[str, set[str]] = {}  # script uri -> uris its last run reported into
        self.runs: dict[str, threading.Event] = {}  # script path -> cancel event of a live run
        self.log_handler = LspLogHandler(self)
        self.log_handler.setFormatter(logging.Formatter("%(message)s"))
        self.log_handler.setLevel(cfg.LOG_LEVELS.get((log_level or "info").lower(), logging.INFO))
        root = logging.getLogger("ddp-lint")
        root.addHandler(self.log_handler)
        root.setLevel(logging.DEBUG)
        root.propagate = False

    # -- plumbing ----------------------------------------------------------------------------------
    def send_log(self, mtype, message: str) -> None:
        def send():
            try:
                self.window_log_message(t.LogMessageParams(type=mtype, message=message))
            except Exception:
                pass

        if self.loop is None or self.protocol.writer is None:
            print(message, file=sys.stderr)
        elif threading.get_ident() == self.loop_thread:
            send()
        else:
            self.loop.call_soon_threadsafe(send)

    def show(self, mtype, message: str) -> None:
        try:
            self.window_show_message(t.ShowMessageParams(type=mtype, message=message))
        except Exception:
            pass

    def report_server_error(self, error: Exception, source) -> None:
        # pygls' default shows a popup for every out-of-band error; log instead (requests already
        # answer with an LSP error, and ``guarded`` has logged the traceback of internal ones).
        if isinstance(error, JsonRpcInvalidParams):
            log.info("request refused: %s", error)
        elif isinstance(error, JsonRpcInternalError) and str(error).startswith("ddp-lint: internal error"):
            pass
        elif getattr(source, "__name__", "") == "FeatureRequestError" and isinstance(error, JsonRpcException):
            log.info("request answered with an error: %s", error)
        else:
            log.error("internal error (%s): %s", getattr(source, "__name__", source), error)

    def capability(self, *path, default=None):
        obj = self.caps
        for p in path:
            if obj is None:
                return default
            obj = getattr(obj, p, None)
        return default if obj is None else obj

    def folders(self) -> list[str]:
        out = []
        try:
            ws = self.workspace
        except RuntimeError:
            return out
        for f in ws.folders.values():
            p = uri_to_path(f.uri)
            if p:
                out.append(p)
        if not out and ws.root_uri:
            p = uri_to_path(ws.root_uri)
            if p:
                out.append(p)
        return out

    # -- settings ------------------------------------------------------------------------------------
    def apply_settings(self) -> None:
        raw = cfg.merge(self.init_layer, self.config_layer)
        new, problems = cfg.parse(raw)
        level = new.log_level if "logLevel" in raw or "log_level" in raw or "log-level" in raw \
            else (self.cli_log_level or new.log_level)
        self.log_handler.setLevel(cfg.LOG_LEVELS.get(str(level).lower(), logging.INFO))
        for p in problems:
            log.warning("%s", p)
        if problems:
            key = "\n".join(problems)
            if key not in self.reported_config_errors:
                self.reported_config_errors.add(key)
                self.show(t.MessageType.Warning, "ddp-lint: " + "; ".join(problems))
        changed = new != self.settings
        self.settings = new
        if changed:
            self.settings_gen += 1
            self.projects.clear()
            log.info("settings: %s", new)

    def analysis_settings(self, st: DocState):
        path = st.doc.path
        folder = os.path.dirname(path) if path else (self.folders() or [None])[0]
        s, err = self.projects.for_folder(folder, self.settings)
        if err and err not in self.reported_config_errors:
            self.reported_config_errors.add(err)
            log.error("%s (using the default settings)", err)
            self.show(t.MessageType.Error, f"ddp-lint: {err} (using the default settings)")
        return s

    def relint_all(self) -> None:
        for st in list(self.docs.values()):
            st.analyzed_version = None
            if self.pull:
                continue
            self.schedule(st, 0.0)
        if self.pull:
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
        while st.inflight is not None:
            await asyncio.wait([st.inflight])
        doc = st.doc
        if st.closed or (st.analyzed_version == doc.version and st.settings_gen == self.settings_gen
                         and doc.version is not None):
            return False
        if not self.settings.enable or not _is_python(doc):
            st.static, st.syntax, st.static_version = [], None, doc.version
            st.analyzed_version, st.settings_gen = doc.version, self.settings_gen
            return True
        version, text, gen = doc.version, doc.text, self.settings_gen
        settings = self.analysis_settings(st)
        filename = doc.path or doc.uri
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self.executor, _timed_check, text, filename, settings)
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
                out.append(to_diagnostic(f, doc, enc, with_fix=exact, related_support=related))
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
        findings = self.runtime.get(uri)
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
        for _ in range(50):
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
        uri = st.doc.uri
        rt = self.runtime.get(uri)
        dropped = False
        for ch in changes:
            if ch is None:
                continue
            st.static = [g for g in (shift_finding(f, ch) for f in st.static) if g is not None]
            if st.syntax is not None:
                st.syntax = shift_finding(st.syntax, ch)
            if rt:
                kept = [g for g in (shift_finding(f, ch) for f in rt) if g is not None]
                dropped |= len(kept) != len(rt)
                rt = kept
        if rt is not None:
            if rt:
                self.runtime[uri] = rt
            else:
                self.runtime.pop(uri, None)
        return dropped

    # -- code actions ----------------------------------------------------------------------------------
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
                if (line, d.code) in noqa_seen:
                    continue
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
            if doc.path and _IMPORTS_DIST.search(doc.text):
                actions.append(t.CodeAction(
                    title=RUN_TITLE, kind=RUN_KIND,
                    command=t.Command(title=RUN_TITLE, command=RUN_COMMAND, arguments=[uri])))
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
        return t.CodeAction(title=title, kind=t.CodeActionKind.QuickFix, diagnostics=[d],
                            is_preferred=app is Applicability.SAFE,
                            edit=self.workspace_edit(doc, fix["edits"], fix["version"]))

    async def current_fix(self, st: DocState, d: t.Diagnostic) -> dict | None:
        """The fix of the current version's finding with ``d``'s code on ``d``'s line."""
        if st.analyzed_version != st.doc.version and (self.settings.lint_on_change or st.analyzed_version is None):
            await self.analyse(st)
        if st.static_version != st.doc.version or st.syntax is not None:
            return None
        for f in st.static:
            if f.code == d.code and f.range.start.line == d.range.start.line and f.fix is not None:
                diag = to_diagnostic(f, st.doc, self.encoding, with_fix=True, related_support=False)
                return fix_from_data(diag.data)
        return None

    def has_safe_fix(self, st: DocState) -> bool:
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
        doc = st.doc
        text, version = doc.text, doc.version
        settings = self.analysis_settings(st)
        exact = st.static_version == version and st.syntax is None
        findings = list(st.static) if exact else None
        filename = doc.path or doc.uri
        loop = asyncio.get_running_loop()
        new = await loop.run_in_executor(self.executor, _fix_all, text, filename, settings, findings)
        if doc.version != version or new == text:
            return None
        return self.workspace_edit(doc, [minimal_edit(doc, new, self.encoding)], version)

    # -- hover ---------------------------------------------------------------------------------------------
    def hover(self, params: t.HoverParams):
        st = self.docs.get(params.text_document.uri)
        if st is None:
            return None
        doc = st.doc
        line = doc.line(params.position.line)
        if "#" not in line:
            return None
        m = NOQA_RE.search(line)
        if m is None or m.group("codes") is None:
            return None
        col = doc.to_cp(params.position, self.encoding).column
        base = m.start("codes")
        for cm in _CODE_RE.finditer(m.group("codes")):
            s, e = base + cm.start(), base + cm.end()
            if s <= col <= e:
                rule = get_rule(cm.group(0))
                if rule is None:
                    text = f"`{cm.group(0).upper()}` is not a ddp-lint rule code."
                else:
                    text = rule.render_docs() + f"\n[Documentation]({rule.url()})\n"
                from ..analysis.model import Position, Range

                rng = doc.range_to_client(Range(Position(params.position.line, s),
                                                Position(params.position.line, e)), self.encoding)
                return t.Hover(contents=t.MarkupContent(kind=t.MarkupKind.Markdown, value=text), range=rng)
        return None


def _is_python(doc: Document) -> bool:
    """Only Python is linted (a client may open other files with this server attached)."""
    lang = (doc.language_id or "").lower()
    if lang in ("python", "py", "python3"):
        return True
    name = (doc.path or doc.uri).lower()
    return not lang and name.endswith((".py", ".pyi", ".pyw"))


# -- helpers run in the analysis threads -----------------------------------------------------------
def _timed_check(text: str, filename: str, settings):
    t0 = time.perf_counter()
    res = check_source(text, filename, settings)
    return res, time.perf_counter() - t0


def _fix_all(text: str, filename: str, settings, findings):
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
    from ..analysis.source import SourceText

    src = SourceText(old)
    start = src.position_at(a)
    end = src.position_at(len(old) - b)
    from ..analysis.model import Range

    return t.TextEdit(range=doc.range_to_client(Range(start, end), enc), new_text=new[a:len(new) - b])


# -- the server and its handlers ----------------------------------------------------------------------
def guarded(method: str):
    """Wrap a request handler: an unexpected exception is logged with its traceback and answered
    with an LSP error; the server keeps running."""

    def deco(fn):
        if asyncio.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def wrapper(ls, params):
                try:
                    return await fn(ls, params)
                except (JsonRpcException, asyncio.CancelledError):
                    raise
                except Exception as e:
                    log.error("internal error in %s:\n%s", method, traceback.format_exc())
                    raise JsonRpcInternalError(f"ddp-lint: internal error in {method}: {type(e).__name__}: {e}") from None
        else:
            @functools.wraps(fn)
            def wrapper(ls, params):
                try:
                    return fn(ls, params)
                except JsonRpcException:
                    raise
                except Exception as e:
                    log.error("internal error in %s:\n%s", method, traceback.format_exc())
                    raise JsonRpcInternalError(f"ddp-lint: internal error in {method}: {type(e).__name__}: {e}") from None
        return wrapper

    return deco


def notification(method: str):
    """Wrap a notification handler: errors are logged, never raised."""

    def deco(fn):
        @functools.wraps(fn)
        def wrapper(ls, params):
            try:
                return fn(ls, params)
            except Exception:
                log.error("internal error in %s:\n%s", method, traceback.format_exc())

        return wrapper

    return deco


def create_server(log_level: str | None = None) -> DdpServer:
    server = DdpServer(log_level)

    @server.feature(t.INITIALIZE)
    @notification(t.INITIALIZE)
    def initialize(ls: DdpServer, params: t.InitializeParams):
        ls.loop = asyncio.get_running_loop()
        ls.loop_thread = threading.get_ident()
        ls.caps = params.capabilities
        ls.encoding = ls.workspace.position_encoding or UTF16
        ls.pull = ls.capability("text_document", "diagnostic") is not None
        ls.init_layer = cfg.unwrap(params.initialization_options)
        ls.apply_settings()

    @server.feature(t.INITIALIZED)
    async def initialized(ls: DdpServer, params):
        log.info("ddp-lint %s: position encoding %s, %s diagnostics", __version__, ls.encoding,
                 "pull" if ls.pull else "push")
        try:
            if ls.capability("workspace", "did_change_configuration", "dynamic_registration", default=False):
                await ls.client_register_capability_async(t.RegistrationParams(registrations=[
                    t.Registration(id="ddp-lint-config", method=t.WORKSPACE_DID_CHANGE_CONFIGURATION,
                                   register_options={"section": cfg.SECTION})]))
        except Exception as e:
            log.warning("the client refused to register workspace/didChangeConfiguration: %s", e)
        try:
            if ls.capability("workspace", "did_change_watched_files", "dynamic_registration", default=False):
                await ls.client_register_capability_async(t.RegistrationParams(registrations=[
                    t.Registration(id="ddp-lint-pyproject", method=t.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                                   register_options=t.DidChangeWatchedFilesRegistrationOptions(
                                       watchers=[t.FileSystemWatcher(glob_pattern="**/pyproject.toml")]))]))
        except Exception as e:
            log.debug("no file watching for pyproject.toml: %s", e)
        try:
            await fetch_configuration(ls)
        except Exception:
            log.error("reading the client's settings failed:\n%s", traceback.format_exc())

    async def fetch_configuration(ls: DdpServer) -> None:
        if not ls.capability("workspace", "configuration", default=False):
            return
        old_gen = ls.settings_gen
        try:
            got = await asyncio.wait_for(ls.workspace_configuration_async(t.ConfigurationParams(
                items=[t.ConfigurationItem(section=cfg.SECTION)])), timeout=10)
        except asyncio.TimeoutError:
            log.warning("the client did not answer workspace/configuration within 10 s")
            return
        layer = cfg.unwrap(got[0]) if got else {}
        ls.config_layer = layer
        ls.apply_settings()
        if ls.settings_gen != old_gen:
            ls.relint_all()

    @server.feature(t.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(ls: DdpServer, params: t.DidChangeConfigurationParams):
        try:
            layer = cfg.unwrap(params.settings) if isinstance(params.settings, dict) else {}
            old_gen = ls.settings_gen
            if layer:
                ls.config_layer = layer
                ls.apply_settings()
            elif ls.capability("workspace", "configuration", default=False):
                await fetch_configuration(ls)
            ls.projects.clear()
            ls.settings_gen += ls.settings_gen == old_gen  # pyproject may have changed: re-check all
            ls.relint_all()
        except Exception:
            log.error("internal error in didChangeConfiguration:\n%s", traceback.format_exc())

    @server.feature(t.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    @notification(t.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched(ls: DdpServer, params: t.DidChangeWatchedFilesParams):
        if any(c.uri.endswith("pyproject.toml") for c in params.changes):
            ls.projects.clear()
            ls.settings_gen += 1
            ls.relint_all()

    @server.feature(t.TEXT_DOCUMENT_DID_OPEN)
    @notification(t.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: DdpServer, params: t.DidOpenTextDocumentParams):
        td = params.text_document
        old = ls.docs.get(td.uri)
        if old is not None:
            old.closed = True
        st = ls.docs[td.uri] = DocState(Document(td.uri, td.text, td.version, td.language_id,
                                                 uri_to_path(td.uri)))
        if not ls.pull:
            ls.schedule(st, 0.0)

    @server.feature(t.TEXT_DOCUMENT_DID_CHANGE)
    @notification(t.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(ls: DdpServer, params: t.DidChangeTextDocumentParams):
        st = ls.docs.get(params.text_document.uri)
        if st is None:
            log.warning("didChange for a document that is not open: %s", params.text_document.uri)
            return
        doc = st.doc
        changes = [doc.apply_change(c, ls.encoding) for c in params.content_changes]
        doc.version = params.text_document.version
        dropped = ls.move_findings(st, changes)
        if ls.pull:
            if st.task is not None and not st.task.done():
                ls.schedule(st, ls.settings.debounce_ms / 1000)  # a waiting pull waits for quiet
            if dropped:
                ls.request_refresh()
                ls.publish_uri(st.doc.uri)
            return
        if ls.settings.lint_on_change:
            ls.schedule(st, ls.settings.debounce_ms / 1000)
        elif dropped or st.syntax is not None or st.static:
            # save-only linting: keep the published positions in step with the text
            if st.task is not None and not st.task.done():
                st.task.cancel()
            ls.publish(st)

    @server.feature(t.TEXT_DOCUMENT_DID_SAVE)
    @notification(t.TEXT_DOCUMENT_DID_SAVE)
    def did_save(ls: DdpServer, params: t.DidSaveTextDocumentParams):
        uri = params.text_document.uri
        if uri.endswith("pyproject.toml"):
            ls.projects.clear()
            ls.settings_gen += 1
            ls.relint_all()
            return
        st = ls.docs.get(uri)
        if st is None:
            return
        if params.text is not None and params.text != st.doc.text:
            st.doc.text = params.text
            st.doc._starts = None
        if ls.pull:
            if not ls.settings.lint_on_change:
                async def later():
                    await ls.analyse(st)
                    ls.request_refresh()

                asyncio.ensure_future(later())
            return
        if st.analyzed_version != st.doc.version or st.settings_gen != ls.settings_gen:
            ls.schedule(st, 0.0)

    @server.feature(t.TEXT_DOCUMENT_DID_CLOSE)
    @notification(t.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(ls: DdpServer, params: t.DidCloseTextDocumentParams):
        uri = params.text_document.uri
        st = ls.docs.pop(uri, None)
        if st is not None:
            st.closed = True
            if st.task is not None and not st.task.done():
                st.task.cancel()
        if not ls.pull:
            # static diagnostics go away; runtime findings stay on the file until the next run
            ls.text_document_publish_diagnostics(t.PublishDiagnosticsParams(
                uri=uri, diagnostics=ls.runtime_diagnostics(uri, None)))

    @server.feature(t.TEXT_DOCUMENT_DIAGNOSTIC,
                    t.DiagnosticOptions(identifier="ddp-lint", inter_file_dependencies=False,
                                        workspace_diagnostics=False))
    @guarded(t.TEXT_DOCUMENT_DIAGNOSTIC)
    async def diagnostic(ls: DdpServer, params: t.DocumentDiagnosticParams):
        return await ls.pull_report(params)

    @server.feature(t.TEXT_DOCUMENT_CODE_ACTION, t.CodeActionOptions(
        code_action_kinds=[t.CodeActionKind.QuickFix, FIX_ALL_KIND, RUN_KIND], resolve_provider=True))
    @guarded(t.TEXT_DOCUMENT_CODE_ACTION)
    async def code_action(ls: DdpServer, params: t.CodeActionParams):
        return await ls.code_actions(params)

    @server.feature(t.CODE_ACTION_RESOLVE)
    @guarded(t.CODE_ACTION_RESOLVE)
    async def code_action_resolve(ls: DdpServer, action: t.CodeAction):
        if isinstance(action.data, dict) and action.data.get("action") == "fixAll":
            action.data["drop_empty"] = False
            return await ls.resolve_fix_all(action)
        return action

    @server.feature(t.TEXT_DOCUMENT_HOVER)
    @guarded(t.TEXT_DOCUMENT_HOVER)
    def hover(ls: DdpServer, params: t.HoverParams):
        return ls.hover(params)

    @server.command(FIX_ALL_COMMAND)
    async def fix_all_command(ls: DdpServer, *args):
        try:
            uri = _uri_argument(args)
            st = ls.docs.get(uri)
            if st is None:
                raise JsonRpcInvalidParams(f"ddp-lint.fixAll: {uri} is not an open document")
            edit = await ls.fix_all_edit(st)
            if edit is None:
                return {"applied": False, "reason": "nothing to fix"}
            res = await ls.workspace_apply_edit_async(t.ApplyWorkspaceEditParams(
                edit=edit, label="ddp-lint: fix all"))
            return {"applied": bool(res and res.applied)}
        except (JsonRpcException, asyncio.CancelledError):
            raise
        except Exception as e:
            log.error("internal error in %s:\n%s", FIX_ALL_COMMAND, traceback.format_exc())
            raise JsonRpcInternalError(f"ddp-lint: internal error in {FIX_ALL_COMMAND}: {e}") from None

    @server.command(RUN_COMMAND)
    async def run_command(ls: DdpServer, *args):
        from .runtime import run_command as impl

        try:
            return await impl(ls, args)
        except (JsonRpcException, asyncio.CancelledError):
            raise
        except Exception as e:
            log.error("internal error in %s:\n%s", RUN_COMMAND, traceback.format_exc())
            raise JsonRpcInternalError(f"ddp-lint: internal error in {RUN_COMMAND}: {e}") from None

    @server.feature(t.SHUTDOWN)
    def shutdown(ls: DdpServer, params):
        for ev in list(ls.runs.values()):
            ev.set()  # a run in progress kills its processes
        ls.executor.shutdown(wait=False, cancel_futures=True)

    return server


def _uri_argument(args) -> str:
    """The one document argument of a command: a URI string, ``{"uri": ...}`` or
    ``{"textDocument": {"uri": ...}}`` (clients differ)."""
    if len(args) == 1 and isinstance(args[0], list):
        args = tuple(args[0])
    if len(args) != 1:
        raise JsonRpcInvalidParams(
            f"expected exactly one argument, the file's URI (a string or {{\"uri\": ...}}), got {len(args)}")
    a = args[0]
    if isinstance(a, dict):
        td = a.get("textDocument")
        a = td.get("uri") if isinstance(td, dict) else a.get("uri")
    if not isinstance(a, str) or not a:
        raise JsonRpcInvalidParams(f"expected the file's URI as a string, got {args[0]!r}")
    return a


def _stop_runs_on_sigterm(server: DdpServer) -> None:
    """An editor that stops the server with SIGTERM while a run is live: cancel the run (the
    runner kills every process of it) and give it a few seconds, then exit."""
    import signal

    def on_term(signum, frame):
        for ev in list(server.runs.values()):
            ev.set()
        from . import runtime

        pool = runtime._executor
        if pool is not None and server.runs:
            waiter = threading.Thread(target=pool.shutdown, kwargs={"wait": True}, daemon=True)
            waiter.start()
            waiter.join(5)
        os._exit(0)

    try:
        signal.signal(signal.SIGTERM, on_term)
    except (ValueError, OSError):  # not the main thread, or no signals here
        return
    # A Python signal handler runs in the main thread, and only once it wakes up. When the kernel
    # hands SIGTERM to another thread (the stdin reader, a worker) while the main thread sleeps in
    # the event loop, the handler would wait for the client's next message, possibly forever. The
    # wakeup fd gets the signal's number at once, whichever thread took it; a thread acts on it.
    try:
        r, w = os.pipe()
        os.set_blocking(w, False)
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except (ValueError, OSError):
        return

    def watch():
        while True:
            try:
                data = os.read(r, 64)
            except InterruptedError:
                continue
            except OSError:
                return
            if not data:
                return
            if signal.SIGTERM in data:
                on_term(signal.SIGTERM, None)

    threading.Thread(target=watch, daemon=True, name="ddp-lint-sigterm").start()


class _QuietRefusals(logging.Filter):
    """pygls logs every request answered with an error as an exception with its traceback; a
    refused argument (InvalidParams) is not a server problem, so keep stderr quiet about it."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, JsonRpcInvalidParams)


def start(tcp: tuple[str, int] | None = None, log_level: str | None = None) -> int:
    """Run the server on stdio (default) or on a TCP address; returns when the client exits."""
    if log_level is not None and log_level.lower() not in cfg.LOG_LEVELS:
        print(f"ddp-lint server: unknown --log-level {log_level!r} (use one of: {', '.join(cfg.LOG_LEVELS)})",
              file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="ddp-lint server: %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pygls").setLevel(logging.WARNING)
    logging.getLogger("pygls.protocol.json_rpc").addFilter(_QuietRefusals())
    server = create_server(log_level)
    _stop_runs_on_sigterm(server)
    if tcp is not None:
        host, port = tcp
        print(f"ddp-lint server: listening on {host}:{port}", file=sys.stderr)
        server.start_tcp(host, port)
        return 0
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print() must never corrupt the protocol stream
    server.start_io(stdin, stdout)
    return 0
