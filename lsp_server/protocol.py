"""The JSON-RPC side of the server: pygls' protocol adapted to ddp-lint, and the log handlers.

* ``DdpProtocol``: no second copy of the documents, InvalidParams answered, the pull-diagnostics
  capability only for clients that pull, notification futures not kept, a safe ``shutdown``;
* ``LspLogHandler``: log records to the client as ``window/logMessage``;
* ``QuietRefusals``: keeps refused requests out of stderr.
"""
from __future__ import annotations

import logging
import traceback

from lsprotocol import types as t
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

log = logging.getLogger("ddp-lint.server")


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

    def __init__(self, server):
        super().__init__()
        self.server = server

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            lvl = max((k for k in self.TYPES if k <= record.levelno), default=logging.DEBUG)
            self.server.send_log(self.TYPES[lvl], msg)
        except Exception:  # pragma: no cover - logging must never raise
            pass


class QuietRefusals(logging.Filter):
    """pygls logs every request answered with an error as an exception with its traceback; a
    refused argument (InvalidParams) is not a server problem, so keep stderr quiet about it."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, JsonRpcInvalidParams)
