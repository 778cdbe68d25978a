"""Which sampler a ``set_epoch`` call reaches: the questions behind "the epoch is set, but on
another object than the shuffling sampler".

- ``default_sampler_loaders(hub, view, recv, at, batch_sampler_of, callers)``: a receiver that
  holds only ``loader.sampler`` (also ``getattr(loader, "sampler", None)``, through names,
  helpers' parameters and their callers: ``origins``) of loaders built with ``batch_sampler=``
  and no ``sampler=``. There ``DataLoader.sampler`` is torch's default ``SequentialSampler``,
  which has no ``set_epoch``: the sampler given inside the batch sampler never hears of it.
  ``batch_sampler_of(view, call)`` (the rule's vocabulary of loaders) names the batch sampler of a
  loader construction that takes one and no sampler, else None.
- ``wrapped_samplers(hub, view, expr, at, is_sampler, callers)``: the samplers (``is_sampler``)
  a batch sampler value was built around (an argument of its construction, through names and
  helpers' returns), when no class of the construction's chain defines ``set_epoch`` or
  ``__getattr__`` (a wrapper that forwards the epoch, called elsewhere, is not judged).
- ``epoch_setters(view)``: the module's ``x.set_epoch(...)`` calls, but those inside a
  ``set_epoch`` method (a wrapper passing the epoch on).
- ``caller_views(hub, view, node, callers)``: the views of the project functions that run the
  function of ``node``, a few calls up (the modules that may set the epoch on its way).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from .origins import origins
from .records import class_chain

_MAX_LEAVES = 8
_FORWARDS = frozenset({"set_epoch", "__getattr__", "__getattribute__"})


def _sampler_read(e):
    """``obj`` of ``obj.sampler`` / ``getattr(obj, "sampler")`` / ``getattr(obj, "sampler", None)``;
    None for anything else (a default other than None too)."""
    if isinstance(e, ast.Attribute) and e.attr == "sampler" and isinstance(e.ctx, ast.Load):
        return e.value
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "getattr" and not e.keywords \
            and len(e.args) in (2, 3) and isinstance(e.args[1], ast.Constant) and e.args[1].value == "sampler" \
            and (len(e.args) == 2 or (isinstance(e.args[2], ast.Constant) and e.args[2].value is None)):
        return e.args[0]
    return None


def default_sampler_loaders(hub, view, recv, at, batch_sampler_of, callers=None) -> list | None:
    """(view, loader call, batch sampler expression) of each loader whose default sampler
    ``recv`` holds at ``at``, when every value it may hold is one (or None); else None."""
    out = []
    todo = [(view, recv, at)]
    leaves = []
    while todo:
        v, e, a = todo.pop()
        for lv, le in origins(hub, v, e, a, callers=callers):
            if isinstance(le, ast.Constant) and le.value is None:
                continue
            if isinstance(le, ast.BoolOp) and isinstance(le.op, ast.Or) and len(leaves) < _MAX_LEAVES:
                todo.extend((lv, x, le) for x in le.values)  # ``a or b``: either value
                continue
            leaves.append((lv, le))
            if len(leaves) > _MAX_LEAVES:
                return None
    for lv, le in leaves:
        obj = _sampler_read(le)
        if obj is None:
            return None
        found = origins(hub, lv, obj, le, callers=callers)
        if not found or len(found) > _MAX_LEAVES:
            return None
        for dv, d in found:
            bs = batch_sampler_of(dv, d) if isinstance(d, ast.Call) else None
            if bs is None:
                return None
            out.append((dv, d, bs))
    return out or None


def wrapped_samplers(hub, view, expr, at, is_sampler, callers=None) -> list:
    """(view, sampler call) of the samplers the batch sampler ``expr`` holds at ``at`` was built
    around; empty when one of its constructions may forward ``set_epoch`` or is unknown."""
    out = []
    got = origins(hub, view, expr, at, callers=callers)
    if not got or len(got) > _MAX_LEAVES:
        return []
    for bv, b in got:
        if not isinstance(b, ast.Call):
            return []
        cls = hub.resolve_class(bv, b.func)
        if cls is not None and any(isinstance(f, FUNC_TYPES) and f.name in _FORWARDS
                                   for _cv, c in class_chain(hub, *cls) for f in c.body):
            return []
        for a in (*b.args, *(k.value for k in b.keywords)):
            for sv, s in origins(hub, bv, a, b, callers=callers)[:_MAX_LEAVES]:
                if isinstance(s, ast.Call) and is_sampler(sv, s):
                    out.append((sv, s))
    return out


def epoch_setters(view) -> list:
    """The module's ``x.set_epoch(...)`` calls outside ``set_epoch`` methods."""
    out = []
    for c in view.sem.calls:
        if not (isinstance(c.func, ast.Attribute) and c.func.attr == "set_epoch"):
            continue
        fn = view.sem.enclosing_function(c)
        if fn is not None and fn.name == "set_epoch":
            continue
        out.append(c)
    return out


def caller_views(hub, view, node, callers=None, depth: int = 3) -> list:
    """The views whose functions call the function of ``node``, ``depth`` calls up (``callers``:
    ``origins``' own, for calls in other modules)."""
    out, seen = [], set()
    todo = [(view, view.sem.enclosing_function(node), 0)]
    while todo:
        v, fn, d = todo.pop()
        if fn is None or id(fn) in seen or d >= depth:
            continue
        seen.add(id(fn))
        if isinstance(parent(fn), ast.ClassDef) and fn.name == "__init__":
            continue
        sites = [(v, s) for s in hub.call_sites(v, fn)] + (list(callers(v, fn)) if callers is not None else [])
        for sv, s in sites[:_MAX_LEAVES]:
            if all(sv is not o for o in out):
                out.append(sv)
            todo.append((sv, sv.sem.enclosing_function(s), d + 1))
    return out


def misdirected_set_epoch(hub, view, call, batch_sampler_of, is_sampler, callers=None):
    """(loader view, loader call, sampler view, sampler call) when the ``set_epoch`` ``call`` of
    ``view`` reaches only the default sampler of loaders given a batch sampler built around a
    sampler ``is_sampler`` accepts, and no other ``set_epoch`` of the modules on the way (this
    one, the loader's, the sampler's, the callers' a few calls up) may reach it; else None."""
    got = default_sampler_loaders(hub, view, call.func.value, call, batch_sampler_of, callers)
    if got is None:
        return None
    inner = [s for lv, ld, bs in got for s in wrapped_samplers(hub, lv, bs, ld, is_sampler, callers)]
    if not inner:
        return None
    views = {id(v): v for v in (view, got[0][0], *(v for v, _s in inner), *caller_views(hub, view, call, callers))}
    for v in views.values():
        for c in epoch_setters(v):
            if c is not call and default_sampler_loaders(hub, v, c.func.value, c, batch_sampler_of, callers) is None:
                return None
    return got[0][0], got[0][1], inner[0][0], inner[0][1]
