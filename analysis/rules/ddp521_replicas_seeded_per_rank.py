from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..source import SourceText
from ..flow.modern import FSDP1, FULLY_SHARD, PARALLELIZE, helper_mesh_dims, hub, origins, shard_calls, whole_mesh_dims
from ..flow.origins import branch_origins
from ..flow.params import by_name_only
from ..flow.passes import iterated_leaves
from ..flow.call_sites import runs_before
from ..flow.seeds import constructions, on_meta, seed_in_force, setter_calls, state_set_after
from ._common import other_call_sites, shard_or_callers_reach
from ._loader import DATALOADER

# FSDP1 strategies that keep whole replicas of the parameters over some ranks
_REPLICATING = frozenset({"HYBRID_SHARD", "_HYBRID_SHARD_ZERO2", "NO_SHARD"})
# calls that load a state into the module they are given (receiver or first argument)
_FN_LOADS = frozenset({"set_model_state_dict", "set_state_dict"})


class ReplicasSeededPerRank(Rule):
    """
    ## What it does
    Checks for a model built under a rank-varying seed (`torch.manual_seed(seed + rank)`, or a
    helper such as `seed_everything(args.seed + rank)` that seeds torch from its parameter) on a
    real device, then handed to a wrapper that keeps each rank's own initial values over a
    replicated dimension without a broadcast:
    - FSDP2 `fully_shard(model, mesh=mesh)` on a 2-D (or larger) `DeviceMesh`: HSDP, replicated
      over the first dimension, sharded over the last (the mesh built in the sharding function or
      passed to it, also by a caller in another module of a function or a method; a shape built at
      run time counts by its literal `mesh_dim_names`);
    - FSDP1 `FullyShardedDataParallel` with `ShardingStrategy.HYBRID_SHARD`, `_HYBRID_SHARD_ZERO2`
      or `NO_SHARD` and no `sync_module_states=True`.

    The seed in force is the last seeding call before the construction: in its function, in the
    project functions it calls before (across modules), or before the calls of that function. Its
    value is rank-varying by value flow only (the rank reaches it). A model built on the `meta`
    device (initialised after sharding, where DTensor's random ops share one RNG state), loaded
    after it is built (`load_state_dict`, `set_model_state_dict`, DCP `load`, `from_pretrained`),
    initialised again (`init_weights()`, `reset_parameters()`, `apply(...)`) or broadcast, in the
    building function, the project functions it calls after, or the class's methods, is not
    flagged. DDP broadcasts the module's state from rank 0 when it wraps, and is not flagged.

    Also checks for a model whose state is loaded on the main rank only (`model.load_state_dict`
    or `set_model_state_dict(model, ...)` behind `if rank == 0:`, in the building function, a
    helper it calls, or the caller after it, across modules), then wrapped by FSDP2
    `fully_shard` (any mesh) or FSDP1 without `sync_module_states=True` (any strategy). Every
    later call that may give the model values (a load, a broadcast, an initialisation, as above)
    must run on the main rank only too; a load on every rank, a broadcast after it, or one after
    the wrap is not flagged.

    Also checks for the batches of tensor-parallel replicas: a loop that walks a DataLoader
    shuffling with torch's global generator (`shuffle=True`, no `sampler`, `batch_sampler` or
    `generator`; built in the loop's header, bound to a name, held by an object or returned by a
    helper, in any module) under a seed that varies over every rank (the global rank, not only a
    named dimension of a `DeviceMesh` such as `mesh["dp"].get_local_rank()` or a process group's
    rank), after the loop's function applied tensor parallelism (`parallelize_module`, there or in
    a project function it calls before the loop). A loop that broadcasts or scatters in its body
    (one rank of the group sharing its batch) is not flagged.

    Also checks for `DTensor.from_local(t, mesh, [Replicate()])` (a placement list holding
    `Replicate()`) of a `t` computed from a draw of torch's global generator (`torch.randn(n)`,
    also in a helper of any module that returns it, through names and tuple unpacking) under a
    seed in force that varies over every rank (the seed found as above, also in the caller of
    another module that runs the helper). A draw with its own `generator=`, a `Shard` placement
    or `distribute_tensor` is not flagged.

    ## Why is this bad?
    DDP and FSDP1 with `sync_module_states=True` copy rank 0's parameters to every rank when they
    wrap. FSDP2 and FSDP1's replicating strategies without that flag do not: every rank keeps the
    values it drew. With a seed that differs per rank, the replicas of each shard start from
    different weights; their gradients are averaged over the replicate dimension, but the weights
    themselves never meet, so the replicas train as different models for the whole run (and a
    checkpoint depends on which replica writes it). Nothing raises. On a 1-D mesh (pure sharding)
    there is no replica: each rank keeps only its own slice of every parameter, drawn from its own
    random stream, which is a valid initialisation and is not flagged.

    A state loaded on rank 0 alone is the same problem for every sharding strategy: each rank
    keeps the shards of its own copy, so the sharded model holds the loaded values only in rank
    0's shards and the random initial values everywhere else; fine-tuning starts from a corrupted
    checkpoint without an error.

    Tensor parallelism splits each layer over the ranks of a TP group, and its default input
    layout (`Replicate()`) assumes every rank of the group feeds the same batch. A DataLoader that
    shuffles with the global generator draws its order from the seed in force when a pass starts:
    seeded with the global rank, the ranks of one group draw different batches, so the sharded
    layers combine halves of different inputs. The activations and the losses are silently wrong.

    `DTensor.from_local` trusts its caller: with a `Replicate()` placement it neither checks nor
    makes the local tensors equal. Drawn under a per-rank seed, each rank's "replicated" tensor
    holds its own values: the ranks compute with different parameters, the losses differ, the
    gradients of a replicated parameter are never reconciled, and a checkpoint keeps one rank's
    copy. `distribute_tensor` sends the source rank's values to the others.

    ## Example
    ```python
    model = Net()
    if dist.get_rank() == 0:
        model.load_state_dict(torch.load(path, map_location="cpu"))
    model = FSDP(model, device_id=local_rank)  # no broadcast: ranks 1.. keep random weights
    ```
    ```python
    torch.manual_seed(args.seed + dist.get_rank())  # per-rank dropout and noise
    mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("replicate", "shard"))
    model = Net().cuda()
    fully_shard(model, mesh=mesh)
    ```
    ```python
    parallelize_module(model, mesh["tp"], {"w1": ColwiseParallel(), "w2": RowwiseParallel()})
    torch.manual_seed(args.seed + dist.get_rank())  # differs inside each TP group
    for batch in DataLoader(shard, batch_size=8, shuffle=True):
        ...
    ```

    ## Use instead
    ```python
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    mesh = init_device_mesh("cuda", (2, 4), mesh_dim_names=("replicate", "shard"))
    model = Net().cuda()
    fully_shard(model, mesh=mesh)
    torch.manual_seed(args.seed + dist.get_rank())  # per-rank randomness after the model exists
    ```
    Or build the model on the `meta` device and initialise it after `fully_shard`, or pass
    `sync_module_states=True` to FSDP1.

    For tensor parallelism, seed with the data-parallel rank, alike on the ranks of a TP group:
    ```python
    torch.manual_seed(args.seed + mesh["dp"].get_local_rank())
    ```

    For a replicated tensor drawn at random:
    ```python
    scale = nn.Parameter(distribute_tensor(1.0 + 0.1 * torch.randn(n), mesh, [Replicate()]))
    ```

    For a state loaded on rank 0 only:
    ```python
    model = Net()
    if dist.get_rank() == 0:
        model.load_state_dict(torch.load(path, map_location="cpu"))
    model = FSDP(model, device_id=local_rank, sync_module_states=True)  # rank 0's values everywhere
    ```

    ## Fix safety
    There is no automatic fix: where per-rank randomness should start again is the user's choice.
    """

    code = "DDP521"
    name = "replicas-seeded-per-rank"
    severity = Severity.ERROR
    # the wrap may be in a sharding helper of another module, and the seed in a third: only the
    # reach gate (the file or a module it imports spells a sharding call, or a caller in another
    # file may run its ``from_local`` under the seed)
    reach = classmethod(shard_or_callers_reach)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        seen = set()
        callers = other_call_sites(ctx, an, methods=True)
        for call, module, why in _replicating_wraps(an, view, ctx, callers):
            for kv, k in constructions(an, view, module, call):
                if on_meta(an, kv, k):
                    continue
                seed = seed_in_force(an, kv, k, callers=callers)
                if seed is None or seed.kind != "V" or state_set_after(an, kv, k):
                    continue
                key = (id(seed.call), id(k))
                if key in seen:
                    continue
                seen.add(key)
                self._report(ctx, view, call, why, seed, kv, k)
        self._tp_batches(ctx, an, view)
        self._replicated_from_local(ctx, an, view)
        for call, module, why in _broadcastless_wraps(an, view, ctx):
            for kv, k in constructions(an, view, module, call, wrap=call):
                if on_meta(an, kv, k):
                    continue
                got = _loaded_on_main_only(an, kv, k)
                if got is None or (id(got[1]), id(call)) in seen:
                    continue
                seen.add((id(got[1]), id(call)))
                self._report_load(ctx, view, call, why, got)

    def _tp_batches(self, ctx, an, view) -> None:
        """A loop of this file walks a DataLoader that shuffles with torch's global generator, under
        a seed that varies over every rank (not only over a mesh dimension or a process group),
        after the program applied tensor parallelism (``parallelize_module``, here or in a project
        helper called before the loop): the ranks of one TP group draw different batches."""
        if not ctx.sem.calls:
            return
        loops = [*ctx.sem.by_type.get(ast.For, ()), *ctx.sem.by_type.get(ast.AsyncFor, ())]
        done = set()
        for loop in sorted(loops, key=lambda n: (n.lineno, n.col_offset)):
            tp = runs_before(an, view, loop, PARALLELIZE)
            if tp is None or _broadcasts_batches(view, loop):
                continue
            seed = seed_in_force(an, view, loop)
            if seed is None or seed.kind != "V" or seed.src is None or seed.src.group is not None \
                    or by_name_only(seed) or id(seed.call) in done:
                continue
            loaders = [got for e in iterated_leaves(loop.iter, calls=True) if (got := _global_shuffle(an, view, e, loop))]
            if not loaders:
                continue
            done.add(id(seed.call))
            self._report_tp(ctx, view, loop, seed, tp, loaders[0])

    def _replicated_from_local(self, ctx, an, view) -> None:
        """``DTensor.from_local(t, mesh, [Replicate()])`` of a ``t`` drawn from torch's global
        generator (through names, tuple unpacking and helpers' returns: ``origins``) under a seed
        in force that varies over every rank: each rank's "replicated" DTensor holds its own draw."""
        callers = None
        for c in ctx.calls_to(*_FROM_LOCAL):
            if not _replicate_placement(an, view, get_arg(c, 2, "placements"), c):
                continue
            for dv, draw, frames in _global_draws(an, view, get_arg(c, 0, "local_tensor"), c):
                if callers is None:
                    callers = other_call_sites(ctx, an)
                seed = seed_in_force(an, dv, draw, frames, callers)
                if seed is None or seed.kind != "V" or seed.src is None or seed.src.group is not None \
                        or by_name_only(seed):
                    continue
                src = f" ({seed.src.desc})" if seed.src.desc else ""
                msg = (f"`DTensor.from_local` marks a tensor `Replicate()` that each rank draws from torch's "
                       f"global generator under a seed that differs between ranks{src}: `from_local` trusts that "
                       "the local tensors are identical and neither checks nor communicates, so every rank holds "
                       "a different \"replicated\" value; use `distribute_tensor`, which sends the source rank's "
                       "value, or draw it under a seed alike on every rank")
                related = []
                for v, n, what in ((dv, draw, "drawn here"), (seed.view, seed.call, "the per-rank seed")):
                    related.append((n, what) if v is view else
                                   ("file", v.path, SourceText(v.text).node_range(n), what))
                ctx.report(c, msg, related=related)
                break

    def _report_tp(self, ctx, view, loop, seed, tp, loader) -> None:
        lv, ld = loader
        src = f" ({seed.src.desc})" if seed.src.desc else ""
        msg = (f"the DataLoader shuffles with torch's global generator under a seed that differs between ranks{src}, "
               "after tensor parallelism (`parallelize_module`) made the ranks of each TP group hold parts of one "
               "model that expects the same input on all of them: the ranks of a group draw different batches; "
               "seed with the data-parallel rank (the `dp` dimension's `get_local_rank()`), or give the "
               "DataLoader a generator seeded alike on the ranks of a group")
        related = [(tp, "tensor parallelism applied here"), (loop, "the batches drawn here")]
        if lv is view:
            related.append((ld, "the shuffling DataLoader"))
        else:
            related.append(("file", lv.path, SourceText(lv.text).node_range(ld), "the shuffling DataLoader"))
        if seed.view is view:
            ctx.report(seed.call, msg, related=related)
        else:
            related.insert(0, ("file", seed.view.path, SourceText(seed.view.text).node_range(seed.call),
                               "the per-rank seed"))
            ctx.report(loop, msg, related=related)

    def _report_load(self, ctx, view, call, why, got) -> None:
        lv, load = got
        msg = (f"the model's state is loaded on the main rank only (`{SourceText(lv.text).segment(load.func)}`), "
               f"then {why}, which keeps each rank's own values without a broadcast: the other ranks "
               "keep their random initial weights and the sharded model mixes them with the loaded ones; "
               "pass `sync_module_states=True` (FSDP1), load on every rank, or load after wrapping with "
               "`set_model_state_dict(..., broadcast_from_rank0=True)`")
        if lv is view:
            related = [(load, "loaded on the main rank only")]
        else:
            related = [("file", lv.path, SourceText(lv.text).node_range(load), "loaded on the main rank only")]
        ctx.report(call, msg, related=related)

    def _report(self, ctx, view, call, why, seed, kv, k) -> None:
        src = f" ({seed.src.desc})" if seed.src is not None and seed.src.desc else ""
        msg = (f"the model is built under a seed that differs between ranks{src}, then {why}, which "
               "keeps each rank's own initial weights without a broadcast: the replicas start different "
               "and never reconcile; seed every rank alike before building the model (and reseed per rank "
               "after it), build it on the meta device, or broadcast its state")
        related = []
        if kv is view:
            related.append((k, "the model is built here"))
        else:
            related.append(("file", kv.path, SourceText(kv.text).node_range(k), "the model is built here"))
        if seed.view is view:
            related.insert(0, (call, "wrapped here"))
            ctx.report(seed.call, msg, related=related)
        else:
            related.insert(0, ("file", seed.view.path, SourceText(seed.view.text).node_range(seed.call),
                               "the per-rank seed"))
            ctx.report(call, msg, related=related)


_FROM_LOCAL = ("torch.distributed.tensor.DTensor.from_local", "torch.distributed._tensor.DTensor.from_local")
# torch's global generator draws (no ``generator=`` argument)
_DRAWS = frozenset({"torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.normal",
                    "torch.rand_like", "torch.randn_like", "torch.bernoulli", "torch.multinomial"})


def _replicate_placement(an, view, placements, at) -> bool:
    """Every origin of ``placements`` is a list or tuple display holding a ``Replicate()``."""
    if placements is None:
        return False
    got = origins(an, view, placements, at)
    return bool(got) and all(
        isinstance(e, (ast.List, ast.Tuple)) and any(
            isinstance(x, ast.Call) and (v.sem.call_qualname(x) or "").endswith(".Replicate") for x in e.elts)
        for v, e in got)


def _global_draws(an, view, expr, at) -> list:
    """(view, call, frames) of the draws of torch's global generator the value of ``expr`` is
    computed from (an operand of the expression an origin binds: ``1.0 + std * torch.randn(n)``),
    with the helper calls that led to each (``origins``' frames, for ``seed_in_force``)."""
    out = []
    for v, e, frames in origins(an, view, expr, at, frames=()) if expr is not None else ():
        for n in ast.walk(e):
            if isinstance(n, ast.Call) and v.sem.call_qualname(n) in _DRAWS and \
                    not any(k.arg == "generator" for k in n.keywords):
                out.append((v, n, frames))
    return out


def _replicating_wraps(an, view, ctx, callers=None) -> list:
    """(wrap call, module expression, words) of the file's wraps that keep each rank's values over
    a replicated dimension (``callers``: ``origins``' own, for a mesh a sharding helper's
    parameter receives from a caller in another module)."""
    out = []
    for c in ctx.calls_to(*FULLY_SHARD):
        module = get_arg(c, 0, "module")
        mesh = get_arg(c, None, "mesh")
        if module is None or mesh is None:
            continue
        dims = whole_mesh_dims(an, view, mesh, c, callers)
        if dims is not None and dims >= 2:
            out.append((c, module, f"`fully_shard` shards it on a {dims}-D mesh (HSDP)"))
    for c, module in shard_calls(an, view):
        if (view.sem.call_qualname(c) or "") in FULLY_SHARD:
            continue
        dims = helper_mesh_dims(an, view, c)
        if dims is not None and dims >= 2:
            out.append((c, module, f"`{ctx.text(c.func)}` shards it with `fully_shard` on a {dims}-D mesh (HSDP)"))
    for c in ctx.calls_to(FSDP1):
        module = get_arg(c, 0, "module")
        if module is None or _syncs_states(an, view, c):
            continue
        strategy = get_arg(c, 2, "sharding_strategy")
        got = branch_origins(an, view, strategy, c) if strategy is not None else []
        names = {e.attr for _v, e, _f in got if isinstance(e, ast.Attribute)}
        if got and len(names) == len(got) and names <= _REPLICATING:
            out.append((c, module, f"FSDP wraps it with `{sorted(names)[0]}`"))
    return out


def _broadcastless_wraps(an, view, ctx) -> list:
    """(wrap call, module expression, words) of the file's wraps that shard each rank's own copy
    of the module without a broadcast, whatever the strategy: FSDP2 ``fully_shard`` (directly or
    through a sharding helper), FSDP1 without ``sync_module_states``."""
    out = []
    for c, module in shard_calls(an, view):
        if (view.sem.call_qualname(c) or "") in FULLY_SHARD:
            out.append((c, module, "`fully_shard` shards it"))
        else:
            out.append((c, module, f"`{ctx.text(c.func)}` shards it with `fully_shard`"))
    for c in ctx.calls_to(FSDP1):
        module = get_arg(c, 0, "module")
        if module is not None and not _syncs_states(an, view, c):
            out.append((c, module, "FSDP wraps it without `sync_module_states=True`"))
    return out


def _loaded_on_main_only(an, view, k):
    """(view, call) of a load of a state into the module built by ``k`` that runs on the main rank
    only, when every call after ``k`` that may give its parameters values (``seeds.setter_calls``,
    a project function read for what it runs) runs on the main rank only too; None otherwise."""
    load = None
    for sv, n, main_only in setter_calls(an, view, k, by_name=False, guards=True):
        if not main_only:
            return None
        if load is None and _loads_into(an, sv, n, view, k):
            load = (sv, n)
    return load


def _loads_into(an, view, call, kv, k) -> bool:
    """``call`` loads a state into the module the construction ``k`` builds: its receiver
    (``model.load_state_dict(sd)``) or first argument (``set_model_state_dict(model, sd)``)."""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr == "load_state_dict":
        target = f.value
    elif (isinstance(f, ast.Attribute) and f.attr in _FN_LOADS) or (isinstance(f, ast.Name) and f.id in _FN_LOADS):
        target = get_arg(call, 0, "model")
    else:
        return False
    if target is None:
        return False
    return any(v is kv and e is k for v, e in constructions(an, view, target, call))


def _global_shuffle(an, view, expr, at):
    """(view, DataLoader call) when every origin of ``expr`` at ``at`` is a DataLoader that shuffles
    with torch's global generator (``shuffle=`` true on some path, no ``sampler``, ``batch_sampler``
    or ``generator``); None otherwise."""
    leaves = branch_origins(an, view, expr, at, limit=10)
    if not leaves:
        return None
    for lv, ld, fr in leaves:
        if not isinstance(ld, ast.Call) or (lv.sem.call_qualname(ld) or "") != DATALOADER:
            return None
        if any(get_arg(ld, i, k) is not None for i, k in ((3, "sampler"), (4, "batch_sampler"), (None, "generator"))):
            return None
        shuffle = get_arg(ld, 2, "shuffle")
        if shuffle is None or not any(isinstance(e, ast.Constant) and e.value is True
                                      for _v, e, _f in branch_origins(an, lv, shuffle, ld, frames=fr)):
            return None
    return leaves[0][0], leaves[0][1]


def _broadcasts_batches(view, loop) -> bool:
    """The loop's body broadcasts (a batch sent from one rank of the group to the others)."""
    return any((view.sem.call_qualname(c) or "") in _BROADCASTS for c in ast.walk(loop) if isinstance(c, ast.Call))


_BROADCASTS = ("torch.distributed.broadcast", "torch.distributed.broadcast_object_list",
               "torch.distributed.scatter", "torch.distributed.scatter_object_list")


def _syncs_states(an, view, call) -> bool:
    flag = get_arg(call, None, "sync_module_states")
    if flag is None:
        return False
    got = origins(an, view, flag, call)
    return not (got and all(isinstance(e, ast.Constant) and e.value is False for _v, e in got))
