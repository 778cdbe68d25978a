"""Tensor dtypes: which dtype a tensor is built with, and a collective's buffer that one arm of a
rank test builds with one dtype and the other arm with another.

``dtype_of(hub, view, expr)`` gives a ``DType`` (``family``: "int", "float", "bool", "complex";
``exact``: "int64", "float32", ... or None for the default floating dtype, which
``torch.set_default_dtype`` may change) or None where it is not known. Followed: the dtype of
``torch.zeros/ones/empty/rand/randn/full/arange(..., dtype=...)`` (the default floating dtype
without one; ``full`` and ``arange`` take it from their values), ``torch.tensor(data)`` /
``as_tensor`` (from the Python values of ``data``: ints make int64), the typed constructors
(``torch.LongTensor``), ``*_like`` of a known tensor, conversions (``.long()``, ``.float()``,
``.to(torch.int32)``) and methods that keep the dtype (``.cuda()``, ``.clone()``, ``.to(device)``
with a device string or ``device=``), names through their bindings. Python values: int and float
literals, ``int()``/``len()``/``float()``, arithmetic, ``max``/``min``/``sum`` of them (also
``max(seq, default=0)`` of a comprehension), and what a project function returns.

``branch_dtype_splits(hub, view)``: (collective, buffer, (binding, dtype), (binding, dtype),
test) where the buffer of a ``broadcast``/``all_reduce``/``reduce``/``all_gather`` is bound in
both arms of an ``if`` on a rank-varying test, the two bindings reach the collective, and their
dtypes differ (a different family, or two different exact dtypes): the ranks hand the collective
buffers of different byte sizes or kinds (DDP109).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, parent
from ..torch_api import D
from .assignments import has_ancestor
from .bindings import reaching
from .helper_calls import resolved
from .origins import origins

_MAX_DEPTH = 12

_TORCH_DTYPES = {
    "float32": ("float", "float32"), "float": ("float", "float32"), "float64": ("float", "float64"),
    "double": ("float", "float64"), "float16": ("float", "float16"), "half": ("float", "float16"),
    "bfloat16": ("float", "bfloat16"), "int64": ("int", "int64"), "long": ("int", "int64"),
    "int32": ("int", "int32"), "int": ("int", "int32"), "int16": ("int", "int16"), "short": ("int", "int16"),
    "int8": ("int", "int8"), "uint8": ("int", "uint8"), "bool": ("bool", "bool"),
    "complex64": ("complex", "complex64"), "complex128": ("complex", "complex128"),
}
_CONVERT = {"long": "int64", "int": "int32", "float": "float32", "double": "float64", "half": "float16",
            "bfloat16": "bfloat16", "bool": "bool", "short": "int16", "byte": "uint8", "char": "int8"}
_KEEP_METHODS = frozenset({"cuda", "cpu", "clone", "detach", "contiguous", "pin_memory", "view", "reshape",
                           "flatten", "squeeze", "unsqueeze", "requires_grad_", "detach_"})
_DEFAULT_FLOAT_CTORS = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn"})
_FROM_DATA = frozenset({"torch.tensor", "torch.as_tensor"})
_TYPED = {"torch.LongTensor": "int64", "torch.IntTensor": "int32", "torch.FloatTensor": "float32",
          "torch.DoubleTensor": "float64", "torch.HalfTensor": "float16", "torch.BoolTensor": "bool",
          "torch.ByteTensor": "uint8", "torch.cuda.LongTensor": "int64", "torch.cuda.FloatTensor": "float32",
          "torch.cuda.IntTensor": "int32", "torch.cuda.DoubleTensor": "float64"}
_LIKE = frozenset({"torch.zeros_like", "torch.ones_like", "torch.empty_like", "torch.full_like",
                   "torch.rand_like", "torch.randn_like"})
# collectives whose tensor must have the same dtype on every rank: (position, keyword) of the tensor
BUFFERED = {"broadcast": (0, "tensor"), "all_reduce": (0, "tensor"), "reduce": (0, "tensor"),
            "all_gather": (1, "tensor"), "all_gather_into_tensor": (1, "input_tensor")}


class DType:
    __slots__ = ("family", "exact")

    def __init__(self, family: str, exact: str | None):
        self.family, self.exact = family, exact

    def differs(self, o: "DType") -> bool:
        return self.family != o.family or (self.exact is not None and o.exact is not None and self.exact != o.exact)

    def words(self) -> str:
        return self.exact or "the default floating dtype (float32)"


def _of_name(name: str) -> DType | None:
    got = _TORCH_DTYPES.get(name)
    return DType(*got) if got else None


def _dtype_arg(sem, e) -> DType | None:
    """``torch.int64`` (or ``torch.long``) as an argument."""
    qn = sem.qualname(e) if isinstance(e, (ast.Attribute, ast.Name)) else None
    if qn and qn.startswith("torch.") and qn.count(".") == 1:
        return _of_name(qn[len("torch."):])
    return None


def _from_py(kind: str | None) -> DType | None:
    return {"int": DType("int", "int64"), "float": DType("float", None), "bool": DType("bool", "bool")}.get(kind)


def dtype_of(hub, view, expr, at=None, depth: int = 0) -> DType | None:
    """The dtype of the tensor ``expr`` evaluates to at ``at``, or None when not known."""
    if expr is None or depth > _MAX_DEPTH:
        return None
    sem = view.sem
    at = expr if at is None else at
    if isinstance(expr, ast.Name):
        kind, evs = reaching(view, expr.id, at)
        if kind != "events" or not evs:
            return None
        got = None
        for e in evs:
            if not (isinstance(e, ast.Assign) and len(e.targets) == 1 and isinstance(e.targets[0], ast.Name)):
                return None
            d = dtype_of(hub, view, e.value, e, depth + 1)
            if d is None or (got is not None and (got.differs(d) or got.exact != d.exact)):
                return None
            got = d
        return got
    if not isinstance(expr, ast.Call):
        return None
    explicit = get_arg(expr, None, "dtype")
    qn = sem.call_qualname(expr) or ""
    f = expr.func
    if qn.startswith("torch."):
        if any(k.arg is None for k in expr.keywords) or any(isinstance(a, ast.Starred) for a in expr.args):
            return None
        if explicit is not None:
            return _dtype_arg(sem, explicit)
        if qn in _DEFAULT_FLOAT_CTORS:
            return DType("float", None)
        if qn in _TYPED:
            return _of_name(_TYPED[qn])
        if qn in _FROM_DATA:
            return _from_py(py_kind(hub, view, get_arg(expr, 0, "data"), at, depth + 1, seq=True))
        if qn == "torch.full":
            return _from_py(py_kind(hub, view, get_arg(expr, 1, "fill_value"), at, depth + 1))
        if qn == "torch.arange":
            kinds = {py_kind(hub, view, a, at, depth + 1) for a in expr.args}
            return _from_py(kinds.pop()) if len(kinds) == 1 else None
        if qn in _LIKE:
            return dtype_of(hub, view, get_arg(expr, 0, "input"), at, depth + 1)
        return None
    if isinstance(f, ast.Attribute) and not qn:
        a = f.attr
        if a in _CONVERT and not expr.args and not expr.keywords:
            return _of_name(_CONVERT[a])
        if a in _KEEP_METHODS:
            return dtype_of(hub, view, f.value, at, depth + 1)
        if a == "to":
            if explicit is not None:
                return _dtype_arg(sem, explicit)
            if expr.args:
                d = _dtype_arg(sem, expr.args[0])
                if d is not None:
                    return d
                if not (isinstance(expr.args[0], ast.Constant) and isinstance(expr.args[0].value, str)):
                    return None  # a name may hold a dtype
            if all(k.arg in ("device", "non_blocking") for k in expr.keywords):
                return dtype_of(hub, view, f.value, at, depth + 1)
    return None


def py_kind(hub, view, expr, at, depth: int = 0, seq: bool = False) -> str | None:
    """"int", "float" or "bool" for a Python number (``seq``: for the elements of a list, tuple or
    comprehension, nested), or None."""
    if expr is None or depth > _MAX_DEPTH:
        return None
    if isinstance(expr, (ast.List, ast.Tuple)):
        if not seq or not expr.elts or any(isinstance(x, ast.Starred) for x in expr.elts):
            return None
        return _join([py_kind(hub, view, x, at, depth + 1, seq=True) for x in expr.elts])
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)):
        return py_kind(hub, view, expr.elt, at, depth + 1, seq=True) if seq else None
    if isinstance(expr, ast.Constant):
        v = expr.value
        return "bool" if isinstance(v, bool) else "int" if isinstance(v, int) else "float" if isinstance(v, float) else None
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, (ast.USub, ast.UAdd)):
        return py_kind(hub, view, expr.operand, at, depth + 1)
    if isinstance(expr, ast.BinOp):
        left, right = py_kind(hub, view, expr.left, at, depth + 1), py_kind(hub, view, expr.right, at, depth + 1)
        if left not in ("int", "float") or right not in ("int", "float"):
            return None
        if isinstance(expr.op, ast.Div):
            return "float"
        if isinstance(expr.op, (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)):
            return "float" if "float" in (left, right) else "int"
        return None
    if isinstance(expr, ast.IfExp):
        return _join([py_kind(hub, view, expr.body, at, depth + 1, seq), py_kind(hub, view, expr.orelse, at, depth + 1, seq)])
    if isinstance(expr, ast.Name):
        # through bindings, tuple unpacking, ``self`` attributes, helpers' returns and parameters;
        # a name also rebound by ``+=``, a loop or a ``with`` is not followed (origins skips those)
        kind, evs = reaching(view, expr.id, at)
        if kind not in ("events", "param") or (kind == "events" and not all(
                isinstance(e, ast.Assign) or (isinstance(e, ast.AnnAssign) and e.value is not None)
                for e in evs or ())):
            return None
        leaves = origins(hub, view, expr, at, keep_path=True)
        if not leaves or any(rest or isinstance(e, ast.Name) for _v, e, rest in leaves):
            return None
        return _join([py_kind(hub, v, e, e, depth + 1, seq) for v, e, _rest in leaves])
    if not isinstance(expr, ast.Call):
        return None
    f = expr.func
    if isinstance(f, ast.Name) and view.sem.call_qualname(expr) in (None, f.id, "builtins." + f.id) \
            and f.id not in view.defs and f.id not in view.imports:
        if seq and f.id in ("list", "tuple", "sorted") and len(expr.args) == 1:
            return py_kind(hub, view, expr.args[0], at, depth + 1, seq=True)
        if f.id in ("int", "len") and len(expr.args) == 1:
            return "int"
        if f.id == "round" and len(expr.args) == 1:
            return "int"
        if f.id == "float" and len(expr.args) == 1:
            return "float"
        if f.id == "bool" and len(expr.args) == 1:
            return "bool"
        if f.id in ("max", "min", "sum"):
            if any(isinstance(a, ast.Starred) for a in expr.args) or any(
                    k.arg not in ("default", "start") for k in expr.keywords):
                return None
            if len(expr.args) == 1:
                parts = [py_kind(hub, view, expr.args[0], at, depth + 1, seq=True)]
                parts += [py_kind(hub, view, k.value, at, depth + 1) for k in expr.keywords]
                if f.id == "sum" and not expr.keywords:
                    parts.append("int")  # ``start`` is 0
                got = _join(parts)
                return got if got != "bool" or f.id != "sum" else None
            return _join([py_kind(hub, view, a, at, depth + 1) for a in expr.args]) if expr.args else None
        return None
    target = resolved(hub, view, expr)
    if target is None or not isinstance(target[1], FUNC_TYPES) or target[1].name == "__init__":
        return None
    tv, fn = target
    kinds = [py_kind(hub, tv, n.value, n, depth + 1, seq) for n in iter_scope_nodes(fn)
             if isinstance(n, ast.Return)]
    return _join(kinds) if kinds and all(isinstance(n.value, ast.expr) for n in iter_scope_nodes(fn)
                                         if isinstance(n, ast.Return)) else None


def _join(kinds) -> str | None:
    kinds = list(kinds)
    if not kinds or any(k is None for k in kinds):
        return None
    s = set(kinds)
    if len(s) == 1:
        return kinds[0]
    if s == {"int", "float"}:
        return "float"
    return None


def _arm(node):
    """{if statement: arm} around ``node`` in its function: 0 its body, 1 its else."""
    out = {}
    child, p = node, parent(node)
    while p is not None:
        if isinstance(p, ast.If):
            if child in p.body:
                out[p] = 0
            elif child in p.orelse:
                out[p] = 1
        if isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            break
        child, p = p, parent(p)
    return out


def branch_dtype_splits(hub, view) -> list:
    """(collective, buffer, (binding, dtype), (binding, dtype), if statement) for the collectives of
    ``view`` whose buffer gets one dtype in one arm of a rank-varying ``if`` and another in the
    other arm."""
    got = view.memo.get("dtypes.splits")
    if got is not None:
        return got
    got = view.memo["dtypes.splits"] = []
    sem = view.sem
    ev = hub.evaluator(view)
    for op, (pos, kw) in BUFFERED.items():
        for c in sem.calls_to(D + op):
            if get_arg(c, None, "group") is not None:
                continue
            t = get_arg(c, pos, kw)
            if not isinstance(t, ast.Name):
                continue
            kind, evs = reaching(view, t.id, c)
            if kind != "events" or not evs or len(evs) < 2:
                continue
            typed = []
            for e in evs:
                if isinstance(e, ast.Assign) and len(e.targets) == 1 and isinstance(e.targets[0], ast.Name):
                    d = dtype_of(hub, view, e.value, e)
                    if d is not None:
                        typed.append((e, d))
            found = _split(ev, typed, c)
            if found is not None:
                got.append((c, t, *found))
    return got


def _split(ev, typed, stop):
    for i, (a, da) in enumerate(typed):
        arms_a = _arm(a)
        for b, db in typed[i + 1:]:
            if not da.differs(db):
                continue
            arms_b = _arm(b)
            for test_if, arm in arms_a.items():
                if arms_b.get(test_if, arm) != arm and ev.value(test_if.test).varying:
                    if has_ancestor(stop, test_if):
                        continue  # the collective is itself inside one arm
                    return ((a, da), (b, db), test_if) if arm == 0 else ((b, db), (a, da), test_if)
    return None


