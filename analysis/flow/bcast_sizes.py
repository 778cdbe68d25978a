"""Broadcast size contracts: a helper that broadcasts a buffer sized by one parameter on the
receiving ranks and made from another parameter on the source rank.

The common shape (Megatron's ``broadcast_list``, ``broadcast_tensor``, countless ``send_floats``)::

    def broadcast_list(size, values=None, src=0):
        if dist.get_rank() == src:
            buf = torch.tensor(values)            # the source: len(values) elements
        else:
            buf = torch.empty(size)               # the others: ``size`` elements
        dist.broadcast(buf, src)

``contract(hub, view, fn)`` gives ``(size_param, payload_param, mode)`` for such a function:
the receivers' buffer has ``size_param`` elements, the source's is ``payload_param`` (``mode``
"tensor": the parameter is the tensor itself; "list": ``torch.tensor(param)`` of a sequence). It
follows helpers that pass their parameters on (``broadcast_float_list(size, float_list)`` ->
``broadcast_list(size, torch.float32, list_values=float_list)`` -> ``broadcast_tensor(size,
dtype, tensor=tensor)``), in this module or another one of the project, to a small depth.

A call that gives the size as a constant and the payload as a sequence of known, different length
(``broadcast_float_list(3, float_list=values)`` with ``values`` a 6-element list) breaks the
contract: DDP109 reports it.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, param_names
from ..torch_api import D, constant_of
from .bindings import reaching
from .helper_calls import bind_args, resolved

_ALLOC = frozenset({"torch.empty", "torch.zeros", "torch.ones", "torch.full"})
_FROM_LIST = frozenset({"torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor",
                        "torch.LongTensor", "torch.IntTensor", "torch.cuda.FloatTensor",
                        "torch.cuda.LongTensor"})
_MAX_DEPTH = 4
# ``torch.distributed.broadcast`` and DeepSpeed's mirror of it (``import deepspeed.comm as dist``)
BROADCASTS = frozenset({D + "broadcast", "deepspeed.comm.broadcast", "deepspeed.comm.comm.broadcast"})


def contract(hub, view, fn, depth: int = 0):
    """(size parameter, payload parameter, "tensor" | "list") of ``fn``, or None. The size is an
    int when ``fn`` hands a constant size on to such a helper itself (``broadcast_float_list(3,
    float_list=values)`` with ``values`` its parameter)."""
    if not isinstance(fn, FUNC_TYPES):
        return None
    memo = view.memo.setdefault("bcast_sizes.contract", {})
    key = (fn, depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    if key in memo:
        return memo[key]
    memo[key] = None  # recursion guard
    try:
        got = _contract(hub, view, fn, depth)
    except RecursionError:  # pragma: no cover - defensive
        got = None
    memo[key] = got
    return got


def _calls_of(view, fn) -> list:
    """The calls made in ``fn``'s own body."""
    return view.sem.function_calls(fn)


def _size_param(sem, call, params):
    """The parameter ``torch.empty(size, ...)`` / ``torch.empty((size,), ...)`` sizes by, or None."""
    if (sem.call_qualname(call) or "") not in _ALLOC or not call.args:
        return None
    a = call.args[0]
    if len(call.args) > (2 if sem.call_qualname(call) == "torch.full" else 1):
        return None  # several dimensions
    if isinstance(a, (ast.Tuple, ast.List)) and len(a.elts) == 1:
        a = a.elts[0]
    return a.id if isinstance(a, ast.Name) and a.id in params else None


def _list_param(sem, call, params):
    """The parameter ``torch.tensor(values, ...)`` makes a tensor of, or None."""
    if (sem.call_qualname(call) or "") not in _FROM_LIST or len(call.args) != 1:
        return None
    a = call.args[0]
    return a.id if isinstance(a, ast.Name) and a.id in params else None


def _sides(view, fn, name: str, at, params):
    """What the bindings of ``name`` reaching ``at`` make: (size params, payloads) where a
    payload is (param, mode)."""
    sem = view.sem
    kind, evs = reaching(view, name, at)
    sizes, payloads = set(), set()
    if kind in ("param", "events+param") and name in params:
        payloads.add((name, "tensor"))
    if kind in ("events", "events+param"):
        for e in evs or ():
            if not isinstance(e, ast.Assign) or len(e.targets) != 1 or not isinstance(e.targets[0], ast.Name):
                continue
            v = e.value
            if isinstance(v, ast.Call):
                s = _size_param(sem, v, params)
                if s is not None:
                    sizes.add(s)
                    continue
                p = _list_param(sem, v, params)
                if p is not None:
                    payloads.add((p, "list"))
    return sizes, payloads


def _contract(hub, view, fn, depth):
    sem = view.sem
    params = set(param_names(fn))
    if not params:
        return None
    fn_calls = _calls_of(view, fn)
    for c in fn_calls if len(params) > 1 else ():
        if sem.call_qualname(c) not in BROADCASTS:
            continue
        t = get_arg(c, 0, "tensor")
        if not isinstance(t, ast.Name):
            continue
        sizes, payloads = _sides(view, fn, t.id, c, params)
        if len(sizes) == 1 and len(payloads) == 1:
            (s,), (p,) = sizes, payloads
            if s != p[0]:
                return (s, p[0], p[1])
    if depth >= _MAX_DEPTH:
        return None
    for c in fn_calls:
        if not (c.args or c.keywords):
            continue
        target = resolved(hub, view, c)
        if target is None or target[1] is fn:
            continue
        inner = contract(hub, target[0], target[1], depth + 1)
        if inner is None:
            continue
        args = bind_args(c, target[1])
        p_arg = args.get(inner[1])
        if isinstance(inner[0], int):
            size = inner[0]
        else:
            s_arg = args.get(inner[0])
            size = s_arg.id if isinstance(s_arg, ast.Name) and s_arg.id in params else _int(sem, s_arg)
        if size is None or not isinstance(p_arg, ast.Name):
            continue
        if p_arg.id in params:
            return (size, p_arg.id, inner[2])
        if isinstance(size, int):
            continue
        if inner[2] == "tensor":
            sizes, payloads = _sides(view, fn, p_arg.id, c, params)
            if not sizes and len(payloads) == 1:
                (p,) = payloads
                if p[1] == "list" and p[0] != size:
                    return (size, p[0], "list")
    return None


def _int(sem, expr):
    """The int constant ``expr`` is (``constant_of``), or None."""
    if expr is None:
        return None
    c = constant_of(sem, expr)
    if c is None or not isinstance(c.value, int) or isinstance(c.value, bool):
        return None
    return c.value


def literal_length(view, expr, at):
    """The length of the sequence ``expr`` holds at ``at`` when it is a list or tuple display
    without starred elements (directly or through a name bound once to one, never written into
    afterwards); else None."""
    if isinstance(expr, ast.Name):
        kind, evs = reaching(view, expr.id, at)
        if kind != "events" or not evs or len(evs) != 1 or not isinstance(evs[0], ast.Assign):
            return None
        from .mutations import mutations
        if mutations(view, expr.id, at, evs):
            return None
        e = evs[0]
        if len(e.targets) != 1 or not isinstance(e.targets[0], ast.Name):
            return None
        expr = e.value
    if isinstance(expr, (ast.List, ast.Tuple)) and not any(isinstance(x, ast.Starred) for x in expr.elts):
        return len(expr.elts)
    return None


def broken_contracts(hub, view):
    """(call, target, declared size, payload length, size argument, payload argument) for the
    calls of ``view`` that break a helper's broadcast size contract."""
    got = view.memo.get("bcast_sizes.broken")
    if got is not None:
        return got
    got = view.memo["bcast_sizes.broken"] = []
    sem = view.sem
    for c in sem.calls:
        if not (c.args or c.keywords) or not isinstance(c.func, (ast.Name, ast.Attribute)):
            continue
        target = resolved(hub, view, c)
        if target is None:
            continue
        k = contract(hub, target[0], target[1])
        if k is None or k[2] != "list":
            continue
        args = bind_args(c, target[1])
        p_arg = args.get(k[1])
        if p_arg is None:
            continue
        if isinstance(k[0], int):
            s_arg, size = None, k[0]  # the helper declares the size itself
        else:
            s_arg = args.get(k[0])
            size = _int(sem, s_arg)
        if size is None:
            continue
        n = literal_length(view, p_arg, c)
        if n is None or n == size:
            continue
        got.append((c, target, size, n, s_arg, p_arg))
    return got


_SELF_SHAPED = frozenset({"view", "reshape", "to", "long", "int", "float", "cuda", "contiguous", "flatten"})


def _strip(v):
    """``torch.tensor(x).view(-1).to(dev)`` -> ``torch.tensor(x)`` (methods that keep the count)."""
    while isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr in _SELF_SHAPED:
        v = v.func.value
    return v


def _in_loop(node, fn) -> bool:
    from ..semantic import parent
    p = parent(node)
    while p is not None and p is not fn:
        if isinstance(p, (ast.For, ast.AsyncFor, ast.While)):
            return True
        p = parent(p)
    return False


def _grown_in_loop(view, fn, name: ast.Name):
    """The ``name += piece`` / ``name.extend(piece)`` in a loop of ``fn`` that gives the list
    ``name`` holds at its use a length only the data decides (pieces of unknown length), with no
    growth outside a loop (a padding to a size: ``name += [-1] * (n - len(name))``); else None."""
    from .mutations import mutations
    kind, evs = reaching(view, name.id, name)
    if kind != "events" or not evs:
        return None
    grows = [e for e in evs if isinstance(e, ast.AugAssign) and isinstance(e.op, ast.Add)]
    grows += [n for n, vals in mutations(view, name.id, name, evs)
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("extend", "append")]
    inits = [e for e in evs if isinstance(e, ast.Assign)]
    if not grows or not inits or not all(
            isinstance(e.value, ast.List) and not e.value.elts for e in inits):
        return None  # not a list started empty here
    for g in grows:
        if not _in_loop(g, fn):
            return None  # grown (padded) outside the loop too
        piece = g.value if isinstance(g, ast.AugAssign) else (g.args[0] if g.args else None)
        if isinstance(g, ast.Call) and g.func.attr == "append":
            return None  # one item per iteration: the count is the loop's (not judged here)
        if piece is None or isinstance(piece, (ast.List, ast.Tuple)):
            return None  # pieces of a known length
    return grows[0]


def _killed_by(e, st) -> bool:
    """``e`` lies in an earlier statement of the block that holds ``st`` (``st`` rebinds after it)."""
    from ..semantic import parent
    p = parent(st)
    for f in ("body", "orelse", "finalbody"):
        blk = getattr(p, f, None)
        if isinstance(blk, list) and st in blk:
            for x in blk[:blk.index(st)]:
                if (x.lineno, x.col_offset) <= (e.lineno, e.col_offset) and (
                        e.end_lineno, e.end_col_offset) <= (x.end_lineno, x.end_col_offset):
                    return True
    return False


def partial_broadcasts(hub, view):
    """(broadcast call, tensor argument, receivers' allocation, growth) where the source rank
    broadcasts ``torch.tensor(lst)`` of a list grown in a loop by pieces of unknown length
    (``_grown_in_loop``) and the other ranks receive into ``torch.empty(n)`` of a size that the
    list is never padded or truncated to."""
    got = view.memo.get("bcast_sizes.partial")
    if got is not None:
        return got
    got = view.memo["bcast_sizes.partial"] = []
    sem = view.sem
    for c in [c for qn in sorted(BROADCASTS) for c in sem.calls_to(qn)]:
        t = get_arg(c, 0, "tensor")
        fn = sem.enclosing_function(c)
        if not isinstance(t, ast.Name) or fn is None:
            continue
        kind, evs = reaching(view, t.id, c)
        if kind != "events" or not evs:
            continue
        alloc = src = src_st = None
        rest = []
        for e in evs:
            v = _strip(e.value) if isinstance(e, ast.Assign) and len(e.targets) == 1 else None
            qn = (sem.call_qualname(v) or "") if isinstance(v, ast.Call) else ""
            if qn in _ALLOC and v.args and len(v.args) <= (2 if qn == "torch.full" else 1) and alloc is None:
                alloc = v
            elif qn in _FROM_LIST and len(v.args) == 1 and isinstance(v.args[0], ast.Name) and src is None:
                src, src_st = v, e
            else:
                rest.append(e)
        if alloc is None or src is None or not all(_killed_by(e, src_st) for e in rest):
            continue
        grow = _grown_in_loop(view, fn, src.args[0])
        if grow is not None:
            got.append((c, t, alloc, src, grow))
    return got
