"""Which values are the parameters of a sharded module: a module given to ``fully_shard`` or
``parallelize_module``, whose parameters are DTensors sharded over the ranks (FSDP2 shards dim 0
in ``torch.chunk`` pieces, uneven when the size is not a multiple of the mesh size).

``params_modules`` follows an iterable of parameters to the modules they belong to
(``m.parameters()``, ``list(...)`` / ``filter(...)`` / a comprehension of it, names and a
helper's parameters to its callers' arguments); ``over_sharded_params`` asks it of the target of a
``for`` or a comprehension; ``sharded_param`` of a single value: a loop target over such
parameters, or a helper's parameter that every call passes one (in other modules too,
``callers`` as ``origins`` takes it).
"""
from __future__ import annotations

import ast

from ..semantic import parent, param_names
from .calls import call_args
from .hidden import PARALLELIZE, is_fsdp2, is_tp
from .origins import holds_call, origins, qn_pred


def params_modules(an, view, expr, at, seen=None, callers=None):
    """(view, module) pairs whose parameters ``expr`` is: ``m.parameters()`` /
    ``m.named_parameters()``, ``list(...)``/``filter(...)`` of it or a comprehension over it, or a
    name bound to one of those (through a parameter, to its callers' arguments; ``callers`` as
    ``origins`` takes it); None when some origin is not one (also for a name bound from itself,
    ``params = list(params)``: each binding is followed once)."""
    seen = set() if seen is None else seen
    if id(expr) in seen:
        return None
    seen.add(id(expr))
    if isinstance(expr, (ast.Name, ast.Attribute)):
        got = origins(an, view, expr, at, callers=callers)
        if not got or len(got) > 8:
            return None
        out = []
        for v, e in got:
            more = params_modules(an, v, e, e, seen, callers)
            if more is None:
                return None
            out.extend(more)
        return out
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("list", "filter", "tuple") \
            and expr.args and not expr.keywords:
        return params_modules(an, view, expr.args[-1], at, seen, callers)
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)) and len(expr.generators) == 1:
        g = expr.generators[0]
        if isinstance(expr.elt, ast.Name) and isinstance(g.target, ast.Name) and expr.elt.id == g.target.id:
            return params_modules(an, view, g.iter, at, seen, callers)
        return None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "parameters":
        return [(view, expr.func.value)]
    return None


def over_sharded_params(an, view, name, at, callers, tp: bool = True) -> bool:
    """``name`` is the target of a ``for`` / comprehension over the parameters of modules whose
    parameters are DTensors (given to ``fully_shard`` or ``parallelize_module``):
    ``X.parameters()`` / ``X.named_parameters()``, or a value made of them (``params_modules``)."""
    p = parent(at)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
        gens = p.generators if isinstance(p, (ast.ListComp, ast.GeneratorExp, ast.SetComp)) else (
            [p] if isinstance(p, ast.For) else [])
        for g in gens:
            t, it = g.target, g.iter
            if isinstance(t, ast.Tuple) and t.elts:
                if _called(it, "zip") and len(it.args) == len(t.elts) and not it.keywords:
                    # ``for p, old in zip(params, snapshot)``: the element of the matching iterable
                    i = next((k for k, x in enumerate(t.elts) if isinstance(x, ast.Name) and x.id == name), None)
                    if i is None:
                        continue
                    t, it = t.elts[i], it.args[i]
                else:  # ``for name, p in m.named_parameters()`` / ``for i, p in enumerate(params)``
                    t = t.elts[-1]
                    if _called(it, "enumerate") and it.args:
                        it = it.args[0]
            if not (isinstance(t, ast.Name) and t.id == name):
                continue
            if isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr == "named_parameters":
                mods = [(view, it.func.value)]
            else:
                mods = params_modules(an, view, it, at, callers=callers)
            return bool(mods) and all(sharded_module(an, v, m, callers, tp) for v, m in mods)
        p = parent(p)
    return False


def sharded_module(an, view, mod, callers, tp: bool = True) -> bool:
    """``mod`` holds a module whose parameters are DTensors: given to ``fully_shard`` or
    ``parallelize_module`` (in place, by a helper, or bound from what either returns, also through
    a helper's return or a tuple)."""
    if is_fsdp2(an, view, mod, mod, callers):
        return True
    if not tp:
        return False
    if is_tp(an, view, mod, mod, callers):
        return True
    return holds_call(an, view, mod, mod, qn_pred(*PARALLELIZE), callers=callers) is not None



def sharded_param(an, view, expr, at, callers=None, depth: int = 0, tp: bool = True) -> bool:
    """``expr`` (a name) is a parameter of a sharded module: the target of a loop or a comprehension
    over such parameters (``over_sharded_params``), or a parameter of its function that every call
    passes one (``wrap_like(local, p)`` inside such a loop; calls in this module and, with
    ``callers``, in the project's other modules; at least one call, all of them followed).
    ``tp=False``: FSDP2's sharding only, not tensor parallel's."""
    if depth > 3 or not isinstance(expr, ast.Name):
        return False
    if over_sharded_params(an, view, expr.id, at, callers, tp):
        return True
    fn = view.sem.enclosing_function(at)
    if fn is None or expr.id not in param_names(fn):
        return False
    sites = [(view, c) for c in view.sem.calls if an.resolve_call(view, c) == (view, fn)]
    if callers is not None:
        sites += list(callers(view, fn))
    if not sites or len(sites) > 8:
        return False
    for sv, c in sites:
        arg = dict(call_args(c, fn)).get(expr.id)
        if arg is None or not sharded_param(an, sv, arg, c, callers, depth + 1, tp):
            return False
    return True


def _called(e, name: str) -> bool:
    """``e`` is a call of the builtin ``name`` (``zip(...)``, ``enumerate(...)``)."""
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == name
