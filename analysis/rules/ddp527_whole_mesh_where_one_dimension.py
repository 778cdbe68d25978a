from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg, param_names
from ..source import SourceText
from ..flow.bindings import contains, stores_name
from ..flow.calls import call_args
from ..flow.modern import hub, whole_mesh_dims

_FUNCOL = "torch.distributed._functional_collectives."
# functional collectives: the position of their ``group`` argument
_GROUP_AT = {"all_reduce": 2, "all_gather_tensor": 2, "all_gather_tensor_autograd": 2, "broadcast": 2,
             "reduce_scatter_tensor": 3, "reduce_scatter_tensor_autograd": 3, "all_reduce_coalesced": 2,
             "all_gather_into_tensor_coalesced": 1, "reduce_scatter_tensor_coalesced": 3,
             "all_to_all_single": 3, "all_to_all_single_autograd": 3, "permute_tensor": 2}
# DeviceMesh methods that need ``mesh_dim`` on a mesh of several dimensions
_NEED_DIM = ("get_group", "get_local_rank")


class WholeMeshWhereOneDimension(Rule):
    """
    ## What it does
    Checks for a whole `DeviceMesh` of two or more dimensions used where only a one-dimensional
    mesh works: as the `group` of a functional collective
    (`funcol.all_reduce(t, "avg", group=world_mesh)`), or as the receiver of `get_group()` /
    `get_local_rank()` without a `mesh_dim`. The mesh may reach the collective through a helper's
    parameter (`dist_mean(loss, world_mesh)` of a `utils` module), and its dimensions may be
    literal (`init_device_mesh("cuda", (dp, tp), ...)`) or be the dimensions the program takes
    from it by name (`world_mesh["dp"]`, and `world_mesh["tp"]` in the helper that
    parallelizes the model) when the shape is built at run time.

    ## Why is this bad?
    A collective over the whole 2-D mesh is a collective over every rank: with tensor
    parallelism a metric that is the same on the ranks of a tensor-parallel group is counted once
    per such rank. PyTorch refuses it: the functional collectives raise
    "Only 1D mesh is supported", and `get_group()` / `get_local_rank()` raise
    "mesh_dim needs to be specified", at the first step that reaches them, on every rank, and
    only in runs where the mesh has more than one dimension (a data-parallel-only run passes).

    ## Example
    ```python
    world_mesh = init_device_mesh("cuda", (dp, tp), mesh_dim_names=("dp", "tp"))
    loss = funcol.all_reduce(loss, "avg", group=world_mesh)
    ```

    ## Use instead
    ```python
    loss = funcol.all_reduce(loss, "avg", group=world_mesh["dp"])
    ```

    ## Fix safety
    There is no automatic fix: which dimension the value is reduced over is the program's.
    """

    code = "DDP527"
    name = "whole-mesh-where-one-dimension"
    severity = Severity.ERROR
    # the mesh may reach a helper of another module under any name: the reach gate (a mesh is
    # built in this file or in a project module it imports) is the rule's own condition

    @classmethod
    def reach(cls, text, filename):
        from ..flow.reach import reaches

        return reaches(filename, text, ("init_device_mesh",))

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        for c in view.sem.calls:
            got = _mesh_of(view, c)
            if got is not None:
                mesh, what = got
                if _own_param(view, mesh):
                    continue  # reported at the calls that pass the whole mesh (below)
                dims = whole_mesh_dims(an, view, mesh, c)
                if dims is not None and dims >= 2:
                    ctx.report(c, f"`{ctx.text(mesh)}` is a whole {dims}-D mesh: {what} needs one named dimension of it "
                                  "and raises when the mesh has several")
                continue
            target = an.resolve_call(view, c) if c.args or c.keywords else None
            if target is None or not isinstance(target[1], FUNC_TYPES):
                continue
            for (site, what), arg in _param_sites(target[0], target[1], c):
                dims = whole_mesh_dims(an, view, arg, c)
                if dims is not None and dims >= 2:
                    tv = target[0]
                    ctx.report(c, f"`{ctx.text(arg)}` is a whole {dims}-D mesh, and `{ctx.text(c.func)}` uses it "
                                  f"where one dimension is needed ({what}): it raises when the mesh has several; "
                                  "pass the dimension the value is reduced over",
                               related=[("file", tv.path, SourceText(tv.text).node_range(site), "uses it here")]
                               if tv is not view and tv.path else [(site, "uses it here")])
                    break


def _mesh_of(view, c) -> tuple | None:
    """(mesh expression, words) of a use of ``c`` that needs a one-dimensional mesh."""
    qn = view.sem.call_qualname(c) or ""
    if qn.startswith(_FUNCOL) and qn[len(_FUNCOL):] in _GROUP_AT:
        g = get_arg(c, _GROUP_AT[qn[len(_FUNCOL):]], "group")
        if g is not None and not isinstance(g, (ast.Tuple, ast.Constant, ast.List)):
            return g, f"the functional collective `{qn[len(_FUNCOL):]}`"
        return None
    f = c.func
    if isinstance(f, ast.Attribute) and f.attr in _NEED_DIM and not c.args and not c.keywords \
            and isinstance(f.value, (ast.Name, ast.Attribute)):
        return f.value, f"`{f.attr}()` without `mesh_dim`"
    return None


def _own_param(view, expr) -> bool:
    """``expr`` is a parameter of its function that the function never rebinds."""
    fn = view.sem.enclosing_function(expr)
    return isinstance(expr, ast.Name) and fn is not None and expr.id in param_names(fn) \
        and not stores_name(fn, expr.id)


def _mesh_uses(tv) -> list:
    """(call, ``_mesh_of``) for each call of the module whose mesh is a name, once per module."""
    got = tv.memo.get("ddp527.mesh_uses")
    if got is None:
        got = tv.memo["ddp527.mesh_uses"] = [(c, m) for c in tv.sem.calls
                                             if (m := _mesh_of(tv, c)) is not None and isinstance(m[0], ast.Name)]
    return got


def _param_sites(tv, fn, call) -> list:
    """((site, words), argument of ``call``) for the uses in ``fn`` that need a one-dimensional
    mesh of a parameter of ``fn`` it never rebinds."""
    memo = tv.memo.setdefault("ddp527.param_sites", {})
    got = memo.get(id(fn))
    if got is None or got[0] is not fn:
        params = set(param_names(fn))
        uses = []
        for c, m in _mesh_uses(tv):
            if m[0].id in params and contains(fn, c) and not stores_name(fn, m[0].id):
                uses.append((c, m[1], m[0].id))
        got = memo[id(fn)] = (fn, uses)
    if not got[1]:
        return []
    args = dict(call_args(call, fn))
    return [((c, what), args[p]) for c, what, p in got[1] if p in args]
