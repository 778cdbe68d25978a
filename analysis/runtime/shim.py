"""ddp-lint rank shim. Runs INSIDE each rank, in the user's interpreter.

Started by path (``python -m torch.distributed.run ... /path/to/shim.py SCRIPT ARGS``); it needs
only the standard library and torch, and imports nothing from ddp-lint. The launcher also starts
torchrun itself through this file (``python shim.py TORCHRUN-ARGS`` with DDP_LINT_SHIM_ROLE=torchrun,
see _as_torchrun), so that a run cannot outlive ddp-lint.

Environment contract (set by the launcher, analysis/runtime/launcher.py):
  DDP_LINT_LOG_DIR      folder for the per-rank JSON-lines logs (rank-<RANK>.jsonl)
  DDP_LINT_TIMEOUT      seconds; the process-group timeout is shortened to this
  DDP_LINT_EMULATE      "1" to install the CUDA/NCCL emulation (section EMULATION below)
  DDP_LINT_EMU_NGPUS    number of GPUs the emulated machine has
  DDP_LINT_RUN_ID       marks every process of the run (see _watch_for_orphaning)
  DDP_LINT_SHIM_ROLE    "torchrun" (with DDP_LINT_PARENT_PID): run torchrun, not a rank

Hooks between the sections (kept as module globals so both sections can use them):
  _PRE_COLLECTIVE_HOOKS  list of callables(op_name, args, kwargs, site) run before every recorded
                         torch.distributed collective; a hook may raise to fail that call.
  _log_event(kind, **fields)  append one JSON line to this rank's log (flushed immediately).

Collective records are bounded: past DDP_LINT_LOG_BUDGET bytes (default 8 MiB) a collective is
logged only if it is still running 0.25 s later, or raised; the others are counted ("quiet").
"""
from __future__ import annotations

import os
import sys
import traceback

# ================================ RECORDING (owned by the runner) ================================
#
# Log records (one JSON object per line in rank-<RANK>.jsonl; every record has kind, rank, t, pid):
#   start     {main_thread, script, argv, world_size, local_rank, emulate}   first thing the shim logs
#   ready     {}                                     torch imported and patched; the script starts now
#   init      {file, line, function, backend}        init_process_group's call site (user frame)
#   call      {seq, op, file, line, function, group, async}   a collective starts
#   return    {seq, op}                              it returned (for async_op: it was enqueued)
#   raise     {seq, op, error}                       it raised
#   exception {type, qualname, message, frames, text, extra, exit_code}   the rank's uncaught exception
#   exit      {code, via: return|SystemExit|os._exit, frames}             the rank ended without one
#   note      {message}                              anything worth telling the user
#   argparse  {message, prog, site}                  argparse's error, just before it exits with 2
#   ddp_state {model, site, when, params, synced, grads}  a DDP model's fingerprint (shim_checks.py)
#   quiet     {completed, site?}                     finished, not logged (bounded, below), so far
# frames: [{file, line, function, end_line?, col?, end_col?}], outermost first (as in a traceback);
# in a SIGUSR2 dump (stack-<RANK>.py) a recording wrapper's frame also has {op}.
# A site passed to _PRE_COLLECTIVE_HOOKS is {file, line, function} (the innermost frame outside
# torch and this shim) or None.  Hooks run after the ``call`` record (or its parking, when over
# budget), so a hook that raises shows as ``raise`` on that call and as the rank's exception at the
# user's line.
#
# seen-<RANK> (one JSON object, rewritten in place): {file, line, function, t}, the main thread's
# latest user frame, sampled every 0.2 s (shim_checks.start_seen_sampler).
#
# Signals: SIGUSR1 dumps every thread's stack to stack-<RANK>.usr1 (the launcher asks a hung rank);
# SIGTERM (torchrun's teardown) to stack-<RANK>.term, then terminates; fatal errors to .fatal.

import functools
import json
import signal
import threading
import time

_PRE_COLLECTIVE_HOOKS: list = []

_LOG_FD = None
_PID = os.getpid()
_RANK = None
_SHIM_FILE = os.path.abspath(__file__)
# the emulation (part 2, loaded by path only when DDP_LINT_EMULATE=1); its frames are the shim's too
_EMU_FILE = os.path.join(os.path.dirname(_SHIM_FILE), "shim_emulation.py")
_FILES_FILE = os.path.join(os.path.dirname(_SHIM_FILE), "shim_files.py")  # part 3: file writes (DDP908)
_CHECKS_FILE = os.path.join(os.path.dirname(_SHIM_FILE), "shim_checks.py")  # part 4: DDP906/DDP907, argparse
_SHIM_FILES = (_SHIM_FILE, _EMU_FILE, _FILES_FILE, _CHECKS_FILE, *(os.path.join(os.path.dirname(_SHIM_FILE), f)
               for f in ("shim_emulation_dist.py", "shim_spawn.py", "shim_output.py")))
_EMU = None  # the emulation's state once installed (shim_emulation._EMU)
_TORCH_DIR = None
_TLS = threading.local()
_SEQ = 0
_SEQ_LOCK = threading.Lock()
_LAST_SITE = None
_KEEP = []  # file objects faulthandler writes to (must stay alive)
_SIGNATURES = {}
_GROUP_CACHE = {}

COLLECTIVE_OPS = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_gather_coalesced",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
    "broadcast", "reduce", "gather", "scatter", "all_reduce_coalesced",
    "all_gather_object", "gather_object", "scatter_object_list", "broadcast_object_list",
    "send_object_list", "recv_object_list", "barrier", "monitored_barrier",
    "send", "recv", "isend", "irecv", "batch_isend_irecv", "new_group",
)


def _rank_int():
    try:
        return int(os.environ.get("RANK", "-1"))
    except ValueError:
        return -1


def _log_event(kind, **fields):
    """Append one JSON line to this rank's log; a single write(2), so it survives a kill."""
    if _LOG_FD is None or os.getpid() != _PID:
        return 0
    if kind in ("exit", "exception") and _QUIET != _QUIET_LOGGED:
        _log_quiet()  # the count of unlogged collectives is complete before the rank's last word
    rec = {"kind": kind, "rank": _RANK, "t": time.time(), "pid": _PID}
    rec.update(fields)
    try:
        line = json.dumps(rec, default=repr)
    except Exception:  # a field that even repr() cannot handle
        line = json.dumps({"kind": kind, "rank": _RANK, "t": rec["t"], "pid": _PID, "unserializable": True})
    data = (line + "\n").encode("utf-8", "replace")
    size = len(data)
    try:
        while data:
            n = os.write(_LOG_FD, data)
            data = data[n:]
    except OSError:
        pass
    return size


def _is_internal(filename):
    return filename in _SHIM_FILES or (_TORCH_DIR is not None and filename.startswith(_TORCH_DIR))


def _caller_site(depth=2):
    """{file, line, function} of the innermost frame outside torch and this shim."""
    try:
        f = sys._getframe(depth)
    except ValueError:
        return None
    while f is not None:
        code = f.f_code
        if not _is_internal(code.co_filename):
            return {"file": code.co_filename, "line": f.f_lineno, "function": code.co_name}
        f = f.f_back
    return None


def _frames_of(tb):
    out = []
    for fs in traceback.extract_tb(tb):
        d = {"file": fs.filename, "line": fs.lineno, "function": fs.name}
        for attr, key in (("end_lineno", "end_line"), ("colno", "col"), ("end_colno", "end_col")):
            v = getattr(fs, attr, None)
            if v is not None:
                d[key] = v
        out.append(d)
    return out


def _group_of(op, fn, args, kwargs):
    if "group" in kwargs:
        return kwargs["group"]
    sig = _SIGNATURES.get(op)
    if sig is None:
        try:
            import inspect

            sig = _SIGNATURES[op] = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = _SIGNATURES[op] = False
    if not sig:
        return None
    try:
        return sig.bind_partial(*args, **kwargs).arguments.get("group")
    except TypeError:
        return None


_ROOTED = {"broadcast": "src", "reduce": "dst", "scatter": "src", "gather": "dst", "broadcast_object_list": "src",
           "scatter_object_list": "src", "gather_object": "dst"}


def _root_of(op, fn, args, kwargs):
    """(argument name, value) of a rooted collective's root (src/dst, or group_src/group_dst), else None."""
    name, sig = _ROOTED.get(op), (_group_of(op, fn, (), {}), _SIGNATURES.get(op))[1]  # caches the signature
    bound = sig.bind_partial(*args, **kwargs).arguments if name and sig else kwargs
    return next(((k, bound[k]) for k in (name, f"group_{name}") if name and type(bound.get(k)) is int), None)


def _group_desc(group):
    if group is None:
        return None
    key = id(group)
    desc = _GROUP_CACHE.get(key)
    if desc is None:
        try:
            import torch.distributed as dist

            desc = {"ranks": list(dist.get_process_group_ranks(group))}
        except Exception:
            desc = {"repr": repr(group)[:200]}
        try:
            desc["name"] = str(group.group_name)
        except Exception:
            pass
        _GROUP_CACHE[key] = desc
    return desc


def _next_seq():
    global _SEQ
    with _SEQ_LOCK:
        _SEQ += 1
        return _SEQ


# -- bounded logs ----------------------------------------------------------------------------------
# A collective costs a "call" and a "return" line (~350 bytes): a loop that all_reduces a metric each
# step writes hundreds of MB a minute. Past _LOG_BUDGET bytes, a "call" is written only if it is still
# running _SLOW_S later (by a watcher thread; its "return" follows); quicker ones are only counted
# ("quiet" events). Every collective a rank is stuck in, or that raised, is still in the log.
try:
    _LOG_BUDGET = max(0, int(os.environ.get("DDP_LINT_LOG_BUDGET", "") or 8 * 1024 * 1024))
except ValueError:
    _LOG_BUDGET = 8 * 1024 * 1024
_SLOW_S = 0.25
_LOG_USED = 0  # bytes of call/return lines written so far
_INFLIGHT = {}  # seq -> (monotonic start, call record), not written yet (compact mode only)
_QUIET = 0  # collectives that finished without being written
_QUIET_LOGGED = 0
_INFLIGHT_LOCK = threading.Lock()
_WATCHER = None


def _log_collective(kind, rec):
    global _LOG_USED
    _LOG_USED += _log_event(kind, **rec)


def _collective_begin(seq, rec):
    """Log the call now, or (over budget) park it for the watcher. Returns True if written."""
    if _LOG_USED < _LOG_BUDGET:
        _log_collective("call", rec)
        return True
    with _INFLIGHT_LOCK:
        _INFLIGHT[seq] = (time.monotonic(), rec)
    _start_watcher()
    return False


def _collective_end(seq, op, written, error=None):
    global _QUIET
    if not written:
        with _INFLIGHT_LOCK:
            parked = _INFLIGHT.pop(seq, None)
            if parked is None:  # the watcher wrote its call meanwhile
                written = True
            elif error is not None:  # a collective that raised is always logged
                _log_collective("call", parked[1])
                written = True
            else:
                _QUIET += 1
                return
    if error is not None:
        _log_collective("raise", {"seq": seq, "op": op, "error": error})
    else:
        _log_collective("return", {"seq": seq, "op": op})


def _start_watcher():
    global _WATCHER
    if _WATCHER is not None:
        return
    _WATCHER = threading.Thread(target=_watch_inflight, daemon=True, name="ddp-lint-collectives")
    _WATCHER.start()


def _watch_inflight():
    global _QUIET_LOGGED
    last_quiet = 0.0
    while os.getpid() == _PID:
        time.sleep(_SLOW_S / 2)
        now = time.monotonic()
        with _INFLIGHT_LOCK:
            for seq, (t0, rec) in list(_INFLIGHT.items()):
                if now - t0 >= _SLOW_S:
                    del _INFLIGHT[seq]
                    _log_collective("call", rec)
        if _QUIET != _QUIET_LOGGED and now - last_quiet >= 1.0:
            _log_quiet()
            last_quiet = now


def _log_quiet():
    global _QUIET_LOGGED
    n = _QUIET
    if n != _QUIET_LOGGED:
        _QUIET_LOGGED = n
        site = _LAST_SITE  # where this rank's latest collective was called from
        _log_event("quiet", completed=n, **({"site": site} if site else {}))


def _wrap_collective(op, fn):
    if getattr(fn, "_ddp_lint_wrapped", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        # only the outermost collective of the rank process is recorded (all_gather_object calls
        # all_gather inside; a forked DataLoader worker is not a rank)
        if getattr(_TLS, "depth", 0) or os.getpid() != _PID:
            return fn(*args, **kwargs)
        global _LAST_SITE
        site = _caller_site()
        seq = _next_seq()
        rec = {"seq": seq, "op": op, "async": bool(kwargs.get("async_op", False))}
        if site:
            rec.update(site)
            _LAST_SITE = site
        try:
            g = _group_desc(_group_of(op, fn, args, kwargs))
            if g is not None:
                rec["group"] = g
            root = _root_of(op, fn, args, kwargs)
            if root is not None:
                rec["root_arg"], rec["root"] = root
            rec.update({"local_sync": True} if op == "new_group" and kwargs.get("use_local_synchronization", args[4:5] == (True,)) else {})
        except Exception:
            pass
        written = _collective_begin(seq, rec)
        _TLS.depth = 1
        try:
            for hook in list(_PRE_COLLECTIVE_HOOKS):
                hook(op, args, kwargs, site)
            result = fn(*args, **kwargs)
        except BaseException as e:
            _collective_end(seq, op, written, error=f"{type(e).__name__}: {e}"[:4000])
            raise
        finally:
            _TLS.depth = 0
        _collective_end(seq, op, written)
        return result

    wrapper._ddp_lint_wrapped = True
    wrapper._ddp_lint_original = fn
    return wrapper


def _run_timeout():
    try:
        t = float(os.environ.get("DDP_LINT_TIMEOUT", ""))
    except ValueError:
        return None
    if t <= 0:
        return None
    # a small margin: the launcher asks hung ranks for their stacks first, the backend's own
    # timeout is the fallback that turns a hang into an error instead of a 10-30 minute wait
    return t + min(5.0, max(1.0, 0.25 * t))


def _wrap_init(fn, c10d):
    if getattr(fn, "_ddp_lint_wrapped", False):
        return fn

    @functools.wraps(fn)
    def init_process_group(*args, **kwargs):
        site = _caller_site() or {}
        backend = kwargs.get("backend", args[0] if args else None)
        forced = os.environ.get("DDP_LINT_BACKEND", "auto")
        if forced in ("gloo", "nccl") and os.environ.get("DDP_LINT_EMULATE") != "1" and backend != forced:
            if args:
                args = (forced,) + tuple(args[1:])
            else:
                kwargs["backend"] = forced
            _log_event("note", message=f"backend {backend!r} replaced by {forced!r} (--backend {forced})")
        limit = _run_timeout()
        if limit is not None:
            import datetime

            cap = datetime.timedelta(seconds=limit)
            given = kwargs.get("timeout", args[2] if len(args) > 2 else None)
            if given is None or (isinstance(given, datetime.timedelta) and given > cap):
                if len(args) > 2:
                    args = tuple(args[:2]) + (cap,) + tuple(args[3:])
                else:
                    kwargs["timeout"] = cap
        _log_event("init", backend=str(backend) if backend is not None else None, **site)
        out = fn(*args, **kwargs)
        for hook in _POST_INIT_HOOKS:
            hook()
        return out

    init_process_group._ddp_lint_wrapped = True
    init_process_group._ddp_lint_original = fn
    return init_process_group


def _patch_torch():
    global _TORCH_DIR
    import torch
    import torch.distributed as dist

    _TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    if not dist.is_available():
        _log_event("note", message="torch.distributed is not available in this torch build")
        return
    from torch.distributed import distributed_c10d as c10d

    for op in COLLECTIVE_OPS:
        orig = getattr(c10d, op, None) or getattr(dist, op, None)
        if orig is None or not callable(orig):
            continue
        w = _wrap_collective(op, orig)
        for mod in (c10d, dist):
            if getattr(mod, op, None) is orig:
                setattr(mod, op, w)
    if os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() == "DETAIL":
        _patch_ddp_logger(dist)
    _install_checks(torch, c10d)
    orig_init = c10d.init_process_group
    w = _wrap_init(orig_init, c10d)
    for mod in (c10d, dist):
        if getattr(mod, "init_process_group", None) is orig_init:
            setattr(mod, "init_process_group", w)
    limit = _run_timeout()
    orig_default = getattr(c10d, "_get_default_timeout", None)
    if limit is not None and orig_default is not None and not getattr(orig_default, "_ddp_lint_wrapped", False):
        import datetime

        cap = datetime.timedelta(seconds=limit)

        def _get_default_timeout(*a, **k):
            t = orig_default(*a, **k)
            try:
                return min(t, cap)
            except TypeError:
                return cap

        _get_default_timeout._ddp_lint_wrapped = True
        c10d._get_default_timeout = _get_default_timeout


_CHECKS = None  # shim_checks.py, loaded by path (DDP906/DDP907)


def _load_checks():
    """shim_checks.py (argparse errors, DDP906/DDP907), loaded by path once."""
    global _CHECKS
    if _CHECKS is None:
        import importlib.util

        spec = importlib.util.spec_from_file_location("_ddp_lint_shim_checks", _CHECKS_FILE)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _CHECKS = mod
    return _CHECKS


def _install_checks(torch, c10d):
    _load_checks().install(torch, c10d, _caller_site, _log_event, _PRE_COLLECTIVE_HOOKS)


def _patch_ddp_logger(dist):
    """torch 2.13 segfaults in DistributedDataParallel's constructor under
    TORCH_DISTRIBUTED_DEBUG=DETAIL with gloo: the C++ Logger's set_construction_data_and_log casts
    the ProcessGroupWrapper that DETAIL installs to ProcessGroupGloo. That call only records usage
    statistics, so it is skipped; everything else of DDP (and DETAIL's checks) stays."""
    base = getattr(dist, "Logger", None)
    if base is None or getattr(base, "_ddp_lint_safe", False):
        return
    try:
        class _SafeDDPLogger(base):
            _ddp_lint_safe = True

            def set_construction_data_and_log(self, *args, **kwargs):
                return None
    except TypeError:  # a final pybind class
        return
    _SafeDDPLogger.__name__ = _SafeDDPLogger.__qualname__ = "Logger"
    dist.Logger = _SafeDDPLogger


def _patch_os_exit():
    orig = os._exit

    def _exit(code):
        if os.getpid() == _PID:
            site = _caller_site()
            _log_event("exit", code=code, via="os._exit", frames=[site] if site else [])
        orig(code)

    _exit._ddp_lint_original = orig
    os._exit = _exit


def _lib_dirs():
    """Folders whose frames are never the user's code: the stdlib and the installed packages."""
    out = []
    try:
        import sysconfig

        paths = sysconfig.get_paths()
        for k in ("stdlib", "platstdlib", "purelib", "platlib"):
            p = paths.get(k)
            if p and p not in out:
                out.append(os.path.abspath(p))
    except Exception:
        pass
    for p in sys.path:
        if p and ("site-packages" in p or "dist-packages" in p) and p not in out:
            out.append(os.path.abspath(p))
    return out


def _dump_python_stacks(signum=None, frame=None):
    """SIGUSR2: every thread's full stack, outermost first, as one JSON line in stack-<RANK>.py."""
    log_dir = os.environ.get("DDP_LINT_LOG_DIR")
    if not log_dir or os.getpid() != _PID:
        return
    out, wcode = {}, _wrap_collective("_", len).__code__
    for tid, f in sys._current_frames().items():
        frames = []
        while f is not None and len(frames) < 5000:
            fr = {"file": f.f_code.co_filename, "line": f.f_lineno, "function": f.f_code.co_name}
            if f.f_code is wcode:  # a recording wrapper names its collective (no frame under it may)
                fr["op"] = str(f.f_locals.get("op") or "")[:100]
            frames.append(fr)
            f = f.f_back
        frames.reverse()  # outermost first, as in a traceback
        out[str(tid)] = frames
    data = json.dumps({"main_thread": threading.main_thread().ident, "threads": out}).encode()
    path = os.path.join(log_dir, f"stack-{_RANK}.py")
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _open_private(path):
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600), "w")


_POST_INIT_HOOKS: list = []  # callables() run after init_process_group returned (shim_spawn.py)


def _setup_recording(script, tag=None):
    """``tag`` names the log files: the rank (RANK, under torchrun), or, for the processes of a
    self-spawning script (shim_spawn.py), "main" or "p<pid>" until init_process_group names the rank."""
    global _LOG_FD, _RANK
    _RANK = _rank_int()
    log_dir = os.environ.get("DDP_LINT_LOG_DIR")
    if not log_dir:
        return
    tag = tag or str(_RANK)
    _LOG_FD = os.open(os.path.join(log_dir, f"rank-{tag}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0), 0o600)
    _log_event(
        "start", main_thread=threading.main_thread().ident, script=script, argv=sys.argv[1:],
        world_size=os.environ.get("WORLD_SIZE"), local_rank=os.environ.get("LOCAL_RANK"),
        group_rank=os.environ.get("GROUP_RANK"), local_world_size=os.environ.get("LOCAL_WORLD_SIZE"),
        emulate=os.environ.get("DDP_LINT_EMULATE") == "1", lib_dirs=_lib_dirs(),
    )
    import faulthandler

    try:
        fatal = _open_private(os.path.join(log_dir, f"stack-{tag}.fatal"))
        _KEEP.append(fatal)
        faulthandler.enable(file=fatal, all_threads=True)
        if hasattr(faulthandler, "register"):
            usr1 = _open_private(os.path.join(log_dir, f"stack-{tag}.usr1"))
            term = _open_private(os.path.join(log_dir, f"stack-{tag}.term"))
            _KEEP.extend((usr1, term))
            faulthandler.register(signal.SIGUSR1, file=usr1, all_threads=True, chain=False)
            faulthandler.register(signal.SIGTERM, file=term, all_threads=True, chain=True)
    except (OSError, RuntimeError, ValueError) as e:
        _log_event("note", message=f"faulthandler unavailable: {e}")
    try:  # full-depth Python stacks (faulthandler stops at 100 frames); only runs between bytecodes
        if signal.getsignal(signal.SIGUSR2) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGUSR2, _dump_python_stacks)
            _KEEP.append("py_stacks")
    except (OSError, ValueError, AttributeError):
        pass
    try:
        checks = _load_checks()
        checks.start_seen_sampler(log_dir, tag, _lib_dirs(), _is_internal)
        checks.patch_argparse(_log_event, _caller_site)
    except Exception:
        pass
    _patch_os_exit()
    try:
        _patch_torch()
    except ImportError as e:
        _log_event("note", message=f"torch could not be imported: {e}")


def _exception_record(e):
    extra = {}
    for k in dir(e):
        if k.startswith("ddp_lint_"):
            try:
                v = getattr(e, k)
                json.dumps(v)
                extra[k[len("ddp_lint_"):]] = v
            except Exception:
                pass
    t = type(e)
    try:
        text = "".join(traceback.format_exception(t, e, e.__traceback__))
    except Exception:
        text = repr(e)
    try:
        message = str(e)
    except Exception:
        message = "<unprintable>"
    return {"type": t.__name__, "qualname": f"{t.__module__}.{t.__qualname__}", "message": message[:20000],
            "frames": _frames_of(e.__traceback__), "text": text[-200000:], "extra": extra}


def _user_tb(tb):
    """The traceback from the script's first frame on (drops this shim and runpy)."""
    first = tb
    while tb is not None:
        fn = tb.tb_frame.f_code.co_filename
        if fn not in _SHIM_FILES and "runpy" not in fn:
            return tb
        tb = tb.tb_next
    return first


def _print_user_traceback(e):
    """The traceback as Python would print it for the script alone: no shim or runpy frames."""
    te = traceback.TracebackException(type(e), e, _user_tb(e.__traceback__), compact=True)
    seen = set()
    stack = [te]
    while stack:
        t = stack.pop()
        if id(t) in seen:
            continue
        seen.add(id(t))
        t.stack = traceback.StackSummary.from_list([f for f in t.stack if f.filename not in _SHIM_FILES])
        for nxt in (t.__cause__, t.__context__):
            if nxt is not None:
                stack.append(nxt)
    sys.stderr.write("".join(te.format()))
    sys.stderr.flush()


def _exit_code(code):
    return 0 if code is None else code if isinstance(code, int) else 1


# ================================ EMULATION (shim_emulation.py) ==================================
# GPU-free runs (DDP_LINT_EMULATE=1): the CUDA/NCCL emulation lives in shim_emulation.py (see its
# header and docs/emulation.md). It is loaded by path, only when emulation is on, and uses the hooks
# above (_PRE_COLLECTIVE_HOOKS, _log_event, _caller_site, _is_internal).

def _emulation_install():
    """Load shim_emulation.py by path and install it in this rank (before the script runs)."""
    global _EMU, _TORCH_DIR
    if _EMU is not None:
        return
    import importlib.util

    import torch

    if _TORCH_DIR is None:
        _TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    spec = importlib.util.spec_from_file_location("_ddp_lint_shim_emulation", _EMU_FILE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses and pickling look classes up by module name
    spec.loader.exec_module(mod)
    import types

    g = globals()
    mod.bind(types.SimpleNamespace(**{k: g[k] for k in ("_PRE_COLLECTIVE_HOOKS", "_log_event", "_caller_site",
                                                       "_is_internal")}))
    mod._emulation_install()
    _EMU = mod._EMU


def _load_part(name, path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(_SHIM_FILE), path))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _files_install():
    """Load shim_files.py by path: records the files each rank writes (torch.save, open for
    writing) as ``write`` events, for DDP908."""
    import types

    mod = _load_part("_ddp_lint_shim_files", _FILES_FILE)
    mod.bind(types.SimpleNamespace(_log_event=_log_event, _is_internal=_is_internal))
    mod.install()


def _as_torchrun():
    """The launcher starts torchrun through this file (DDP_LINT_SHIM_ROLE=torchrun), so that it
    dies with ddp-lint: if ddp-lint is killed outright (SIGKILL, an editor that gives up on it),
    the kernel kills torchrun too (PR_SET_PDEATHSIG), and each rank, orphaned, stops the rest of
    the run (_watch_for_orphaning). SIGKILL rather than SIGTERM: torchrun would SIGTERM the ranks,
    and a rank killed that way could no longer find the processes it started. Everything else is
    ``python -m torch.distributed.run`` as is."""
    os.environ.pop("DDP_LINT_SHIM_ROLE", None)
    parent = os.environ.pop("DDP_LINT_PARENT_PID", "")
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent.isdigit() and os.getppid() != int(parent):  # ddp-lint died before the line above
        return 143
    log_dir = os.environ.get("DDP_LINT_LOG_DIR")
    if log_dir:  # torchrun's own messages (its ChildFailedError banner) go to the report, not the terminal;
        try:     # the ranks keep the shared stdout/stderr (file descriptors 1 and 2)
            sys.stderr = open(os.open(os.path.join(log_dir, "torchrun.err"), os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0),
                                      0o600), "w", buffering=1, errors="replace")
        except OSError:
            pass
    sys.argv[0] = "torchrun"
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(_SHIM_FILE):
        sys.path[0] = os.getcwd()  # as ``python -m`` has it; this folder must not shadow anything
    import runpy

    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
    return 0


def _watch_for_orphaning():
    """A rank whose torchrun is gone (ddp-lint and torchrun both killed outright, so nobody is left
    to stop the run) kills every process of this run it can find (they carry DDP_LINT_RUN_ID in
    their environment), removes the run's log folder, and then its own process group and itself.
    A process that left the run's environment behind (setsid + a scrubbed environment) is out of
    its reach; while ddp-lint lives, its subreaper finds those."""
    run_id = os.environ.get("DDP_LINT_RUN_ID")
    if not run_id or not os.path.isdir("/proc"):
        return
    parent, me = os.getppid(), os.getpid()

    def cleanup():
        marker = b"\0DDP_LINT_RUN_ID=" + run_id.encode() + b"\0"
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open(f"/proc/{name}/environ", "rb") as fh:
                    env = b"\0" + fh.read()
                if marker in env or env.endswith(marker[:-1]):
                    os.kill(int(name), signal.SIGKILL)
            except OSError:
                continue
        log_dir = os.environ.get("DDP_LINT_LOG_DIR")
        if log_dir and os.path.basename(log_dir).startswith("ddp-lint-run-"):
            import shutil

            shutil.rmtree(log_dir, ignore_errors=True)
        if os.getpgrp() == me:  # torchrun gives every rank its own session: take its children too
            os.killpg(me, signal.SIGKILL)
        os.kill(me, signal.SIGKILL)

    def watch():
        while os.getppid() == parent:
            time.sleep(0.25)
        try:
            cleanup()
        except Exception:
            os.kill(me, signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="ddp-lint-orphan-watch").start()


def main(argv=None):
    """``shim.py SCRIPT [ARGS...]``: record, then run SCRIPT as ``__main__`` like torchrun would."""
    if argv is None and os.environ.get("DDP_LINT_SHIM_ROLE") == "torchrun":
        return _as_torchrun()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.stderr.write("usage: shim.py SCRIPT [ARGS...]\n")
        return 2
    module = None
    if argv[0] == "-m" and len(argv) > 1:  # ``shim.py -m PACKAGE.MODULE [ARGS...]``, as ``python -m``
        module = argv[1]
        argv = argv[1:]
        script = _module_file(module) or os.path.abspath(module)
        script_dir = os.getcwd()  # python -m puts the current folder first
    else:
        script = os.path.abspath(argv[0])
        script_dir = os.path.dirname(script)
    sys.argv = [script] + argv[1:]
    _whole_lines()
    # the interpreter put this shim's folder first on sys.path; the script's own folder belongs there
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(_SHIM_FILE):
        sys.path[0] = script_dir
    else:
        sys.path.insert(0, script_dir)
    spawn_parent = os.environ.pop("DDP_LINT_SHIM_ROLE", None) == "spawn-parent"  # not for its children
    try:
        _setup_recording(script, "main" if spawn_parent else None)
    except Exception as e:  # never stop the user's script because recording failed
        sys.stderr.write(f"ddp-lint shim: recording disabled: {e!r}\n")
    try:
        _watch_for_orphaning()
    except Exception:
        pass
    if os.environ.get("DDP_LINT_EMULATE") == "1":
        try:
            _emulation_install()
        except Exception as e:
            _log_event("exception", **_exception_record(e), exit_code=1, phase="emulation")
            traceback.print_exc()
            return 1
    if _LOG_FD is not None:
        try:
            _files_install()
        except Exception as e:
            _log_event("note", message=f"file writes are not recorded: {e!r}")
    _log_event("ready", py_stacks="py_stacks" in _KEEP)
    import runpy

    try:
        if module is not None:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = _exit_code(e.code)
        _log_event("exit", code=code, via="SystemExit", frames=_frames_of(e.__traceback__),  # context: the error
                   context=_exception_record(e.__context__) if e.__context__ is not None else None,  # ended by exit
                   message=None if isinstance(e.code, (int, type(None))) else str(e.code)[:2000])
        _teardown()
        raise
    except BaseException as e:
        code = 130 if isinstance(e, KeyboardInterrupt) else 1
        _log_event("exception", **_exception_record(e), exit_code=code)
        try:
            _print_user_traceback(e)
        except Exception:
            pass
        return code
    if _CHECKS is not None:
        _CHECKS.log_states("end")
    _log_event("exit", code=0, via="return", frames=[_LAST_SITE] if _LAST_SITE else [])
    _teardown()
    return 0


def _module_file(module):
    """The file ``python -m MODULE`` would run, found from the current folder (without importing
    the module itself; its parent packages are imported, as ``python -m`` does)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        import importlib.util

        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations:  # a package: its __main__
            spec = importlib.util.find_spec(module + ".__main__")
        return os.path.abspath(spec.origin) if spec is not None and spec.origin else None
    except Exception:
        return None


def _whole_lines():
    """All ranks share one pipe. Unbuffered text streams (PYTHONUNBUFFERED) hand each piece of a print
    to the OS alone, so ranks interleave mid-line; line buffering writes each line in one piece.
    In text mode each line gets ``[rank N] `` (shim_output.py)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        try:
            stream.reconfigure(line_buffering=True, write_through=False)
        except Exception:  # replaced or closed by something else: leave it alone
            pass
    if os.environ.get("DDP_LINT_RANK_PREFIX") == "1" and _rank_int() >= 0:  # text mode: shim_output.py
        try:
            _load_part("_ddp_lint_shim_output", "shim_output.py").install(_rank_int())
        except Exception:
            pass


def _teardown():
    """Under TORCH_DISTRIBUTED_DEBUG=DETAIL (set by ddp-lint, not by the script), torch 2.13 now and
    then aborts at interpreter exit ("terminate called without an active exception") when the
    script left its process group alive. Destroying it once the script has finished avoids that."""
    if os.environ.get("TORCH_DISTRIBUTED_DEBUG", "").upper() != "DETAIL" or "torch.distributed" not in sys.modules:
        return
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass


if __name__ == "__main__":
    sys.exit(main())
