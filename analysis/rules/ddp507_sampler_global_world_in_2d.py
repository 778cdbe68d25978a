from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.modern import FULLY_SHARD, PARALLELIZE, hub, named_mesh_dims, origins, shard_reach

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
    reach = classmethod(shard_reach)  # the parallelism may be applied by a helper of another module

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        samplers = ctx.calls_to(_SAMPLER)
        if not samplers:
            return
        tps, other = self._tp_on_2d_mesh(ctx, an, view)
        if not tps:
            return
        sem = view.sem
        for c in samplers:
            # with tensor parallelism on a 1-D mesh too, only a sampler beside the 2-D one counts
            tp = next((t for t in tps if sem.enclosing_function(t[0]) is sem.enclosing_function(c)),
                      None if other else tps[0])
            if tp is None:
                continue
            n, r = get_arg(c, 1, "num_replicas"), get_arg(c, 2, "rank")
            if _global(an, view, n, c, _WORLD) and _global(an, view, r, c, _RANK):
                ctx.report(c, f"`{ctx.text(c)}` splits the data over the whole world, but the file runs tensor "
                              f"parallelism on one dimension of a {tp[1]}-D mesh: the ranks of a tensor-parallel "
                              "group get different batches; use the data-parallel mesh dimension's `size()` "
                              "and `get_local_rank()`",
                           related=[(tp[0], "parallelism on one dimension of the mesh")])

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


def _global(an, view, expr, at, qns) -> bool:
    """Left out (the default is the global one), or a call of ``qns`` without a group."""
    if expr is None:
        return True
    got = origins(an, view, expr, at)
    return bool(got) and all(isinstance(e, ast.Call) and (v.sem.call_qualname(e) or "") in qns and not e.args
                             and not e.keywords for v, e in got)
