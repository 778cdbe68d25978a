"""ddp-lint rank shim, part 4: the "last seen" sampler, argparse errors, and the silent-divergence
checks (DDP906, DDP907).
Runs INSIDE each rank.

Loaded by path by shim.py (``_patch_torch``); stdlib + torch only, imports nothing from ddp-lint.
Nothing here runs per step beyond one counter in DDP's ``_pre_forward``:
  * DistributedDataParallel.__init__ remembers each DDP model (weakly) and where it was wrapped;
  * DistributedDataParallel._pre_forward counts the forwards after which backward all-reduces the
    gradients (gradient sync on, grad enabled); DistributedDataParallel.no_sync remembers where it
    was first entered and counts its entries (once per ``with``);
  * at destroy_process_group (before it) and at the script's normal end, each live DDP model is
    fingerprinted once: a checksum per parameter, whether any parameter has a gradient, and the
    counter. shim.py logs it as a ``ddp_state`` record; analysis/runtime/findings.py compares ranks.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
import weakref

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # files in the run's private folder: never through a link
_MODELS = []  # [(weakref to the DDP module, index, site)]
_DONE = set()  # indexes already fingerprinted
_MAX_PARAMS = 4096


_LOG = None
_TORCH = None


def install(torch, c10d, caller_site, log_event):
    """Patch DDP and destroy_process_group (once)."""
    global _LOG, _TORCH
    _LOG, _TORCH = log_event, torch
    orig_destroy = c10d.destroy_process_group

    @functools.wraps(orig_destroy)
    def destroy_process_group(group=None):
        if group is None:
            log_states("destroy_process_group")
        return orig_destroy(group)

    for m in (c10d, sys.modules.get("torch.distributed")):
        if m is not None and getattr(m, "destroy_process_group", None) is orig_destroy:
            m.destroy_process_group = destroy_process_group
    DDP = torch.nn.parallel.DistributedDataParallel
    if getattr(DDP, "_ddp_lint_checks", False):
        return
    real_init = DDP.__init__
    real_pre = DDP._pre_forward

    @functools.wraps(real_init)
    def __init__(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        try:
            self._ddp_lint_synced = 0
            _MODELS.append((weakref.ref(self), len(_MODELS), caller_site(2)))
        except Exception:
            pass

    @functools.wraps(real_pre)
    def _pre_forward(self, *inputs, **kwargs):
        if self.require_backward_grad_sync and torch.is_grad_enabled():
            self._ddp_lint_synced = getattr(self, "_ddp_lint_synced", 0) + 1
        return real_pre(self, *inputs, **kwargs)

    real_no_sync = DDP.no_sync

    @functools.wraps(real_no_sync)
    def no_sync(self, *args, **kwargs):
        try:  # where no_sync() was first entered, and how often (DDP907 goes there when nothing synced)
            if getattr(self, "_ddp_lint_no_sync", None) is None:
                self._ddp_lint_no_sync = caller_site(2)
            self._ddp_lint_no_sync_n = getattr(self, "_ddp_lint_no_sync_n", 0) + 1
        except Exception:
            pass
        return real_no_sync(self, *args, **kwargs)

    DDP.__init__ = __init__
    DDP._pre_forward = _pre_forward
    DDP.no_sync = no_sync
    DDP._ddp_lint_checks = True


_SEEN_S = 0.2  # how often the "last seen" sampler looks at the main thread


def start_seen_sampler(log_dir, tag, lib_dirs, _is_internal):
    """Every _SEEN_S, the main thread's innermost frame outside the stdlib, the installed packages,
    torch and this shim is written over the fixed-size file seen-<RANK>: a
    rank killed outright (SIGKILL, the OOM killer) leaves no traceback and no stack, but this says
    where it was last seen. One pwrite(2) per sample; nothing in the rank's own thread."""
    libs = tuple(os.path.join(p, "") for p in lib_dirs)
    fd = os.open(os.path.join(log_dir, f"seen-{tag}"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, 0o600)
    main_id = threading.main_thread().ident

    def user(f):
        while f is not None:
            fn = f.f_code.co_filename
            if not (fn.startswith("<") or _is_internal(fn) or fn.startswith(libs)):
                return f
            f = f.f_back
        return None

    def run():
        last, since = None, 0.0
        while True:
            time.sleep(_SEEN_S)
            try:
                f = user(sys._current_frames().get(main_id))
                if f is None:
                    continue
                key = (f.f_code.co_filename, f.f_lineno)
                now = time.time()
                if key != last:
                    last, since = key, now
                # rewritten on every sample (t: seen there now; since: there since), so that a rank
                # killed after a long time on one line is not reported as last seen long ago
                data = json.dumps({"file": key[0], "line": key[1], "function": f.f_code.co_name, "t": now,
                                   "since": since})
                data = data.encode("utf-8", "replace")[:4000].ljust(4096) + b"\n"
                os.pwrite(fd, data, 0)
            except Exception:
                pass

    threading.Thread(target=run, daemon=True, name="ddp-lint-seen").start()


def patch_argparse(_log_event, _caller_site):
    """An argparse error (``the following arguments are required: --local_rank``) is logged as a
    note before argparse exits with status 2, so the finding can say it."""
    try:
        import argparse
    except ImportError:
        return
    orig = argparse.ArgumentParser.error

    @functools.wraps(orig)
    def error(self, message):
        try:
            _log_event("argparse", message=str(message)[:2000], prog=str(getattr(self, "prog", ""))[:200],
                       site=_caller_site(2))
        except Exception:
            pass
        return orig(self, message)

    argparse.ArgumentParser.error = error


def _checksum(torch, t):
    """An exact checksum of a tensor's bytes (position-weighted, so swapped values differ)."""
    t = t.detach().to("cpu").contiguous().reshape(-1)
    size = t.element_size()
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(size)
    if view is None or t.numel() == 0:
        return f"{tuple(t.shape)}"
    bits = t.view(view).to(torch.int64)
    w = torch.arange(1, bits.numel() + 1, dtype=torch.int64) % 1000003 + 1
    return f"{int((bits * w).sum()) & 0xFFFFFFFFFFFF:012x}{int(bits.sum()) & 0xFFFF:04x}"


def fingerprint(torch, when):
    """One record per live DDP model not fingerprinted yet: [{model, site, when, params, synced, grads}]."""
    out = []
    for ref, idx, site in list(_MODELS):
        m = ref()
        if m is None or idx in _DONE:
            continue
        _DONE.add(idx)
        try:
            with torch.no_grad():
                params, grads = [], False
                for name, p in list(m.module.named_parameters())[:_MAX_PARAMS]:
                    params.append([name, _checksum(torch, p)])
                    grads = grads or p.grad is not None
            out.append({"model": idx, "site": site, "when": when, "params": params,
                        "synced": getattr(m, "_ddp_lint_synced", 0), "grads": grads,
                        "no_sync": getattr(m, "_ddp_lint_no_sync", None),
                        "no_sync_n": getattr(m, "_ddp_lint_no_sync_n", 0)})
        except Exception as e:  # never fail the user's script for a check
            out.append({"model": idx, "site": site, "when": when, "error": repr(e)[:300]})
    return out


def log_states(when):
    """Fingerprint the live DDP models and log them (``ddp_state`` records); never raises."""
    if _LOG is None:
        return
    try:
        for rec in fingerprint(_TORCH, when):
            _LOG("ddp_state", **rec)
    except Exception:
        pass
