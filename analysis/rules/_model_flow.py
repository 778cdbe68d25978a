"""Model and device flow for the DDP2xx rules: is this file a distributed script, which names hold
the DDP wrapper, was a module moved to a device before it was wrapped, which device is in scope.

All of it is local dataflow in one scope (plus module level), over the semantic indexes.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, param_names, parent

DDP = "torch.nn.parallel.DistributedDataParallel"
SPAWNS = ("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes")
_LAUNCH = ("torch.distributed.init_process_group", DDP, *SPAWNS,
           "torch.distributed.fsdp.FullyShardedDataParallel", "torch.distributed.fsdp.fully_shard",
           "torch.distributed._composable.fsdp.fully_shard", "torch.distributed.device_mesh.init_device_mesh")
# what a file must spell for is_distributed_script to hold (the last component of each launch call)
LAUNCH_TEXT = tuple(dict.fromkeys(q.rsplit(".", 1)[1] for q in _LAUNCH))
_MOVE_METHODS = frozenset({"to", "cuda", "to_empty", "xpu", "npu", "mps"})
# calls that hand back the module they got (same device)
_PASS_THROUGH = frozenset({
    "torch.nn.SyncBatchNorm.convert_sync_batchnorm", "torch.compile",
    "torch.nn.utils.parametrize.cached", "torch.jit.script",
})


def is_distributed_script(ctx) -> bool:
    """The file starts or joins a process group, wraps in DDP/FSDP or spawns ranks itself."""
    return ctx.memo("model_flow.distributed_script", lambda: bool(ctx.sem.calls_to(*_LAUNCH)))


def ddp_calls(ctx) -> list[ast.Call]:
    return ctx.sem.calls_to(DDP)


def stmt_list_of(node: ast.stmt) -> tuple[ast.AST, list[ast.stmt]] | None:
    p = parent(node)
    if p is None:
        return None
    for field in ("body", "orelse", "finalbody", "handlers"):
        lst = getattr(p, field, None)
        if isinstance(lst, list) and node in lst:
            return p, lst
    return None


def dominates(stmt: ast.stmt, node: ast.AST) -> bool:
    """``stmt`` runs, unconditionally, before ``node`` in the same scope: it sits earlier in a block
    that contains ``node`` (so an ``if`` around ``stmt`` alone makes it not dominate)."""
    got = stmt_list_of(stmt)
    if got is None:
        return False
    _, lst = got
    n = node
    while n is not None:
        if n in lst:
            return lst.index(n) > lst.index(stmt)
        if isinstance(n, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            return False
        n = parent(n)
    return False


def reaching_assignment(ctx, name: str, node: ast.AST):
    """The textually last plain assignment of ``name`` before ``node`` in ``node``'s scope (module
    level when the function does not bind the name). None when there is none, or when the name is a
    parameter, or bound by something other than ``name = value``."""
    sem = ctx.sem
    scope = sem.scope_of(node)
    assigns = sem.assignments(scope).get(name)
    if not assigns:
        if isinstance(scope, ast.Module) or name in param_names(scope):
            return None
        scope = sem.tree
        assigns = sem.assignments(scope).get(name)
        if not assigns:
            return None
        before = assigns  # module-level binding seen from a function: all of them
    else:
        before = [a for a in assigns if a.lineno < node.lineno]
    if not before:
        return None
    last = before[-1]
    if isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name):
        return last
    if isinstance(last, ast.AnnAssign) and last.value is not None:
        return last
    return None


def is_ddp_wrapper(ctx, expr: ast.AST, at: ast.AST):
    """The ``X = DDP(...)`` assignment when ``expr`` (a name or ``self.attr``) holds the DDP wrapper
    at ``at``; else None."""
    if isinstance(expr, ast.Name):
        st = reaching_assignment(ctx, expr.id, at)
        if st is not None and isinstance(st.value, ast.Call) and ctx.qn(st.value) == DDP:
            return st
        return None
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        cls = next((a for a in ctx.sem.ancestors(expr) if isinstance(a, ast.ClassDef)), None)
        if cls is None:
            return None
        found = []
        for c in ddp_calls(ctx):
            st = parent(c)
            if isinstance(st, ast.Assign) and st.lineno >= cls.lineno and st.end_lineno <= cls.end_lineno:
                for t in st.targets:
                    if isinstance(t, ast.Attribute) and t.attr == expr.attr and isinstance(t.value, ast.Name) \
                            and t.value.id == "self":
                        found.append(st)
        if len(found) == 1 and not _other_self_assigns(ctx, cls, expr.attr, found[0]):
            return found[0]
    return None


def _other_self_assigns(ctx, cls: ast.ClassDef, attr: str, keep: ast.stmt) -> bool:
    # assignments() only indexes plain names; look at the class's statements directly (bounded)
    for st in _class_assign_stmts(cls):
        if st is keep:
            continue
        targets = st.targets if isinstance(st, ast.Assign) else [st.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and t.attr == attr:
                return True
    return False


def _class_assign_stmts(cls: ast.ClassDef):
    stack = list(cls.body)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            yield n
        for f in ("body", "orelse", "finalbody", "handlers"):
            v = getattr(n, f, None)
            if isinstance(v, list):
                stack.extend(x for x in v if isinstance(x, ast.AST))


# -- where does a module live? -------------------------------------------------------------------
def _file_classes(ctx) -> dict[str, ast.ClassDef]:
    return ctx.memo("model_flow.classes",
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
    return False


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
    sem = ctx.sem
    scope = sem.scope_of(node)
    for n in _DEVICE_NAMES:
        st = reaching_assignment(ctx, n, node)
        if st is None:
            continue
        v = st.value
        if isinstance(v, ast.Call) and (ctx.qn(v) or "") == "torch.device":
            return n
        if isinstance(v, ast.JoinedStr) or (isinstance(v, ast.Constant) and isinstance(v.value, str)):
            return n
    del scope
    return None


def first_device_id(call: ast.Call) -> ast.AST | None:
    ids = get_arg(call, 1, "device_ids")
    if isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1 and not isinstance(ids.elts[0], ast.Starred):
        return ids.elts[0]
    return None
