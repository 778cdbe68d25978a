"""The JSON-RPC side of the server: pygls' protocol adapted to ddp-lint, and the log handlers.

* ``DdpProtocol``: no second copy of the documents, InvalidParams answered, the pull-diagnostics
  capability only for clients that pull, notification futures not kept, a safe ``shutdown``, and
  every request answered: one without ``"jsonrpc": "2.0"`` or that is not an object gets
  InvalidRequest, and so does a request after ``shutdown`` (as the LSP specification says);
* ``LspLogHandler``: log records to the client as ``window/logMessage``;
* ``QuietRefusals``: keeps refused requests out of stderr.
"""
from __future__ import annotations

import logging
import traceback

from lsprotocol import types as t
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams, JsonRpcInvalidRequest
from pygls.protocol import LanguageServerProtocol
from pygls.protocol.language_server import lsp_method

from .framing import MAX_MESSAGE

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

    def handle_message(self, message):
        # pygls drops (with a log line) a message without "jsonrpc": "2.0", a batch or a scalar,
        # and every request after ``shutdown``: the client would wait for an answer forever.
        if isinstance(message, dict) or not hasattr(message, "jsonrpc"):
            self._refuse(message, 'not a JSON-RPC 2.0 message (it needs "jsonrpc": "2.0")')
            return
        if message.jsonrpc != self.VERSION:
            self._refuse(message, f'unsupported JSON-RPC version {str(message.jsonrpc)[:20]!r} (expected "2.0")')
            return
        method = getattr(message, "method", None)
        if self._shutdown and method is not None and method != t.EXIT:
            if getattr(message, "id", None) is not None:
                self._send_response(message.id, error=JsonRpcInvalidRequest(
                    f"the server is shutting down: {str(method)[:100]} refused").to_response_error())
            return
        super().handle_message(message)

    def _refuse(self, message, why: str) -> None:
        """Answer a malformed message with InvalidRequest when it looks like a request (or when its
        id cannot be known: a batch, a scalar); a malformed notification or response is dropped."""
        if isinstance(message, dict):
            msg_id, is_request = message.get("id"), "method" in message
            if not isinstance(msg_id, (int, str)) or isinstance(msg_id, bool):
                msg_id = None
        elif hasattr(message, "jsonrpc"):
            msg_id, is_request = getattr(message, "id", None), hasattr(message, "method")
        else:
            msg_id, is_request = None, True
        log.warning("refused a message: %s", why)
        if is_request and (msg_id is not None or not isinstance(message, dict)):
            self._send_error(msg_id, JsonRpcInvalidRequest(why))

    def _send_error(self, msg_id, error: JsonRpcException) -> None:
        if msg_id is not None:
            self._send_response(msg_id, error=error.to_response_error())
        else:  # pygls' serializer would drop a null id, which JSON-RPC requires here
            self._send_data({"jsonrpc": "2.0", "id": None, "error": {"code": error.code, "message": error.message}})

    def answer_oversize(self, size: int) -> None:
        """The framing skipped a message too big to read (its id is unknown: answered with null)."""
        self._send_error(None, JsonRpcInvalidRequest(
            f"message of {size} bytes refused: the limit is {MAX_MESSAGE} bytes"))

    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None):
        # pygls runs a command (``workspace/executeCommand``) as an inner handler of a generator:
        # the client's ``$/cancelRequest`` cancels the outer future only, and the inner coroutine
        # (a ``ddp-lint.run``) went on to the end and published its result. Link them: cancelling
        # the outer future cancels the inner task, whose CancelledError reaches the runner's
        # cancel event (tests/regressions/test_lsp_regressions.py::test_cancel_request_stops_a_run).
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        outer = getattr(callback, "keywords", {}).get("result_future")
        inner = self._request_futures.get(msg_id)
        if outer is not None and inner is not None and outer is not inner:
            def cancel_inner(f, inner=inner):
                if f.cancelled() and not inner.done():
                    inner.cancel()

            outer.add_done_callback(cancel_inner)
            # and forget the inner future once done (pygls keeps it under a fresh uuid forever)
            inner.add_done_callback(
                lambda f, k=msg_id: self._request_futures.pop(k, None) if self._request_futures.get(k) is f else None)

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

    # notebooks: their cells live in the server's own store too (lsp_server/notebooks.py)
    @lsp_method(t.NOTEBOOK_DOCUMENT_DID_OPEN)
    def lsp_notebook_document__did_open(self, params):
        if (h := self.fm.features.get(t.NOTEBOOK_DOCUMENT_DID_OPEN)) is not None:
            yield h, (params,), None

    @lsp_method(t.NOTEBOOK_DOCUMENT_DID_CHANGE)
    def lsp_notebook_document__did_change(self, params):
        if (h := self.fm.features.get(t.NOTEBOOK_DOCUMENT_DID_CHANGE)) is not None:
            yield h, (params,), None

    @lsp_method(t.NOTEBOOK_DOCUMENT_DID_CLOSE)
    def lsp_notebook_document__did_close(self, params):
        if (h := self.fm.features.get(t.NOTEBOOK_DOCUMENT_DID_CLOSE)) is not None:
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
