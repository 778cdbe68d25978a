"""Helpers shared by the server's request, notification and command handlers.

* ``guarded``: a request handler whose unexpected exception is logged and answered with an LSP
  error (the server keeps running);
* ``notification``: a notification handler whose errors are logged, never raised;
* ``uri_argument``: the one document argument of a ``workspace/executeCommand``.

This module imports nothing else from ``lsp_server``, so every handler module can use it.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import traceback

from pygls.exceptions import JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams

log = logging.getLogger("ddp-lint.server")

RUN_COMMAND = "ddp-lint.run"
FIX_ALL_COMMAND = "ddp-lint.fixAll"
EXPLAIN_COMMAND = "ddp-lint.explain"


def internal_error(method: str, e: BaseException) -> JsonRpcInternalError:
    """Log the current traceback and build the LSP error that answers ``method``."""
    log.error("internal error in %s:\n%s", method, traceback.format_exc())
    return JsonRpcInternalError(f"ddp-lint: internal error in {method}: {type(e).__name__}: {e}")


def guarded(method: str):
    """Wrap a request handler: an unexpected exception is logged with its traceback and answered
    with an LSP error; the server keeps running."""

    def deco(fn):
        if asyncio.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def wrapper(ls, *params):
                try:
                    return await fn(ls, *params)
                except (JsonRpcException, asyncio.CancelledError):
                    raise
                except Exception as e:
                    raise internal_error(method, e) from None
        else:
            @functools.wraps(fn)
            def wrapper(ls, *params):
                try:
                    return fn(ls, *params)
                except JsonRpcException:
                    raise
                except Exception as e:
                    raise internal_error(method, e) from None
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


def uri_argument(args) -> str:
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
