"""ddp-lint rank shim, part 3: which files each rank writes (for DDP908 same-file-from-several-ranks).
Runs INSIDE each rank; loaded by path by shim.py (``_files_install``); stdlib + torch only, imports
nothing from ddp-lint.

Records, once per (path, call site), a ``write`` event: {path, real, via, mode?, node, local_rank,
frames}. ``via`` is "torch.save" (a path given to torch.save, which torch writes from C++) or "open"
(``open(..., "w"/"x"/"wb"...)``: a truncating write; appends are left out: several ranks appending
to one log file is a common, mostly harmless, pattern). At most _MAX records per rank.
frames: the caller's stack outside torch and the shim, innermost first (at most 40).
"""
from __future__ import annotations

import builtins
import os
import sys
import threading

_MAX = 256
_SEEN = set()
_TLS = threading.local()
_NODE = os.environ.get("GROUP_RANK")
_LOCAL = os.environ.get("LOCAL_RANK")


def _log_event(kind, **fields):  # bound by shim.py
    return 0


def _is_internal(filename):  # bound by shim.py
    return False


def bind(core):
    g = globals()
    for name in ("_log_event", "_is_internal"):
        g[name] = getattr(core, name)


def _frames():
    out = []
    try:
        f = sys._getframe(2)
    except ValueError:
        return out
    while f is not None and len(out) < 40:
        fn = f.f_code.co_filename
        if not _is_internal(fn):
            out.append({"file": fn, "line": f.f_lineno, "function": f.f_code.co_name})
        f = f.f_back
    return out


def _record(target, via, mode=None):
    if getattr(_TLS, "busy", False) or len(_SEEN) >= _MAX:
        return
    _TLS.busy = True
    try:
        try:
            p = os.fspath(target)
        except TypeError:
            return
        if isinstance(p, bytes):
            p = os.fsdecode(p)
        if not isinstance(p, str) or not p:
            return
        ap = os.path.abspath(p)
        frames = _frames()
        top = frames[0] if frames else {}
        key = (ap, top.get("file"), top.get("line"))
        if key in _SEEN:
            return
        _SEEN.add(key)
        try:
            real = os.path.realpath(ap)
        except (OSError, ValueError):
            real = ap
        _log_event("write", path=ap, real=real, via=via, mode=mode, node=_NODE, local_rank=_LOCAL, frames=frames)
    except Exception:
        pass
    finally:
        _TLS.busy = False


def install():
    orig_open = builtins.open
    if getattr(orig_open, "_ddp_lint_wrapped", False):
        return

    def open(file, mode="r", *args, **kwargs):
        if type(mode) is str and ("w" in mode or "x" in mode) and not isinstance(file, int):
            _record(file, "open", mode)
        return orig_open(file, mode, *args, **kwargs)

    open._ddp_lint_wrapped = True
    open.__wrapped__ = orig_open
    open.__doc__ = orig_open.__doc__
    builtins.open = open
    try:
        import torch
        import torch.serialization as ser
    except Exception:
        return
    orig_save = getattr(ser, "save", None)
    if orig_save is None or getattr(orig_save, "_ddp_lint_wrapped", False):
        return
    import functools

    @functools.wraps(orig_save)
    def save(obj, f, *args, **kwargs):
        if isinstance(f, (str, bytes, os.PathLike)):
            _record(f, "torch.save")
        return orig_save(obj, f, *args, **kwargs)

    save._ddp_lint_wrapped = True
    for mod in (ser, torch):
        if getattr(mod, "save", None) is orig_save:
            mod.save = save
