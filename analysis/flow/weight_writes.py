"""Where a program overwrites a module's parameters, on which ranks, and whether a broadcast
follows: the questions behind "the replicas' weights changed on some ranks after the wrap".

- ``weight_writes(view, scope)``: (node, module expression) of each write among ``scope``'s own
  nodes: ``m.load_state_dict(sd)``, ``torch.nn.init.<f>(m.weight)``, ``x.copy_(src)`` (also
  ``x.data.copy_``) where ``x`` is a module's parameter or a loop variable over ``m.parameters()``
  (``freezes.frozen_module`` names the module). Which module: the receiver as written; whether it
  is (read out of) a wrapper is ``freezes.wrapper_of``'s and ``wrapped.wrap_origins``' question.
- ``main_only(view, node)``: the write runs on the main rank only, by the tests inside its own
  function (``rank.rank0_guarded`` without the callers: an ``if rank == 0``, an early ``return``
  off the main rank, a project helper such as ``is_main_process()``).
- ``callee_writes(hub, view, call)``: the writes a project function that ``call`` runs makes on
  the module one of its parameters holds (``unwrap(model).backbone.load_state_dict(sd)``), as
  (the argument ``call`` passes, write node, callee view, main-only inside the callee).
- ``broadcast_after(hub, view, scope, line)``: a broadcast (``dist.broadcast``,
  ``broadcast_object_list``, a project helper that runs one: ``summaries``) in ``scope`` after
  ``line``: the main rank's weights may be sent to the others, nothing is claimed.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes
from .bindings import reaching
from .freezes import frozen_module, wrapper_of

_COPIES = frozenset({"copy_"})
_INIT = "torch.nn.init."
_BROADCASTS = frozenset({"broadcast", "broadcast_object_list", "_broadcast_coalesced", "sync_module_states",
                         "_sync_module_states", "_sync_params_and_buffers", "broadcast_coalesced"})


def weight_writes(view, scope) -> list:
    """(node, module expression) of each parameter write among the own nodes of ``scope``."""
    memo = view.memo.setdefault("weight_writes", {})
    got = memo.get(scope)
    if got is not None:
        return got
    out = []
    sem = view.sem
    for c in iter_scope_nodes(scope):
        if not isinstance(c, ast.Call):
            continue
        f = c.func
        if isinstance(f, ast.Attribute) and f.attr == "load_state_dict" and (c.args or c.keywords):
            out.append((c, f.value))
            continue
        qn = sem.call_qualname(c) or ""
        if qn.startswith(_INIT) and c.args:
            out.append((c, c.args[0]))
            continue
        if isinstance(f, ast.Attribute) and f.attr in _COPIES and c.args:
            recv = f.value
            if isinstance(recv, ast.Attribute) and recv.attr == "data":
                recv = recv.value
            if isinstance(recv, ast.Name):
                module, _loop = frozen_module(view, recv, c)
                if module is not None and module is not recv:
                    out.append((c, module))
            elif isinstance(recv, ast.Attribute):
                out.append((c, recv))
    memo[scope] = out
    return out


def main_only(view, node, ctx=None) -> bool:
    """``node`` runs on the main rank only, by the tests of its own function (``ctx``: the rule's
    context of the checked module, whose tests may read project functions of other modules:
    ``if ckpt is not None:`` of ``ckpt = latest_checkpoint(get_run_dir(cfg))``)."""
    from .rank import rank0_guarded  # lazy: rank reads rank_tests, which reads the flow helpers
    from .viewctx import view_ctx

    return rank0_guarded(ctx if ctx is not None else view_ctx(view), node, callers=False) is True


def callee_writes(hub, view, call) -> list:
    """(argument of ``call``, write node, callee view, main-only in the callee) of each write a
    project function ``call`` runs makes on (a submodule of) the module a parameter holds:
    ``wrapper_of`` in the callee names the parameter (``unwrap(model).backbone`` -> ``model``)."""
    from .calls import call_args

    out = []
    for cv, fn in hub.resolve_targets(view, call):
        if not isinstance(fn, FUNC_TYPES):
            continue
        args = dict(call_args(call, fn))
        if not args:
            continue
        for node, module in weight_writes(cv, fn):
            for w, _at, _below in wrapper_of(hub, cv, module, node) or ():
                if not (isinstance(w, ast.Name) and w.id in args):
                    continue
                kind, where = reaching(cv, w.id, node)
                if kind == "param" and where is fn:
                    out.append((args[w.id], node, cv, main_only(cv, node)))
                    break
    return out


def broadcast_after(hub, view, scope, line: int) -> bool:
    """A broadcast runs in ``scope`` after ``line`` (directly, or in a project function it calls)."""
    for s in hub.sites(view, scope):
        # (not the broadcast of buffers a DDP forward runs, nor ZeroRedundancyOptimizer's: they
        # send no parameters the main rank loaded)
        if s.node.lineno > line and any(e.op in _BROADCASTS and e.what.startswith("`") for e in s.effects):
            return True
    for c in iter_scope_nodes(scope):
        if isinstance(c, ast.Call) and c.lineno > line:
            f = c.func
            name = f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else "")
            if name in _BROADCASTS:
                return True
    return False
