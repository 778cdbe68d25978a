"""Small, local dataflow shared by the DDP0xx/DDP1xx rules: helper functions defined in the file that
wrap a call (a ``setup()`` that runs ``init_process_group``), names bound to constructors, the
device variable in scope. Queries use the semantic indexes only (no extra tree walks)."""
from __future__ import annotations

import ast
import re

from ..semantic import FUNC_TYPES, param_names



def _callee_name(call: ast.Call) -> str | None:
    """``setup`` for ``setup(...)`` and ``self.setup(...)`` / ``cls.setup(...)``."""
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in ("self", "cls"):
        return f.attr
    return None


def wrapper_functions(ctx, qualnames: tuple[str, ...], cache_key: str) -> set[str]:
    """Names of functions defined in this file that (transitively) call one of ``qualnames``
    unconditionally or not: a ``setup()`` that calls ``init_process_group``."""
    return ctx.memo(("dataflow.wrappers", cache_key), lambda: _wrapper_functions(ctx, qualnames))


def _wrapper_functions(ctx, qualnames: tuple[str, ...]) -> set[str]:
    sem = ctx.sem
    names: set[str] = set()
    frontier = [c for c in sem.calls_to(*qualnames)]
    # calls by local callee name, built lazily once
    by_name: dict[str, list[ast.Call]] | None = None
    seen_fns: set[int] = set()
    while frontier:
        new = []
        for c in frontier:
            fn = sem.enclosing_function(c)
            if fn is None or id(fn) in seen_fns:
                continue
            seen_fns.add(id(fn))
            if fn.name not in names:
                names.add(fn.name)
                if by_name is None:
                    by_name = {}
                    for k in sem.calls:
                        n = _callee_name(k)
                        if n is not None and n in sem.functions:
                            by_name.setdefault(n, []).append(k)
                new.extend(by_name.get(fn.name, ()))
        frontier = new
    return names


def calls_or_wrappers(ctx, qualnames: tuple[str, ...], cache_key: str) -> list[ast.Call]:
    """Direct calls to ``qualnames`` plus calls to the file's own wrappers of them."""
    sem = ctx.sem
    out = list(sem.calls_to(*qualnames))
    wrappers = wrapper_functions(ctx, qualnames, cache_key)
    if wrappers:
        for k in sem.calls:
            n = _callee_name(k)
            if n is not None and n in wrappers:
                out.append(k)
    return out


_TENSOR_CTORS = frozenset({
    "torch.tensor", "torch.zeros", "torch.ones", "torch.empty", "torch.full", "torch.arange",
    "torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.linspace", "torch.eye",
    "torch.as_tensor", "torch.from_numpy", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor",
    "torch.IntTensor", "torch.DoubleTensor", "torch.HalfTensor", "torch.BoolTensor", "torch.ByteTensor",
})
_NO_DEVICE_KW = frozenset({"torch.from_numpy", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor",
                           "torch.IntTensor", "torch.DoubleTensor", "torch.HalfTensor", "torch.BoolTensor",
                           "torch.ByteTensor"})


def cpu_tensor_ctor(ctx, expr: ast.AST) -> ast.Call | None:
    """``expr`` when it is a tensor constructor call that builds on the CPU (no ``device=``)."""
    if not isinstance(expr, ast.Call):
        return None
    qn = ctx.qn(expr)
    if qn not in _TENSOR_CTORS:
        return None
    if any(k.arg is None or k.arg == "device" for k in expr.keywords):
        return None
    if qn == "torch.as_tensor" and len(expr.args) >= 3:
        return None
    if any(isinstance(a, ast.Starred) for a in expr.args):
        return None
    return expr


def tensor_ctor(ctx, expr: ast.AST) -> bool:
    return isinstance(expr, ast.Call) and ctx.qn(expr) in _TENSOR_CTORS


_DEVICE_VARS = ("device", "local_rank", "device_id", "local_device", "gpu_id", "dev", "gpu", "cuda_device")
_DEVICE_NAME = re.compile(r"^(device|local_rank|device_id|local_device|gpu_id|dev|gpu|cuda_device)$")


def device_var_in_scope(ctx, scope: ast.AST) -> str | None:
    """A per-rank device variable visible in ``scope``: a parameter or a name assigned in the
    function (or module) named like ``device`` / ``local_rank``, bound to something device-like."""
    sem = ctx.sem
    params = param_names(scope) if isinstance(scope, FUNC_TYPES) else []
    assigned = sem.assignments(scope)
    for n in _DEVICE_VARS:
        if n in params:
            return n
        if n in assigned:
            val = sem.single_value(n, scope)
            if val is not None and _device_like(ctx, val):
                return n
            if val is None and all(isinstance(b, (ast.Assign, ast.AnnAssign)) for b in assigned[n]):
                return n
    return None


def _device_like(ctx, val: ast.AST) -> bool:
    if isinstance(val, ast.Constant):
        return isinstance(val.value, str) and val.value.startswith("cuda:") or type(val.value) is int
    if isinstance(val, ast.JoinedStr):
        first = val.values[0] if val.values else None
        return isinstance(first, ast.Constant) and str(first.value).startswith("cuda:")
    if isinstance(val, ast.Call):
        qn = ctx.qn(val) or ""
        if qn == "torch.device":
            a = val.args[0] if val.args else None
            if isinstance(a, ast.Constant) and a.value == "cuda" and len(val.args) < 2:
                return False  # torch.device("cuda"): the current device, not a per-rank one
            return True
        if qn in ("torch.cuda.current_device",):
            return True
        if isinstance(val.func, ast.Name) and val.func.id == "int":
            return True
        return False
    if isinstance(val, (ast.Subscript, ast.Attribute, ast.BinOp, ast.Name)):
        return True
    return False
