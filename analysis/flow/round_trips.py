"""A GPU tensor taken to the host and sent back with a bare ``.cuda()`` (DDP016): which tensor the
host copy comes from (``host_source``: ``x.cpu()``, ``x.detach().to("cpu")``, through tensor methods,
``torch.*`` functions of it, local names, tuple elements and project helpers that return a host copy
of their parameter) and whether the code has just established that this tensor is on a GPU
(``known_on_gpu``: ``x.is_cuda`` / ``x.device.type == "cuda"`` holds where the call runs)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, param_names, parent
from ..torch_api import DEVICE_SETTERS
from .helper_calls import bind_args

_MAX_DEPTH = 6
# ``torch.*`` functions whose result lives where their first tensor argument lives
_NOT_ELEMENTWISE = ("torch.cuda.", "torch.distributed.", "torch.device", "torch.load", "torch.save")


def is_bare_cuda_move(ctx, call: ast.Call) -> bool:
    """``t.cuda()`` / ``t.cuda(non_blocking=True)`` / ``t.to("cuda")``: a move to the *current*
    CUDA device, with no index."""
    f = call.func
    if not isinstance(f, ast.Attribute):
        return False
    if f.attr == "cuda":
        return not call.args and all(k.arg not in ("device", None) for k in call.keywords)
    if f.attr == "to":
        dev = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "device"), None)
        return isinstance(dev, ast.Constant) and dev.value == "cuda"
    return False


def _host_move(call: ast.Call) -> bool:
    f = call.func
    if not isinstance(f, ast.Attribute):
        return False
    if f.attr == "cpu":
        return not call.args
    if f.attr == "to" and len(call.args) >= 1:
        a = call.args[0]
        return isinstance(a, ast.Constant) and a.value == "cpu"
    return False


def host_source(ctx, an, view, expr: ast.AST, at: ast.AST, depth: int = 0):
    """(the name of the tensor, the ``.cpu()`` call) when ``expr`` (evaluated in ``view`` at ``at``)
    is computed from a host copy of a local tensor or parameter ``x`` of the function holding
    ``at``, else None."""
    if expr is None or depth > _MAX_DEPTH:
        return None
    if isinstance(expr, ast.Call):
        f = expr.func
        if _host_move(expr):
            base = f.value
            while isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) and not base.args \
                    and base.func.attr in ("detach", "contiguous", "clone"):
                base = base.func.value
            if isinstance(base, ast.Name):
                return base.id, expr
            return None
        if isinstance(f, ast.Attribute) and view.sem.qualname(f) is None:
            return host_source(ctx, an, view, f.value, at, depth + 1)  # a method of the host tensor
        qn = view.sem.qualname(f) or ""
        if qn.startswith("torch.") and not qn.startswith(_NOT_ELEMENTWISE) and expr.args:
            return host_source(ctx, an, view, expr.args[0], at, depth + 1)
        return _through_helper(ctx, an, view, expr, at, depth)
    if isinstance(expr, (ast.Subscript, ast.Attribute)) and view.sem.qualname(expr) is None:
        return host_source(ctx, an, view, expr.value, at, depth + 1)  # ``.values``, ``[0]`` of it
    if isinstance(expr, ast.Name):
        return _through_name(ctx, an, view, expr.id, at, depth)
    return None


def _through_name(ctx, an, view, name: str, at: ast.AST, depth: int):
    """A local name bound once, before ``at``, in the function holding ``at`` (also as one element
    of a tuple assignment ``host, n = x.cpu(), x.numel()``)."""
    sem = view.sem
    scope = sem.scope_of(at)
    if not isinstance(scope, FUNC_TYPES) or name in param_names(scope):
        return None
    stores = sem.assignments(scope).get(name) or []
    if len(stores) != 1 or stores[0].lineno > at.lineno:
        return None
    st = stores[0]
    if not isinstance(st, ast.Assign) or len(st.targets) != 1:
        return None
    t, v = st.targets[0], st.value
    if isinstance(t, ast.Name):
        return host_source(ctx, an, view, v, st, depth + 1)
    if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts):
        for te, ve in zip(t.elts, v.elts):
            if isinstance(te, ast.Name) and te.id == name:
                return host_source(ctx, an, view, ve, st, depth + 1)
    return None


def _through_helper(ctx, an, view, call: ast.Call, at: ast.AST, depth: int):
    """A project function whose every return is a host copy of one of its parameters
    (``def to_host(t): return t.detach().cpu()``): the argument bound to it, read at the call."""
    if an is None:
        return None
    got = an.resolve_call(view, call)
    if got is None:
        return None
    cview, fn = got
    rets = [n.value for n in ast.walk(fn) if isinstance(n, ast.Return)]
    if not rets or any(r is None for r in rets):
        return None
    params = set()
    for r in rets:
        src = host_source(ctx, an, cview, r, r, depth + 1)
        if src is None or src[0] not in param_names(fn):
            return None
        params.add(src[0])
    if len(params) != 1:
        return None
    arg = bind_args(call, fn).get(params.pop())
    if not isinstance(arg, ast.Name):
        return None
    return arg.id, call


def _gpu_test(test: ast.AST, name: str, positive: bool) -> bool:
    """``test`` (taken when ``positive``, else its negation holds) implies ``name`` is on a GPU."""
    if isinstance(test, ast.BoolOp):
        if isinstance(test.op, ast.And) and positive:
            return any(_gpu_test(v, name, True) for v in test.values)
        if isinstance(test.op, ast.Or) and not positive:
            return any(_gpu_test(v, name, False) for v in test.values)
        return False
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _gpu_test(test.operand, name, not positive)
    if isinstance(test, ast.Attribute) and test.attr == "is_cuda":
        return positive and isinstance(test.value, ast.Name) and test.value.id == name
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and len(test.comparators) == 1:
        lhs, rhs, op = test.left, test.comparators[0], test.ops[0]
        if isinstance(lhs, ast.Constant):
            lhs, rhs = rhs, lhs
        if not (isinstance(rhs, ast.Constant) and rhs.value == "cuda"):
            return False
        if not (isinstance(lhs, ast.Attribute) and lhs.attr == "type" and isinstance(lhs.value, ast.Attribute)
                and lhs.value.attr == "device" and isinstance(lhs.value.value, ast.Name)
                and lhs.value.value.id == name):
            return False
        return (isinstance(op, ast.Eq) and positive) or (isinstance(op, ast.NotEq) and not positive)
    return False


def _exits(body: list) -> bool:
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def known_on_gpu(sem, node: ast.AST, name: str):
    """The test that puts ``name`` on a GPU where ``node`` runs (the ``if`` / conditional expression
    around it, an ``assert``, or an earlier ``if not x.is_cuda: return`` of an enclosing block),
    else None. ``name`` must not be rebound in the function."""
    fn = sem.enclosing_function(node)
    if fn is None or len(sem.assignments(fn).get(name) or []) > (0 if name in param_names(fn) else 1):
        return None
    child, p = node, parent(node)
    while p is not None:
        if isinstance(p, (ast.If, ast.IfExp)) and child is not p.test:
            in_body = child is p.body if isinstance(p, ast.IfExp) else any(s is child for s in p.body)
            if _gpu_test(p.test, name, in_body):
                return p.test
        body = None
        for field in ("body", "orelse", "finalbody"):
            seq = getattr(p, field, None)
            if isinstance(seq, list) and any(s is child for s in seq):
                body = seq
        for st in body or ():
            if st is child:
                break
            if isinstance(st, ast.Assert) and _gpu_test(st.test, name, True):
                return st.test
            if isinstance(st, ast.If) and _exits(st.body) and not st.orelse and _gpu_test(st.test, name, False):
                return st.test
        if p is fn:
            break
        child, p = p, parent(p)
    return None


def current_device_chosen(ctx, node: ast.AST) -> bool:
    """The function holding ``node`` chooses the current device itself (``with torch.cuda.device(...)``
    around it, ``torch.cuda.set_device(...)`` before it), or the module sets a default device."""
    sem = ctx.sem
    if sem.calls_to("torch.set_default_device"):
        return True
    for a in sem.ancestors(node):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                e = item.context_expr
                if isinstance(e, ast.Call) and (ctx.qn(e) or "") in ("torch.cuda.device", "torch.device"):
                    return True
    fn = sem.enclosing_function(node)
    return any(sem.enclosing_function(c) is fn and c.lineno <= node.lineno
               for c in sem.calls_to(*DEVICE_SETTERS))
