"""Data sharding by rank under 2-D parallelism: the places that give each process its part of the
data, whether the rank and the count they split by are the *global* ones, which parameters of a
project function reach such a place, and whether the program runs tensor parallelism (or FSDP2)
on one dimension of a mesh of two or more dimensions (the data must then be split over the
data-parallel dimension only).

- ``shard_sinks(view)``: (node, rank expression, count expression, what) for each manual split of
  the module: ``range(rank, n, world)``, ``items[rank::world]``, ``itertools.islice(it, rank,
  None, world)``, ``split_dataset_by_node(ds, rank=..., world_size=...)``;
- ``shard_params(hub, view, fn)``: the splits ``fn`` runs (in itself, through the project helpers
  and classes it calls, and in the methods of a class whose ``__init__`` keeps a parameter on
  ``self``), each part (rank, count) bound to a parameter of ``fn`` or to a value of its own;
- ``global_world(hub, view, expr, at, part)``: is a rank / count the global one, by value
  (``dist.get_rank()``, the environment's ``RANK`` kept in a record, ``dist.get_world_size()``);
- ``program_2d(hub, view, fn, callers)``: the 2-D parallelism of ``fn`` or of a function that
  calls it.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, parent
from .bindings import reaching
from .calls import call_args
from .counts import Count, count_of
from .modern import FULLY_SHARD, PARALLELIZE, helper_mesh_dims, named_mesh_dims, taken_mesh_dims
from .origins import origins
from .rank_kinds import GLOBAL, rank_kind_of

RANK, WORLD = "rank", "world"
_GET = {RANK: "torch.distributed.get_rank", WORLD: "torch.distributed.get_world_size"}
_SPLIT_BY_NODE = ("datasets.distributed.split_dataset_by_node",)
_ISLICE = ("itertools.islice",)
_MAX_DEPTH = 3


def shard_sinks(view) -> list:
    """(node, rank expression, count expression, what) for each manual split of the data by rank
    in the module (memoised on the view)."""
    memo = view.memo.get("data_shards.sinks")
    if memo is not None:
        return memo
    out = []
    sem = view.sem
    for c in sem.calls:
        if isinstance(c.func, ast.Name) and c.func.id == "range" and len(c.args) == 3 and not c.keywords \
                and sem.qualname(c.func) in (None, "range", "builtins.range"):
            out.append((c, c.args[0], c.args[2], "`range(rank, n, world)`"))
    for c in sem.calls_to(*_ISLICE):
        if len(c.args) == 4 and isinstance(c.args[2], ast.Constant) and c.args[2].value is None:
            out.append((c, c.args[1], c.args[3], "`islice(items, rank, None, world)`"))
    for c in sem.calls_to(*_SPLIT_BY_NODE):
        r, w = get_arg(c, 1, "rank"), get_arg(c, 2, "world_size")
        if r is not None and w is not None:
            out.append((c, r, w, "`split_dataset_by_node`"))
    for s in sem.of_types(ast.Subscript):  # (``by_type`` indexes subscripts only for the rules that ask)
        if isinstance(s.slice, ast.Slice) and s.slice.lower is not None \
                and s.slice.step is not None and s.slice.upper is None and isinstance(s.ctx, ast.Load):
            out.append((s, s.slice.lower, s.slice.step, "`items[rank::world]`"))
    view.memo["data_shards.sinks"] = out
    return out


def bare_param(view, fn, expr) -> str | None:
    """The parameter of ``fn`` that ``expr`` is as it stands (through ``int()``)."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "int" \
            and len(expr.args) == 1 and not expr.keywords:
        expr = expr.args[0]
    if not isinstance(expr, ast.Name):
        return None
    kind, evs = reaching(view, expr.id, expr)
    return expr.id if kind == "param" and evs is fn else None


def _kept_on_self(view, init) -> dict:
    """attribute -> parameter of ``__init__`` for each ``self.x = param`` it runs."""
    out = {}
    for st in ast.walk(init):
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Attribute) \
                and isinstance(st.targets[0].value, ast.Name) and st.targets[0].value.id == "self":
            p = bare_param(view, init, st.value)
            if p is not None:
                out.setdefault(st.targets[0].attr, p)
    return out


def _self_attr(expr) -> str | None:
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "int" \
            and len(expr.args) == 1 and not expr.keywords:
        expr = expr.args[0]
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return expr.attr
    return None


def shard_params(hub, view, fn, depth: int = 0) -> tuple:
    """The splits ``fn`` runs, as (sink view, sink node, what, {part: bind}) with ``bind``
    ("param", name) for a parameter of ``fn`` passed on as it is, or ("value", view, expr, at)
    for a value of its own (memoised per check, on the hub)."""
    if depth > _MAX_DEPTH or not isinstance(fn, FUNC_TYPES):
        return ()
    memo = hub.__dict__.setdefault("_data_shard_params", {})
    key = (id(view), id(fn))
    if key in memo:
        return memo[key]
    memo[key] = ()  # recursion guard
    sem = view.sem
    out = []
    cls = parent(fn)
    kept = _kept_on_self(view, fn) if fn.name == "__init__" and isinstance(cls, ast.ClassDef) else {}
    for node, r, w, what in shard_sinks(view):
        owner = sem.enclosing_function(node)
        binds = {}
        for part, e in ((RANK, r), (WORLD, w)):
            p = bare_param(view, fn, e) if owner is fn else None
            if p is None and kept and owner is not None and parent(owner) is cls:
                p = kept.get(_self_attr(e) or "")
            binds[part] = ("param", p) if p is not None else ("value", view, e, node)
        if (owner is fn or (kept and owner is not None and parent(owner) is cls)) \
                and any(b[0] == "param" for b in binds.values()):
            out.append((view, node, what, binds))
    for c in sem.function_calls(fn):
        target = hub.resolve_call(view, c)
        if target is None or target[1] is fn:
            continue
        inner = shard_params(hub, target[0], target[1], depth + 1)
        if not inner:
            continue
        args = dict(call_args(c, target[1]))
        for sv, node, what, binds in inner:
            mine = {}
            for part, b in binds.items():
                if b[0] != "param":
                    mine[part] = b
                    continue
                a = args.get(b[1])
                if a is None:
                    mine = None  # left to its default: not followed
                    break
                p = bare_param(view, fn, a)
                mine[part] = ("param", p) if p is not None else ("value", view, a, c)
            if mine is not None:
                out.append((sv, node, what, mine))
    memo[key] = tuple(out[:8])
    return memo[key]


def global_world(hub, view, expr, at, part, callers=None) -> bool:
    """Left out (``expr`` None: the default is the global one), or of the global world by value:
    every origin (``callers``: as ``origins`` takes it) ``dist.get_rank()`` / ``dist.get_world_size()``
    without a group, the environment's global rank / world size (``int(os.environ["RANK"])`` kept
    in a record or a helper's return: ``rank_kinds.rank_kind_of``, ``counts.count_of``), or a
    constant (the single-process fallback), with at least one that is not a constant."""
    if expr is None:
        return True
    seen = False
    for v, e in origins(hub, view, expr, at, callers=callers):
        if isinstance(e, ast.Call) and v.sem.call_qualname(e) == _GET[part] and not e.args and not e.keywords:
            seen = True
        elif isinstance(e, ast.Constant):
            continue
        elif part == RANK and rank_kind_of(hub, v, e, e)[0] == GLOBAL:
            seen = True
        elif part == WORLD and count_of(hub, v, e, e) == Count("W", 1, 0):
            seen = True
        else:
            return False
    return seen


def parallel_2d(hub, view, fn) -> tuple | None:
    """(call, dimensions) of the first call of ``fn`` (None: the module's top level) that shards
    or tensor-parallelizes on one named dimension of a mesh of 2 or more dimensions: directly
    (``parallelize_module(m, mesh["tp"], plan)``, ``fully_shard(m, mesh=mesh["dp"])``) or through a
    project helper that does it with the mesh it is given or builds (``apply_tp(model, tp_mesh)``).
    For tensor parallelism, a mesh whose shape is built at run time counts by the names the
    program takes from it (``taken_mesh_dims``)."""
    sem = view.sem
    for c in sem.function_calls(fn):
        qn = sem.call_qualname(c) or ""
        for qns, where, measure in ((PARALLELIZE, (1, "device_mesh"), taken_mesh_dims),
                                    (FULLY_SHARD, (None, "mesh"), named_mesh_dims)):
            if qn in qns:
                m = get_arg(c, *where)
                dims = measure(hub, view, m, c) if m is not None else None
            elif hub.resolve_call(view, c) is not None:
                dims = helper_mesh_dims(hub, view, c, qns, where, measure)
            else:
                continue
            if dims is not None and dims >= 2:
                return c, dims
    return None


def program_2d(hub, view, fn, callers) -> tuple | None:
    """(view, call, dimensions) of 2-D parallelism (``parallel_2d``) in ``fn``, in another method
    of its class, or in a function that calls it (in this module, or one of the project's other modules as ``callers`` gives
    them: ``build_loader(cfg, dp_mesh)`` of a training script), one level up."""
    got = parallel_2d(hub, view, fn)
    if got is not None:
        return (view, *got)
    if not isinstance(fn, FUNC_TYPES):
        return None
    cls = parent(fn)
    if isinstance(cls, ast.ClassDef):  # a method: the object's set-up in another method (``__init__``)
        for m in [m for m in cls.body if isinstance(m, FUNC_TYPES) and m is not fn][:8]:
            got = parallel_2d(hub, view, m)
            if got is not None:
                return (view, *got)
    sites = [(view, c) for c in hub.call_sites(view, fn)]
    sites += [s for s in callers(view, fn) if not any(s[1] is c for _v, c in sites)]
    for cv, cc in sites[:8]:
        got = parallel_2d(hub, cv, cv.sem.enclosing_function(cc))
        if got is not None:
            return (cv, *got)
    return None
