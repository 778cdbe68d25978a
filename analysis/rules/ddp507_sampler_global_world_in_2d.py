from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg
from ..source import SourceText
from ..flow.modern import FULLY_SHARD, PARALLELIZE, helper_mesh_dims, hub, named_mesh_dims, origins
from ._common import other_call_sites, shard_or_callers_reach

_SAMPLER = "torch.utils.data.DistributedSampler"
_WORLD = ("torch.distributed.get_world_size",)
_RANK = ("torch.distributed.get_rank",)


class SamplerGlobalWorldIn2d(Rule):
    """
    ## What it does
    Checks for a `DistributedSampler` that splits the data over the global world
    (`num_replicas` left out or `dist.get_world_size()`, `rank` left out or `dist.get_rank()`) in a
    file that also runs tensor parallelism over one dimension of a 2-D (or larger) `DeviceMesh`
    (`parallelize_module(model, mesh["tp"], plan)`), or shards with FSDP2 over one named
    dimension of such a mesh (`fully_shard(model, mesh=mesh["dp"])`: the other dimensions are
    not data parallel; HSDP, which gives `fully_shard` the whole 2-D mesh, is not flagged). The
    mesh may be built in a helper or kept on `self`, and its dimension may be unpacked into a name
    (`tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]`) or reach the parallelizing helper as a parameter.

    ## Why is this bad?
    In 2-D parallelism the ranks of one tensor-parallel group compute on the *same* batch: their
    shards of each layer meet in the TP collectives. A sampler over the global world gives every
    rank a different batch, so the TP group combines activations of unrelated samples: the loss is
    wrong and nothing raises. The data must be split over the data-parallel dimension only:
    `num_replicas=mesh["dp"].size()`, `rank=mesh["dp"].get_local_rank()`.

    ## Example
    ```python
    mesh = init_device_mesh("cuda", (dp, tp), mesh_dim_names=("dp", "tp"))
    model = parallelize_module(model, mesh["tp"], plan)
    sampler = DistributedSampler(dataset)
    ```

    ## Use instead
    ```python
    dp_mesh = mesh["dp"]
    sampler = DistributedSampler(dataset, num_replicas=dp_mesh.size(), rank=dp_mesh.get_local_rank())
    ```

    ## Fix safety
    There is no automatic fix: the name of the data-parallel dimension is the program's.
    """

    code = "DDP507"
    name = "sampler-global-world-in-2d"
    severity = Severity.ERROR
    requires_text = ("DistributedSampler",)
    reach = classmethod(shard_or_callers_reach)  # the parallelism may be in another module, or its caller

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        samplers = ctx.calls_to(_SAMPLER)
        if not samplers:
            return
        tps, other = self._tp_on_2d_mesh(ctx, an, view)
        sem = view.sem
        callers = other_call_sites(ctx, an, methods=True)
        for c in samplers:
            n, r = get_arg(c, 1, "num_replicas"), get_arg(c, 2, "rank")
            # the rank may reach the sampler through a parameter or a config object's field
            if not (_global(an, view, n, c, _WORLD, callers) and _global(an, view, r, c, _RANK, callers)):
                continue
            if tps:
                # with tensor parallelism on a 1-D mesh too, only a sampler beside the 2-D one counts
                tp = next((t for t in tps if sem.enclosing_function(t[0]) is sem.enclosing_function(c)),
                          None if other else tps[0])
                if tp is None:
                    continue
                related = [(tp[0], "parallelism on one dimension of the mesh")]
            else:
                # the parallelism runs in a helper (``apply_tp(model, mesh["tp"])`` of another module)
                # or in the function that calls the sampler's (a loader builder of another module)
                got = _program_2d(an, view, sem.enclosing_function(c), callers)
                if got is None:
                    continue
                tv, tc, dims = got
                tp = (tc, dims)
                msg = "parallelism on one dimension of the mesh"
                related = [(tc, msg)] if tv is view else [
                    ("file", tv.path, SourceText(tv.text).node_range(tc), msg)]
            ctx.report(c, f"`{ctx.text(c)}` splits the data over the whole world, but the program runs tensor "
                          f"parallelism on one dimension of a {tp[1]}-D mesh: the ranks of a tensor-parallel "
                          "group get different batches; use the data-parallel mesh dimension's `size()` "
                          "and `get_local_rank()`",
                       related=related)

    def _tp_on_2d_mesh(self, ctx, an, view):
        """([(parallelize call, mesh rank)] on a dimension of a mesh of 2 or more dimensions,
        whether the file also parallelizes otherwise)."""
        out, other = [], False
        # FSDP2 over one named dimension of a larger mesh (``fully_shard(m, mesh=mesh["dp"])``):
        # the other dimensions are not data parallel (HSDP gives the whole 2-D mesh)
        for c in ctx.calls_to(*FULLY_SHARD):
            m = get_arg(c, None, "mesh")
            dims = named_mesh_dims(an, view, m, c) if m is not None else None
            if dims is not None and dims >= 2:
                out.append((c, dims))
        for c in ctx.calls_to(*PARALLELIZE):
            m = get_arg(c, 1, "device_mesh")
            dims = named_mesh_dims(an, view, m, c) if m is not None else None
            if dims is not None and dims >= 2:
                out.append((c, dims))
            else:
                other = True
        return out, other


def _parallel_2d(an, view, fn) -> tuple | None:
    """(call, dimensions) of the first call of ``fn`` (None: the module's top level) that shards
    or tensor-parallelizes on one named dimension of a mesh of 2 or more dimensions: directly
    (``parallelize_module(m, mesh["tp"], plan)``, ``fully_shard(m, mesh=mesh["dp"])``) or through a
    project helper that does it with the mesh it is given or builds (``apply_tp(model, tp_mesh)``)."""
    sem = view.sem
    for c in sem.function_calls(fn):
        qn = sem.call_qualname(c) or ""
        for qns, where in ((PARALLELIZE, (1, "device_mesh")), (FULLY_SHARD, (None, "mesh"))):
            if qn in qns:
                m = get_arg(c, *where)
                dims = named_mesh_dims(an, view, m, c) if m is not None else None
            elif an.resolve_call(view, c) is not None:
                dims = helper_mesh_dims(an, view, c, qns, where, named_mesh_dims)
            else:
                continue
            if dims is not None and dims >= 2:
                return c, dims
    return None


def _program_2d(an, view, fn, callers) -> tuple | None:
    """(view, call, dimensions) of 2-D parallelism (``_parallel_2d``) in the sampler's function
    ``fn``, or in a function that calls it (in this module, or one of the project's other modules
    as ``callers`` gives them: ``build_loader(cfg, dp_mesh)`` of a training script), one level up."""
    got = _parallel_2d(an, view, fn)
    if got is not None:
        return (view, *got)
    if not isinstance(fn, FUNC_TYPES):
        return None
    sites = [(view, c) for c in an.call_sites(view, fn)]
    sites += [s for s in callers(view, fn) if not any(s[1] is c for _v, c in sites)]
    for cv, cc in sites[:8]:
        got = _parallel_2d(an, cv, cv.sem.enclosing_function(cc))
        if got is not None:
            return (cv, *got)
    return None


def _global(an, view, expr, at, qns, callers=None) -> bool:
    """Left out (the default is the global one), or a call of ``qns`` without a group
    (``callers``: as ``origins`` takes it)."""
    if expr is None:
        return True
    got = origins(an, view, expr, at, callers=callers)
    return bool(got) and all(isinstance(e, ast.Call) and (v.sem.call_qualname(e) or "") in qns and not e.args
                             and not e.keywords for v, e in got)
