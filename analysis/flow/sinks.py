"""Parameter sinks: which parameters of a function reach the argument of a collective.

``param_sinks(hub, view, fn, table)`` answers, for a function of this project (this file or
another one), which of its parameters it passes *as they are* to a collective of ``table``
(``{op: (position, keyword)}``): ``reduce_mean(value)`` whose body runs ``dist.all_reduce(value)``.
It follows helpers of helpers (``log(x)`` -> ``reduce_mean(x)``), across files, to a small depth.
A parameter the function tests or converts (``isinstance(value, torch.Tensor)``,
``torch.as_tensor(value)``) or rebinds before the collective is not a sink: unknown never
produces a finding.

Shape sinks (``shape_sinks``) are the same question for DDP109: which parameters decide, by their
value or their shape, the shape of a tensor a collective gets.
"""
from __future__ import annotations

import ast

from ..torch_api import D
from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from .assignments import under_try
from .bindings import reaching
from .shape_facts import Sh
from .shapes import Shapes, shapes_of
from .helper_calls import bind_args, callee_name, helper_calls, may_import_project, may_resolve, resolved
from .summaries import Effect, on_subgroup, scope_calls

_CHECKS = frozenset({"isinstance", "is_tensor", "as_tensor", "tensor", "from_numpy", "Tensor", "FloatTensor",
                     "LongTensor", "hasattr", "type", "torch.is_tensor", "to_tensor", "scalar_tensor"})
_MAX_DEPTH = 4


class Sink:
    """``param`` reaches ``effect`` (the collective, with the chain of helpers in ``effect.via``):
    as it is, or (``method``) through a tensor-only method first (``rt = tensor.clone()``)."""

    __slots__ = ("param", "effect", "method")

    def __init__(self, param: str, effect: Effect, method: str | None = None):
        self.param, self.effect, self.method = param, effect, method


# methods a tensor has and a Python number does not: calling one on a number raises AttributeError
TENSOR_ONLY = frozenset({"clone", "detach", "cuda", "to", "contiguous", "div_", "mul_", "add_", "sub_",
                         "clamp_", "zero_", "fill_", "copy_", "cpu", "float", "half", "double", "long",
                         "div", "mul", "sum", "mean", "reshape", "view", "unsqueeze", "flatten"})


def _checked_params(view, fn) -> frozenset:
    """Parameters ``fn`` tests or converts anywhere (``isinstance(p, ...)``, ``torch.tensor(p)``)."""
    memo = view.memo.setdefault("sinks.checked", {})
    got = memo.get(id(fn))
    if got is None:
        params = set(param_names(fn))
        found = set()
        for c in scope_calls(view, fn):
            f = c.func
            name = f.id if isinstance(f, ast.Name) else (f.attr if isinstance(f, ast.Attribute) else None)
            if name in _CHECKS:
                for a in c.args[:1]:
                    if isinstance(a, ast.Name) and a.id in params:
                        found.add(a.id)
        got = memo[id(fn)] = frozenset(found)
    return got


def _param_of(view, fn, expr) -> str | None:
    """``expr`` is a parameter of ``fn`` that nothing rebinds before it is read there."""
    if not isinstance(expr, ast.Name):
        return None
    kind, got = reaching(view, expr.id, expr)
    if kind == "param" and got is fn:
        return expr.id
    return None


def _through_method(view, fn, expr, depth: int = 0):
    """(parameter, method) when ``expr`` is a tensor-only method called on a parameter
    (``value.clone()``), or a name bound once to one (``rt = tensor.clone()``), else None."""
    if depth > 2:
        return None
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in TENSOR_ONLY:
        recv = expr.func.value
        p = _param_of(view, fn, recv)
        if p is not None:
            return p, expr.func.attr
        return _through_method(view, fn, recv, depth + 1)
    if isinstance(expr, ast.Name):
        kind, evs = reaching(view, expr.id, expr)
        if kind == "events" and evs and all(isinstance(e, (ast.Assign, ast.AugAssign, ast.Call)) for e in evs):
            first = [e for e in evs if isinstance(e, ast.Assign)]
            if len(first) == 1 and len(first[0].targets) == 1 and isinstance(first[0].targets[0], ast.Name):
                return _through_method(view, fn, first[0].value, depth + 1)
    return None


def param_sinks(hub, view, fn, table: dict, key: str, depth: int = 0) -> tuple[Sink, ...]:
    """The parameters of ``fn`` passed as they are to a collective of ``table``; ``key`` names
    the table in the memo (one memo per rule)."""
    memo = view.memo.setdefault("sinks." + key, {})
    mkey = (id(fn), depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    got = memo.get(mkey)
    if got is not None:
        return got
    if depth > _MAX_DEPTH or not isinstance(fn, FUNC_TYPES):
        return ()
    memo[mkey] = ()  # recursion guard
    hub._view_stack.append(view)
    try:
        out = _compute(hub, view, fn, table, key, depth)
    finally:
        hub._view_stack.pop()
    memo[mkey] = out
    return out


def helper_sink_args(ctx, an, table: dict, op_qns, key: str):
    """The arguments of this file's calls of project helpers that pass a parameter on to a
    collective (``param_sinks``): ``(call, callee name, sink, argument, scope of the call)`` for every
    sink the call binds an argument to. ``op_qns``: the collectives' qualified names, to know whether
    the file makes any itself. One walk that the rules asking "what reaches a collective's tensor
    through a helper" (DDP105, DDP111) share."""
    view = an.main
    by_qn = ctx.sem.calls_by_qualname
    local = any(by_qn.get(qn) for qn in op_qns) or may_import_project(view)
    for call in helper_calls(view, ctx.sem.calls, local, an, table, ctx=ctx):
        target = resolved(an, view, call)
        if target is None:
            continue
        sinks = param_sinks(an, *target, table, key)
        if not sinks:
            continue
        args = bind_args(call, target[1])
        scope = ctx.sem.scope_of(call)
        name = callee_name(target)
        for sink in sinks:
            arg = args.get(sink.param)
            if arg is not None:
                yield call, name, sink, arg, scope


def _compute(hub, view, fn, table, key, depth):
    sem = view.sem
    checked = _checked_params(view, fn)
    out: list[Sink] = []
    seen = set()
    for c in scope_calls(view, fn):
        if len(out) >= 6:
            break
        # the cheap rejects by name first; then whether the call sits under a ``try`` (a walk up)
        qn = sem.call_qualname(c) or ""
        if qn.startswith(D):
            op = qn[len(D):]
            spec = table.get(op)
            if spec is None or under_try(c, fn) or on_subgroup(c, op):
                continue
            arg = get_arg(c, *spec)
            p, method = _param_of(view, fn, arg), None
            if p is None and arg is not None:
                p, method = _through_method(view, fn, arg) or (None, None)
            if p is not None and p not in checked and p not in seen:
                seen.add(p)
                out.append(Sink(p, Effect(op, c, view.path), method))
            continue
        if qn.startswith(("torch.", "numpy.", "math.")) or not may_resolve(view, c) or under_try(c, fn):
            continue
        target = resolved(hub, view, c)
        if target is None or target[1] is fn:
            continue
        inner = param_sinks(hub, target[0], target[1], table, key, depth + 1)
        if not inner:
            continue
        args = bind_args(c, target[1])
        name = callee_name(target)
        for s in inner:
            p = _param_of(view, fn, args.get(s.param))
            if p is not None and p not in checked and p not in seen:
                seen.add(p)
                out.append(Sink(p, s.effect.through(name), s.method))
    return tuple(out)


# -- shape sinks (DDP109): a parameter whose value or shape decides a collective tensor's shape --

# collective -> (position, keyword) of the tensor whose shape must match across ranks
SHAPED = {
    "all_gather": (1, "tensor"), "all_gather_into_tensor": (1, "input_tensor"),
    "_all_gather_base": (1, "input_tensor"), "all_reduce": (0, "tensor"),
    "reduce_scatter": (0, "output"), "reduce_scatter_tensor": (1, "input"),
}


class ShapeSink:
    """Parameter ``param`` of a function decides (``mode``: its value as a size, or its shape)
    the shape of the tensor that ``effect``'s collective gets."""

    __slots__ = ("param", "mode", "effect")

    def __init__(self, param, mode, effect):
        self.param, self.mode, self.effect = param, mode, effect


def shaped_calls(view, scope):
    """(call, op, tensor argument) for the shaped collectives directly in ``scope``."""

    out = []
    for c in scope_calls(view, scope):
        qn = view.sem.call_qualname(c) or ""
        if not qn.startswith(D):
            continue
        op = qn[len(D):]
        spec = SHAPED.get(op)
        if spec is None or on_subgroup(c, op):
            continue
        t = get_arg(c, *spec)
        if t is not None and not per_rank_buffers(view, c, op):
            out.append((c, op, t))
    return out


def per_rank_buffers(view, call, op) -> bool:
    """``all_gather(bufs, t)`` whose receive buffers are built here one per rank, each sized from
    that rank's item of a sequence (``[t.new_empty(int(n), d) for n in sizes]``, or a loop
    ``for n in sizes: bufs.append(...)`` with ``n`` in the size): the sizes were exchanged first
    and the gather is uneven on purpose (torch supports uneven ``all_gather`` output sizes), so the
    rank-varying shape of ``t`` is no finding. Buffers that copy the local tensor
    (``torch.zeros_like(t)`` for every rank) are not per rank."""
    if op != "all_gather":
        return False
    out = get_arg(call, 0, "tensor_list")
    if isinstance(out, ast.Name):
        kind, evs = reaching(view, out.id, out)
        if kind != "events" or not evs or len(evs) != 1:
            return False
        ev = evs[0]
        if isinstance(ev, ast.Assign) and len(ev.targets) == 1 and isinstance(ev.targets[0], ast.Name):
            out = ev.value
            if isinstance(out, ast.List) and not out.elts:
                return _appended_per_item(view, ev, ev.targets[0].id)
        else:
            return False
    if isinstance(out, (ast.ListComp, ast.GeneratorExp)):
        return _per_item(out.elt, [g.target for g in out.generators])
    return False


def _per_item(elt, targets) -> bool:
    """``elt`` reads a name the loop/comprehension ``targets`` bind (in a size, not as the
    tensor it copies: ``zeros_like(x)`` for ``x`` in a list of tensors is a copy per rank too)."""
    names = {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    if not names or not isinstance(elt, ast.Call):
        return False
    if isinstance(elt.func, ast.Name) or (isinstance(elt.func, ast.Attribute) and elt.func.attr.endswith("_like")):
        copied = elt.args[0] if elt.args else None
        if isinstance(copied, ast.Name) and copied.id in names:
            return False
    return any(isinstance(n, ast.Name) and n.id in names for a in (*elt.args, *(k.value for k in elt.keywords))
               for n in ast.walk(a))


def _appended_per_item(view, assign, name) -> bool:
    """``bufs = []`` then ``for n in sizes: bufs.append(<sized by n>)`` in the same function."""
    scope = view.sem.scope_of(assign)
    found = False
    for c in scope_calls(view, scope):
        f = c.func
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == name):
            continue
        if f.attr != "append" or not c.args:
            return False
        loop = parent(c)
        while loop is not None and not isinstance(loop, (ast.For, ast.AsyncFor, *FUNC_TYPES)):
            loop = parent(loop)
        if not isinstance(loop, (ast.For, ast.AsyncFor)) or not _per_item(c.args[0], [loop.target]):
            return False
        found = True
    return found


def arg_fact(sh: Shapes, arg, mode) -> Sh:
    return sh.size(arg) if mode == "val" else sh.shape(arg)


def shape_sinks(hub, view, fn, depth: int = 0) -> tuple:
    """The parameters of ``fn`` whose value or shape decides the shape of a tensor that ``fn``
    (or a helper it calls, in this file or another) hands to a shaped collective."""
    memo = view.memo.setdefault("shapes.sinks", {})
    key = (id(fn), depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    got = memo.get(key)
    if got is not None:
        return got
    if depth > 4 or not isinstance(fn, FUNC_TYPES):
        return ()
    effs = hub.summary(view, fn).collectives  # what it may run, through helpers too (capped)
    if len(effs) < 6 and not any(e.op in SHAPED for e in effs):
        memo[key] = ()
        return ()
    memo[key] = ()  # recursion guard
    hub._view_stack.append(view)
    try:
        out = _shape_sinks(hub, view, fn, depth)
    finally:
        hub._view_stack.pop()
    memo[key] = out
    return out


def _shape_sinks(hub, view, fn, depth):

    sh = shapes_of(hub, view)
    out = []
    seen = set()

    def add(fact, eff):
        if fact.kind != "U" or not fact.deps:
            return
        for fid, p, m in fact.deps:
            if fid == id(fn) and m in ("val", "shape") and (p, m) not in seen and len(out) < 6:
                seen.add((p, m))
                out.append(ShapeSink(p, m, eff))

    for c, op, t in shaped_calls(view, fn):
        add(sh.shape(t), Effect(op, c, view.path))
    for c in scope_calls(view, fn):
        f = c.func
        if not (isinstance(f, ast.Name) or (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name))):
            continue
        if not (c.args or c.keywords):
            continue
        target = resolved(hub, view, c)
        if target is None or target[1] is fn:
            continue
        inner = shape_sinks(hub, target[0], target[1], depth + 1)
        if not inner:
            continue
        args = bind_args(c, target[1])
        name = callee_name(target)
        for s in inner:
            a = args.get(s.param)
            if a is not None:
                add(arg_fact(sh, a, s.mode), s.effect.through(name))
    return tuple(out)
