from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg, param_names
from ..flow.calls import on_subgroup
from ..flow.group_spans import WORLD, group_span, hsdp_meshes, mesh_span, same_span, spans_replicas
from ..flow.helper_calls import bind_args
from ..flow.hidden import arg_calls, shard_calls
from ..flow.modern import PARALLELIZE, hub, origins
from ..flow.reductions import _is_sum
from ..flow.spmd_kinds import PARTIAL, REDUCERS, local_norms, may_consume
from ._common import other_call_sites


class LocalShardNormWrongRanks(Rule):
    """
    ## What it does
    Checks for a gradient norm (or another global sum) built from the *local shards* of DTensor
    gradients (`g.to_local()`, `g._local_tensor`) and then reduced over the wrong set of ranks.
    The value's kind across ranks is followed (`flow.spmd_kinds`): a local shard of a sharded
    gradient is a *shard*, a norm or a sum of shards is *partial* (this rank's term of the global
    sum), and it must be summed over exactly the mesh dimensions the shards are split on:

    - not reduced at all, and used to clip: the gradients are scaled by
      `torch.nn.utils.clip_grads_with_norm_(..., total_norm)`, `torch._foreach_mul_(grads, coef)`
      or `g.mul_(coef)` with a coefficient made of the partial norm, in a module (or a caller's
      module) that shards with `fully_shard` or `parallelize_module`. The finding is on the norm
      when it is made in the same module, else on the clip;
    - summed over a group that spans the replicate dimension of a mesh of two or more dimensions
      that a `fully_shard` of the module (or of the function's callers' modules, or of a sharding
      helper they call) may shard over (HSDP: replicate x shard): the shards are replicated over the
      replicate dimension and counted once per replica. Which ranks a group spans is read from
      where it comes from (`flow.group_spans`): the whole world (no group, `group.WORLD`,
      `new_group()` of every rank, also kept on a state object), the replicate dimension's group, or
      a flattened group of both; the shard dimension's group is right;
    - summed over the group of a mesh that `parallelize_module` splits the model over
      (`dist.all_reduce(norm_sq, group=tp_mesh.get_group())`, the group passed through a helper's
      parameter; the same named dimension of one mesh, `mesh["tp"]`, read apart where the
      script takes the group and where a helper of another module parallelizes), when the
      gradients were not selected by their placements (a filtered comprehension, or a loop that
      adds a gradient's term under a test of that gradient, the others summed apart): the
      parameters a tensor-parallel plan leaves replicated (norms, embeddings, everything outside
      the plan) are the same on every rank of that group and are counted once per rank.

    The gradients, their local shards and the norm may pass through helpers (of another module),
    lists and dicts of lists, methods and tuple assignments; the sum may be made by a helper that
    all-reduces the value it is given (reported in the helper, when every call gives it such a
    norm).

    ## Why is this bad?
    An unreduced norm differs between ranks: each rank clips its own shard by its own coefficient,
    so the update is no longer a uniformly clipped gradient and the ranks log different norms.
    A sum over too many ranks is too large by the replicate (or tensor-parallel) degree: the
    logged norm is wrong and the gradients are clipped although the true norm is below the
    threshold. Nothing fails; training just differs from the one configured.

    ## Example
    ```python
    local = [p.grad.to_local() for p in model.parameters() if p.grad is not None]
    norm_sq = sum(g.norm() ** 2 for g in local)
    dist.all_reduce(norm_sq)  # HSDP mesh (replicate x shard): replicas counted again
    coef = torch.clamp(max_norm / (norm_sq.sqrt() + 1e-6), max=1.0)
    torch._foreach_mul_(local, coef)
    ```

    ## Use instead
    ```python
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # DTensor-aware
    total = total.full_tensor() if isinstance(total, DTensor) else total

    # or sum the local terms over the shard dimension only
    dist.all_reduce(norm_sq, group=mesh["dp_shard"].get_group())
    ```

    ## Fix safety
    There is no automatic fix.
    """

    code = "DDP526"
    name = "local-shard-norm-wrong-ranks"
    severity = Severity.WARNING
    requires_text = ("all_reduce", "clip_grads_with_norm_", "_foreach_mul", "mul_", "div_")
    requires_text_all = (("grad",), ("norm", "sum"))

    def finish(self, ctx) -> None:
        an = view = callers = None
        for fns in ctx.sem.functions.values():
            for fn in fns:
                # only a function that reduces or scales by a value can hold a finding: the facts
                # (which follow every call into the project's helpers) are asked for those alone
                if not isinstance(fn, FUNC_TYPES) or not may_consume(ctx.sem, fn):
                    continue
                if an is None:
                    an, view = hub(ctx)
                    callers = other_call_sites(ctx, an)
                facts = local_norms(an, view, fn)
                if not facts.clips and not facts.reduced:
                    continue
                self._unreduced(ctx, an, view, fn, facts, callers)
                self._over_counted(ctx, an, view, fn, _caller_seeded(an, view, fn, facts, callers), callers)

    def _unreduced(self, ctx, an, view, fn, facts, callers) -> None:
        done = set()
        for call, arg, k in facts.clips:
            if not _shards(an, _views(view, fn, callers), ("fsdp2", "tp")):
                return
            at = k.at[1] if k.at is not None and k.at[0] is view else call
            if id(at) in done:
                continue
            done.add(id(at))
            ctx.report(at, f"`{ctx.text(at)}` is this rank's part of the gradient norm (a norm of the gradients' "
                           f"local shards), never reduced across ranks, and `{ctx.text(call.func)}` (line "
                           f"{call.lineno}) scales the gradients by it: each rank clips with its own norm; "
                           "all-reduce the sum of the shards' terms over the shard group first, or use "
                           "`torch.nn.utils.clip_grad_norm_` on the DTensor parameters")

    def _over_counted(self, ctx, an, view, fn, facts, callers) -> None:
        for name, calls in facts.reduced.items():
            k = facts.env.get(name)
            if k is None or getattr(k, "kind", None) != PARTIAL or k.filtered:
                continue
            for c in calls:
                if (view.sem.call_qualname(c) or "") not in REDUCERS:
                    continue  # a helper that reduces it: judged in the helper, with what its calls pass
                if not _is_sum(get_arg(c, 1, "op")):
                    continue
                grp = get_arg(c, 2, "group")
                spans = group_span(an, view, grp, c, callers)
                if spans:
                    meshes = hsdp_meshes(an, _views(view, fn, callers))
                    if meshes and all(spans_replicas(s, meshes) for s in spans):
                        where = "the whole world" if all(s == WORLD for s in spans) else \
                            "a group that spans the mesh's replicate dimension"
                        ctx.report(c, f"`{ctx.text(c)}` sums `{name}`, a norm of the gradients' local shards, over "
                                      f"{where}, but the model is sharded over a mesh of several dimensions "
                                      "(HSDP: replicate x shard): the shards are replicated over the replicate "
                                      "dimension and counted once per replica; sum over the shard dimension's "
                                      "group only, or use `torch.nn.utils.clip_grad_norm_`")
                        continue
                if not on_subgroup(c, "all_reduce"):
                    continue
                if _tp_group(an, view, grp, c, callers):
                    ctx.report(c, f"`{ctx.text(c)}` sums `{name}` over the group of the mesh that "
                                  "`parallelize_module` splits the model over, but it adds the norms of every "
                                  "gradient's local tensor: the parameters the plan leaves replicated are the same "
                                  "on every rank of that group and are counted once per rank; sum only the sharded "
                                  "gradients' terms over it")


def _caller_seeded(an, view, fn, facts, callers):
    """The facts of ``fn`` with the parameters it reduces holding what its calls pass, where its
    own body gives them no kind (``def sum_over(t, group): dist.all_reduce(t, group=group)``
    called with a norm of local shards): one kind that every call (in this module, or in the
    project's other modules) agrees on; else ``facts``."""
    params = [n for n in facts.reduced if n not in facts.env and n in param_names(fn)]
    if not params:
        return facts
    sites = [(view, c) for c in an.call_sites(view, fn)] or callers(view, fn)
    seeds: dict = {}
    for cv, c in sites[:8]:
        caller = cv.sem.enclosing_function(c)
        if caller is None or caller is fn:
            return facts
        env = local_norms(an, cv, caller).env
        args = bind_args(c, fn)
        for name in params:
            a = args.get(name)
            k = env.get(a.id) if isinstance(a, ast.Name) else None
            if k is None or (name in seeds and seeds[name] != k):
                return facts
            seeds[name] = k
    return local_norms(an, view, fn, seeds) if seeds else facts


def _views(view, fn, callers) -> list:
    """This module, and the modules of ``fn``'s callers."""
    out = [view]
    for v, _c in callers(view, fn):
        if v not in out:
            out.append(v)
    return out


def _shards(an, views, kinds) -> bool:
    return any(shard_calls(an, v, kind) for v in views for kind in kinds)


def _tp_group(an, view, grp, at, callers) -> bool:
    """``grp`` holds the process group of a mesh (``m.get_group()``) that a ``parallelize_module``
    of the same module (or of a helper it calls, in another module) splits a model over: the mesh
    followed to the same origin, or spanning the same ranks (``flow.group_spans``: the same named
    dimension of one ``init_device_mesh``, ``mesh["tp"]`` read apart in each place)."""
    if grp is None:
        return False
    got = origins(an, view, grp, at, callers=callers)
    if not got:
        return False
    for v, e in got:
        if not (isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "get_group"
                and not e.args):
            return False
        mesh = {id(x) for _w, x in origins(an, v, e.func.value, e)}
        tp, spans = set(), []
        for c, m in arg_calls(an, v, PARALLELIZE, 1, "device_mesh", "parallelize_module"):
            tp |= {id(x) for _w, x in origins(an, v, m, c)}
            spans.append(mesh_span(an, v, m, c))
        if mesh and mesh <= tp:
            continue
        span = mesh_span(an, v, e.func.value, e)
        if span is None or not spans or not all(s is not None and same_span(span, s) for s in spans):
            return False
    return True
