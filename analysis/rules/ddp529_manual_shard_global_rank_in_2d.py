from __future__ import annotations

from ..model import Severity
from ..registry import NoCase, Rule
from ..source import SourceText
from ..flow.calls import call_args
from ..flow.data_shards import RANK, WORLD, bare_param, global_world, program_2d, shard_params, shard_sinks
from ..flow.modern import hub
from ._common import other_call_sites, shard_or_callers_reach


class ManualShardGlobalRankIn2d(Rule):
    """
    ## What it does
    Checks for data split by hand over the global world (`range(rank, n, world)`,
    `items[rank::world]`, `itertools.islice(items, rank, None, world)`,
    `split_dataset_by_node(ds, rank, world_size)`) with the global rank and world size
    (`dist.get_rank()`, `dist.get_world_size()`, the environment's `RANK` / `WORLD_SIZE`, kept in a
    record or a helper's return), in a program that runs tensor parallelism (or FSDP2) on one
    dimension of a 2-D (or larger) `DeviceMesh`. The split may be in a dataset class or a loader
    builder of another module: the finding is on the argument that passes the global rank to it
    (`build_loader(rank=dist.get_rank(), world_size=dist.get_world_size())`). A `DistributedSampler`
    is DDP507's.

    ## Why is this bad?
    In 2-D parallelism the ranks of one tensor-parallel group compute on the *same* batch: their
    shards of each layer meet in the TP collectives. A split over the global world gives every rank
    a different part of the data, so the TP group combines activations of unrelated samples and the
    replicated parameters drift apart across the group; nothing raises. The data must be split
    over the data-parallel dimension only: `mesh["dp"].get_local_rank()` and `mesh["dp"].size()`.

    ## Example
    ```python
    mesh = init_device_mesh("cuda", (dp, tp), mesh_dim_names=("dp", "tp"))
    parallelize_module(model, mesh["tp"], plan)
    loader = build_loader(batch, rank=dist.get_rank(), world=dist.get_world_size())
    ```

    ## Use instead
    ```python
    dp_mesh = mesh["dp"]
    loader = build_loader(batch, rank=dp_mesh.get_local_rank(), world=dp_mesh.size())
    ```

    ## Fix safety
    There is no automatic fix: the name of the data-parallel dimension is the program's.
    """

    code = "DDP529"
    name = "manual-shard-global-rank-in-2d"
    severity = Severity.ERROR
    requires_text = (NoCase("rank"), "SLURM_PROCID")
    reach = classmethod(shard_or_callers_reach)  # the parallelism may be in another module, or its caller

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        sem = view.sem
        callers = other_call_sites(ctx, an, methods=True)
        done = set()
        # a split of this module whose rank and count are values of its own function
        for node, r, w, what in shard_sinks(view):
            fn = sem.enclosing_function(node)
            if fn is not None and any(n is node for _v, n, _w, _b in shard_params(an, view, fn)):
                continue  # a part comes from a parameter: its callers are the finding's place
            if not (global_world(an, view, r, node, RANK, callers) and global_world(an, view, w, node, WORLD, callers)):
                continue
            self._report(ctx, an, view, fn, node, node, what, callers, done)
        # a call that passes the global rank / count on to a split of a project function
        for c in sem.calls:
            target = an.resolve_call(view, c)
            if target is None:
                continue
            fn = sem.enclosing_function(c)
            for sv, node, what, binds in shard_params(an, *target):
                args = None
                ok, at = True, None
                for part, b in binds.items():
                    if b[0] == "value":
                        ok = global_world(an, b[1], b[2], b[3], part, callers if b[1] is view else None)
                    else:
                        if args is None:
                            args = dict(call_args(c, target[1]))
                        a = args.get(b[1])
                        # a parameter of the caller as it stands: its own callers pass the value
                        ok = a is not None and (fn is None or bare_param(view, fn, a) is None) \
                            and global_world(an, view, a, c, part)
                        if ok and (at is None or part == RANK):
                            at = a
                    if not ok:
                        break
                if ok and at is not None:
                    self._report(ctx, an, view, fn, at, c, what, callers, done, sink=(sv, node))
                    break

    def _report(self, ctx, an, view, fn, at, site, what, callers, done, sink=None) -> None:
        if id(at) in done:
            return
        got = program_2d(an, view, fn, callers)
        if got is None:
            return
        done.add(id(at))
        tv, tc, dims = got
        msg = "parallelism on one dimension of the mesh"
        related = [(tc, msg)] if tv is view else [("file", tv.path, SourceText(tv.text).node_range(tc), msg)]
        if sink is not None:
            sv, node = sink
            smsg = "the data is split by rank here"
            related.append((node, smsg) if sv is view else ("file", sv.path, SourceText(sv.text).node_range(node), smsg))
        ctx.report(at, f"the data is split over the whole world ({what} with the global rank and world size), "
                       f"but the program runs tensor parallelism on one dimension of a {dims}-D mesh: the ranks "
                       "of a tensor-parallel group get different batches; split by the data-parallel mesh "
                       "dimension's `get_local_rank()` and `size()`",
                   related=related)

