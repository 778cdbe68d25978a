"""The uses of the *current* CUDA device (DDP001, DDP601): ``x.cuda()`` without an index,
``.to("cuda")``, ``device="cuda"`` (also through a name, an argparse default, a config dict),
``torch.cuda.current_device()`` as a value, and the collectives / DDP constructors they feed."""
from __future__ import annotations

import ast

from ..semantic import get_arg, parent
from ..torch_api import argparse_default, attribute_store_value, dict_item_value
from ._common import D, DDP_CLASS, TENSOR_COLLECTIVES, device_call_index
from ._per_rank_device import _const_cuda, _device_position, _label

def current_device_uses(ctx, eager_only: bool) -> list[tuple[ast.AST, str]]:
    """Expressions that put tensors (or a communicator) on the *current* CUDA device: ``x.cuda()``
    without an index, ``.to("cuda")``, ``device="cuda"``, ``torch.device("cuda")`` (unless
    ``eager_only``: that object only picks its device when a tensor is made on it),
    ``torch.cuda.current_device()`` used as a value, and tensor collectives / DDP constructors fed
    with such tensors or modules."""
    return ctx.memo(("ddp001.current_device_uses", eager_only), lambda: _current_device_uses(ctx, eager_only))


def _current_device_uses(ctx, eager_only: bool) -> list[tuple[ast.AST, str]]:
    sem = ctx.sem
    nodes: set[int] = set()  # ids of the affected expressions
    # the moves (``.cuda()``, ``.to("cuda")``) first in the list, then the allocations
    # (``device="cuda"``) of the other calls
    idx = device_call_index(ctx)
    out: list[tuple[ast.AST, str]] = []
    # a name (``.to(device)``, ``device=device``) is judged once per scope: look the answer up
    # here before calling ``_is_cuda_literal`` (which fills the same memo)
    names = ctx.memo("ddp001.cuda_names", dict)
    scope_of = sem.scope_of
    Name = ast.Name
    for c in idx.moves:
        f = c.func
        if f.attr == "cuda":
            if not c.args and all(k.arg == "non_blocking" for k in c.keywords) \
                    and ctx.qn(f.value) not in ("torch", "torch.cuda"):
                out.append((c, f"`{_label(ctx, c)}` moves to the current CUDA device"))
                nodes.add(id(c))
        elif c.args:
            a = c.args[0]
            got = sc = None
            if a.__class__ is Name:
                sc = scope_of(c)
                got = names.get((a.id, id(sc), True, 0))
            if got is None:
                got = _is_cuda_literal(ctx, a, c, scope=sc)
            if got:
                out.append((c, f"`{_label(ctx, c)}` moves to the current CUDA device"))
                nodes.add(id(c))
    allow = not eager_only
    for c, value in idx.device_kw:
        if id(c) in nodes:
            continue
        got = sc = None
        if value.__class__ is Name:
            sc = scope_of(c)
            got = names.get((value.id, id(sc), allow, 0))
        if got is None:
            got = _is_cuda_literal(ctx, value, c, allow_device_obj=allow, scope=sc)
        if got:
            out.append((c, f"`{_label(ctx, c)}` allocates on the current CUDA device"))
            nodes.add(id(c))
    if not eager_only:
        for c in sem.calls_to("torch.device"):
            if len(c.args) == 1 and not c.keywords and _const_cuda(c.args[0]) and _used_as_device(ctx, c):
                out.append((c, '`torch.device("cuda")` is the current CUDA device'))
                nodes.add(id(c))
    for c in sem.calls_to("torch.cuda.current_device"):
        if _only_printed(c) or not _used_as_device(ctx, c):
            continue
        out.append((c, "`torch.cuda.current_device()` is 0 on every rank"))
        nodes.add(id(c))
    if not nodes:
        return out
    # a collective or DDP(...) fed with one of them (directly or through a name bound once)
    def fed(arg: ast.AST | None, scope) -> bool:
        if arg is None:
            return False
        if id(arg) in nodes:
            return True
        if isinstance(arg, ast.Name):
            val = sem.single_value(arg.id, scope)
            return val is not None and any(id(n) in nodes for n in ast.walk(val))
        return False
    for c in ctx.dist_calls(*TENSOR_COLLECTIVES):
        if fed(get_arg(c, 0, "tensor"), sem.scope_of(c)):
            out.append((c, f"`{_short(ctx, c)}` on a tensor on the current CUDA device"))
    for c in sem.calls_to(DDP_CLASS):
        if fed(get_arg(c, 0, "module"), sem.scope_of(c)):
            out.append((c, "`DistributedDataParallel(...)` broadcasts the parameters from their device, "
                           "cuda:0 on every rank, whatever `device_ids` says"))
    return out


def _used_as_device(ctx, call: ast.Call) -> bool:
    """``torch.cuda.current_device()`` placing something (directly, or through a name bound to it
    once); reading it in a test or a log line is not a use."""
    if _device_position(ctx, call):
        return True
    st = parent(call)
    if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
        name = st.targets[0].id
        scope = ctx.sem.scope_of(call)
        for n in ast.walk(scope):
            if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load) \
                    and ctx.sem.scope_of(n) is scope and _device_position(ctx, n):
                return True
    return False


def _is_cuda_literal(ctx, node, at, allow_device_obj: bool = True, depth: int = 0, scope=None) -> bool:
    """``"cuda"``, ``torch.device("cuda")`` or a name bound once to one of them (an if-expression
    ``"cuda" if torch.cuda.is_available() else "cpu"`` counts: on a GPU node it is "cuda").
    ``scope``: ``scope_of(at)`` when the caller has it already."""
    if depth > 3 or node is None:
        return False
    if _const_cuda(node):
        return True
    if isinstance(node, ast.IfExp):
        return _const_cuda(node.body) or _const_cuda(node.orelse)
    if allow_device_obj and isinstance(node, ast.Call) and ctx.qn(node) == "torch.device":
        return len(node.args) == 1 and not node.keywords and _const_cuda(node.args[0])
    if isinstance(node, ast.Name):
        # the answer for a name depends on its scope only (``device`` in ``x.to(device)``,
        # ``torch.zeros(1, device=device)``... of one function): once per check
        if scope is None:
            scope = ctx.sem.scope_of(at)
        memo = ctx.memo("ddp001.cuda_names", dict)
        key = (node.id, id(scope), allow_device_obj, depth)
        got = memo.get(key)
        if got is None:
            val = ctx.sem.single_value(node.id, scope)
            got = memo[key] = _is_cuda_literal(ctx, val, at, allow_device_obj, depth + 1, scope)
        return got
    if node.__class__ is ast.Attribute and node.value.__class__ is ast.Name and ctx.qn(node) is None:
        # ``args.device`` with ``add_argument("--device", default="cuda")`` and no store of its
        # own in the module, or the one store ``args.device = "cuda"``
        if _attr_stored(ctx.sem, node.value.id, node.attr):
            val = attribute_store_value(ctx.sem, node.value.id, node.attr)
        else:
            val = argparse_default(ctx.sem, node.attr)
        return val is not None and _is_cuda_literal(ctx, val, at, allow_device_obj, depth + 1, scope)
    if node.__class__ is ast.Subscript:  # ``cfg["device"]`` of a config dict literal
        val = dict_item_value(ctx.sem, node, scope if scope is not None else ctx.sem.scope_of(at))
        return val is not None and _is_cuda_literal(ctx, val, at, allow_device_obj, depth + 1, scope)
    return False


def _attr_stored(sem, base: str, attr: str) -> bool:
    """Some statement of the module stores ``base.attr`` (an assignment, augmented or annotated)."""
    for t in (ast.Assign, ast.AugAssign, ast.AnnAssign):
        for st in sem.by_type.get(t, ()):
            for tg in (st.targets if t is ast.Assign else [st.target]):
                if tg.__class__ is ast.Attribute and tg.attr == attr and tg.value.__class__ is ast.Name \
                        and tg.value.id == base:
                    return True
    return False


def _only_printed(node: ast.AST) -> bool:
    p = parent(node)
    while p is not None and not isinstance(p, ast.stmt):
        if isinstance(p, ast.JoinedStr):
            return True
        if isinstance(p, ast.Call):
            f = p.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("print", "info", "debug", "warning", "log", "format"):
                return True
        p = parent(p)
    return False


def _short(ctx, call: ast.Call) -> str:
    qn = ctx.qn(call) or ""
    return qn[len(D):] if qn.startswith(D) else qn
