"""The ddp-lint language server: a thin pygls 2.x adapter over ``analysis``.

This module creates the server (``DdpServer``: settings, logging, the handler table in
``create_server``) and starts it (``start``). The work lives next door:

* ``protocol``: the JSON-RPC side (pygls' protocol adapted, the framing, the log handler);
* ``state``: what the server knows about one open document (``documents``: its text);
* ``diagnostics``: analyse (threads, debounced per URI), publish (push) or answer pulls, and move
  the findings with the edits; a result for a version no longer current is never published;
* ``code_actions``: quick fixes, "Disable for this line", fix-all, "Run with torchrun";
* ``hover``: a rule's docs over its code in a ``# noqa`` comment;
* ``runtime``: ``ddp-lint.run`` and its results (``RuntimeResults``);
* ``commands``: the helpers every handler uses (``guarded``, ``notification``, ``uri_argument``).
"""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import sys
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor

from lsprotocol import types as t
from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams
from pygls.io_ import StdoutWriter, run_async
from pygls.lsp.server import LanguageServer

from ..analysis import __version__
from ..analysis.config import is_config_file

from . import settings as cfg
from .code_actions import FIX_ALL_KIND, RUN_KIND, CodeActionsMixin
from .commands import EXPLAIN_COMMAND, FIX_ALL_COMMAND, RUN_COMMAND, guarded, notification, uri_argument
from .convert import uri_to_path
from .diagnostics import DiagnosticsMixin
from .documents import UTF16, Document
from .framing import FrameReader, stdin_source, stream_source
from .hover import HoverMixin
from .lenses import CodeLensMixin
from .notebooks import NotebookMixin
from .notebooks import sync_options as notebook_sync_options
from .protocol import DdpProtocol, LspLogHandler, QuietRefusals
from .runtime import RuntimeResults, probe_gpus
from .runtime import explain_command as explain_impl
from .runtime import run_command as run_impl
from .state import DocState

log = logging.getLogger("ddp-lint.server")
_PYGLS_LOG = logging.getLogger("pygls.server")  # the message loop logs where pygls' own loop does

UNTRUSTED = ("this server listens on a TCP port, where any local user can connect, so it runs no code; "
             "start it with --allow-run to trust every local user, or use stdio or --socket PATH")


class DdpServer(NotebookMixin, CodeLensMixin, DiagnosticsMixin, CodeActionsMixin, HoverMixin, LanguageServer):
    def __init__(self, log_level: str | None = None, trusted: bool = True):
        super().__init__("ddp-lint", __version__, protocol_cls=DdpProtocol,
                         text_document_sync_kind=t.TextDocumentSyncKind.Incremental,
                         notebook_document_sync=notebook_sync_options())
        # False on a TCP port without --allow-run: any local user may be the client, so the server
        # runs no code (no ddp-lint.run, no run.* settings) and reads no file a client names
        # (no pyproject.toml lookup, no imported module from disk: cross-file analysis sees only the
        # open documents); it lints the text it is sent. SECURITY.md, "TCP mode".
        self.trusted = trusted
        self.untrusted_reason = UNTRUSTED
        self.docs: dict[str, DocState] = {}
        self.notebooks: dict = {}  # notebook URI -> notebooks.NotebookDoc (its cells are in ``docs``)
        self.cell_notebook: dict[str, str] = {}  # cell URI -> notebook URI
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
        self.results = RuntimeResults()  # what ``ddp-lint.run`` found, and the runs in progress
        self.gpus: int | None = None  # local GPUs, counted once after ``initialized`` (run action title)
        self.gpu_probe = None
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

    # -- transports ---------------------------------------------------------------------------------
    # pygls' own message loop, protocol and writers; only the reader in front of the loop is ours
    # (``framing.FrameReader``: lenient headers, a size cap).
    def start_io(self, stdin=None, stdout=None):
        self._stop_event = threading.Event()
        reader = FrameReader(stdin_source(stdin or sys.stdin.buffer, self.thread_pool),
                             on_oversize=self.protocol.answer_oversize)
        self.protocol.set_writer(StdoutWriter(stdout or sys.stdout.buffer))
        try:
            asyncio.run(run_async(stop_event=self._stop_event, reader=reader, protocol=self.protocol,
                                  logger=_PYGLS_LOG, error_handler=self.report_server_error))
        except BrokenPipeError:
            log.error("the connection to the client is lost; shutting down")
        except (KeyboardInterrupt, SystemExit):
            pass
        finally:
            self.shutdown()

    def serve_socket(self, listener: socket.socket, same_user_only: bool = False) -> None:
        """Serve ONE client on a listening socket: a second connection while one is served is
        closed at once (it must not take over the session's output, nor end it), and the server
        stops when its client goes. ``same_user_only``: refuse a Unix-socket peer of another uid."""
        self._stop_event = threading.Event()
        busy = False
        exit_code: list = []

        async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
            nonlocal busy
            if busy or (same_user_only and not _same_user(writer)):
                log.warning("refused a connection: %s", "a client is already connected" if busy
                            else "the peer is another user")
                writer.close()
                return
            busy = True
            self.protocol.set_writer(writer)
            frames = FrameReader(stream_source(reader), on_oversize=self.protocol.answer_oversize)
            try:
                await run_async(stop_event=self._stop_event, reader=frames, protocol=self.protocol,
                                logger=_PYGLS_LOG, error_handler=self.report_server_error)
            except SystemExit as e:  # ``exit``: leave the serving loop, then exit with its status
                exit_code.append(e.code)
            finally:
                self.shutdown()

        async def serve():
            if listener.family == getattr(socket, "AF_UNIX", None):
                self._server = await asyncio.start_unix_server(connection, sock=listener)
            else:
                self._server = await asyncio.start_server(connection, sock=listener)
            async with self._server:
                await self._server.serve_forever()

        try:
            asyncio.run(serve())
        except (asyncio.CancelledError, KeyboardInterrupt):
            pass
        if exit_code:
            raise SystemExit(exit_code[0])

    # -- settings ------------------------------------------------------------------------------------
    def apply_settings(self) -> None:
        raw = cfg.merge(self.init_layer, self.config_layer)
        new, problems = cfg.parse(raw)
        level = new.log_level if "logLevel" in raw or "log_level" in raw or "log-level" in raw \
            else (self.cli_log_level or new.log_level)
        self.log_handler.setLevel(cfg.LOG_LEVELS.get(str(level).lower(), logging.INFO))
        if not self.trusted and new.run != cfg.RunSettings():
            new.run = cfg.RunSettings()
            problems.append(f"settings `{cfg.SECTION}.run.*` ignored: {UNTRUSTED}")
        for p in problems:
            log.warning("%s", p)
        if problems:
            key = "\n".join(problems)
            if key not in self.reported_config_errors:
                self.reported_config_errors.add(key)
                self.show(t.MessageType.Warning, cfg.capped("ddp-lint: " + "; ".join(problems), 2000))
        changed = new != self.settings
        self.settings = new
        if changed:
            self.settings_gen += 1
            self.projects.clear()
            log.info("settings: %s", new)

    def analysis_settings(self, st: DocState):
        path = st.doc.path
        folder = os.path.dirname(path) if path else (self.folders() or [None])[0]
        if not self.trusted:
            folder = None  # no pyproject.toml lookup under a path an untrusted client names
        s, err = self.projects.for_folder(folder, self.settings)
        if not self.trusted:
            # cross-file analysis sees the documents the client sent, never a file on disk (R2)
            s = dataclasses.replace(s, read_project_files=False)
        if err and err not in self.reported_config_errors:
            self.reported_config_errors.add(err)
            log.error("%s (using the default settings)", err)
            self.show(t.MessageType.Error, f"ddp-lint: {err} (using the default settings)")
        return s


# -- the server and its handlers ------------------------------------------------------------------
def create_server(log_level: str | None = None, trusted: bool = True) -> DdpServer:
    server = DdpServer(log_level, trusted)

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
        if ls.trusted:
            asyncio.ensure_future(probe_gpus(ls))  # in a thread, for the run action's title
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
                    # pyproject.toml: the settings; *.py: a helper that changed on disk (a checkout, another
                    # editor) re-checks the open files whose analysis read it
                    t.Registration(id="ddp-lint-files", method=t.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                                   register_options=t.DidChangeWatchedFilesRegistrationOptions(
                                       watchers=[t.FileSystemWatcher(glob_pattern="**/pyproject.toml"),
                                                 t.FileSystemWatcher(glob_pattern="**/ddp-lint.toml"),
                                                 t.FileSystemWatcher(glob_pattern="**/.ddp-lint.toml"),
                                                 t.FileSystemWatcher(glob_pattern="**/*.py")]))]))
        except Exception as e:
            log.debug("no file watching for pyproject.toml and helpers: %s", e)
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
        if any(is_config_file(c.uri) for c in params.changes):
            ls.projects.clear()
            ls.settings_gen += 1
            ls.relint_all()
            return
        for c in params.changes:  # a helper changed on disk: its open dependents are analysed again
            if c.uri.endswith(".py"):
                ls.refresh_dependents(uri_to_path(c.uri), 0.0)

    @server.feature(t.TEXT_DOCUMENT_DID_OPEN)
    @notification(t.TEXT_DOCUMENT_DID_OPEN)
    def did_open(ls: DdpServer, params: t.DidOpenTextDocumentParams):
        td = params.text_document
        old = ls.docs.get(td.uri)
        if old is not None:
            old.closed = True
        st = ls.docs[td.uri] = DocState(Document(td.uri, td.text, td.version, td.language_id,
                                                 uri_to_path(td.uri)))
        ls.share_text(st)
        if not ls.pull:
            ls.schedule(st, 0.0)
        # a document whose path an open file's import probed (absent before, or shadowed): that file
        # now resolves to it (its text, never the disk's, in untrusted mode)
        ls.refresh_dependents(st.doc.path, 0.0)

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
        ls.share_text(st)
        ls.refresh_dependents(doc.path, ls.settings.debounce_ms / 1000)
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
        if is_config_file(uri):
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
            ls.share_text(st, open_=False)  # its dependents now read the file on disk again
            ls.refresh_dependents(st.doc.path, 0.0)
        if not ls.pull:
            # static diagnostics go away; runtime findings stay on the file until the next run
            ls.text_document_publish_diagnostics(t.PublishDiagnosticsParams(
                uri=uri, diagnostics=ls.runtime_diagnostics(uri, None)))

    # notebooks (LSP 3.17 notebook sync): the cells are one module (lsp_server/notebooks.py)
    @server.feature(t.NOTEBOOK_DOCUMENT_DID_OPEN)
    @notification(t.NOTEBOOK_DOCUMENT_DID_OPEN)
    def notebook_did_open(ls: DdpServer, params: t.DidOpenNotebookDocumentParams):
        ls.notebook_did_open(params)

    @server.feature(t.NOTEBOOK_DOCUMENT_DID_CHANGE)
    @notification(t.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def notebook_did_change(ls: DdpServer, params: t.DidChangeNotebookDocumentParams):
        ls.notebook_did_change(params)

    @server.feature(t.NOTEBOOK_DOCUMENT_DID_SAVE)
    @notification(t.NOTEBOOK_DOCUMENT_DID_SAVE)
    def notebook_did_save(ls: DdpServer, params: t.DidSaveNotebookDocumentParams):
        ls.notebook_did_save(params)

    @server.feature(t.NOTEBOOK_DOCUMENT_DID_CLOSE)
    @notification(t.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def notebook_did_close(ls: DdpServer, params: t.DidCloseNotebookDocumentParams):
        ls.notebook_did_close(params)

    @server.feature(t.TEXT_DOCUMENT_DIAGNOSTIC,
                    t.DiagnosticOptions(identifier="ddp-lint", inter_file_dependencies=True,
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

    @server.feature(t.TEXT_DOCUMENT_CODE_LENS, t.CodeLensOptions(resolve_provider=False))
    @guarded(t.TEXT_DOCUMENT_CODE_LENS)
    async def code_lens(ls: DdpServer, params: t.CodeLensParams):
        return await ls.code_lenses(params)

    @server.feature(t.TEXT_DOCUMENT_HOVER)
    @guarded(t.TEXT_DOCUMENT_HOVER)
    def hover(ls: DdpServer, params: t.HoverParams):
        return ls.hover(params)

    @server.command(FIX_ALL_COMMAND)
    async def fix_all_command(ls: DdpServer, *args):
        try:
            uri = uri_argument(args)
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
        try:
            return await run_impl(ls, args)
        except (JsonRpcException, asyncio.CancelledError):
            raise
        except Exception as e:
            log.error("internal error in %s:\n%s", RUN_COMMAND, traceback.format_exc())
            raise JsonRpcInternalError(f"ddp-lint: internal error in {RUN_COMMAND}: {e}") from None

    @server.command(EXPLAIN_COMMAND)
    async def explain_command(ls: DdpServer, *args):
        try:
            return await explain_impl(ls, args)
        except (JsonRpcException, asyncio.CancelledError):
            raise
        except Exception as e:
            log.error("internal error in %s:\n%s", EXPLAIN_COMMAND, traceback.format_exc())
            raise JsonRpcInternalError(f"ddp-lint: internal error in {EXPLAIN_COMMAND}: {e}") from None

    @server.feature(t.SHUTDOWN)
    def shutdown(ls: DdpServer, params):
        ls.results.cancel_all()  # a run in progress kills its processes
        ls.executor.shutdown(wait=False, cancel_futures=True)

    return server


def _stop_runs_on_sigterm(server: DdpServer) -> None:
    """An editor that stops the server with SIGTERM while a run is live: cancel the run (the
    runner kills every process of it) and give it a few seconds, then exit."""
    import signal

    def on_term(signum, frame):
        server.results.cancel_all()
        server.results.wait_for_runs(5)
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


def start(tcp: tuple[str, int] | None = None, log_level: str | None = None, *,
          socket_path: str | None = None, allow_run: bool = False) -> int:
    """Run the server on stdio (default), on a TCP address or on a Unix socket; returns when the
    client exits. On TCP the server runs no code and reads no file a client names unless
    ``allow_run`` (``--allow-run``): any local user can connect to a port. A Unix socket is
    created 0600 (only this user can connect), so it is trusted like stdio."""
    if log_level is not None and log_level.lower() not in cfg.LOG_LEVELS:
        print(f"ddp-lint server: unknown --log-level {log_level!r} (use one of: {', '.join(cfg.LOG_LEVELS)})",
              file=sys.stderr)
        return 2
    if tcp is not None and socket_path is not None:
        print("ddp-lint server: use either --tcp or --socket, not both", file=sys.stderr)
        return 2
    if allow_run and tcp is None:
        print("ddp-lint server: --allow-run only applies to --tcp (stdio and --socket always allow runs)",
              file=sys.stderr)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="ddp-lint server: %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pygls").setLevel(logging.WARNING)
    logging.getLogger("pygls.protocol.json_rpc").addFilter(QuietRefusals())
    server = create_server(log_level, trusted=tcp is None or allow_run)
    _stop_runs_on_sigterm(server)
    if tcp is not None:
        host, port = tcp
        try:
            listener = socket.create_server((host, port))
        except OSError as e:
            print(f"ddp-lint server: cannot listen on {host}:{port}: {e}", file=sys.stderr)
            return 2
        note = "runs allowed (--allow-run): any local user who connects can run code" if allow_run \
            else "runs disabled (--allow-run enables them)"
        print(f"ddp-lint server: listening on {host}:{port}; {note}", file=sys.stderr)
        server.serve_socket(listener)
        return 0
    if socket_path is not None:
        try:
            listener = unix_listener(socket_path)
        except (OSError, ValueError) as e:
            print(f"ddp-lint server: cannot listen on {socket_path}: {e}", file=sys.stderr)
            return 2
        print(f"ddp-lint server: listening on {socket_path} (mode 0600)", file=sys.stderr)
        try:
            server.serve_socket(listener, same_user_only=True)
        finally:
            try:
                os.unlink(socket_path)
            except OSError:
                pass
        return 0
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print() must never corrupt the protocol stream
    server.start_io(stdin, stdout)
    return 0


def _same_user(writer: asyncio.StreamWriter) -> bool:
    """True when the Unix-socket peer runs as this user (SO_PEERCRED; True where unavailable:
    the socket's 0600 mode already keeps other users out)."""
    sock = writer.get_extra_info("socket")
    opt = getattr(socket, "SO_PEERCRED", None)
    if sock is None or opt is None:
        return True
    try:
        import struct

        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i")))
    except OSError:
        return True
    return uid == os.getuid()


def unix_listener(path: str) -> socket.socket:
    """A listening Unix socket at ``path``, created with mode 0600 (no window where it is wider:
    the umask is set before ``bind``). An existing path is never replaced."""
    if not hasattr(socket, "AF_UNIX"):
        raise ValueError("Unix sockets are not available on this system")
    if os.path.lexists(path):
        raise ValueError("the path already exists; remove it or choose another")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    except OSError:
        sock.close()
        raise
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(4)
    return sock
