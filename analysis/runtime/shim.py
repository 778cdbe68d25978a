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
# ruff: noqa
from __future__ import annotations

import os
import sys
import traceback

_PRE_COLLECTIVE_HOOKS: list = []

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
#   quiet     {completed, site?}                     collectives finished but not logged (bounded
#                                                    logs, see below), cumulative; site: the latest
# frames: [{file, line, function, end_line?, col?, end_col?}], outermost first (as in a traceback).
# A site passed to _PRE_COLLECTIVE_HOOKS is {file, line, function} (the innermost frame outside
# torch and this shim) or None.  Hooks run after the ``call`` record (or its parking, when over
# budget), so a hook that raises shows as ``raise`` on that call and as the rank's exception at the
# user's line.
#
# Signals: SIGUSR1 dumps every thread's Python stack to stack-<RANK>.usr1 (the launcher asks a hung
# rank this way); SIGTERM (torchrun tearing the job down) dumps to stack-<RANK>.term and then
# terminates as before; fatal errors (segfault, abort) go to stack-<RANK>.fatal.

import functools
import json
import signal
import threading
import time

_LOG_FD = None
_PID = os.getpid()
_RANK = None
_SHIM_FILE = os.path.abspath(__file__)
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
    return filename == _SHIM_FILE or (_TORCH_DIR is not None and filename.startswith(_TORCH_DIR))


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
# Every collective costs a "call" and a "return" line (~350 bytes). A loop that all_reduces a metric
# every step would write hundreds of MB in a minute. Once this rank has written _LOG_BUDGET bytes of
# them, a collective's "call" is written only if it is still running _SLOW_S later (a watcher thread
# writes it, then its "return" follows as usual); collectives that finish sooner are only counted,
# and the count is logged ("quiet" events, cumulative). What the analysis needs is unchanged: every
# collective a rank is stuck in, or that raised, is in the log.
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
        return fn(*args, **kwargs)

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
    out = {}
    for tid, f in sys._current_frames().items():
        frames = []
        while f is not None and len(frames) < 5000:
            frames.append({"file": f.f_code.co_filename, "line": f.f_lineno, "function": f.f_code.co_name})
            f = f.f_back
        frames.reverse()  # outermost first, as in a traceback
        out[str(tid)] = frames
    data = json.dumps({"main_thread": threading.main_thread().ident, "threads": out}).encode()
    path = os.path.join(log_dir, f"stack-{_RANK}.py")
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _open_private(path):
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w")


def _setup_recording(script):
    global _LOG_FD, _RANK
    _RANK = _rank_int()
    log_dir = os.environ.get("DDP_LINT_LOG_DIR")
    if not log_dir:
        return
    tag = str(_RANK)
    _LOG_FD = os.open(os.path.join(log_dir, f"rank-{tag}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    _log_event(
        "start", main_thread=threading.main_thread().ident, script=script, argv=sys.argv[1:],
        world_size=os.environ.get("WORLD_SIZE"), local_rank=os.environ.get("LOCAL_RANK"),
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
        if fn != _SHIM_FILE and "runpy" not in fn:
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
        t.stack = traceback.StackSummary.from_list([f for f in t.stack if f.filename != _SHIM_FILE])
        for nxt in (t.__cause__, t.__context__):
            if nxt is not None:
                stack.append(nxt)
    sys.stderr.write("".join(te.format()))
    sys.stderr.flush()


def _exit_code(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1


# ================================ EMULATION (owned by the emulation) =============================
#
# GPU-free runs (DDP_LINT_EMULATE=1, DDP_LINT_EMU_NGPUS=N; docs/emulation.md): every rank runs on
# the CPU over gloo while the script believes it has N GPUs and an NCCL process group.
#   * backends: "nccl", "cuda:nccl", "cpu:gloo,cuda:nccl", None ... become "gloo"; the requested
#     kind is remembered per process group ("nccl" = NCCL only, "mixed" = a CPU backend as well).
#   * torch.cuda answers as a machine with N GPUs; the current device is kept per thread.
#   * a TorchFunctionMode places everything sent to "cuda:k" on the CPU and tags those tensors with
#     the attribute _EMU_TAG = k; results of ops on tagged tensors inherit the tag.  A tensor without
#     the tag is a CPU tensor.
#   * NCCL's rules, checked before every collective (_PRE_COLLECTIVE_HOOKS) and in DDP's
#     constructor: two ranks of a group on one GPU -> EmulatedNcclError (DDP905) on every rank; a CPU
#     tensor on an NCCL-only group -> EmulatedNcclError("No backend type associated with device type
#     cpu", DDP901).  Ranks exchange their devices through the default store, keyed by a per-group
#     sequence number, so a clash fails within milliseconds and never waits for a timeout.
#   * what is not emulated faithfully is told once per topic as a "note" event.

_EMU = None  # the _EmuState once installed
_EMU_TAG = "_ddp_lint_emu_dev"
_EMU_TOTAL_MEMORY = 80 * 1024 ** 3
_EMU_DEVICE_NAME = "NVIDIA A100-SXM4-80GB (emulated by ddp-lint)"
_EMU_NCCL_MSG = ("on real NCCL this hangs, or fails with 'invalid usage' / 'Duplicate GPU detected' / "
                 "'Multiple Ranks are using the same GPU'")
_EMU_FIX = "Fix: `torch.cuda.set_device(local_rank)` right after `init_process_group` (DDP001's fix)"

# how each collective chooses its device under NCCL
_EMU_OBJECT_OPS = {"all_gather_object", "gather_object", "scatter_object_list", "broadcast_object_list",
                   "send_object_list", "recv_object_list"}
_EMU_P2P_OPS = {"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list"}
_EMU_TENSOR_ARGS = {
    "all_reduce": ("tensor",), "broadcast": ("tensor",), "reduce": ("tensor",),
    "all_gather": ("tensor", "tensor_list"), "all_gather_into_tensor": ("input_tensor", "output_tensor"),
    "_all_gather_base": ("input_tensor", "output_tensor"), "all_gather_coalesced": ("input_tensor_list",),
    "reduce_scatter": ("output", "input_list"), "reduce_scatter_tensor": ("input", "output"),
    "_reduce_scatter_base": ("input", "output"), "all_to_all": ("input_tensor_list", "output_tensor_list"),
    "all_to_all_single": ("input", "output"), "gather": ("tensor", "gather_list"),
    "scatter": ("tensor", "scatter_list"), "all_reduce_coalesced": ("tensors",),
    "send": ("tensor",), "recv": ("tensor",), "isend": ("tensor",), "irecv": ("tensor",),
    "batch_isend_irecv": ("p2p_op_list",),
}


class EmulatedNcclError(RuntimeError):
    """An error that real CUDA/NCCL would raise (or a hang it would cause), found by the emulation.

    ``ddp_lint_code`` is the finding's code: DDP905 for two ranks on one GPU (nccl-device-clash),
    DDP901 (rank-exception) for the other emulated CUDA/NCCL errors (a CPU tensor on an NCCL group,
    an invalid device ordinal, ...).  The other ``ddp_lint_*`` attributes land in the log record's
    ``extra``.
    """

    ddp_lint_code = "DDP905"
    ddp_lint_emulated = True

    def __init__(self, message, code="DDP905", op=None, device=None, ranks=(), kind=None):
        super().__init__(message)
        self.ddp_lint_code = code
        self.ddp_lint_op = op
        self.ddp_lint_device = device
        self.ddp_lint_ranks = [int(r) for r in ranks]
        self.ddp_lint_kind = kind


class _EmuGroup:
    __slots__ = ("kind", "bound", "used", "seq", "key")

    def __init__(self, kind, bound, key):
        self.kind = kind  # "nccl" | "mixed"
        self.bound = bound  # init_process_group / new_group device_id, as an index
        self.used = set()  # devices the group's tensor collectives have used (barrier's 3rd choice)
        self.seq = 0
        self.key = key


class _EmuState:
    def __init__(self, ngpus):
        self.ngpus = ngpus
        self.tls = threading.local()
        self.groups = {}  # ProcessGroup -> _EmuGroup (only NCCL-emulated groups)
        self.default_kind = None
        self.notes = set()
        self.dev_cache = {}
        self.max_allocated = {}
        self.store = None
        self.wait_s = 300.0
        self.mode = None
        self.torch = None
        self.default_dev = None  # torch.set_default_device("cuda[:k]"): k, or -2 for "the current device"
        self.constructors = frozenset()
        self.inits = 0  # init_process_group calls: keeps a re-initialised job's store keys apart

    def current(self):
        return getattr(self.tls, "device", 0)


def _emu_note(topic, message):
    st = _EMU
    if st is None or topic in st.notes:
        return
    st.notes.add(topic)
    site = _caller_site(3) if "_caller_site" in globals() else None
    _log_event("note", message=f"emulation: {message}", topic=topic, emulated=True, **(site or {}))


def _emu_ordinal_error(k):
    n = _EMU.ngpus
    return EmulatedNcclError(
        f"CUDA error: invalid device ordinal (emulated: the emulated machine has {n} GPU"
        f"{'s' if n != 1 else ''}, cuda:0..cuda:{n - 1}; cuda:{k} does not exist)",
        code="DDP901", device=f"cuda:{k}", kind="invalid-device-ordinal")


def _emu_dev_index(d, check=True):
    """An emulated CUDA device as its index; -1 for the CPU; None for anything else."""
    st = _EMU
    t = type(d)
    if t is int:
        k = d
    else:
        torch = st.torch
        if t is str:
            dev = st.dev_cache.get(d)
            if dev is None:
                try:
                    dev = torch.device(d)
                except (RuntimeError, ValueError, TypeError):
                    return None
                st.dev_cache[d] = dev
        elif t is torch.device:
            dev = d
        else:
            return None
        if dev.type == "cpu":
            return -1
        if dev.type != "cuda":
            return None
        k = dev.index if dev.index is not None else st.current()
    if check and not (0 <= k < st.ngpus):
        raise _emu_ordinal_error(k)
    return k


def _emu_tag_of(t):
    return getattr(t, _EMU_TAG, None)


def _emu_tag(out, k):
    torch = _EMU.torch
    if isinstance(out, torch.Tensor):
        try:
            setattr(out, _EMU_TAG, k)
        except (AttributeError, TypeError):
            pass
    elif isinstance(out, (tuple, list)):
        for o in out:
            if isinstance(o, torch.Tensor) and getattr(o, _EMU_TAG, None) is None:
                try:
                    setattr(o, _EMU_TAG, k)
                except (AttributeError, TypeError):
                    pass
    return out


def _emu_untag(t):
    d = getattr(t, "__dict__", None)
    if d:
        d.pop(_EMU_TAG, None)


def _emu_user_frame(depth):
    """True when the frame ``depth`` levels up is the user's code (not torch, not this shim)."""
    try:
        fn = sys._getframe(depth).f_code.co_filename
    except ValueError:
        return False
    return not _is_internal(fn)


def _emu_move(t, k, args, kwargs, func):
    """Tensor.to/cuda/cpu towards the emulated device k (-1: the CPU): a real copy when the device
    changes, as on a GPU (the source keeps its own device); ``self`` when it does not."""
    cur = getattr(t, _EMU_TAG, None)
    if cur is None:
        cur = -1
    out = func(*args, **kwargs)
    if out is t:
        if cur == k:
            return out
        out = t.clone()
    elif getattr(out, _EMU_TAG, None) is not None:  # a fresh tensor never has one; be safe
        _emu_untag(out)
    if k >= 0:
        setattr(out, _EMU_TAG, k)
    return out


def _emu_h_to(func, args, kwargs):
    torch = _EMU.torch
    t = args[0]
    k = None
    rest = list(args[1:])
    if rest:
        a = rest[0]
        if isinstance(a, torch.Tensor):
            k = getattr(a, _EMU_TAG, None)
            if k is None:
                k = -1
            rest = [torch.device("cpu"), a.dtype] + rest[1:]  # to(other) also takes other's dtype
        elif not isinstance(a, torch.dtype):
            k = _emu_dev_index(a)
            if k is not None:
                rest[0] = "cpu"
    if "device" in kwargs:
        k2 = _emu_dev_index(kwargs["device"])
        if k2 is not None:
            k = k2
            kwargs = dict(kwargs)
            kwargs["device"] = "cpu"
    if k is None:  # a dtype/memory-format conversion: same device
        out = func(*args, **kwargs)
        kt = getattr(t, _EMU_TAG, None)
        if kt is not None and out is not t:
            _emu_tag(out, kt)
        return out
    return _emu_move(t, k, (t, *rest), kwargs, func)


def _emu_h_cuda(func, args, kwargs):
    t = args[0]
    dev = args[1] if len(args) > 1 else kwargs.get("device")
    k = _EMU.current() if dev is None else _emu_dev_index(dev)
    if k is None or k < 0:
        raise EmulatedNcclError(f"Invalid device, must be cuda device (emulated): {dev!r}", code="DDP901")
    nb = kwargs.get("non_blocking", args[2] if len(args) > 2 else False)
    torch = _EMU.torch
    return _emu_move(t, k, (t,), {}, lambda x: x.to(torch.device("cpu"), non_blocking=bool(nb)))


def _emu_h_cpu(func, args, kwargs):
    return _emu_move(args[0], -1, args, kwargs, func)


def _emu_h_parse_to(func, args, kwargs):
    # Module.to(...) parses its arguments here; an int (or "cuda") target needs a real accelerator
    # to be resolved, so resolve it against the emulated machine first.
    torch = _EMU.torch
    args = list(args)
    if args and isinstance(args[0], torch.Tensor):  # module.to(other): other's device and dtype
        k = getattr(args[0], _EMU_TAG, None)
        if k is not None:
            args = [torch.device("cuda", k), args[0].dtype] + args[1:]
    if args and not isinstance(args[0], (torch.dtype, torch.Tensor)):
        k = _emu_dev_index(args[0])
        if k is not None and k >= 0:
            args[0] = torch.device("cuda", k)
    if "device" in kwargs:
        k = _emu_dev_index(kwargs["device"])
        if k is not None and k >= 0:
            kwargs = dict(kwargs)
            kwargs["device"] = torch.device("cuda", k)
    return func(*args, **kwargs)


def _emu_h_data_set(func, args, kwargs):
    out = func(*args, **kwargs)
    t, v = args[0], args[1]
    k = getattr(v, _EMU_TAG, None)
    if k is None:
        _emu_untag(t)
    else:
        setattr(t, _EMU_TAG, k)
    return out


def _emu_h_pin_memory(func, args, kwargs):
    return args[0]


def _emu_h_is_pinned(func, args, kwargs):
    return False


def _emu_h_record_stream(func, args, kwargs):
    return None


def _emu_h_get_device(func, args, kwargs):
    k = getattr(args[0], _EMU_TAG, None)
    return -1 if k is None else k


def _emu_h_numpy(func, args, kwargs):
    k = getattr(args[0], _EMU_TAG, None)
    if k is not None and not kwargs.get("force", False):
        raise TypeError(f"can't convert cuda:{k} device type tensor to numpy. Use Tensor.cpu() to copy "
                        "the tensor to host memory first. (emulated CUDA)")
    return func(*args, **kwargs)


def _emu_h_type(func, args, kwargs):
    dtype = args[1] if len(args) > 1 else kwargs.get("dtype")
    if isinstance(dtype, type) and getattr(dtype, "__module__", "") == "torch.cuda":
        dtype = f"torch.cuda.{dtype.__name__}"  # x.type(torch.cuda.FloatTensor)
        args = (args[0], dtype) + tuple(args[2:])
    t = args[0]
    k = getattr(t, _EMU_TAG, None)
    if isinstance(dtype, str) and dtype.startswith("torch.cuda."):  # x.type("torch.cuda.FloatTensor")
        kw = {n: v for n, v in kwargs.items() if n != "dtype"}
        out = func(t, "torch." + dtype[len("torch.cuda."):], *args[2:], **kw)
        k2 = _EMU.current() if k is None else k
        if out is t and k != k2:
            out = t.clone()
        setattr(out, _EMU_TAG, k2)
        return out
    out = func(*args, **kwargs)
    if dtype is None:  # x.type() -> its type name
        if k is not None and isinstance(out, str) and out.startswith("torch.") and ".cuda." not in out:
            out = "torch.cuda." + out[len("torch."):]
        return out
    if k is not None and out is not t:
        _emu_tag(out, k)
    return out


def _emu_h_device_get(func, args, kwargs):
    out = func(*args, **kwargs)
    k = getattr(args[0], _EMU_TAG, None)
    if k is not None and _emu_user_frame(3):
        return _EMU.torch.device("cuda", k)
    return out


def _emu_h_is_cuda_get(func, args, kwargs):
    out = func(*args, **kwargs)
    if getattr(args[0], _EMU_TAG, None) is not None and _emu_user_frame(3):
        return True
    return out


def _emu_first_tag(args, kwargs, torch):
    T = torch.Tensor
    for a in args:
        if isinstance(a, T):
            k = getattr(a, _EMU_TAG, None)
            if k is not None:
                return k
        elif type(a) in (list, tuple):
            for b in a:
                if isinstance(b, T):
                    k = getattr(b, _EMU_TAG, None)
                    if k is not None:
                        return k
    if kwargs:
        for a in kwargs.values():
            if isinstance(a, T):
                k = getattr(a, _EMU_TAG, None)
                if k is not None:
                    return k
    return None


def _emu_make_mode(torch):
    from torch.overrides import TorchFunctionMode

    T = torch.Tensor
    special = {
        T.to: _emu_h_to, T.cuda: _emu_h_cuda, T.cpu: _emu_h_cpu,
        torch._C._nn._parse_to: _emu_h_parse_to, T.data.__set__: _emu_h_data_set,
        T.pin_memory: _emu_h_pin_memory, T.is_pinned: _emu_h_is_pinned,
        T.record_stream: _emu_h_record_stream, T.get_device: _emu_h_get_device,
        T.numpy: _emu_h_numpy, T.type: _emu_h_type,
        T.device.__get__: _emu_h_device_get, T.is_cuda.__get__: _emu_h_is_cuda_get,
    }
    get_special = special.get
    dev_index = _emu_dev_index
    first_tag = _emu_first_tag
    Tensor = T

    class _EmulatedCudaMode(TorchFunctionMode):
        """Places CUDA tensors on the CPU and tags them with their emulated device."""

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if kwargs is None:
                kwargs = {}
            h = get_special(func)
            if h is not None:
                return h(func, args, kwargs)
            st = _EMU
            if st.default_dev is not None and func in st.constructors and kwargs.get("device") is None:
                kwargs = dict(kwargs)
                kwargs["device"] = st.current() if st.default_dev == -2 else st.default_dev
            if kwargs:
                dev = kwargs.get("device")
                if dev is not None:
                    k = dev_index(dev)
                    if k is not None:
                        kwargs = dict(kwargs)
                        kwargs["device"] = "cpu"
                        if kwargs.get("pin_memory"):
                            kwargs["pin_memory"] = False
                        out = func(*args, **kwargs)
                        if k >= 0:
                            _emu_tag(out, k)
                        return out
                if kwargs.get("pin_memory"):
                    kwargs = dict(kwargs)
                    kwargs["pin_memory"] = False
            out = func(*args, **kwargs)
            if out is None or (args and out is args[0]):
                return out
            k = first_tag(args, kwargs, torch)
            if k is not None:
                if isinstance(out, Tensor):
                    if getattr(out, _EMU_TAG, None) is None:
                        try:
                            setattr(out, _EMU_TAG, k)
                        except (AttributeError, TypeError):
                            pass
                elif type(out) is not bool:
                    _emu_tag(out, k)
            return out

    return _EmulatedCudaMode()


# ---- torch.cuda, as a machine with N GPUs ---------------------------------------------------------

def _emu_device_arg(device, optional=True):
    if device is None and optional:
        return _EMU.current()
    k = _emu_dev_index(device)
    if k is None or k < 0:
        raise ValueError(f"Expected a cuda device, but got: {device!r} (emulated CUDA)")
    return k


class _EmuDeviceProperties:
    def __init__(self, k):
        self.name = _EMU_DEVICE_NAME
        self.major, self.minor = 8, 0
        self.total_memory = _EMU_TOTAL_MEMORY
        self.multi_processor_count = 108
        self.is_integrated = False
        self.is_multi_gpu_board = False
        self.max_threads_per_multi_processor = 2048
        self.warp_size = 32
        self.L2_cache_size = 40 * 1024 * 1024
        self.gcnArchName = ""
        self.uuid = f"GPU-ddp-lint-emulated-{k:04d}"
        self.pci_bus_id = 0x10 + k
        self.pci_device_id = 0
        self.pci_domain_id = 0

    def __repr__(self):
        return (f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB, multi_processor_count="
                f"{self.multi_processor_count}, uuid={self.uuid})")


def _emu_allocated(k):
    """Bytes held by tensors on emulated cuda:k (an estimate from the live tagged tensors)."""
    import gc

    torch = _EMU.torch
    seen = set()
    total = 0
    for o in gc.get_objects():
        if isinstance(o, torch.Tensor) and getattr(o, _EMU_TAG, None) == k:
            try:
                s = o.untyped_storage()
                p = s.data_ptr()
                if p not in seen:
                    seen.add(p)
                    total += s.nbytes()
            except Exception:
                pass
    mx = _EMU.max_allocated
    mx[k] = max(mx.get(k, 0), total)
    return total


def _emu_cuda_api(torch):
    st = _EMU
    api = {}

    def _internal_caller():
        # torch's own code keeps seeing the CPU-only truth (all tensors really are on the CPU);
        # the script and the libraries it uses see N GPUs
        try:
            f = sys._getframe(2)
        except ValueError:
            return False
        fn = f.f_code.co_filename
        # new_subgroups() sizes its groups by the node's GPUs: that one is the script's question
        return _is_internal(fn) and not fn.endswith("distributed_c10d.py")

    real_is_available = torch.cuda.is_available
    real_device_count = torch.cuda.device_count

    def is_available():
        if _internal_caller():
            return real_is_available()
        return True

    def device_count():
        if _internal_caller():
            return real_device_count()
        return st.ngpus

    def set_device(device):
        k = _emu_dev_index(device)
        if k is None or k < 0:
            if k == -1 or device is None:
                return  # torch ignores a negative index / None
            raise ValueError(f"Expected a cuda device, but got: {device!r}")
        st.tls.device = k
        st.tls.set = True

    def current_device():
        return st.current()

    class device:
        """Context manager that changes the emulated current CUDA device."""

        def __init__(self, device):
            if device is None:
                self.idx = -1
            else:
                k = _emu_dev_index(device)
                self.idx = -1 if k is None else k
            self.prev_idx = -1

        def __enter__(self):
            self.prev_idx = st.current()
            if self.idx >= 0:
                st.tls.device = self.idx
            return self

        def __exit__(self, *exc):
            st.tls.device = self.prev_idx
            return False

    class device_of(device):
        def __init__(self, obj):
            k = getattr(obj, _EMU_TAG, None)
            super().__init__(k if k is not None else None)

    class _StreamContext:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            return self.stream

        def __exit__(self, *exc):
            return False

    class Stream:
        """No streams on the CPU: every op has already finished when it returns."""

        def __new__(cls, device=None, priority=0, **kwargs):
            _emu_note("streams", "torch.cuda.Stream/Event semantics are not emulated: work runs "
                                 "synchronously on the CPU, so a missing wait_stream()/synchronize() "
                                 "cannot show as a race here")
            self = object.__new__(cls)
            self.device_index = _emu_device_arg(device)
            self.device = torch.device("cuda", self.device_index)
            self.priority = priority
            self.cuda_stream = 0
            return self

        def wait_stream(self, stream):
            pass

        def wait_event(self, event):
            pass

        def record_event(self, event=None):
            event = event or Event()
            event.record(self)
            return event

        def query(self):
            return True

        def synchronize(self):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def __eq__(self, other):
            return isinstance(other, Stream) and other.device_index == self.device_index and \
                other.cuda_stream == self.cuda_stream

        def __hash__(self):
            return hash((self.device_index, self.cuda_stream))

        def __repr__(self):
            return f"<torch.cuda.Stream device=cuda:{self.device_index} cuda_stream=0x0 (emulated)>"

    class Event:
        def __init__(self, enable_timing=False, blocking=False, interprocess=False, **kwargs):
            _emu_note("streams", "torch.cuda.Stream/Event semantics are not emulated: work runs "
                                 "synchronously on the CPU, so a missing wait_stream()/synchronize() "
                                 "cannot show as a race here")
            self.t = None
            self.enable_timing = enable_timing

        def record(self, stream=None):
            self.t = time.perf_counter()

        def wait(self, stream=None):
            pass

        def query(self):
            return True

        def synchronize(self):
            pass

        def elapsed_time(self, end_event):
            _emu_note("timing", "timings on the emulated GPUs measure the CPU: GPU and NCCL performance "
                                "are not emulated")
            if self.t is None or end_event.t is None:
                raise RuntimeError("Both events must be recorded before calculating elapsed time.")
            return (end_event.t - self.t) * 1000.0

    def current_stream(device=None):
        return Stream(device)

    def default_stream(device=None):
        return Stream(device)

    def stream(s):
        return _StreamContext(s)

    def set_stream(s):
        pass

    def synchronize(device=None):
        if device is not None:
            _emu_device_arg(device)

    def get_device_name(device=None):
        _emu_device_arg(device)
        return _EMU_DEVICE_NAME

    def get_device_properties(device=None):
        return _EmuDeviceProperties(_emu_device_arg(device))

    def get_device_capability(device=None):
        _emu_device_arg(device)
        return (8, 0)

    def _mem_note():
        _emu_note("memory", "CUDA memory queries are estimates: the bytes of the live tensors on the "
                            f"emulated device, out of {_EMU_TOTAL_MEMORY // 1024 ** 3} GiB; fragmentation, "
                            "the caching allocator and out-of-memory errors are not emulated")

    def memory_allocated(device=None):
        _mem_note()
        return _emu_allocated(_emu_device_arg(device))

    def max_memory_allocated(device=None):
        k = _emu_device_arg(device)
        _emu_allocated(k)
        return st.max_allocated.get(k, 0)

    def memory_reserved(device=None):
        a = memory_allocated(device)
        blk = 2 * 1024 * 1024
        return (a + blk - 1) // blk * blk

    def max_memory_reserved(device=None):
        a = max_memory_allocated(device)
        blk = 2 * 1024 * 1024
        return (a + blk - 1) // blk * blk

    def mem_get_info(device=None):
        r = memory_reserved(device)
        return (_EMU_TOTAL_MEMORY - r, _EMU_TOTAL_MEMORY)

    def memory_stats(device=None):
        a = memory_allocated(device)
        return {"allocated_bytes.all.current": a, "allocated_bytes.all.peak": max_memory_allocated(device),
                "reserved_bytes.all.current": memory_reserved(device), "num_ooms": 0}

    def memory_summary(device=None, abbreviated=False):
        a = memory_allocated(device)
        return f"emulated CUDA device {_emu_device_arg(device)}: {a} bytes allocated (estimate)"

    def reset_peak_memory_stats(device=None):
        k = _emu_device_arg(device)
        st.max_allocated[k] = 0

    def _noop(*a, **k):
        return None

    def manual_seed(seed):
        return None  # tensors on the emulated GPUs draw from the CPU generator (torch.manual_seed)

    def initial_seed():
        return torch.initial_seed()

    def get_rng_state(device="cuda"):
        _emu_note("rng", "CUDA random generators are not emulated: random tensors on the emulated GPUs "
                         "come from the CPU generator; torch.cuda.manual_seed*() and the CUDA RNG state "
                         "functions are accepted and do nothing")
        return torch.get_rng_state()

    def get_rng_state_all():
        return [get_rng_state() for _ in range(st.ngpus)]

    class _GraphNotEmulated:
        def __init__(self, *a, **k):
            raise EmulatedNcclError("CUDA graphs cannot be emulated on the CPU (ddp-lint emulation); run "
                                    "this script on a GPU machine, or with --emulate off", code="DDP901")

    def mem_note_noop(*a, **k):
        return None

    api.update(
        is_available=is_available, device_count=device_count, is_initialized=lambda: True, init=_noop,
        set_device=set_device, current_device=current_device, device=device, device_of=device_of,
        synchronize=synchronize, get_device_name=get_device_name,
        get_device_properties=get_device_properties, get_device_capability=get_device_capability,
        get_arch_list=lambda: ["sm_80", "sm_90"], is_bf16_supported=lambda *a, **k: True,
        memory_allocated=memory_allocated, max_memory_allocated=max_memory_allocated,
        memory_reserved=memory_reserved, max_memory_reserved=max_memory_reserved,
        memory_cached=memory_reserved, max_memory_cached=max_memory_reserved, mem_get_info=mem_get_info,
        memory_stats=memory_stats, memory_summary=memory_summary, empty_cache=_noop,
        reset_peak_memory_stats=reset_peak_memory_stats, reset_max_memory_allocated=reset_peak_memory_stats,
        reset_max_memory_cached=reset_peak_memory_stats, reset_accumulated_memory_stats=_noop,
        set_per_process_memory_fraction=_noop, ipc_collect=_noop,
        manual_seed=manual_seed, manual_seed_all=manual_seed, seed=_noop, seed_all=_noop,
        initial_seed=initial_seed, get_rng_state=get_rng_state, get_rng_state_all=get_rng_state_all,
        set_rng_state=lambda *a, **k: None, set_rng_state_all=lambda *a, **k: None,
        Stream=Stream, Event=Event, current_stream=current_stream, default_stream=default_stream,
        stream=stream, set_stream=set_stream, is_current_stream_capturing=lambda: False,
        CUDAGraph=_GraphNotEmulated, graph=_GraphNotEmulated,
    )
    return api


def _emu_patch_cuda(torch):
    api = _emu_cuda_api(torch)
    for name, fn in api.items():
        setattr(torch.cuda, name, fn)
    rnd = getattr(torch.cuda, "random", None)
    if rnd is not None:
        for name in ("manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
                     "get_rng_state_all", "set_rng_state", "set_rng_state_all"):
            if hasattr(rnd, name):
                setattr(rnd, name, api[name])
    nvtx = getattr(torch.cuda, "nvtx", None)
    if nvtx is not None:
        import contextlib

        for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
            if hasattr(nvtx, name):
                setattr(nvtx, name, lambda *a, **k: 0)
        nvtx.range = lambda *a, **k: contextlib.nullcontext()
    # torch.accelerator, for scripts on the device-generic API (torch's own code keeps the truth)
    acc = getattr(torch, "accelerator", None)
    if acc is not None:
        st = _EMU

        def _user():
            try:
                return not _is_internal(sys._getframe(2).f_code.co_filename)
            except ValueError:
                return True

        wrap = {}
        for name in ("is_available", "current_accelerator", "device_count", "current_device_index",
                     "current_device_idx", "set_device_index", "set_device_idx", "synchronize"):
            real = getattr(acc, name, None)
            if real is None:
                continue
            wrap[name] = real
        def mk(name, real):
            def f(*a, **k):
                if not _user():
                    return real(*a, **k)
                if name == "is_available":
                    return True
                if name == "current_accelerator":
                    return torch.device("cuda")
                if name == "device_count":
                    return st.ngpus
                if name.startswith("current_device"):
                    return st.current()
                if name.startswith("set_device"):
                    return api["set_device"](a[0] if a else k.get("device"))
                return None
            f.__name__ = name
            return f
        for name, real in wrap.items():
            setattr(acc, name, mk(name, real))
    # amp on an emulated GPU: autocast("cuda") is a no-op on the CPU (float32), GradScaler too
    def _amp_note():
        _emu_note("amp", "CUDA autocast / GradScaler are not emulated: the emulated GPUs compute in "
                         "float32, so mixed-precision overflow or underflow cannot show here")
    try:
        import torch.amp.autocast_mode as am

        real_init = am.autocast.__init__

        def __init__(self, device_type, *a, **k):
            if device_type == "cuda":
                _amp_note()
                k = dict(k)
                k["enabled"] = False
                device_type = "cpu"
            return real_init(self, device_type, *a, **k)

        am.autocast.__init__ = __init__
    except Exception:
        pass
    try:
        import torch.amp.grad_scaler as gs

        real_gs = gs.GradScaler.__init__

        def gs_init(self, device="cuda", *a, **k):
            if device == "cuda":
                _amp_note()
                k = dict(k)
                k["enabled"] = False
                device = "cpu"
            return real_gs(self, device, *a, **k)

        gs.GradScaler.__init__ = gs_init
    except Exception:
        pass
    try:
        import torch.utils.cpp_extension as cx

        for name in ("load", "load_inline", "CUDAExtension"):
            real = getattr(cx, name, None)
            if real is None:
                continue

            def mk2(real, name):
                def f(*a, **k):
                    _emu_note("kernels", f"torch.utils.cpp_extension.{name}: custom CUDA kernels cannot run "
                                         "on the emulated GPUs; this part of the run is not emulated")
                    return real(*a, **k)
                return f
            setattr(cx, name, mk2(real, name))
    except Exception:
        pass


# ---- torch.distributed: NCCL process groups on gloo ---------------------------------------------

def _emu_backend_kind(backend):
    """"nccl" (NCCL only), "mixed" (NCCL for CUDA plus a CPU backend), or None (no NCCL)."""
    if backend is None:
        return "mixed"  # the default on a GPU machine: cpu:gloo,cuda:nccl
    s = str(backend).strip().lower()
    cuda = cpu = None
    for part in s.split(","):
        part = part.strip()
        if not part:
            continue
        if ":" in part:
            dev, be = (x.strip() for x in part.split(":", 1))
            if dev == "cuda":
                cuda = be
            elif dev == "cpu":
                cpu = be
        elif part == "nccl":
            cuda = "nccl"
        elif part in ("gloo", "mpi", "ucc"):
            cpu = cpu or part
            cuda = cuda or part
    if cuda != "nccl":
        return None
    return "mixed" if cpu else "nccl"


def _emu_bind(fn, args, kwargs, cache={}):
    import inspect

    sig = cache.get(fn)
    if sig is None:
        sig = cache[fn] = inspect.signature(fn)
    b = sig.bind_partial(*args, **kwargs)
    return b


def _emu_default_group():
    from torch.distributed import distributed_c10d as c10d

    try:
        return c10d._get_default_group()
    except Exception:
        return None


def _emu_group_key(pg):
    try:
        name = str(pg.group_name)
    except Exception:
        name = ""
    if not name:
        import torch.distributed as dist

        name = "r" + "-".join(map(str, dist.get_process_group_ranks(pg)))
    return f"i{_EMU.inits}/{name}"


def _emu_wrap_dist(torch):
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    st = _EMU
    real_init = dist.init_process_group
    real_new_group = c10d.new_group
    real_init_sig = getattr(real_init, "_ddp_lint_original", real_init)
    real_ng_sig = getattr(real_new_group, "_ddp_lint_original", real_new_group)

    def init_process_group(*args, **kwargs):
        b = _emu_bind(real_init_sig, args, kwargs)
        a = b.arguments
        requested = a.get("backend")
        kind = _emu_backend_kind(requested)
        bound = None
        if kind is not None:
            a["backend"] = "gloo"
            a.pop("pg_options", None)
            dev = a.pop("device_id", None)
            if dev is not None:
                bound = _emu_dev_index(dev)
                if bound is not None and bound < 0:
                    bound = None
            _log_event("emulation", what="init", requested_backend=None if requested is None else str(requested),
                       backend="gloo", group_kind=kind, device_id=bound, ngpus=st.ngpus)
        out = real_init(*b.args, **b.kwargs)
        st.inits += 1
        st.default_kind = kind
        if kind is not None:
            pg = _emu_default_group()
            if pg is not None:
                g = st.groups[pg] = _EmuGroup(kind, bound, _emu_group_key(pg))
                try:
                    import socket

                    st.store = c10d._get_default_store()
                    st.store.set(f"ddp_lint_emu/pid/{dist.get_rank()}", f"{socket.gethostname()}|{os.getpid()}")
                except Exception:
                    st.store = None
                if bound is not None:
                    # device_id= makes NCCL create its communicator now, on that device
                    _emu_check(pg, g, "init_process_group", bound, "the `device_id` given to init_process_group")
        return out

    def new_group(*args, **kwargs):
        b = _emu_bind(real_ng_sig, args, kwargs)
        a = b.arguments
        requested = a.get("backend")
        kind = _emu_backend_kind(requested) if requested is not None else st.default_kind
        bound = None
        if kind is not None:
            if requested is not None:
                a["backend"] = "gloo"
            a.pop("pg_options", None)
            dev = a.pop("device_id", None)
            if dev is not None:
                bound = _emu_dev_index(dev)
                if bound is not None and bound < 0:
                    bound = None
        pg = real_new_group(*b.args, **b.kwargs)
        if kind is not None and pg is not None and pg is not c10d.GroupMember.NON_GROUP_MEMBER:
            try:
                if bound is None:
                    dpg = _emu_default_group()
                    dg = st.groups.get(dpg)
                    bound = dg.bound if dg is not None else None
                st.groups[pg] = _EmuGroup(kind, bound, _emu_group_key(pg))
            except Exception:
                pass
        return pg

    for name, fn in (("init_process_group", init_process_group), ("new_group", new_group)):
        real = real_init if name == "init_process_group" else real_new_group
        fn.__wrapped__ = real
        fn.__doc__ = getattr(real, "__doc__", None)
        fn._ddp_lint_emulated = True
        for mod in (c10d, dist):
            if getattr(mod, name, None) is real:
                setattr(mod, name, fn)
    real_get_backend = dist.get_backend

    def get_backend(group=None):
        out = real_get_backend(group)
        g = st.groups.get(group or _emu_default_group())
        if g is not None and g.kind == "nccl" and not _internal(1):
            return "nccl"
        return out

    dist.get_backend = get_backend
    dist.is_nccl_available = lambda: True
    _PRE_COLLECTIVE_HOOKS.append(_emu_pre_collective)
    _emu_patch_ddp(torch)


def _internal(depth):
    try:
        return _is_internal(sys._getframe(depth + 1).f_code.co_filename)
    except ValueError:
        return False


def _emu_tensors(x, out, depth=0):
    torch = _EMU.torch
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)) and depth < 2:
        for y in x:
            _emu_tensors(y, out, depth + 1)
    elif depth < 2 and hasattr(x, "tensor") and hasattr(x, "op"):  # a P2POp
        _emu_tensors(x.tensor, out, depth + 1)
    return out


def _emu_pre_collective(op, args, kwargs, site):
    st = _EMU
    if st is None or op == "new_group" or op == "monitored_barrier":
        return
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    fn = getattr(c10d, op, None)
    fn = getattr(fn, "_ddp_lint_original", fn)
    try:
        a = _emu_bind(fn, args, kwargs).arguments
    except (TypeError, ValueError):
        return
    group = a.get("group")
    if group is None and op == "batch_isend_irecv":
        ops_ = a.get("p2p_op_list") or []
        group = getattr(ops_[0], "group", None) if ops_ else None
    pg = group if group is not None else _emu_default_group()
    g = st.groups.get(pg)
    if g is None:
        return
    try:
        if c10d._rank_not_in_group(pg):
            return
    except Exception:
        pass
    dev = None
    why = ""
    if op in _EMU_OBJECT_OPS:
        d = a.get("device")
        if d is not None:
            dev = _emu_dev_index(d)
            why = "the `device` given to it"
        elif g.kind == "nccl":
            dev = st.current()
            why = ("the object collectives pickle into a tensor on the *current* CUDA device, "
                   + ("set by torch.cuda.set_device" if getattr(st.tls, "set", False) else
                      "cuda:0 when torch.cuda.set_device was never called"))
        if dev is not None and dev < 0:
            dev = None
        if dev is not None:
            g.used.add(dev)  # they are tensor collectives underneath
    elif op == "barrier":
        ids = a.get("device_ids")
        if g.kind == "mixed":
            dev = None
        elif isinstance(ids, list) and ids:
            dev = _emu_dev_index(ids[0])
            why = "`device_ids` given to barrier"
        elif g.bound is not None:
            dev = g.bound
            why = "the `device_id` given to init_process_group"
        elif g.used:
            dev = min(g.used)
            why = "NCCL's barrier runs on the first device this group used"
        else:
            dev = pg.rank() % st.ngpus
            why = "NCCL's barrier guesses the device rank % device_count"
    else:
        names = _EMU_TENSOR_ARGS.get(op)
        if names is None:
            return
        ts = []
        for n in names:
            _emu_tensors(a.get(n), ts)
        cpu = [t for t in ts if getattr(t, _EMU_TAG, None) is None]
        if cpu and g.kind == "nccl":
            who = "a CPU tensor" if len(ts) == 1 else f"CPU tensors ({len(cpu)} of its {len(ts)})"
            err = EmulatedNcclError(
                f"No backend type associated with device type cpu: {op}() got {who} on a "
                "process group that has only the NCCL backend. Move the tensor to this rank's GPU "
                "(`.to(device)` / `.cuda()`), or create the group with backend \"cpu:gloo,cuda:nccl\"",
                code="DDP901", op=op, device="cpu", ranks=[dist.get_rank()], kind="cpu-tensor")
            if op not in _EMU_P2P_OPS:
                _emu_post(pg, g, None, op, site)  # let the other ranks go on: they fail on their own
            raise err
        tagged = [getattr(t, _EMU_TAG) for t in ts if getattr(t, _EMU_TAG, None) is not None]
        dev = tagged[0] if tagged else None
        why = "the device of the tensor passed to it"
        if dev is not None:
            g.used.add(dev)
    if op in _EMU_P2P_OPS:
        return  # only two ranks take part: no group-wide exchange
    _emu_check(pg, g, op, dev, why, site)


def _emu_post(pg, g, dev, op, site):
    st = _EMU
    g.seq += 1
    if st.store is None:
        return None
    line = (site or {}).get("line")
    key = f"ddp_lint_emu/{g.key}/{g.seq}/"
    try:
        st.store.set(key + str(pg.rank()), f"{'' if dev is None else dev}|{op}|{line or ''}")
    except Exception:
        return None
    return key


def _emu_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] != b"Z"  # a zombie has exited
    except OSError:
        return True


def _emu_peer_gone(keys, pg):
    """True when a rank whose entry is missing has ended (its exit marker, or its process is gone
    from this host)."""
    import socket
    import torch.distributed as dist

    st = _EMU
    store = st.store
    granks = dist.get_process_group_ranks(pg)
    host = None
    for k in keys:
        if store.check([k]):
            continue
        gr = granks[int(k.rsplit("/", 1)[1])]
        if store.check([f"ddp_lint_emu/exited/{gr}"]):
            return True
        pk = f"ddp_lint_emu/pid/{gr}"
        if store.check([pk]):
            h, _, pid = store.get(pk).decode().partition("|")
            host = host or socket.gethostname()
            if h == host and not _emu_alive(int(pid)):
                return True
    return False


def _emu_wait(keys, pg):
    """Wait for the other ranks' entries. False when a rank of the group has ended, or the wait
    outlasts the run's timeout: the caller then skips the check, and the real collective fails or
    hangs exactly as it would without the emulation."""
    st = _EMU
    store = st.store
    now = time.monotonic()
    deadline = now + st.wait_s
    next_probe = now + 0.25
    delay = 0.0002
    while True:
        try:
            if store.check(keys):  # polled: a timed-out store.wait() prints C++ warnings
                return True
            now = time.monotonic()
            if now > deadline:
                return False
            if now >= next_probe:
                next_probe = now + 0.25
                if _emu_peer_gone(keys, pg):
                    return False
        except Exception:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.01)


def _emu_check(pg, g, op, dev, why, site=None):
    """Exchange (group rank -> device) with the other ranks of ``pg`` and raise on a clash."""
    import torch.distributed as dist

    st = _EMU
    key = _emu_post(pg, g, dev, op, site)
    if key is None:
        return
    n = pg.size()
    me = pg.rank()
    keys = [key + str(r) for r in range(n)]
    if not _emu_wait(keys, pg):
        return  # a rank that never comes: the collective itself hangs or fails, and is reported so
    try:
        vals = st.store.multi_get(keys)
    except Exception:
        return
    try:
        if g.seq > 1:
            st.store.delete_key(f"ddp_lint_emu/{g.key}/{g.seq - 1}/{me}")
    except Exception:
        pass
    try:
        granks = dist.get_process_group_ranks(pg)
    except Exception:
        granks = list(range(n))
    by_dev = {}
    ops = {}
    for r, v in enumerate(vals):
        s = v.decode() if isinstance(v, bytes) else str(v)
        d, o, _line = (s.split("|") + ["", ""])[:3]
        ops[r] = o
        if d:
            by_dev.setdefault(int(d), []).append(r)
    clashes = {d: rs for d, rs in by_dev.items() if len(rs) > 1}
    if not clashes:
        return
    d, rs = min(clashes.items(), key=lambda kv: (me not in kv[1], kv[0]))
    ranks = [granks[r] for r in rs]
    names = ", ".join(map(str, ranks[:-1])) + f" and {ranks[-1]}"
    verb = "both use" if len(ranks) == 2 else "all use"
    other_ops = sorted({ops[r] for r in rs if ops[r] and ops[r] != op})
    extra = f" (while another rank is in {', '.join(o + '()' for o in other_ops)})" if other_ops else ""
    mine = "" if me in rs else f" This rank ({granks[me]}) is in the same group, so it fails with them."
    msg = (f"NCCL device clash: ranks {names} {verb} cuda:{d} for {op}(){extra}: {why}. "
           f"Two ranks of one NCCL group on one GPU: {_EMU_NCCL_MSG}.{mine} {_EMU_FIX}.")
    _log_event("emulation", what="clash", op=op, device=f"cuda:{d}", ranks=ranks, **(site or {}))
    raise EmulatedNcclError(msg, code="DDP905", op=op, device=f"cuda:{d}", ranks=ranks, kind="device-clash")


def _emu_patch_ddp(torch):
    from torch.nn.parallel import distributed as ddp_mod

    DDP = ddp_mod.DistributedDataParallel
    real = DDP.__init__

    def __init__(self, module, *args, **kwargs):
        b = _emu_bind(real, (self, module) + tuple(args), kwargs)
        a = b.arguments
        ids = a.get("device_ids")
        pg = a.get("process_group") or _emu_default_group()
        g = _EMU.groups.get(pg)
        params = [p for p in module.parameters()]
        tags = {getattr(p, _EMU_TAG, None) for p in params}
        mdev = next(iter(tags)) if len(tags) == 1 else None
        if ids is not None or a.get("output_device") is not None:
            if ids is not None and len(tags) == 1 and mdev is None and params:
                raise ValueError(
                    "DistributedDataParallel device_ids and output_device arguments only work with "
                    "single-device/multiple-device GPU modules or CPU modules, but got device_ids "
                    f"{list(ids)}, output_device {a.get('output_device')}, and module parameters "
                    "{device(type='cpu')}. (emulated: the module was never moved to its GPU)")
            a["device_ids"] = None
            a["output_device"] = None
        if g is not None:
            if params and mdev is None and None in tags and g.kind == "nccl":
                raise EmulatedNcclError(
                    "No backend type associated with device type cpu: "
                    "DistributedDataParallel got a module on the CPU with an NCCL-only process group. "
                    "Move the module to this rank's GPU first (`model.to(local_rank)`)",
                    code="DDP901", op="DistributedDataParallel", device="cpu", kind="cpu-tensor")
            dev = mdev
            if ids:
                k = _emu_dev_index(ids[0])
                dev = k if k is not None and k >= 0 else dev
            if dev is not None:
                g.used.add(dev)
            if a.get("init_sync", True):
                site = _caller_site(2) if "_caller_site" in globals() else None
                if ids:
                    why = "DistributedDataParallel broadcasts the module over NCCL on `device_ids[0]`"
                else:
                    why = ("DistributedDataParallel broadcasts the module over NCCL on the device of its "
                           "parameters" + ("" if getattr(_EMU.tls, "set", False) else
                                           "; `.cuda()` / `.to('cuda')` use the current device, cuda:0 "
                                           "when torch.cuda.set_device was never called"))
                _emu_check(pg, g, "DistributedDataParallel", dev, why, site)
        return real(*b.args, **b.kwargs)

    __init__.__wrapped__ = real
    DDP.__init__ = __init__
    real_sbn_handle = getattr(DDP, "_passing_sync_batchnorm_handle", None)
    if real_sbn_handle is not None:
        def _passing_sync_batchnorm_handle(self, module):
            if any(getattr(p, _EMU_TAG, None) is not None for p in module.parameters()):
                return None  # a module on an emulated GPU: SyncBatchNorm is allowed there
            return real_sbn_handle(self, module)

        DDP._passing_sync_batchnorm_handle = _passing_sync_batchnorm_handle
    SBN = torch.nn.SyncBatchNorm
    real_sbn_forward = SBN.forward
    base_forward = torch.nn.modules.batchnorm._BatchNorm.forward

    def sbn_forward(self, input):
        if getattr(input, _EMU_TAG, None) is not None and input.device.type == "cpu":
            _emu_note("syncbn", "SyncBatchNorm on the emulated GPUs runs as a per-rank BatchNorm: its "
                                "statistics are not synchronized across ranks, so its numbers differ "
                                "from a real run")
            return base_forward(self, input)
        return real_sbn_forward(self, input)

    SBN.forward = sbn_forward


def _emu_patch_misc(torch):
    st = _EMU
    try:
        from torch.utils._device import _device_constructors

        st.constructors = frozenset(_device_constructors())
    except Exception:
        pass
    real_set_default = torch.set_default_device
    real_get_default = torch.get_default_device

    def set_default_device(device):
        # a DeviceContext for "cuda" would make torch allocate on a GPU that is not there: the
        # emulation's mode puts the default device into the factories instead
        k = None if device is None else _emu_dev_index(device, check=False)
        if k is not None and k >= 0:
            dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
            st.default_dev = -2 if dev.index is None else _emu_dev_index(dev)
            return real_set_default(None)
        st.default_dev = None
        return real_set_default(device)

    def get_default_device():
        if st.default_dev is not None:
            return torch.device("cuda", st.current() if st.default_dev == -2 else st.default_dev)
        return real_get_default()

    real_gen = torch.Generator

    class _GeneratorMeta(type(real_gen)):
        def __instancecheck__(cls, obj):
            return isinstance(obj, real_gen)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, real_gen)

    class Generator(real_gen, metaclass=_GeneratorMeta):
        """torch.Generator(device="cuda") is a CPU generator under emulation."""

        def __new__(cls, device="cpu"):
            k = _emu_dev_index(device)
            if k is not None and k >= 0:
                _emu_note("rng", "CUDA random generators are not emulated: random tensors on the emulated "
                                 "GPUs come from CPU generators; torch.cuda.manual_seed*() and the CUDA RNG "
                                 "state functions are accepted and do nothing")
                device = "cpu"
            return super().__new__(cls, device)

    Generator.__name__ = Generator.__qualname__ = "Generator"
    Generator.__module__ = "torch"
    torch.Generator = Generator
    try:
        torch.cuda.default_generators = tuple(real_gen() for _ in range(st.ngpus))
    except Exception:
        pass

    set_default_device.__wrapped__ = real_set_default
    get_default_device.__wrapped__ = real_get_default
    torch.set_default_device = set_default_device
    torch.get_default_device = get_default_device
    Param = torch.nn.Parameter
    real_new = Param.__new__

    def __new__(cls, data=None, requires_grad=True):
        p = real_new(cls, data, requires_grad)
        k = getattr(data, _EMU_TAG, None)
        if k is not None:
            try:
                setattr(p, _EMU_TAG, k)
            except (AttributeError, TypeError):
                pass
        return p

    Param.__new__ = staticmethod(__new__)
    real_load = torch.load

    def load(f, map_location=None, *a, **k):
        ml = map_location
        if ml is None or isinstance(ml, (str, torch.device)) or isinstance(ml, dict):
            def remap(storage, location):
                return storage
            if isinstance(ml, (str, torch.device)) and _emu_dev_index(ml) == -1:
                remap = ml
            map_location = remap
        return real_load(f, map_location, *a, **k)

    load.__wrapped__ = real_load
    torch.load = load
    try:
        import torch.autograd as ag

        real_grad = ag.grad

        def grad(outputs, inputs, *a, **k):
            res = real_grad(outputs, inputs, *a, **k)
            ins = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
            for i, r in zip(ins, res):
                kk = getattr(i, _EMU_TAG, None)
                if kk is not None and r is not None:
                    setattr(r, _EMU_TAG, kk)
            return res

        grad.__wrapped__ = real_grad
        ag.grad = grad
    except Exception:
        pass
    import warnings

    warnings.filterwarnings("ignore", message=".*pin_memory.*no accelerator is found.*")
    warnings.filterwarnings("ignore", message=".*barrier\\(\\): using the device under current context.*")


def _emulation_install():
    """Install the CUDA/NCCL emulation in this rank (the shim calls this before the script runs)."""
    global _EMU
    if _EMU is not None:
        return
    import torch

    try:
        n = int(os.environ.get("DDP_LINT_EMU_NGPUS") or os.environ.get("LOCAL_WORLD_SIZE")
                or os.environ.get("WORLD_SIZE") or "1")
    except ValueError:
        n = 1
    st = _EMU = _EmuState(max(n, 1))
    st.torch = torch
    try:
        t = float(os.environ.get("DDP_LINT_TIMEOUT", ""))
        if t > 0:
            st.wait_s = t + 5.0
    except ValueError:
        pass
    if _TORCH_DIR is None:
        globals()["_TORCH_DIR"] = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
    _emu_patch_cuda(torch)
    _emu_patch_misc(torch)
    if torch.distributed.is_available():
        _emu_wrap_dist(torch)
    st.mode = _emu_make_mode(torch)
    st.mode.__enter__()
    import atexit

    def _mark_exited(pid=os.getpid()):
        # the other ranks stop waiting for this one's device entries (see _emu_wait)
        if os.getpid() == pid and st.store is not None:
            try:
                st.store.set(f"ddp_lint_emu/exited/{os.environ.get('RANK', '-1')}", "1")
            except Exception:
                pass

    atexit.register(_mark_exited)
    _log_event("emulation", what="installed", ngpus=st.ngpus, torch=torch.__version__)


# ================================ END EMULATION ==================================================


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
    script = os.path.abspath(argv[0])
    sys.argv = [script] + argv[1:]
    _whole_lines()
    # the interpreter put this shim's folder first on sys.path; the script's own folder belongs there
    script_dir = os.path.dirname(script)
    if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(_SHIM_FILE):
        sys.path[0] = script_dir
    else:
        sys.path.insert(0, script_dir)
    try:
        _setup_recording(script)
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
    _log_event("ready", py_stacks="py_stacks" in _KEEP)
    import runpy

    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        code = _exit_code(e.code)
        _log_event("exit", code=code, via="SystemExit", frames=_frames_of(e.__traceback__),
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
    site = _LAST_SITE
    _log_event("exit", code=0, via="return", frames=[site] if site else [])
    _teardown()
    return 0


def _whole_lines():
    """All ranks share one pipe. The runner sets PYTHONUNBUFFERED so output streams as it comes, but
    unbuffered text streams hand every piece of a ``print`` to the OS on its own ("RAN", " ", "0",
    "\\n"), so two ranks printing at once interleave mid-line ("RANRAN 1 0"). Line buffering still
    streams every line at once, and writes each line (up to the pipe's atomic size) in one piece."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name, None)
        try:
            stream.reconfigure(line_buffering=True, write_through=False)
        except Exception:  # replaced or closed by something else: leave it alone
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
