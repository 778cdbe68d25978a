from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from ..source import SourceText
from ..flow.context import call_args
from ..flow.fs_effects import view_ctx
from ..flow.modern import FSDP1, FULLY_SHARD, INIT_MESH, holds_call, hub, origins, qn_pred, shard_calls, shard_reach
from ..flow.origins import branch_origins
from ..flow.rank import rank0_guarded
from ..flow.seeds import constructions, on_meta, seed_in_force

# FSDP1 strategies that keep whole replicas of the parameters over some ranks
_REPLICATING = frozenset({"HYBRID_SHARD", "_HYBRID_SHARD_ZERO2", "NO_SHARD"})
# calls that may give a module's parameters new values after it is built: a load, a broadcast,
# an initialisation run again (on FSDP2's DTensors, whose random ops share one RNG state)
_SETTERS = frozenset({"load_state_dict", "set_state_dict", "set_model_state_dict", "load", "load_checkpoint",
                      "load_model", "load_pretrained", "init_weights", "reset_parameters", "apply", "to_empty",
                      "copy_", "broadcast", "broadcast_coalesced", "_broadcast_coalesced", "_sync_module_states",
                      "sync_module_states", "from_pretrained", "resume", "restore", "_init_weights",
                      "init_parameters", "initialize"})
_DEPTH = 3
# calls that load a state into the module they are given (receiver or first argument)
_LOADS = frozenset({"load_state_dict", "set_model_state_dict", "set_state_dict"})
_FN_LOADS = frozenset({"set_model_state_dict", "set_state_dict"})


class ReplicasSeededPerRank(Rule):
    """
    ## What it does
    Checks for a model built under a rank-varying seed (`torch.manual_seed(seed + rank)`, or a
    helper such as `seed_everything(args.seed + rank)` that seeds torch from its parameter) on a
    real device, then handed to a wrapper that keeps each rank's own initial values over a
    replicated dimension without a broadcast:
    - FSDP2 `fully_shard(model, mesh=mesh)` on a 2-D (or larger) `DeviceMesh`: HSDP, replicated
      over the first dimension, sharded over the last;
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

    ## Why is this bad?
    DDP and FSDP1 with `sync_module_states=True` copy rank 0's parameters to every rank when they
    wrap. FSDP2 and FSDP1's replicating strategies without that flag do not: every rank keeps the
    values it drew. With a seed that differs per rank, the replicas of each shard start from
    different weights; their gradients are averaged over the replicate dimension, but the weights
    themselves never meet, so the replicas train as different models for the whole run (and a
    checkpoint depends on which replica writes it). Nothing raises.

    A state loaded on rank 0 alone is the same problem for every sharding strategy: each rank
    keeps the shards of its own copy, so the sharded model holds the loaded values only in rank
    0's shards and the random initial values everywhere else; fine-tuning starts from a corrupted
    checkpoint without an error.

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
    # reach gate (the file or a module it imports spells a sharding call)
    reach = classmethod(shard_reach)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        seen = set()
        for call, module, why in _replicating_wraps(an, view, ctx):
            for kv, k in constructions(an, view, module, call):
                if on_meta(an, kv, k):
                    continue
                seed = seed_in_force(an, kv, k)
                if seed is None or seed.kind != "V" or _state_set_after(an, kv, k):
                    continue
                key = (id(seed.call), id(k))
                if key in seen:
                    continue
                seen.add(key)
                self._report(ctx, view, call, why, seed, kv, k)
        for call, module, why in _broadcastless_wraps(an, view, ctx):
            for kv, k in constructions(an, view, module, call, wrap=call):
                if on_meta(an, kv, k):
                    continue
                got = _loaded_on_main_only(an, kv, k)
                if got is None or (id(got[1]), id(call)) in seen:
                    continue
                seen.add((id(got[1]), id(call)))
                self._report_load(ctx, view, call, why, got)

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


def _replicating_wraps(an, view, ctx) -> list:
    """(wrap call, module expression, words) of the file's wraps that keep each rank's values over
    a replicated dimension."""
    out = []
    for c in ctx.calls_to(*FULLY_SHARD):
        module = get_arg(c, 0, "module")
        mesh = get_arg(c, None, "mesh")
        if module is None or mesh is None:
            continue
        dims = _mesh_dims(an, view, mesh, c)
        if dims is not None and dims >= 2:
            out.append((c, module, f"`fully_shard` shards it on a {dims}-D mesh (HSDP)"))
    for c, module in shard_calls(an, view):
        if (view.sem.call_qualname(c) or "") in FULLY_SHARD:
            continue
        dims = _helper_mesh_dims(an, view, c)
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
    only, when every call after ``k`` that may give its parameters values (in its function and the
    project functions called there, the methods of its class, after the calls of its function)
    runs on the main rank only too; None otherwise."""
    sem = view.sem
    fn = sem.enclosing_function(k)
    scope = fn if fn is not None else sem.tree
    found = []
    seen = set()
    _setters_in(an, view, scope, (k.end_lineno, k.end_col_offset), 0, False, seen, found)
    if fn is not None:
        cls = parent(fn)
        if isinstance(cls, ast.ClassDef):
            for st in cls.body:
                if isinstance(st, FUNC_TYPES) and st is not fn:
                    _setters_in(an, view, st, None, 0, False, seen, found)
        for s in an.call_sites(view, fn):
            g = sem.enclosing_function(s)
            if g is not fn:
                _setters_in(an, view, g if g is not None else sem.tree, (s.end_lineno, s.end_col_offset), 1,
                            rank0_guarded(view_ctx(view), s, callers=False) is True, seen, found)
    load = None
    for sv, n, main_only in found:
        if not main_only:
            return None
        if load is None and _loads_into(an, sv, n, view, k):
            load = (sv, n)
    return load


def _setters_in(an, view, scope, after, depth, main_only, seen, out) -> None:
    """Collect (view, call, runs on the main rank only) of the setter calls of ``scope`` after
    ``after``, through the project functions called there."""
    if (id(scope), main_only) in seen:
        return
    seen.add((id(scope), main_only))
    vctx = view_ctx(view)
    for n in ast.walk(scope):
        if not isinstance(n, ast.Call) or (after is not None and (n.lineno, n.col_offset) < after):
            continue
        f = n.func
        name = f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else None)
        if name is None:
            continue
        if (view.sem.call_qualname(n) or "") == "torch.load":  # reads a file; sets nothing
            continue
        here = main_only or rank0_guarded(vctx, n, callers=False) is True
        target = an.resolve_call(view, n) if depth < _DEPTH else None
        if target is not None and isinstance(target[1], FUNC_TYPES):  # a project function: what it runs
            _setters_in(an, target[0], target[1], None, depth + 1, here, seen, out)
        elif name in _SETTERS:
            out.append((view, n, here))


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


def _mesh_dims(an, view, mesh, at) -> int | None:
    """The dimensions of the mesh ``mesh`` holds: an ``init_device_mesh`` call of a literal shape,
    or a slice of several named dimensions of one (``mesh["dp_replicate", "dp_shard"]``)."""
    got = holds_call(an, view, mesh, at, qn_pred(*INIT_MESH))
    if got is not None:
        shape = get_arg(got[1], 1, "mesh_shape")
        if isinstance(shape, (ast.Tuple, ast.List)):
            return len(shape.elts)
        return None
    for _v, e in origins(an, view, mesh, at):
        if isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Tuple) and len(e.slice.elts) >= 2 and all(
                isinstance(x, ast.Constant) and isinstance(x.value, str) for x in e.slice.elts):
            return len(e.slice.elts)
    return None


def _helper_mesh_dims(an, view, call) -> int | None:
    """The mesh dimensions of the ``fully_shard`` calls of the project function ``call`` runs (a
    sharding helper given the module, in this module or another), with a mesh built there or
    given as the helper's parameter (read at ``call``); None unless every such call agrees."""
    target = an.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    tv, tfn = target
    args = dict(call_args(call, tfn))
    params = set(param_names(tfn))
    got = set()
    for c in tv.sem.calls_to(*FULLY_SHARD):
        if not _within(tfn, c):
            continue
        mesh = get_arg(c, None, "mesh")
        if mesh is None:
            return None
        if isinstance(mesh, ast.Name) and mesh.id in params and not _stored(tfn, mesh.id):
            if mesh.id not in args:
                return None
            got.add(_mesh_dims(an, view, args[mesh.id], call))
        else:
            got.add(_mesh_dims(an, tv, mesh, c))
    return got.pop() if len(got) == 1 else None


def _within(outer, node) -> bool:
    return (outer.lineno, outer.col_offset) <= (node.lineno, node.col_offset) and (
        node.end_lineno, node.end_col_offset) <= (outer.end_lineno, outer.end_col_offset)


def _stored(fn, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(fn))


def _syncs_states(an, view, call) -> bool:
    flag = get_arg(call, None, "sync_module_states")
    if flag is None:
        return False
    got = origins(an, view, flag, call)
    return not (got and all(isinstance(e, ast.Constant) and e.value is False for _v, e in got))


def _state_set_after(an, view, k) -> bool:
    """A call after the construction ``k`` may give the model's parameters other values: in its
    function after it (and the project functions called there), in the methods of its class, or
    after the calls of its function in its module."""
    sem = view.sem
    fn = sem.enclosing_function(k)
    scope = fn if fn is not None else sem.tree
    if _sets_in(an, view, scope, (k.end_lineno, k.end_col_offset), 0, set()):
        return True
    if fn is None:
        return False
    cls = parent(fn)
    if isinstance(cls, ast.ClassDef):
        for st in cls.body:
            if isinstance(st, FUNC_TYPES) and st is not fn and _sets_in(an, view, st, None, 0, set()):
                return True
    for s in an.call_sites(view, fn):
        g = sem.enclosing_function(s)
        if g is not fn and _sets_in(an, view, g if g is not None else sem.tree, (s.end_lineno, s.end_col_offset), 1,
                                    set()):
            return True
    return False


def _sets_in(an, view, scope, after, depth, seen) -> bool:
    if id(scope) in seen:
        return False
    seen.add(id(scope))
    for n in ast.walk(scope):
        if not isinstance(n, ast.Call) or (after is not None and (n.lineno, n.col_offset) < after):
            continue
        f = n.func
        name = f.attr if isinstance(f, ast.Attribute) else (f.id if isinstance(f, ast.Name) else None)
        if name in _SETTERS:
            return True
        if depth < _DEPTH:
            target = an.resolve_call(view, n)
            if target is not None and isinstance(target[1], FUNC_TYPES) and _sets_in(
                    an, target[0], target[1], None, depth + 1, seen):
                return True
    return False
