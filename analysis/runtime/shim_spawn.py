"""ddp-lint rank shim, part 5: the processes of a self-spawning script. Runs INSIDE each child.

A script that starts its own ranks (``torch.multiprocessing.spawn``, ``start_processes``, a
``multiprocessing`` launcher) runs as one plain process (shim.py with DDP_LINT_SHIM_ROLE=spawn-parent,
its log is ``rank-main``). Every Python child of the run finds, first on its path, the run's
``sitecustomize.py`` (written by analysis/runtime/launcher.py into the run's private folder, active
only with this run's DDP_LINT_RUN_ID and DDP_LINT_SELF_SPAWN=1), which loads this file by path and
calls :func:`child`. The child records like a torchrun rank, under the tag ``p<pid>`` until its
``init_process_group`` returns; then its files are renamed to its rank. Stdlib + torch only.
"""
from __future__ import annotations

import os
import sys


def child():
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shim.py")
    spec = importlib.util.spec_from_file_location("_ddp_lint_shim", path)
    shim = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = shim
    spec.loader.exec_module(shim)
    tag = f"p{os.getpid()}"
    shim._setup_recording(os.environ.get("DDP_LINT_SCRIPT"), tag)
    shim._POST_INIT_HOOKS.append(lambda: _adopt_rank(shim, tag))
    try:
        shim._watch_for_orphaning()
    except Exception:
        pass
    if os.environ.get("DDP_LINT_EMULATE") == "1":
        shim._emulation_install()
    _record_end(shim)
    shim._log_event("ready", py_stacks="py_stacks" in shim._KEEP)


def _adopt_rank(shim, tag):
    """The child is rank r from now on: its files get the names the launcher's reader looks for."""
    if shim._RANK is not None and shim._RANK >= 0:
        return
    import torch.distributed as dist

    r = dist.get_rank()
    d = os.environ.get("DDP_LINT_LOG_DIR") or ""
    for name in (f"rank-{tag}.jsonl", f"stack-{tag}.fatal", f"stack-{tag}.usr1", f"stack-{tag}.term", f"seen-{tag}"):
        try:
            os.rename(os.path.join(d, name), os.path.join(d, name.replace(tag, str(r), 1)))
        except OSError:
            pass
    shim._RANK = r


def _record_end(shim):
    """The child's function ends inside multiprocessing (and torch's _wrap catches its exception):
    record its exception or its end, as shim.main does for a torchrun rank."""
    done = []

    def exc(e):
        if not done:
            done.append(1)
            shim._log_event("exception", **shim._exception_record(e), exit_code=1)

    try:
        import torch.multiprocessing.spawn  # noqa: F401  (the attribute is the function; the module is in sys.modules)

        tms = sys.modules["torch.multiprocessing.spawn"]

        orig_wrap = tms._wrap

        def _wrap(fn, i, args, error_file):
            def recorded(*a):
                try:
                    return fn(*a)
                except Exception as e:
                    exc(e)
                    raise

            return orig_wrap(recorded, i, args, error_file)

        tms._wrap = _wrap
    except Exception:
        pass
    import multiprocessing.process as mpp

    orig_run = mpp.BaseProcess.run

    def run(self):
        try:
            out = orig_run(self)
        except SystemExit as e:
            if not done:
                done.append(1)
                code = shim._exit_code(e.code)
                ctx = e.__context__  # the error a handler ended with sys.exit
                shim._log_event("exit", code=code, via="SystemExit", frames=shim._frames_of(e.__traceback__),
                                context=shim._exception_record(ctx) if ctx is not None else None)
            raise
        except BaseException as e:
            exc(e)
            raise
        if not done:
            done.append(1)
            site = shim._LAST_SITE
            shim._log_event("exit", code=0, via="return", frames=[site] if site else [])
        return out

    mpp.BaseProcess.run = run
