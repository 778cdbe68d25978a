"""Ranks within part of the world: ``mesh["dp"].get_local_rank()`` (a rank within the groups of one
named dimension of a ``DeviceMesh``) and ``dist.get_rank(group)`` (a rank within a process group).
The uniformity analysis marks such a rank source (``values.Src.group``) so that a question about
which ranks share a value (DDP521: the ranks of one tensor-parallel group must draw the same
batches) can tell it from the global rank, by where the value comes from, never by its name."""
from __future__ import annotations

import ast

from ..semantic import get_arg
from .origins import holds_call, origins, qn_pred
from .values import GROUP

INIT_MESH = ("torch.distributed.device_mesh.init_device_mesh", "torch.distributed._tensor.device_mesh.init_device_mesh")


def rank_group(hub, view, call: ast.Call) -> str | None:
    """``GROUP`` for ``get_rank(group)``, the dimension's name for ``mesh["dp"].get_local_rank()``,
    None otherwise."""
    if group_arg(call) and not (isinstance(call.func, ast.Attribute) and call.func.attr == "get_local_rank"):
        return GROUP
    return mesh_dim_rank(hub, view, call.func)


def group_arg(call: ast.Call) -> bool:
    """``get_rank(group)`` / ``get_rank(group=g)`` with a group that is not the literal ``None``."""
    g = get_arg(call, 0, "group")
    return g is not None and not (isinstance(g, ast.Constant) and g.value is None)


def mesh_dim_rank(hub, view, f) -> str | None:
    """The dimension's name when ``f`` is ``<x>.get_local_rank`` and every origin of ``<x>`` is a
    named dimension of an ``init_device_mesh`` mesh (``mesh["dp"]``, directly or through names,
    tuples and helpers' returns); None otherwise (a whole mesh, a value of another kind)."""
    if not (isinstance(f, ast.Attribute) and f.attr == "get_local_rank"):
        return None
    dims = set()
    for v, x in origins(hub, view, f.value, f):
        if not (isinstance(x, ast.Subscript) and isinstance(x.slice, ast.Constant) and isinstance(x.slice.value, str)):
            return None
        if holds_call(hub, v, x.value, x, qn_pred(*INIT_MESH)) is None:
            return None
        dims.add(x.slice.value)
    return dims.pop() if len(dims) == 1 else None
