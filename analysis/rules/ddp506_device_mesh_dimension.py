from __future__ import annotations

import ast
import math

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..torch_api import constant_of
from ..flow.testing import expects_error
from ._common import fixed_world_size
from ..flow.modern import INIT_MESH, const_ints, const_strs, holds_call, hub, qn_pred

_BY_NAME = ("get_group", "size", "get_local_rank", "get_coordinate")


class DeviceMeshDimension(Rule):
    """
    ## What it does
    Checks `init_device_mesh` and the uses of the mesh it returns:
    - `mesh_dim_names` with another number of names than `mesh_shape` has dimensions;
    - a mesh whose constant shape does not multiply to the world size the file fixes
      (`nproc_per_node`-style constants are not guessed: only a literal `world_size=`
      or `WORLD_SIZE` the file sets);
    - a dimension used by a name the mesh does not have: `mesh["dp"]`, `mesh.get_group("tp")`,
      `mesh.size("cp")`, `mesh.get_local_rank("pp")`, including on a mesh made without names.
    The mesh may be built in a helper, kept on `self`, or returned in a tuple. A name that
    `mesh[dims]._flatten(mesh_dim_name=...)` adds to the mesh counts as one of its names, and a mesh
    whose keywords come from a mapping (`init_device_mesh("cpu", **kwargs)`) has unknown names.

    ## Why is this bad?
    Each of these raises when the program reaches it, typically after minutes of model set-up, and
    on every rank: `mesh["dp"]` on a mesh named `("data", "model")` is a `KeyError`
    ("Invalid mesh_dim_names"), a shape that does not multiply to the world size is a
    `RuntimeError` in `init_device_mesh`.

    ## Example
    ```python
    mesh = init_device_mesh("cuda", (dp, tp), mesh_dim_names=("data", "model"))
    model = parallelize_module(model, mesh["tp"], plan)
    ```

    ## Use instead
    ```python
    mesh = init_device_mesh("cuda", (dp, tp), mesh_dim_names=("dp", "tp"))
    model = parallelize_module(model, mesh["tp"], plan)
    ```

    ## Fix safety
    There is no automatic fix: either the names or the uses are wrong.
    """

    code = "DDP506"
    name = "device-mesh-dimension"
    severity = Severity.ERROR
    requires_text = ("init_device_mesh",)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        inits = ctx.calls_to(*INIT_MESH)
        if not inits:
            return
        for c in inits:
            shape, names = get_arg(c, 1, "mesh_shape"), get_arg(c, None, "mesh_dim_names")
            if isinstance(shape, (ast.Tuple, ast.List)) and const_strs(names) is not None and \
                    len(shape.elts) != len(names.elts):
                ctx.report(c, f"the mesh has {len(shape.elts)} dimensions but {len(names.elts)} names "
                              f"(`{ctx.text(names)}`): `init_device_mesh` raises")
                continue
            dims, world = const_ints(shape), fixed_world_size(ctx)
            if dims and world is not None and math.prod(dims) != world and not expects_error(c):
                ctx.report(c, f"the mesh shape `{ctx.text(shape)}` has {math.prod(dims)} ranks but the world "
                              f"size is {world}: `init_device_mesh` raises")
        pred = qn_pred(*INIT_MESH)
        for c in view.sem.calls:
            f = c.func
            if isinstance(f, ast.Attribute) and f.attr in _BY_NAME:
                dim = get_arg(c, 0, "mesh_dim")
                recv = f.value
            else:
                continue
            self._check_use(ctx, an, view, recv, dim, c, pred)
        for sub in ast.walk(view.sem.tree):
            if isinstance(sub, ast.Subscript) and isinstance(sub.ctx, ast.Load):
                self._check_use(ctx, an, view, sub.value, sub.slice, sub, pred)

    def _check_use(self, ctx, an, view, recv, dim, node, pred):
        if not (isinstance(dim, ast.Constant) and isinstance(dim.value, str)):
            return
        if not isinstance(recv, (ast.Name, ast.Attribute)):
            return
        got = holds_call(an, view, recv, node, pred)
        if got is None:
            return
        mv, init = got
        names = get_arg(init, None, "mesh_dim_names")
        if names is None and any(k.arg is None for k in init.keywords):
            return  # `init_device_mesh(..., **kwargs)`: the names may come in the mapping
        have = const_strs(names) if names is not None else ()
        if have is None or dim.value in have or dim.value in self._flattened(an, view, init, pred) \
                or (mv is not view and dim.value in self._flattened(an, mv, init, pred)):
            return
        what = f"its dimensions are named {', '.join(f'`{n}`' for n in have)}" if have else \
            "it was made without `mesh_dim_names`"
        ctx.report(node, f"`{ctx.text(node)}` uses the mesh dimension `{dim.value}`, but {what}: this raises "
                         "on every rank",
                   related=[(init, "the mesh is made here")] if mv is view else [])

    @staticmethod
    def _flattened(an, view, init, pred) -> set[str]:
        """The names that ``mesh[dims]._flatten(mesh_dim_name=...)`` adds to the mesh ``init`` makes
        (a flattened dimension is looked up by name on the root mesh afterwards)."""
        out = set()
        for c in view.sem.calls:
            f = c.func
            if not (isinstance(f, ast.Attribute) and f.attr == "_flatten"):
                continue
            name = constant_of(view.sem, get_arg(c, 0, "mesh_dim_name"))
            if not (name is not None and isinstance(name.value, str)):
                continue
            base = f.value.value if isinstance(f.value, ast.Subscript) else f.value
            if not isinstance(base, (ast.Name, ast.Attribute)):
                continue
            got = holds_call(an, view, base, c, pred)
            if got is not None and got[1] is init:
                out.add(name.value)
        return out
