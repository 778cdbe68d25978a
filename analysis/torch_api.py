"""Torch vocabulary shared by the static rules and the runtime: names of the torch.distributed API
(collectives, DDP), backend evaluation and small constant folding over the static engine's AST.

Imported by analysis/rules/ (through rules/_common.py) and analysis/runtime/ (emulate_policy.py).
Never imports torch.
"""
from __future__ import annotations

import ast

D = "torch.distributed."
# the default group spelt as a value (``group=dist.group.WORLD``)
WORLD_GROUPS = frozenset({D + "group.WORLD", D + "GroupMember.WORLD"})

OBJECT_COLLECTIVES = ("all_gather_object", "gather_object", "scatter_object_list")
OBJECT_COLLECTIVES_WITH_DEVICE = ("broadcast_object_list", "send_object_list", "recv_object_list")

TENSOR_COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_gather_coalesced",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
    "broadcast", "reduce", "gather", "scatter", "all_reduce_coalesced",
)
ALL_COLLECTIVES = TENSOR_COLLECTIVES + OBJECT_COLLECTIVES + OBJECT_COLLECTIVES_WITH_DEVICE[:1] + ("barrier", "monitored_barrier")

DDP_CLASS = "torch.nn.parallel.DistributedDataParallel"
# FSDP1's wrapper class, as it is imported (``device_id=`` takes the rank's device)
FSDP1_CLASSES = frozenset({"torch.distributed.fsdp.FullyShardedDataParallel",
                           "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel"})
# the calls that pin this process's current device, by index, on each accelerator whose index
# counts the devices of one node (``torch_npu`` / ``torch_mlu`` register ``torch.npu`` / ``torch.mlu``
# and keep their own spelling; ``torch.accelerator`` is the backend-generic one)
DEVICE_SETTERS = frozenset({
    "torch.cuda.set_device", "torch.xpu.set_device", "torch.npu.set_device", "torch.mlu.set_device",
    "torch.musa.set_device", "torch_npu.npu.set_device", "torch_mlu.mlu.set_device",
    "torch.accelerator.set_device_index", "torch.accelerator.set_device_idx",
})
SPAWNS = ("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes")
# torchelastic's launcher as a library: ``elastic_launch(config, entrypoint)(*args)`` runs
# ``entrypoint`` in each rank it starts (with the rank in the environment, not as an argument)
ELASTIC_LAUNCH = ("torch.distributed.launcher.api.elastic_launch", "torch.distributed.launcher.elastic_launch")
LAUNCH_CONFIGS = ("torch.distributed.launcher.api.LaunchConfig", "torch.distributed.launcher.LaunchConfig")
# the calls that start a job's ranks: (position, keyword) of the function every rank runs
RANK_STARTERS = {**{q: (0, "fn") for q in SPAWNS}, **{q: (1, "entrypoint") for q in ELASTIC_LAUNCH}}


def rank_entry(sem, call: ast.Call) -> ast.AST | None:
    """The function argument of ``call`` when it starts ranks that each run it (``mp.spawn(fn)``,
    ``start_processes(fn)``, ``elastic_launch(config, entrypoint=fn)``); else None."""
    from .semantic import get_arg  # lazy: the runtime reads this table without the static engine

    got = RANK_STARTERS.get(sem.call_qualname(call) or "")
    return None if got is None else get_arg(call, *got)


def qualify(*short: str) -> tuple[str, ...]:
    return tuple(D + s for s in short)


def const_str(node: ast.AST | None, sem=None) -> str | None:
    """The string literal ``node`` is; with ``sem``, the one it evaluates to (``constant_of``: a
    name bound once, an argparse default, an ``args.x = ...`` store, a config dict's item)."""
    if sem is not None and node is not None and not isinstance(node, ast.Constant):
        node = constant_of(sem, node)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def const_int(node: ast.AST | None, sem=None) -> int | None:
    """The int literal ``node`` is; with ``sem``, the one it evaluates to (as ``const_str``)."""
    if sem is not None and node is not None and not isinstance(node, ast.Constant):
        node = constant_of(sem, node)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def backend_parts(s: str) -> list[str]:
    """The backends a backend string names, lower case: ``"cpu:gloo,cuda:nccl"`` gives
    ``["gloo", "nccl"]``."""
    return [p.split(":")[-1].strip().lower() for p in s.split(",")]


def backend_mentions_nccl(expr: ast.AST | None, ctx, scope: ast.AST, depth: int = 0) -> bool:
    """True when the backend expression is (or may be, in an if-expression) NCCL: a literal
    "nccl", a "cpu:gloo,cuda:nccl" string, ``dist.Backend.NCCL``, or a name bound once to one."""
    if expr is None or depth > 4:
        return False
    s = const_str(expr)
    if s is not None:
        return "nccl" in backend_parts(s)
    if isinstance(expr, ast.IfExp):
        return backend_mentions_nccl(expr.body, ctx, scope, depth + 1) or backend_mentions_nccl(
            expr.orelse, ctx, scope, depth + 1)
    if isinstance(expr, ast.Attribute):
        qn = ctx.qn(expr)
        if qn and qn.lower() in ("torch.distributed.backend.nccl",):
            return True
        # ``backend=args.dist_backend`` with ``parser.add_argument("--dist-backend", default="nccl")``
        # in the same file: NCCL unless the command line says otherwise
        if isinstance(expr.value, ast.Name) and qn is None:
            default = argparse_default(ctx.sem, expr.attr)
            if default is None:  # ``args.dist_backend = "nccl"`` (one store in the module)
                default = attribute_store_value(ctx.sem, expr.value.id, expr.attr)
            return default is not None and backend_mentions_nccl(default, ctx, scope, depth + 1)
        return False
    if isinstance(expr, ast.Subscript):  # ``cfg["backend"]`` with ``cfg = {"backend": "nccl", ...}``
        val = dict_item_value(ctx.sem, expr, scope)
        return val is not None and backend_mentions_nccl(val, ctx, scope, depth + 1)
    if isinstance(expr, ast.Name):
        val = ctx.sem.single_value(expr.id, scope)
        return backend_mentions_nccl(val, ctx, ctx.sem.tree if val is not None and ctx.sem.scope_of(val) is ctx.sem.tree else scope, depth + 1)
    return False


def attribute_store_value(sem, base: str, attr: str) -> ast.AST | None:
    """The value of the one store ``base.attr = value`` of the module (any function); None when
    there is none or several (a value set in two places is not one value)."""
    index = sem.__dict__.get("_attr_stores")
    if index is None:
        # every ``name.attr = value`` of the module, indexed once per model instead of one scan of
        # the module's assignments per question
        index = {}
        for st in sem.by_type.get(ast.Assign, ()):
            for tg in st.targets:
                if tg.__class__ is ast.Attribute and tg.value.__class__ is ast.Name:
                    index.setdefault((tg.value.id, tg.attr), []).append(st.value)
        sem._attr_stores = index
    found = index.get((base, attr), ())
    return found[0] if len(found) == 1 else None


def dict_item_value(sem, expr: ast.Subscript, scope) -> ast.AST | None:
    """``d["key"]`` where ``d`` is bound once to a dict literal with that key and never stored into
    by subscript; None otherwise."""
    key = const_str(expr.slice)
    if key is None or expr.value.__class__ is not ast.Name:
        return None
    name = expr.value.id
    d = sem.single_value(name, scope)
    if d is None and scope is not sem.tree:
        d = sem.single_value(name, sem.tree)
    if not isinstance(d, ast.Dict):
        return None
    for st in sem.by_type.get(ast.Assign, ()):
        for tg in st.targets:
            if tg.__class__ is ast.Subscript and tg.value.__class__ is ast.Name and tg.value.id == name:
                return None
    for k, v in zip(d.keys, d.values):
        if k is None:
            return None  # ``{**other}``: the key may come from elsewhere
        if const_str(k) == key:
            return v
    return None


def constant_of(sem, expr: ast.AST | None, scope=None, depth: int = 0) -> ast.Constant | None:
    """The literal ``expr`` evaluates to, followed through a name bound once (in ``scope`` or the
    module), ``args.x`` (its argparse default or the one ``args.x = ...`` store), ``cfg["x"]`` of a
    config dict literal; None when unknown. The shared answer for "which constant is this"."""
    if expr is None or depth > 4:
        return None
    if isinstance(expr, ast.Constant):
        return expr
    if scope is None:
        scope = sem.scope_of(expr)
    val = None
    if isinstance(expr, ast.Name):
        val = sem.single_value(expr.id, scope)
        if val is None and scope is not sem.tree:
            val = sem.single_value(expr.id, sem.tree)
    elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and sem.qualname(expr) is None:
        val = argparse_default(sem, expr.attr)
        if val is None:
            val = attribute_store_value(sem, expr.value.id, expr.attr)
    elif isinstance(expr, ast.Subscript):
        val = dict_item_value(sem, expr, scope)
    if val is None:
        return None
    return constant_of(sem, val, sem.scope_of(val), depth + 1)


def argparse_default(sem, dest: str) -> ast.AST | None:
    """The ``default=`` of the one ``add_argument`` call of the module whose destination is
    ``dest`` (``"--dist-backend"`` -> ``dist_backend``, or ``dest=``); None when there is none, or
    several."""
    found = []
    calls = sem.calls
    for i in sem.callee_index()[1].get("add_argument", ()):  # the ``x.add_argument(...)`` calls, in order
        c = calls[i]
        name = None
        for k in c.keywords:
            if k.arg == "dest" and isinstance(k.value, ast.Constant) and isinstance(k.value.value, str):
                name = k.value.value
        if name is None:
            opts = [a.value for a in c.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            longs = [o for o in opts if o.startswith("--")]
            pick = longs[0] if longs else (opts[0] if opts else None)
            if pick is None:
                continue
            name = pick.lstrip("-").replace("-", "_")
        if name != dest:
            continue
        default = next((k.value for k in c.keywords if k.arg == "default"), None)
        found.append(default)
    return found[0] if len(found) == 1 else None
