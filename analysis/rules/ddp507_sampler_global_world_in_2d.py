from __future__ import annotations


from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..source import SourceText
from ..flow.data_shards import RANK, WORLD, global_world, program_2d
from ..flow.modern import FULLY_SHARD, PARALLELIZE, hub, named_mesh_dims, taken_mesh_dims
from ._common import other_call_sites, shard_or_callers_reach

_SAMPLER = "torch.utils.data.DistributedSampler"


class SamplerGlobalWorldIn2d(Rule):
    """
    ## What it does
    Checks for a `DistributedSampler` that splits the data over the global world
    (`num_replicas` left out or `dist.get_world_size()`, `rank` left out or `dist.get_rank()`, or
    the environment's `WORLD_SIZE` / `RANK` by value: kept in a record, returned by a helper) in a
    program that also runs tensor parallelism over one dimension of a 2-D (or larger) `DeviceMesh`
    (`parallelize_module(model, mesh["tp"], plan)`), or shards with FSDP2 over one named
    dimension of such a mesh (`fully_shard(model, mesh=mesh["dp"])`: the other dimensions are
    not data parallel; HSDP, which gives `fully_shard` the whole 2-D mesh, is not flagged). The
    mesh may be built in a helper or kept on `self`, and its dimension may be unpacked into a name
    (`tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]`) or reach the parallelizing helper as a parameter;
    a mesh whose shape is built at run time counts by the dimensions the program takes from it by
    name. The parallelism may be in the sampler's function, another method of its class, or a
    caller. A split by hand (`range(rank, n, world)`) is DDP529's.

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
            if not (global_world(an, view, n, c, WORLD, callers) and global_world(an, view, r, c, RANK, callers)):
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
                got = program_2d(an, view, sem.enclosing_function(c), callers)
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
            dims = taken_mesh_dims(an, view, m, c) if m is not None else None
            if dims is not None and dims >= 2:
                out.append((c, dims))
            else:
                other = True
        return out, other
