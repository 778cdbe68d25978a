"""Which ranks a process group spans, read from where the group comes from (``origins``: names,
helpers' returns, ``self`` attributes, a property of a state object, a module-level singleton an
init function builds), never from its name:

- ``WORLD``: every rank. No group (or ``None``), ``dist.group.WORLD``, the default group
  (``_get_default_group()``), ``dist.new_group()`` of every rank (no ranks, ``None``, or
  ``range(dist.get_world_size())``), or the whole of a ``DeviceMesh`` (``init_device_mesh`` needs
  every rank of the world: ``mesh.get_group()`` of a one-dimensional mesh);
- ``Dims(init, names)``: the group of some named dimensions of the mesh an ``init_device_mesh``
  call builds: ``mesh.get_group("dp_shard")``, ``mesh.get_group(mesh_dim=1)`` of a mesh of literal
  names, ``mesh["dp_shard"].get_group()``, ``mesh["dp_replicate", "dp_shard"]._flatten().get_group()``.

``hsdp_meshes`` gives the meshes of two or more dimensions that the ``fully_shard`` calls of some
modules pass (directly, through ``**kwargs`` of a dict, or in a project helper those modules call
to shard a module): HSDP, whose gradients are replicated over every dimension but the last and
sharded over the last. DDP526 pairs the two: a sum of local shards' terms over a group that spans
a replicate dimension counts every shard once per replica.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg
from ..torch_api import D, WORLD_GROUPS
from .calls import call_args
from .hidden import FULLY_SHARD, shard_calls
from .modern import INIT_MESH, const_strs
from .origins import holds_call, origins, qn_pred
from .world import world_size_call

WORLD = "world"
_DEFAULT_GROUP = frozenset({D + "distributed_c10d._get_default_group"})
_NEW_GROUP = frozenset({D + "new_group", D + "distributed_c10d.new_group"})


class Dims:
    """The named dimensions ``names`` (a frozenset) of the mesh the ``init_device_mesh`` call
    ``init`` builds (``view`` its module)."""

    __slots__ = ("view", "init", "names")

    def __init__(self, view, init, names):
        self.view, self.init, self.names = view, init, frozenset(names)


def group_span(hub, view, grp, at, callers=None) -> list | None:
    """The span (``WORLD`` or ``Dims``) of each value the group argument ``grp`` may hold at
    ``at`` (None or absent: ``WORLD``); None when one of them is not known."""
    if grp is None or (isinstance(grp, ast.Constant) and grp.value is None):
        return [WORLD]
    got = origins(hub, view, grp, at, callers=callers)
    if not got:
        return None
    out = []
    for v, e in got:
        s = _span(hub, v, e, callers)
        if s is None:
            return None
        out.append(s)
    return out


def _span(hub, view, e, callers):
    if isinstance(e, ast.Constant) and e.value is None:
        return WORLD
    if isinstance(e, ast.Attribute) and (view.sem.qualname(e) or "") in WORLD_GROUPS:
        return WORLD
    if not isinstance(e, ast.Call):
        return None
    qn = view.sem.call_qualname(e) or ""
    if qn in _DEFAULT_GROUP:
        return WORLD
    if qn in _NEW_GROUP:
        return WORLD if _all_ranks(hub, view, get_arg(e, 0, "ranks"), e, callers) else None
    f = e.func
    if isinstance(f, ast.Attribute) and f.attr == "get_group" and len(e.args) + len(e.keywords) <= 1:
        dim = get_arg(e, 0, "mesh_dim")
        return _mesh_span(hub, view, f.value, e, dim, callers)
    return None


def _all_ranks(hub, view, ranks, at, callers) -> bool:
    """``ranks`` of ``new_group`` names every rank: absent, ``None``, or ``range(world_size)``
    (in ``list(...)`` or not)."""
    if ranks is None or (isinstance(ranks, ast.Constant) and ranks.value is None):
        return True
    got = origins(hub, view, ranks, at, callers=callers)
    if not got:
        return False
    for v, e in got:
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in ("list", "tuple") and len(e.args) == 1:
            e = e.args[0]
        if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "range" and len(e.args) == 1):
            return False
        n = e.args[0]
        if not (world_size_call(v.sem, n) or any(world_size_call(w.sem, x) for w, x in origins(hub, v, n, e, callers=callers))):
            return False
    return True


def mesh_span(hub, view, mesh, at, callers=None):
    """The ranks a ``DeviceMesh`` value spans (``WORLD``, or ``Dims`` of a submesh
    ``mesh["tp"]``), as ``group_span`` reads them for ``mesh.get_group()``; None when not known
    (a mesh of several dimensions, or origins that disagree)."""
    return _mesh_span(hub, view, mesh, at, None, callers)


def same_span(a, b) -> bool:
    """The spans ``a`` and ``b`` are the same ranks: both ``WORLD``, or the same dimensions of
    one ``init_device_mesh``."""
    return _same(a, b)


def _mesh_span(hub, view, mesh, at, dim, callers):
    """The span of ``mesh.get_group(dim)``: one answer for every origin of ``mesh``, else None."""
    if dim is not None and isinstance(dim, ast.Constant) and dim.value is None:
        dim = None
    got = None
    for v, m in origins(hub, view, mesh, at, callers=callers):
        s = _one_mesh_span(hub, v, m, dim, callers)
        if s is None or (got is not None and not _same(got, s)):
            return None
        got = s
    return got


def _same(a, b) -> bool:
    return a == b if WORLD in (a, b) else (a.init is b.init and a.names == b.names)


def _one_mesh_span(hub, v, m, dim, callers):
    flat = isinstance(m, ast.Call) and isinstance(m.func, ast.Attribute) and m.func.attr == "_flatten"
    base = m.func.value if flat else m
    if isinstance(base, ast.Subscript):  # ``mesh["dp"]`` / ``mesh["dp_replicate", "dp_shard"]``
        sl = base.slice
        names = const_strs(sl) if isinstance(sl, ast.Tuple) else (
            (sl.value,) if isinstance(sl, ast.Constant) and isinstance(sl.value, str) else None)
        init = holds_call(hub, v, base.value, base, qn_pred(*INIT_MESH), callers=callers)
        if names is None or init is None:
            return None
        if dim is not None and not flat:
            names = _pick(names, dim)
        elif not flat and len(names) > 1:
            return None  # ``get_group()`` of a mesh of several dimensions: an error, not a group
        return None if names is None else Dims(init[0], init[1], names)
    if isinstance(m, ast.Call) and (v.sem.call_qualname(m) or "") in INIT_MESH:
        if dim is None:
            shape = get_arg(m, 1, "mesh_shape")
            # ``init_device_mesh`` takes every rank of the world; a whole mesh of several
            # dimensions has no one group
            return WORLD if isinstance(shape, (ast.Tuple, ast.List)) and len(shape.elts) == 1 else None
        names = const_strs(get_arg(m, None, "mesh_dim_names"))
        names = _pick(names, dim) if names is not None else None
        return None if names is None else Dims(v, m, names)
    return None


def _pick(names, dim):
    """The dimension ``dim`` (a literal name or index) of ``names``, as a one-name tuple."""
    if isinstance(dim, ast.Constant) and isinstance(dim.value, str):
        return (dim.value,) if dim.value in names else None
    if isinstance(dim, ast.UnaryOp) and isinstance(dim.op, ast.USub) and isinstance(dim.operand, ast.Constant) \
            and type(dim.operand.value) is int:
        dim = ast.Constant(-dim.operand.value)  # ``get_group(-1)``: the last dimension
    if isinstance(dim, ast.Constant) and type(dim.value) is int and -len(names) <= dim.value < len(names):
        return (names[dim.value],)
    return None


def spans_replicas(span, meshes) -> bool:
    """The group ``span`` takes in a replicate dimension of one of the HSDP ``meshes``
    (``hsdp_meshes``): the whole world does, a dimension group when it names one of that mesh's
    dimensions but the last."""
    if span == WORLD:
        return bool(meshes)
    return any(init is span.init and names and span.names & set(names[:-1]) for _v, init, names in meshes)


def hsdp_meshes(hub, views) -> list:
    """(view, ``init_device_mesh`` call or None, dimension names or None) of each mesh of two or
    more dimensions given to ``fully_shard`` in ``views`` or in the project helpers they call to
    shard a module (``shard_calls``)."""
    out = []
    for v in views:
        for c in v.sem.calls_to(*FULLY_SHARD):
            out.extend(_hsdp(hub, v, c, None))
        for c, _a in shard_calls(hub, v):
            if (v.sem.call_qualname(c) or "") in FULLY_SHARD:
                continue
            target = hub.resolve_call(v, c)
            if target is None or not isinstance(target[1], FUNC_TYPES):
                continue
            tv, tfn = target
            binds = dict(call_args(c, tfn))

            def here(_v, f, tfn=tfn, c=c, v=v):  # the helper's parameters as ``c`` binds them
                return [(v, c)] if f is tfn else []
            for fc in tv.sem.calls_to(*FULLY_SHARD):
                if tv.sem.enclosing_function(fc) is tfn:
                    out.extend(_hsdp(hub, tv, fc, here if binds else None))
    return out


def _hsdp(hub, view, call, callers) -> list:
    out = []
    for v, m in mesh_origins(hub, view, call, callers):
        if isinstance(m, ast.Subscript) and isinstance(m.slice, ast.Tuple):
            names = const_strs(m.slice)
            if names is not None and len(names) >= 2:
                init = holds_call(hub, v, m.value, m, qn_pred(*INIT_MESH), callers=callers)
                out.append((v, init[1] if init else None, names))
        elif isinstance(m, ast.Call) and (v.sem.call_qualname(m) or "") in INIT_MESH:
            shape = get_arg(m, 1, "mesh_shape")
            names = const_strs(get_arg(m, None, "mesh_dim_names"))
            if (isinstance(shape, (ast.Tuple, ast.List)) and len(shape.elts) >= 2) or (names and len(names) >= 2):
                out.append((v, m, names))
    return out


def mesh_origins(hub, view, call, callers=None) -> list:
    """The origins of the ``mesh`` a ``fully_shard`` call passes: its argument, or the ``"mesh"``
    entry of a ``**kwargs`` dict (``fully_shard(block, **fsdp_kwargs)`` of ``fsdp_kwargs =
    dict(mesh=..., ...)``)."""
    m = get_arg(call, 1, "mesh")
    if m is not None:
        return origins(hub, view, m, call, callers=callers)
    out = []
    for kw in call.keywords:
        if kw.arg is None:
            out.extend(origins(hub, view, kw.value, call, path=("mesh",), callers=callers))
    return out
