"""Where modules and tensors live: was the module handed to DDP built on the CPU and never moved,
and which device variable is in scope (for a message or a fix).

All of it is local dataflow in one scope (plus module level), over the semantic indexes. Two
questions, two vocabularies of device names: ``device_var_in_scope`` accepts a per-rank index
(``local_rank``, an ``int``) for a tensor's ``device=``; ``device_in_scope`` wants a
``torch.device`` or a device string for ``map_location`` / ``.to(...)``.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from .assignments import reaching_assignment

_MOVE_METHODS = frozenset({"to", "cuda", "to_empty", "xpu", "npu", "mps"})
# calls that hand back the module they got (same device)
_PASS_THROUGH = frozenset({
    "torch.nn.SyncBatchNorm.convert_sync_batchnorm", "torch.compile",
    "torch.nn.utils.parametrize.cached", "torch.jit.script",
})
_DEVICE_VARS = ("device", "local_rank", "device_id", "local_device", "gpu_id", "dev", "gpu", "cuda_device")


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


# -- where does a module live? -------------------------------------------------------------------
def _file_classes(ctx) -> dict[str, ast.ClassDef]:
    return ctx.memo("devices.classes",
                    lambda: {st.name: st for st in ctx.sem.tree.body if isinstance(st, ast.ClassDef)})


def _is_module_class(ctx, cls: ast.ClassDef, depth: int = 0) -> bool:
    if depth > 4:
        return False
    for b in cls.bases:
        qn = ctx.qn(b) or ""
        if qn.startswith("torch.nn."):
            return True
        if isinstance(b, ast.Name):
            other = _file_classes(ctx).get(b.id)
            if other is not None and other is not cls and _is_module_class(ctx, other, depth + 1):
                return True
    return False


def _class_places_itself(ctx, cls: ast.ClassDef, depth: int = 0) -> bool:
    """The class body moves something or creates tensors with an explicit device (or inherits from a
    class of the file that does): it may already live on a device."""
    if depth > 4:
        return True
    for c in ctx.sem.calls:
        if c.lineno < cls.lineno or c.end_lineno > cls.end_lineno:
            continue
        f = c.func
        if isinstance(f, ast.Attribute) and f.attr in _MOVE_METHODS:
            return True
        if any(k.arg in ("device", None) for k in c.keywords):
            return True
    if _unknown_builders(ctx, cls, depth):
        return True
    for fn in cls.body:
        if isinstance(fn, FUNC_TYPES) and fn.name == "__init__" and "device" in param_names(fn):
            return True
    for b in cls.bases:
        if isinstance(b, ast.Name):
            other = _file_classes(ctx).get(b.id)
            if other is not None and other is not cls and _class_places_itself(ctx, other, depth + 1):
                return True
    return False


_SAFE_BUILTINS = frozenset({"super", "range", "len", "int", "float", "str", "list", "dict", "tuple", "set", "zip",
                            "enumerate", "min", "max", "sum", "abs", "round", "isinstance", "getattr", "setattr",
                            "hasattr", "print", "sorted", "reversed", "map", "filter", "any", "all", "type", "bool"})


def _unknown_builders(ctx, init: ast.AST, depth: int) -> bool:
    """The class body calls something that may build a module elsewhere (and place it on a device):
    a function or class imported from outside torch/torchvision/timm, or one of this file that is
    not a CPU-only module class."""
    for c in ctx.sem.calls:
        if c.lineno < init.lineno or c.end_lineno > init.end_lineno:
            continue
        f = c.func
        if isinstance(f, ast.Name):
            if f.id in _SAFE_BUILTINS:
                continue
            qn = ctx.qn(c)
            if qn is not None:
                if not qn.startswith(("torch.", "torchvision.", "timm.", "math.", "functools.", "collections.")):
                    return True
                continue
            cls = _file_classes(ctx).get(f.id)
            if cls is not None and _is_module_class(ctx, cls) and not _class_places_itself(ctx, cls, depth + 1):
                continue
            return True  # a helper function of this file, or a name we cannot see
        elif isinstance(f, ast.Attribute):
            qn = ctx.qn(c)
            if qn is not None and not qn.startswith(("torch.", "torchvision.", "timm.", "math.", "functools.",
                                                     "collections.", "copy.")):
                return True  # e.g. ``registry.build(cfg)`` from an imported module
            # methods of self/super()/locals (``layers.append``, ``self._init_weights()``) are fine
    return False


def constructs_cpu_module(ctx, call: ast.Call) -> bool:
    """A module constructor known to build on the CPU: ``torch.nn.X(...)`` and torchvision/timm
    model builders without ``device=``, or a ``nn.Module`` subclass of this file that never places
    itself."""
    if any(k.arg in ("device", None) for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return False
    qn = ctx.qn(call) or ""
    if qn.startswith("torch.nn.") and not qn.startswith(("torch.nn.functional.", "torch.nn.parallel.", "torch.nn.utils.",
                                                        "torch.nn.init.")):
        head = qn.rsplit(".", 1)[-1]
        if head in ("Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"):
            # a container is on the CPU only when everything in it is built right there;
            # ``nn.Sequential(trunk, head)`` from modules already moved cannot be decided
            parts = [*call.args, *(k.value for k in call.keywords)]
            return all(isinstance(a, ast.Call) and constructs_cpu_module(ctx, a) for a in parts)
        return head[:1].isupper()
    if qn.startswith("torchvision.models.") and qn.rsplit(".", 1)[-1][:1].islower():
        return True
    if qn in ("timm.create_model", "timm.models.create_model"):
        return True
    if isinstance(call.func, ast.Name) and call.func.id not in ctx.sem.aliases:
        cls = _file_classes(ctx).get(call.func.id)
        if cls is not None and _is_module_class(ctx, cls) and not _class_places_itself(ctx, cls):
            return True
    if not qn.startswith(("torch.", "torchvision.", "timm.")) and isinstance(call.func, (ast.Name, ast.Attribute)) \
            and getattr(ctx, "_devices_view", None) is None:
        return _project_cpu_module(ctx, call)
    return False


def _project_cpu_module(ctx, call: ast.Call) -> bool:
    """``SmallNet()`` whose class lives in another file of the project (``from models.net import
    SmallNet``): an ``nn.Module`` subclass there that never places itself (judged in its own
    module, with the same rules as a class of this file)."""
    from . import for_context  # lazy: only module constructors handed to DDP get here

    ana = for_context(ctx)
    got = ana.resolve_call(ana.main, call)
    if got is None or got[0] is ana.main or got[1].name != "__init__":
        return False
    view, init = got
    cls = parent(init)
    if not isinstance(cls, ast.ClassDef) or not isinstance(parent(cls), ast.Module):
        return False

    def build():
        from ..context import Context
        from ..source import SourceText

        c = Context(SourceText(view.text), view.sem, view.path)
        c._devices_view = view
        return c
    vctx = ctx.memo(("devices.view_ctx", view.path), build)
    return _is_module_class(vctx, cls) and not _class_places_itself(vctx, cls)


def on_device(ctx, expr: ast.AST, at: ast.AST, depth: int = 0) -> bool | None:
    """True: ``expr`` (the module handed to DDP at ``at``) was moved or built on a device on some
    path; False: on every path it was built on the CPU and never moved; None: cannot tell."""
    if depth > 4:
        return None
    if isinstance(expr, ast.Call):
        f = expr.func
        if isinstance(f, ast.Attribute) and f.attr in _MOVE_METHODS:
            return True
        if constructs_cpu_module(ctx, expr):
            return False
        if (ctx.qn(expr) or "") in _PASS_THROUGH and expr.args:
            return on_device(ctx, expr.args[0], at, depth + 1)
        return None
    if _is_self_attr(expr):
        return _self_attr_on_device(ctx, expr, at, depth)
    if not isinstance(expr, ast.Name):
        return None
    name = expr.id
    sem = ctx.sem
    scope = sem.scope_of(at)
    assigns = sem.assignments(scope).get(name)
    if not assigns:
        return None  # a parameter, a global, or bound elsewhere
    before = [a for a in assigns if a.lineno < at.lineno]
    if not before:
        return None
    for st in before:
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
            return None
        v = st.value
        if isinstance(v, ast.Name) and v.id == name:
            continue
        res = on_device(ctx, v, st, depth + 1)
        if res is not False:
            return res  # moved on some path, or unknown
    # in-place moves or hand-offs between the first binding and the DDP call
    first = before[0].lineno
    for c in sem.calls:
        if c.lineno < first or c.lineno > at.lineno or c is at:
            continue
        if sem.scope_of(c) is not scope:
            continue
        f = c.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == name and f.attr in _MOVE_METHODS:
            return True
        if (ctx.qn(c) or "") in _PASS_THROUGH:
            continue
        for a in (*c.args, *(k.value for k in c.keywords)):
            if isinstance(a, ast.Name) and a.id == name:
                return None  # handed to code we do not follow
    if _under_device_context(ctx, at) or any(_under_device_context(ctx, b) for b in before):
        return None
    return False


def _is_self_attr(e) -> bool:
    return isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self"


def _self_attr_on_device(ctx, expr: ast.Attribute, at: ast.AST, depth: int) -> bool | None:
    """``self.net`` handed to DDP in a method: False when every assignment of ``self.net`` in the
    class is a plain one earlier in the same block of that method that builds a CPU module, and
    nothing between it and the wrap moves it, passes it on, or calls another method of ``self``
    (which could move it)."""
    sem = ctx.sem
    fn = sem.enclosing_function(at)
    if fn is None or not isinstance(getattr(fn, "_p", None), ast.ClassDef):
        return None
    cls = fn._p
    attr = expr.attr
    stores = []
    for n in ast.walk(cls):
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                for x in ast.walk(t):
                    if _is_self_attr(x) and x.attr == attr and isinstance(x.ctx, ast.Store):
                        stores.append((n, x is t))
    before = [(n, plain) for n, plain in stores if n.lineno < at.lineno and sem.enclosing_function(n) is fn]
    st_at = sem.statement_of(at)
    others = [n for n, _ in stores if n not in [b for b, _ in before] and n is not st_at]
    if len(before) != 1 or others or not before[0][1] or not isinstance(before[0][0], ast.Assign) \
            or getattr(before[0][0], "_p", None) is not getattr(st_at, "_p", None):
        return None
    st = before[0][0]
    if on_device(ctx, st.value, st, depth + 1) is not False:
        return None
    for c in sem.calls:
        if c.lineno < st.lineno or c.lineno > at.lineno or c is at or sem.enclosing_function(c) is not fn:
            continue
        f = c.func
        if isinstance(f, ast.Attribute) and _is_self_attr(f.value) and f.value.attr == attr and f.attr in _MOVE_METHODS:
            return True
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            return None  # another method of the object may move it
        if (ctx.qn(c) or "") in _PASS_THROUGH:
            continue
        for a in (*c.args, *(k.value for k in c.keywords)):
            if (_is_self_attr(a) and a.attr == attr) or (isinstance(a, ast.Name) and a.id == "self"):
                return None
    if _under_device_context(ctx, at) or _under_device_context(ctx, st):
        return None
    return False


def _under_device_context(ctx, node: ast.AST) -> bool:
    if ctx.sem.calls_to("torch.set_default_device"):
        return True
    for a in ctx.sem.ancestors(node):
        if isinstance(a, (ast.With, ast.AsyncWith)):
            for item in a.items:
                e = item.context_expr
                if isinstance(e, ast.Call) and (ctx.qn(e) or "") in ("torch.device", "torch.cuda.device"):
                    return True
    return False


# -- a device to name in a fix -----------------------------------------------------------------
_DEVICE_NAMES = ("device", "local_device", "dev", "rank_device", "cuda_device")


def device_in_scope(ctx, node: ast.AST) -> str | None:
    """A name in ``node``'s scope bound to ``torch.device(...)`` or a device string, usable as
    ``map_location``/``.to(...)``; None when there is none."""
    for n in _DEVICE_NAMES:
        st = reaching_assignment(ctx, n, node)
        if st is None:
            continue
        v = st.value
        if isinstance(v, ast.Call) and (ctx.qn(v) or "") == "torch.device":
            return n
        if isinstance(v, ast.JoinedStr) or (isinstance(v, ast.Constant) and isinstance(v.value, str)):
            return n
    return None


def first_device_id(call: ast.Call) -> ast.AST | None:
    ids = get_arg(call, 1, "device_ids")
    if isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1 and not isinstance(ids.elts[0], ast.Starred):
        return ids.elts[0]
    return None
