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
  * manual data parallelism: a module never wrapped in DDP whose parameters' gradients the script
    all-reduces by hand (``for p in model.parameters(): dist.all_reduce(p.grad)``). A pre-collective
    hook on the first all-reduces (at most _MAX_LOOKS) looks for a ``Parameter`` among the caller's
    locals whose ``.grad`` is the reduced tensor, and the module that owns it; the module is then
    fingerprinted as a DDP model is, on the parameters whose gradients were all-reduced only
    (model-parallel shards, never reduced, are not compared), with the group each was reduced over.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
import types
import weakref

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # files in the run's private folder: never through a link
_MODELS = []  # [(weakref to the DDP module, index, site)]
_DONE = set()  # indexes already fingerprinted
_MAX_PARAMS = 4096


_LOG = None
_TORCH = None


def install(torch, c10d, caller_site, log_event, hooks=None):
    """Patch DDP and destroy_process_group (once); ``hooks``: the shim's pre-collective hooks."""
    global _LOG, _TORCH
    _LOG, _TORCH = log_event, torch
    if hooks is not None and _manual_grad_hook not in hooks:
        hooks.append(_manual_grad_hook)
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


# -- manual data parallelism ------------------------------------------------------------------------
_MANUAL = []  # [weakref to the module, index, site of its first gradient all-reduce, {param name: group}]
_MANUAL_OPS = ("all_reduce", "reduce", "all_reduce_coalesced")
_MAX_LOOKS = 512  # all-reduces looked at; none after (a long run pays nothing once past them)
_LOOKS = 0
_NAMES = {}  # id(module) -> (weakref, {id(param): name}): each module's parameters named once
MANUAL_BASE = 1 << 20  # their ``model`` indexes, apart from the DDP models'


def _grad_of(p, t):
    g = getattr(p, "grad", None)
    try:
        return g is not None and (g is t or (g.data_ptr() == t.data_ptr() and g.numel() == t.numel()))
    except Exception:
        return False


def _manual_grad_hook(op, args, kwargs, site):
    """Before an all-reduce: is its tensor the gradient of a parameter of a module no DDP wraps?"""
    global _LOOKS
    if op not in _MANUAL_OPS or _LOOKS >= _MAX_LOOKS or _TORCH is None:
        return
    _LOOKS += 1
    try:
        t = args[0] if args else kwargs.get("tensor", kwargs.get("tensors"))
        ts = list(t) if isinstance(t, (list, tuple)) else [t]
        ts = [x for x in ts if isinstance(x, _TORCH.Tensor) and not x.requires_grad]
        if not ts:
            return
        f = sys._getframe(1)
        while f is not None and not (f.f_code.co_filename == (site or {}).get("file")
                                     and f.f_lineno == (site or {}).get("line")):
            f = f.f_back
        Param, Module = _TORCH.nn.Parameter, _TORCH.nn.Module
        DDP = _TORCH.nn.parallel.DistributedDataParallel
        skip = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)
        for _ in range(3):  # the all-reduce's own frame and two callers
            if f is None:
                return
            loc = list(f.f_locals.values())[:256]
            params = [v for v in loc if isinstance(v, Param)]
            mods = [v for v in loc if isinstance(v, Module)]
            for v in loc:  # ``self.model``, ``trainer.net``: one attribute level
                if hasattr(v, "__dict__") and not isinstance(v, skip):
                    mods.extend(a for a in list(vars(v).values())[:64] if isinstance(a, Module))
            mods = [m for m in {id(m): m for m in mods}.values() if not isinstance(m, DDP)
                    and not any(r() is not None and getattr(r(), "module", None) is m for r, _, _ in _MODELS)]
            named = sorted((_names_of(m) + (m,) for m in mods), key=lambda e: -len(e[0]))  # the root module first
            for x in ts:
                hit = [p for p in params if _grad_of(p, x)]
                for names, pmap, m in named:
                    found = [pmap[id(p)] for p in hit if id(p) in pmap]
                    if not found and not hit and len(names) <= 2048:
                        found = [n for n, p in names if _grad_of(p, x)][:1]
                    if found:
                        _remember(m, found[0], site, args, kwargs)
                        break
            f = f.f_back
    except Exception:
        pass


def _names_of(m):
    got = _NAMES.get(id(m))
    if got is None or got[0]() is not m:
        names = list(m.named_parameters())
        got = _NAMES[id(m)] = (weakref.ref(m), names, {id(p): n for n, p in names})
    return got[1], got[2]


def _remember(m, name, site, args, kwargs):
    entry = next((e for e in _MANUAL if e[0]() is m), None)
    if entry is None:
        entry = (weakref.ref(m), MANUAL_BASE + len(_MANUAL), site, {})
        _MANUAL.append(entry)
    group = kwargs.get("group", args[2] if len(args) > 2 else None)
    ranks = None
    if group is not None:
        try:
            ranks = sorted(_TORCH.distributed.get_process_group_ranks(group))
            if ranks == list(range(_TORCH.distributed.get_world_size())):
                ranks = None
        except Exception:
            ranks = "?"
    entry[3].setdefault(name, ranks)


def _fingerprint_manual(torch, when):
    out = []
    for ref, idx, site, reduced in list(_MANUAL):
        m = ref()
        if m is None or idx in _DONE or not reduced:
            continue
        _DONE.add(idx)
        try:
            with torch.no_grad():
                params = [[n, _checksum(torch, p)] for n, p in list(m.named_parameters())[:_MAX_PARAMS] if n in reduced]
            out.append({"model": idx, "manual": True, "site": site, "when": when, "params": params,
                        "groups": {n: g for n, g in reduced.items() if g is not None}})
        except Exception as e:
            out.append({"model": idx, "manual": True, "site": site, "when": when, "error": repr(e)[:300]})
    return out


def fingerprint(torch, when):
    """One record per live DDP model not fingerprinted yet: [{model, site, when, params, synced, grads}],
    then one per module whose gradients were all-reduced by hand ({model, manual, site, when, params,
    groups})."""
    out = _fingerprint_manual(torch, when)
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
