"""Sum reductions of one tensor: which calls of a function all-reduce a local tensor with ``SUM``
(over which group), and which helpers of the project all-reduce a parameter with ``SUM`` over the
whole world.

``sum_reductions(hub, view, scope)`` lists, in source order, the ``SumReduce`` facts of ``scope``:

- ``dist.all_reduce(t)`` / ``dist.all_reduce(t, op=ReduceOp.SUM, group=g)`` directly in ``scope``
  (``t`` a local name; no ``op`` is ``SUM``); ``world`` when no group is passed (or ``None``,
  ``group.WORLD``);
- ``helper(t, ...)``: a function or method of the project (this file or another module, as
  ``resolve_call`` resolves it) whose body all-reduces its parameter over the world with ``SUM``
  (``world_sum_params``): the op is no argument, ``ReduceOp.SUM``, or a parameter that this call
  binds to ``ReduceOp.SUM`` (or leaves at a ``SUM`` default). The collective may sit behind a test
  in the helper (``if self.mp_group is None:``) as long as the test reads no parameter of the
  helper other than ``self``: a test of a parameter (``if group is None:``) is the caller's choice.

A reduction under a ``try`` is left out (a failure may be expected and handled). No finding comes
from here; DDP116 pairs the facts.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, param_defaults, param_names, parent, subtree
from ..torch_api import D
from .assignments import under_try
from .bindings import reaching
from .calls import on_subgroup, scope_calls
from .helper_calls import bind_args, callee_name, may_resolve, resolved
from .world import world_size_call

_OP_POS = (1, "op")


class SumReduce:
    """``call`` (in the scope) sums the local tensor ``name``; ``world``: over the default group.
    ``at`` is the ``all_reduce`` itself (in the helper, of module ``path``, for a helper call;
    ``via`` its name), ``group`` the group expression of a direct call (None for the world)."""

    __slots__ = ("call", "name", "world", "at", "path", "via", "group")

    def __init__(self, call, name, world, at, path, via=None, group=None):
        self.call, self.name, self.world, self.at = call, name, world, at
        self.path, self.via, self.group = path, via, group


def _is_sum(op) -> bool:
    """``op`` (an argument, or None when none is passed) is ``ReduceOp.SUM`` (any spelling of the
    attribute path: ``dist.ReduceOp.SUM``, ``ReduceOp.SUM``)."""
    return op is None or (isinstance(op, ast.Attribute) and op.attr == "SUM"
                          and isinstance(op.value, (ast.Name, ast.Attribute)))


def _tests_read_params(node, fn) -> bool:
    """A test above ``node`` in ``fn`` (``if``, ``while``, a conditional expression) reads a
    parameter of ``fn`` other than ``self``/``cls``."""
    params = set(param_names(fn)) - {"self", "cls"}
    child, p = node, parent(node)
    while p is not None and p is not fn:
        test = getattr(p, "test", None) if isinstance(p, (ast.If, ast.While, ast.IfExp)) else None
        if test is not None and child is not test:
            if any(isinstance(n, ast.Name) and n.id in params for n in subtree(test)):
                return True
        child, p = p, parent(p)
    return False


def _param(view, fn, expr) -> str | None:
    """``expr`` is a parameter of ``fn`` that nothing rebinds before it is read."""
    if not isinstance(expr, ast.Name):
        return None
    kind, got = reaching(view, expr.id, expr)
    return expr.id if kind == "param" and got is fn else None


def world_sum_params(view, fn) -> tuple:
    """``(tensor parameter, op parameter or None, all_reduce call)`` for each ``all_reduce`` over
    the world that ``fn`` makes directly on one of its parameters with ``SUM`` (or with an op
    that is itself a parameter), not under a ``try`` and not under a test of a parameter."""
    memo = view.memo.setdefault("reductions.world_sum", {})
    got = memo.get(id(fn))
    if got is not None:
        return got
    out = []
    for c in scope_calls(view, fn):
        if (view.sem.call_qualname(c) or "") != D + "all_reduce" or on_subgroup(c, "all_reduce"):
            continue
        t = _param(view, fn, get_arg(c, 0, "tensor"))
        if t is None or under_try(c, fn) or _tests_read_params(c, fn):
            continue
        op = get_arg(c, *_OP_POS)
        op_param = _param(view, fn, op) if op is not None else None
        if op_param is None and not _is_sum(op):
            continue
        out.append((t, op_param, c))
    got = memo[id(fn)] = tuple(out)
    return got


def _default_of(fn, name: str):
    """The default expression of parameter ``name`` of ``fn``; ``False`` when it has none."""
    return param_defaults(fn).get(name, False)


def sum_reductions(hub, view, scope) -> list:
    """The ``SumReduce`` facts of ``scope``, in source order (see the module's docstring)."""
    memo = view.memo.setdefault("reductions.sums", {})
    got = memo.get(id(scope))
    if got is not None:
        return got
    out = []
    for c in scope_calls(view, scope):
        qn = view.sem.call_qualname(c) or ""
        if qn == D + "all_reduce":
            t = get_arg(c, 0, "tensor")
            if isinstance(t, ast.Name) and _is_sum(get_arg(c, *_OP_POS)) and not under_try(c, scope):
                world = not on_subgroup(c, "all_reduce")
                grp = None if world else get_arg(c, 2, "group")
                out.append(SumReduce(c, t.id, world, c, view.path, group=grp))
            continue
        if qn.startswith(("torch.", "numpy.", "math.")) or not may_resolve(view, c):
            continue
        target = resolved(hub, view, c)
        if target is None or target[1] is scope or not isinstance(target[1], FUNC_TYPES):
            continue
        sinks = world_sum_params(target[0], target[1])
        if not sinks:
            continue
        args = bind_args(c, target[1])
        for t_param, op_param, at in sinks:
            t = args.get(t_param)
            if not isinstance(t, ast.Name):
                continue
            if op_param is not None:
                op = args.get(op_param)
                if op is None:
                    op = _default_of(target[1], op_param)
                    if op is False or op is None or isinstance(op, ast.Constant):
                        continue
                if not _is_sum(op):
                    continue
            out.append(SumReduce(c, t.id, True, at, target[0].path, via=callee_name(target)))
            break
    memo[id(scope)] = out
    return out


def summed_again(hub, view, scope) -> list:
    """``(first, second)`` pairs of ``sum_reductions``: ``second`` sums over the world the tensor
    that ``first`` summed (over any group) just before, on every path from ``first``: ``first``'s
    statement is an earlier statement of a block that holds ``second``, no code between the
    two reads or writes the name (no rescaling, no reset, no rebinding), and the name may be read
    after ``second`` (``read_after``)."""
    facts = sum_reductions(hub, view, scope)
    out = []
    for i, second in enumerate(facts):
        if not second.world:
            continue
        for first in reversed(facts[:i]):
            if first.name != second.name:
                continue
            if _dominates(first.call, second.call) and not _touched_between(view, scope, first.call, second.call,
                                                                               first.name) \
                    and read_after(scope, second.call, first.name):
                out.append((first, second))
            break
    return out


def _stmt_of(node):
    while node is not None and not isinstance(node, ast.stmt):
        node = parent(node)
    return node


def _dominates(a: ast.AST, b: ast.AST, through_with: bool = False) -> bool:
    """The statement holding ``a`` (``through_with``: or a ``with`` statement around it, whose body
    runs straight through) comes before, in the same block, a statement that holds (or is) the one
    holding ``b``."""
    sa = _stmt_of(a)
    while through_with and isinstance(parent(sa), (ast.With, ast.AsyncWith)) and sa in parent(sa).body \
            and not _holds(parent(sa), _stmt_of(b)):
        sa = parent(sa)  # ``with torch.no_grad(): dist.all_reduce(rt)`` then ``return rt``
    blk_owner = parent(sa)
    if blk_owner is None:
        return False
    for field in ("body", "orelse", "finalbody"):
        blk = getattr(blk_owner, field, None)
        if isinstance(blk, list) and sa in blk:
            break
    else:
        return False
    i = blk.index(sa)
    later = {id(s) for s in blk[i + 1:]}
    n = _stmt_of(b)
    while n is not None and n is not blk_owner:
        if id(n) in later:
            return True
        n = parent(n)
    return False


def _holds(outer: ast.AST, node: ast.AST) -> bool:
    while node is not None:
        if node is outer:
            return True
        node = parent(node)
    return False


def read_after(scope, call: ast.Call, name: str) -> bool:
    """``name`` may be read once ``call`` has run: a mention of it later in ``scope``, or ``call``
    inside a loop (the next round reads it). A sum nobody reads again (a test that only makes two
    collectives, to hang one rank on purpose) is no wrong value."""
    p = parent(call)
    while p is not None and p is not scope:
        if isinstance(p, (ast.For, ast.While, ast.AsyncFor)):
            return True
        p = parent(p)
    end = (call.end_lineno, call.end_col_offset)
    return any(isinstance(n, ast.Name) and n.id == name and (n.lineno, n.col_offset) >= end for n in subtree(scope))


def _touched_between(view, scope, a: ast.Call, b: ast.Call, name: str) -> bool:
    """Some mention of ``name`` in ``scope`` lies after ``a`` ends and before ``b`` starts."""
    lo = (a.end_lineno, a.end_col_offset)
    hi = (b.lineno, b.col_offset)
    for n in subtree(scope):
        if isinstance(n, ast.Name) and n.id == name and lo <= (n.lineno, n.col_offset) < hi:
            return True
    return False


# ---------------------------------------------------------------------------------------------
# A helper that returns the world's SUM of its parameter, and values that are means
#
# ``world_sum_return(view, fn)``: the parameter whose world ``SUM`` ``fn`` returns unscaled:
# ``rt = t.clone(); dist.all_reduce(rt); return rt`` (or the parameter itself reduced in place),
# every return giving that name (or the parameter untouched, for a world of one process), nothing
# reading or writing it between the reduction and the final return.
# ``mean_valued(hub, view, expr, at)``: every origin of ``expr`` is a mean: ``x.mean()``,
# ``torch.mean(x)``, a ``torch.nn.functional`` loss or a ``torch.nn`` loss module called with the
# default ``reduction="mean"`` (through ``.detach()``, ``.clone()``, ``.data``, a cast).

_COPIES = frozenset({"clone", "detach", "float", "double", "contiguous"})
_MEAN_LOSSES = frozenset({"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
                          "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div",
                          "soft_margin_loss", "multilabel_soft_margin_loss", "poisson_nll_loss",
                          "gaussian_nll_loss", "hinge_embedding_loss", "cosine_embedding_loss",
                          "margin_ranking_loss", "multi_margin_loss", "triplet_margin_loss"})
_MEAN_LOSS_MODULES = frozenset({"CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss",
                                "BCELoss", "BCEWithLogitsLoss", "KLDivLoss", "SoftMarginLoss",
                                "MultiLabelSoftMarginLoss", "PoissonNLLLoss", "GaussianNLLLoss",
                                "HingeEmbeddingLoss", "CosineEmbeddingLoss", "MarginRankingLoss",
                                "MultiMarginLoss", "TripletMarginLoss"})


def _copy_of(view, e, param: str) -> bool:
    """``e`` is the parameter ``param`` or a copy of it (``param.clone()``, ``.detach()``, chains,
    ``torch.clone(param)``)."""
    while True:
        if isinstance(e, ast.Name):
            return e.id == param
        if isinstance(e, ast.Attribute) and e.attr == "data":
            e = e.value
            continue
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _COPIES and not e.args:
            e = e.func.value
            continue
        if isinstance(e, ast.Call) and (view.sem.call_qualname(e) or "") == "torch.clone" and len(e.args) == 1:
            e = e.args[0]
            continue
        return False


# the collectives that leave the SUM of a tensor in it: everywhere (``all_reduce``), or on the
# destination rank, the one that logs it (``reduce``): (op, async_op) argument positions
_SUMMING = {"all_reduce": ((1, "op"), (3, "async_op")), "reduce": ((2, "op"), (4, "async_op"))}


def world_sum_return(view, fn) -> str | None:
    """The parameter of ``fn`` whose world ``SUM`` it returns unscaled (see above), else None."""
    memo = view.memo.setdefault("reductions.sum_return", {})
    if id(fn) in memo:
        return memo[id(fn)]
    memo[id(fn)] = out = _world_sum_return(view, fn)
    return out


def _world_sum_return(view, fn) -> str | None:
    params = [p for p in param_names(fn) if p not in ("self", "cls")]
    if not params or not fn.body or not isinstance(fn.body[-1], ast.Return):
        return None
    last = fn.body[-1]
    if not isinstance(last.value, ast.Name):
        return None
    name = last.value.id
    red = None
    for c in scope_calls(view, fn):
        qn = view.sem.call_qualname(c) or ""
        op = qn[len(D):] if qn.startswith(D) else ""
        if op not in _SUMMING:
            continue
        t = get_arg(c, 0, "tensor")
        if red is not None or not isinstance(t, ast.Name) or t.id != name or on_subgroup(c, op) \
                or not _is_sum(get_arg(c, *_SUMMING[op][0])) or get_arg(c, *_SUMMING[op][1]) is not None \
                or under_try(c, fn) or _tests_read_params(c, fn) or not _dominates(c, last, True):
            return None
        red = c
    if red is None or _touched_between(view, fn, red, last, name):
        return None
    # what the reduced name holds: the parameter, or one copy of it made before the reduction
    if name in params:
        param = name
        if any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in subtree(fn)):
            return None
    else:
        stores = [n for n in subtree(fn) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]
        if len(stores) != 1 or not isinstance(parent(stores[0]), ast.Assign) or len(parent(stores[0]).targets) != 1:
            return None
        value = parent(stores[0]).value
        param = next((p for p in params if _copy_of(view, value, p)), None)
        if param is None or not _dominates(stores[0], red):
            return None
        if any(isinstance(n, ast.Name) and n.id == param and isinstance(n.ctx, ast.Store) for n in subtree(fn)):
            return None
    for r in subtree(fn):
        if isinstance(r, ast.Return) and r is not last and not (
                isinstance(r.value, ast.Name) and r.value.id in (name, param)):
            return None
    return param


def _strip_copies(e):
    while True:
        if isinstance(e, ast.Attribute) and e.attr == "data":
            e = e.value
        elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _COPIES and not e.args \
                and not e.keywords:
            e = e.func.value
        else:
            return e


def _mean_reduction(call) -> bool:
    """A loss call or construction leaves ``reduction`` at ``"mean"`` (and passes none of the old
    ``size_average`` / ``reduce`` flags)."""
    for kw in call.keywords:
        if kw.arg is None or kw.arg in ("size_average", "reduce"):
            return False
        if kw.arg == "reduction" and not (isinstance(kw.value, ast.Constant) and kw.value.value == "mean"):
            return False
    return True


def mean_valued(hub, view, expr, at, depth: int = 0) -> bool:
    """Every origin of ``expr`` at ``at`` is a mean (see above); False when any is not known to be."""
    from .origins import origins

    expr = _strip_copies(expr)
    got = origins(hub, view, expr, at)
    if not got or depth > 2:
        return False
    for v, e in got:
        e = _strip_copies(e)
        if e is not expr and isinstance(e, (ast.Name, ast.Attribute)) and mean_valued(hub, v, e, e, depth + 1):
            continue
        if not isinstance(e, ast.Call) or not _mean_call(hub, v, e):
            return False
    return True


def _mean_call(hub, view, e: ast.Call) -> bool:
    from .origins import origins

    qn = view.sem.call_qualname(e) or ""
    f = e.func
    if qn == "torch.mean" or (isinstance(f, ast.Attribute) and f.attr == "mean" and not qn.startswith(
            ("numpy.", "statistics.", "math."))):
        return True
    if qn.startswith("torch.nn.functional.") and qn.rsplit(".", 1)[-1] in _MEAN_LOSSES:
        return _mean_reduction(e)
    if not isinstance(f, (ast.Name, ast.Attribute)) or qn:
        return False
    # ``criterion(out, y)``: every origin of the callee is a ``torch.nn`` loss module built with the
    # default reduction
    mods = origins(hub, view, f, e)
    if not mods:
        return False
    for mv, m in mods:
        mqn = (mv.sem.call_qualname(m) or "") if isinstance(m, ast.Call) else ""
        if not (mqn.startswith("torch.nn.") and mqn.rsplit(".", 1)[-1] in _MEAN_LOSS_MODULES and _mean_reduction(m)
                and len(m.args) <= 1):
            return False
    return True


def reads_world_size(view, scope) -> bool:
    """``scope`` reads a number of processes where it may scale a sum back to a mean: a
    ``get_world_size`` call (of any group), or a name or attribute that counts processes
    (``world_size``, ``num_gpus``), used anywhere but in a comparison (``if world_size < 2:``)
    and not only bound to a name that nothing reads (only ever used to stay silent)."""
    from .world import _WORLD_NAME

    loads: dict = {}
    for n in subtree(scope):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            loads.setdefault(n.id, []).append(n)
    for n in subtree(scope):
        if isinstance(n, ast.Call):
            qn = view.sem.call_qualname(n) or ""
            if (qn.endswith("get_world_size") or world_size_call(view.sem, n)) and _scales(n, loads):
                return True
        name = n.id if isinstance(n, ast.Name) else (n.attr if isinstance(n, ast.Attribute) else None)
        if name is not None and _WORLD_NAME.match(name) and not isinstance(n.ctx, ast.Store) and _scales(n, loads):
            return True
        if isinstance(n, ast.Constant) and n.value == "WORLD_SIZE" and _scales(n, loads):
            return True
    return False


def _scales(read, loads: dict, depth: int = 0) -> bool:
    """The number of processes ``read`` may scale something: it is not only compared, and when it
    is bound to a name (``ws = get_world_size()``), a read of that name may."""
    e, p = read, parent(read)
    # the number itself: ``get_world_size()``, ``os.environ["WORLD_SIZE"]``, ``env.get("WORLD_SIZE")``,
    # ``int(...)`` around it
    while isinstance(p, ast.Subscript) or (isinstance(p, ast.Call) and (p.func is e or e in p.args and (
            isinstance(p.func, ast.Name) and p.func.id in ("int", "float")
            or isinstance(p.func, ast.Attribute) and p.func.attr in ("get", "getenv")))):
        e, p = p, parent(p)
    if isinstance(p, ast.Compare):
        return False
    if isinstance(p, ast.Assign) and len(p.targets) == 1 and isinstance(p.targets[0], ast.Name) and depth < 3:
        return any(_scales(u, loads, depth + 1) for u in loads.get(p.targets[0].id, ()))
    return True


def sum_reach(cls, text, filename):
    """A second gate (``Rule.reach``) for a rule about a helper's reduction: the file, or a project
    module it imports (transitively), spells ``all_reduce`` or ``reduce``: ``reduce_tensor`` in
    ``utils/dist.py`` called from the trainer."""
    from .reach import reaches  # lazy: only files the text gate admits

    return reaches(filename, text, ("reduce",))


# --- a cross-rank mean of an exponential of a mean (``exp`` of a mean loss: a perplexity) ----------

_EXP_QNS = frozenset({"torch.exp", "math.exp", "numpy.exp"})


def _is_avg(op) -> bool:
    return isinstance(op, ast.Attribute) and op.attr == "AVG" and isinstance(op.value, (ast.Name, ast.Attribute))


def _world_count(view, e) -> bool:
    """``e`` is the number of processes of the default group: ``get_world_size()`` or a name or
    attribute that counts processes (``world_size``, ``args.world_size``)."""
    from .world import _WORLD_NAME

    if world_size_call(view.sem, e):
        return True
    name = e.id if isinstance(e, ast.Name) else (e.attr if isinstance(e, ast.Attribute) else None)
    return name is not None and bool(_WORLD_NAME.match(name))


def world_mean_param(view, fn, hub=None) -> str | None:
    """The parameter of ``fn`` whose mean over all ranks it returns on its last line: one
    ``all_reduce`` of the parameter (or of one copy of it) over the default group, made directly or
    through a project helper that sums its own parameter over the world (``world_sum_params``; not
    under a ``try`` or a test of a parameter) with ``SUM`` and the return of ``param / get_world_size()`` (directly, or of the one
    name bound to it after the reduction, in the function's own block), or with ``ReduceOp.AVG``
    and the return of the parameter itself. None otherwise."""
    memo = view.memo.setdefault("reductions.mean_param", {})
    if id(fn) not in memo:
        memo[id(fn)] = _world_mean_param(view, fn, hub)
    return memo[id(fn)]


def _world_mean_param(view, fn, hub) -> str | None:
    if not fn.body or not isinstance(fn.body[-1], ast.Return) or fn.body[-1].value is None:
        return None
    reds = []
    for c in scope_calls(view, fn):
        if (view.sem.call_qualname(c) or "") == D + "all_reduce":
            if on_subgroup(c, "all_reduce") or get_arg(c, 3, "async_op") is not None:
                return None
            reds.append((c, get_arg(c, 0, "tensor"), get_arg(c, *_OP_POS)))
        elif hub is not None and may_resolve(view, c):
            # through a helper that sums its parameter over the world: ``_sum_(t)``
            target = resolved(hub, view, c)
            if target is not None and isinstance(target[1], FUNC_TYPES) and target[1] is not fn:
                args = bind_args(c, target[1])
                reds += [(c, args.get(tp), None) for tp, op_param, _at in world_sum_params(*target)
                         if op_param is None]
    if len(reds) != 1:
        return None
    red, t, op = reds[0]
    if under_try(red, fn) or _tests_read_params(red, fn):
        return None
    param = name = _param(view, fn, t)
    if param is None and isinstance(t, ast.Name):
        # one copy of a parameter made before the reduction: ``y = x.clone()``
        stores = [n for n in subtree(fn) if isinstance(n, ast.Name) and n.id == t.id and isinstance(n.ctx, ast.Store)]
        st = parent(stores[0]) if stores else None
        if not (isinstance(st, ast.Assign) and st in fn.body and len(st.targets) == 1 and st.targets[0] is stores[0]
                and st.lineno < red.lineno):
            return None
        param = next((p for p in param_names(fn) if p not in ("self", "cls") and _copy_of(view, st.value, p)), None)
        name = t.id
        if param is None or any(n is not stores[0] for n in stores if n.lineno < red.lineno):
            return None
    if param is None:
        return None
    ret = fn.body[-1].value
    if _is_avg(op):
        stores = [n for n in subtree(fn) if isinstance(n, ast.Name) and n.id == name
                  and isinstance(n.ctx, ast.Store) and n.lineno > red.lineno]
        return param if isinstance(ret, ast.Name) and ret.id == name and not stores else None
    if not _is_sum(op):
        return None
    if isinstance(ret, ast.Name):
        stores = [n for n in subtree(fn) if isinstance(n, ast.Name) and n.id == ret.id
                  and isinstance(n.ctx, ast.Store) and n.lineno > red.lineno]
        st = parent(stores[0]) if len(stores) == 1 else None
        if not (isinstance(st, ast.Assign) and st in fn.body and len(st.targets) == 1 and st.targets[0] is stores[0]):
            return None
        ret = st.value
    if isinstance(ret, ast.BinOp) and isinstance(ret.op, ast.Div) and isinstance(ret.left, ast.Name) \
            and ret.left.id == name and _world_count(view, ret.right):
        return param
    return None


def mean_reduced_exps(hub, view, scope) -> list:
    """``(call, value, exp)`` for each cross-rank mean made in ``scope`` (``all_reduce(t,
    op=ReduceOp.AVG)``, or a project helper that returns its parameter's world mean:
    ``world_mean_param``) of a value that is the exponential of a mean (``exp_of_mean``)."""
    out = []
    for c in scope_calls(view, scope):
        qn = view.sem.call_qualname(c) or ""
        if qn == D + "all_reduce":
            if not _is_avg(get_arg(c, *_OP_POS)) or on_subgroup(c, "all_reduce"):
                continue
            arg = get_arg(c, 0, "tensor")
        else:
            if qn.startswith(("torch.", "numpy.", "math.")) or not may_resolve(view, c):
                continue
            target = resolved(hub, view, c)
            if target is None or target[1] is scope or not isinstance(target[1], FUNC_TYPES):
                continue
            param = world_mean_param(target[0], target[1], hub)
            arg = bind_args(c, target[1]).get(param) if param is not None else None
        if arg is None:
            continue
        e = exp_of_mean(hub, view, arg, c)
        if e is not None:
            out.append((c, arg, e))
    return out


def _exp_operand(view, e):
    """The operand of an exponential call (``torch.exp(x)``, ``math.exp(x)``, ``x.exp()``), else None."""
    if not isinstance(e, ast.Call):
        return None
    qn = view.sem.call_qualname(e) or ""
    if qn in _EXP_QNS and len(e.args) == 1 and not e.keywords:
        return e.args[0]
    if not qn and isinstance(e.func, ast.Attribute) and e.func.attr == "exp" and not e.args and not e.keywords:
        return e.func.value
    return None


def exp_of_mean(hub, view, expr, at, depth: int = 0):
    """The exponential call that ``expr`` holds at ``at`` when every origin of it is an
    exponential of a mean (``mean_of_values``), or a constant fallback (``float("inf")`` in an
    ``except OverflowError``, a branch of a conditional expression) with at least one exponential,
    also made a tensor (``torch.tensor(math.exp(avg))``); else None."""
    from .origins import origins

    if depth > 3:
        return None
    got = origins(hub, view, _strip_copies(expr), at)
    found = None
    todo = [(v, e) for v, e in got]
    while todo:
        v, e = todo.pop()
        e = _strip_copies(e)
        if isinstance(e, ast.IfExp):  # ``math.exp(avg) if avg < 50 else float("inf")``
            todo += [(v, e.body), (v, e.orelse)]
            continue
        if isinstance(e, ast.Constant) or (isinstance(e, ast.Call) and isinstance(e.func, ast.Name)
                                           and e.func.id == "float" and all(isinstance(a, ast.Constant) for a in e.args)):
            continue
        if isinstance(e, ast.Call) and (v.sem.call_qualname(e) or "") in ("torch.tensor", "torch.as_tensor") \
                and len(e.args) == 1:  # a number made a tensor to reduce it
            inner = exp_of_mean(hub, v, e.args[0], e, depth + 1)
            if inner is None:
                return None
            found = found or inner
            continue
        x = _exp_operand(v, e)
        if x is None or not mean_of_values(hub, v, x, e):
            return None
        found = found or e
    return found


def mean_of_values(hub, view, expr, at) -> bool:
    """Every origin of ``expr`` at ``at`` is a mean: ``mean_valued``'s (a mean loss, ``x.mean()``),
    or a total divided by a count: ``total / n`` where ``total`` is a ``sum()`` or a name that a
    loop of its function adds to (``total += loss``)."""
    from .origins import origins

    if mean_valued(hub, view, expr, at):
        return True
    got = origins(hub, view, _strip_copies(expr), at)
    if not got:
        return False
    for v, e in got:
        e = _strip_copies(e)
        if isinstance(e, ast.Call) and _mean_call(hub, v, e):
            continue
        if not (isinstance(e, ast.BinOp) and isinstance(e.op, ast.Div) and _a_total(v, e.left)):
            return False
    return True


def _a_total(view, e) -> bool:
    e = _strip_copies(e)
    if isinstance(e, ast.Call):
        qn = view.sem.call_qualname(e) or ""
        return qn in ("torch.sum", "sum", "builtins.sum") or (
            isinstance(e.func, ast.Attribute) and e.func.attr == "sum" and not qn.startswith("math."))
    if not isinstance(e, ast.Name):
        return False
    fn = view.sem.enclosing_function(e)
    for n in subtree(fn if fn is not None else view.tree):
        if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add) and isinstance(n.target, ast.Name) \
                and n.target.id == e.id:
            p = parent(n)
            while p is not None and p is not fn and not isinstance(p, (ast.For, ast.While, ast.AsyncFor)):
                p = parent(p)
            if isinstance(p, (ast.For, ast.While, ast.AsyncFor)):
                return True
    return False
