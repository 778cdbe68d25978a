from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.findings import node_related
from ..flow.modern import DCP_SAVE, hub
from ..flow.object_state import entry_value, key_varies, placed_object, rng_draw_per_rank, state_entries
from ..flow.values import RNG
from ._common import other_call_sites


class PerRankStateUnderSharedKey(Rule):
    """
    ## What it does
    Checks the state dict given to `torch.distributed.checkpoint.save` / `async_save` for an
    entry whose key is the same on every rank but whose value differs between ranks and is a plain
    tensor or object: a random generator's state where each rank seeds its own
    (`torch.Generator().manual_seed(seed + rank)`, a file that seeds torch, `random` or NumPy
    with the rank), a value computed from the rank, or from this rank's own data. The state dict is
    followed through helpers and methods that build it (in other modules too), dict displays,
    `dict(...)`, `d["k"] = v` stores, `update`, nested dicts, and the `state_dict()` of a project
    object (a `Stateful` DCP calls itself, or one called to fill an entry): its own state is read
    as its construction runs it (`Jitter(seed=base + rank)`, the object reached through `self`
    attributes and the constructor's calls in the training script).

    ## Why is this bad?
    DCP treats a plain tensor or object saved under the same key by every rank as replicated: it
    deduplicates the write items of all ranks and stores one rank's copy. On resume `dcp.load`
    gives that one copy to every rank, so each rank's own state is silently replaced by another
    rank's: per-rank augmentation or dropout streams restart from the same state (ranks may even
    draw identical noise), and a resumed run no longer reproduces the uninterrupted one. Nothing
    fails.

    ## Example
    ```python
    gen = torch.Generator().manual_seed(args.seed + dist.get_rank())
    ...
    dcp.save({"model": get_model_state_dict(model), "noise": gen.get_state()}, checkpoint_id=path)
    ```

    ## Use instead
    Give each rank's state its own key (or save it per rank outside DCP, or as a DTensor sharded
    over the ranks):
    ```python
    dcp.save({"model": get_model_state_dict(model), f"noise_rank{dist.get_rank()}": gen.get_state()},
             checkpoint_id=path)
    ```

    ## Fix safety
    There is no automatic fix: the load side must read the same per-rank key.
    """

    code = "DDP530"
    name = "per-rank-state-under-shared-key"
    severity = Severity.ERROR
    default_enabled = True
    requires_text = ("checkpoint",)  # every qualified name it resolves is torch.distributed.checkpoint.*

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        callers = other_call_sites(ctx, an, methods=True)
        others = other_call_sites(ctx, an, methods=True, modules=True)

        def anywhere(v, fn):  # a helper's calls in this file too (a module's own calls: ``call_sites``)
            here = [(view, c) for c in view.sem.calls if v is not view and an.resolve_call(view, c) == (v, fn)]
            return here + others(v, fn)
        for c in ctx.calls_to(*DCP_SAVE):
            sd = get_arg(c, 0, "state_dict")
            if sd is None:
                continue
            seen = set()
            for e in state_entries(an, view, sd, c, callers):
                if id(e.value) in seen or key_varies(an, e):
                    continue
                seen.add(id(e.value))
                v = entry_value(an, e, callers)
                if not v.varying or (v.src.cat == RNG and not rng_draw_per_rank(an, view, v.src, anywhere)):
                    continue  # random state under no known per-rank seed: it may be seeded elsewhere
                if placed_object(an, e):
                    continue  # a library's sharded object built with the rank: its own placement
                chain = (*e.outer, e)
                where = next((x for x in reversed(chain) if x.view is view), None)  # the innermost one here
                keys = " / ".join(f"`{ast.unparse(x.key)}`" for x in chain)
                msg = (f"`{ast.unparse(e.value)}` is saved by `dcp.{ctx.qn(c).rsplit('.', 1)[-1]}` under {keys}, "
                       f"the same key on every rank, but it differs between ranks ({v.src.text(view.path)}): DCP "
                       "keeps one rank's copy of a plain tensor or object saved under one key, and on resume every "
                       "rank loads that copy. Use a per-rank key (or save per-rank state outside DCP)")
                related = [(c, "saved here")] if where is not None else []
                if e.view is not view:
                    related.append(node_related(ctx, e.view.path, e.value, "the per-rank value"))
                ctx.report(where.value if where is not None else c, msg, related=related)

