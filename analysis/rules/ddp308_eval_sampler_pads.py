from __future__ import annotations

import ast
from types import SimpleNamespace

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, get_arg
from ..torch_api import constant_of
from ._loader import DIST_SAMPLER, is_loader_call, loader_sampler

_SAMPLER_QNS = (DIST_SAMPLER, "torch.utils.data.distributed.DistributedSampler")
# a loader through a builder, a data module and a dataset factory is ~8 steps (as DDP301)
_LOADER_STEPS = 10
_MAX_SCOPES = 64


class EvalSamplerPads(Rule):
    """
    ## What it does
    Checks for a `DistributedSampler` that pads (its `drop_last` is left at `False`) feeding a
    `DataLoader` that an evaluation loop walks, when that loop's results are combined across ranks.

    The sampler is the one in this file; the loop is found by value flow from every function of
    this file, and from the functions of the project's other files that call the function building
    the loader (`valid_loader = build_loader(ds, rank, world)` in a script, then
    `evaluator.run(valid_loader)`): the flow layer's `passes` finds each loop that walks a loader,
    also in the project functions a function calls (methods, other modules, a parameter rewritten as
    the caller's argument), and `origins` follows the walked value back to its `DataLoader(...)` and
    that loader's `sampler=` back to this sampler, through builders' returns, tuples and `self`
    attributes. Every value the `sampler=` may hold must be a padding `DistributedSampler` (or
    None): a builder that picks another sampler for evaluation on some path is not reported.

    The loop is an evaluation walk (`flow.eval_walks`): it runs under `torch.no_grad()` or
    `torch.inference_mode()` (around the loop, on its function, or around a call on the way), its
    rounds run no `backward()`, and a value its body writes (a running sum, a count, a list of
    predictions) reaches `all_reduce`, `reduce`, `all_gather`, `gather` or their object variants
    (directly or through a project helper), in the loop's function or, through its return value, in
    its caller; a metric object the loop feeds (`meter.update(out, y)`) counts as combined when a
    method of it that runs such a collective is called after the loop (`meter.compute()`). A gathered result cut to a length afterwards (`preds[:len(dataset)]`) is taken as the
    padding undone.

    ## Why is this bad?
    `DistributedSampler` with `drop_last=False` (the default) makes every rank take the same number
    of samples by repeating the first ones: with 13 samples on 2 ranks it yields 14 indices, one of
    them twice. That is harmless for training, but an evaluation metric summed or gathered over the
    ranks then counts the repeated samples twice, so the reported loss, accuracy or sample count is
    biased and depends on the world size. A checkpoint picked on that metric can differ from the one
    a single-process evaluation would pick.

    ## Example
    ```python
    sampler = DistributedSampler(val_set)  # pads to a multiple of the world size
    loader = DataLoader(val_set, batch_size=32, sampler=sampler)

    @torch.no_grad()
    def evaluate(model, loader):
        correct = torch.zeros(2, device="cuda")
        for x, y in loader:
            correct += torch.stack([(model(x).argmax(1) == y).sum(), torch.tensor(len(y))])
        dist.all_reduce(correct)  # counts the padded samples
        return correct[0] / correct[1]
    ```

    ## Use instead
    A sampler that shards without padding (each rank takes `range(rank, len(ds), world)`), or
    trim the gathered predictions to the dataset's length:
    ```python
    class ShardSampler(Sampler):
        def __init__(self, ds, rank, world):
            self.idx = list(range(rank, len(ds), world))
        def __iter__(self):
            return iter(self.idx)
        def __len__(self):
            return len(self.idx)

    loader = DataLoader(val_set, batch_size=32, sampler=ShardSampler(val_set, rank, world))
    ```

    ## Fix safety
    No fix is offered: whether to shard without padding (uneven batch counts per rank; a model
    whose forward runs collectives needs `Join`) or to drop the duplicates after gathering is the
    author's choice.

    Off by default (`--select DDP308` or `ALL` turns it on): samples are counted twice only when
    the dataset's length is not a multiple of the world size, and the code rarely shows either.
    """

    code = "DDP308"
    name = "eval-sampler-pads"
    severity = Severity.WARNING
    fix_availability = "never"
    default_enabled = False
    requires_text = ("DistributedSampler",)

    def finish(self, ctx) -> None:
        samplers = [s for s in ctx.calls_to(*_SAMPLER_QNS) if _pads(ctx.sem, s)]
        if not samplers:
            return
        from ..flow import for_context
        from ..flow.findings import node_related
        from ..flow.passes import scope_passes
        from ._common import other_call_sites

        an = for_context(ctx)
        main = an.main
        ids = {id(s): s for s in samplers}
        callers = other_call_sites(ctx, an)
        reported: set[int] = set()
        for view, scope in self._scopes(ctx, an, samplers):
            if len(reported) == len(ids):
                return
            for p in scope_passes(an, view, scope):
                got = _padding_sampler(an, p, ids, main, callers)
                if got is None or id(got) in reported:
                    continue
                from ..flow.eval_walks import reduced_eval_walk

                walk = reduced_eval_walk(an, p)
                if walk is None:
                    continue
                reported.add(id(got))
                fn = walk.view.sem.enclosing_function(walk.loop)
                where = f"`{fn.name}`" if fn is not None else "an evaluation loop"
                ctx.report(
                    got,
                    f"this `DistributedSampler` pads the dataset to a multiple of the world size "
                    f"(`drop_last=False`), and {where} walks its loader without gradients and combines "
                    f"the results across ranks (`{walk.op}`): samples repeated for padding are counted "
                    f"twice whenever the dataset's length is not a multiple of the world size",
                    related=[node_related(ctx, walk.view.path, walk.loop, "the evaluation loop"),
                             node_related(ctx, walk.site_view.path, walk.site, f"`{walk.op}` of its results")],
                )

    @staticmethod
    def _scopes(ctx, an, samplers):
        """(view, scope) to look for passes from: this module's functions and top level, then the
        functions of other files that call a module-level function of this file holding a sampler."""
        main = an.main
        out = [(main, main.tree)]
        out.extend((main, n) for fs in ctx.sem.functions.values() for n in fs if isinstance(n, FUNC_TYPES))
        names = set()
        for s in samplers:
            fn = ctx.sem.enclosing_function(s)
            while fn is not None and not isinstance(getattr(fn, "_p", None), (ast.Module, ast.ClassDef)):
                fn = ctx.sem.enclosing_function(fn)
            if fn is not None and isinstance(getattr(fn, "_p", None), ast.Module):
                names.add(fn.name)
        if names:
            from ._common import project_callers

            seen = set()
            for cctx, call, _node in project_callers(ctx, tuple(sorted(names))):
                cv = an.view_of(cctx.filename) if cctx.filename else None
                if cv is None or cv.sem is not cctx.sem:
                    continue
                cfn = cv.sem.enclosing_function(call)
                scope = cfn if cfn is not None else cv.tree
                if id(scope) not in seen:
                    seen.add(id(scope))
                    out.append((cv, scope))
        return out[:_MAX_SCOPES]


def _pads(sem, call: ast.Call) -> bool:
    """The sampler keeps ``drop_last=False``: absent, or a value that resolves to ``False``."""
    dl = get_arg(call, 5, "drop_last")
    if dl is None:
        return not any(k.arg is None for k in call.keywords)
    got = constant_of(sem, dl, sem.scope_of(call)) if not isinstance(dl, ast.Constant) else dl
    return isinstance(got, ast.Constant) and got.value is False


def _padding_sampler(an, p, ids: dict, main, callers):
    """The sampler of ``ids`` (this file's padding samplers) that the loader walked by ``p`` holds
    on every path (None allowed), or None."""
    from ..flow.origins import branch_origins

    try:
        found_loaders = branch_origins(an, p.view, p.expr, p.at, frames=(), limit=_LOADER_STEPS, callers=callers)
    except Exception:  # noqa: BLE001 - no answer, no finding
        return None
    for lv, ld, fr in found_loaders:
        if not is_loader_call(lv.sem, ld):
            continue
        s_arg = loader_sampler(SimpleNamespace(sem=lv.sem), ld)
        if s_arg is None:
            continue
        if isinstance(s_arg, ast.Call) and (lv.sem.call_qualname(s_arg) or "") in _SAMPLER_QNS:
            found = [(lv, s_arg, fr)]
        else:
            found = branch_origins(an, lv, s_arg, ld, frames=fr)
        nones = [e for _v, e, _f in found if isinstance(e, ast.Constant) and e.value is None]
        ours = [e for v, e, _f in found if v is main and id(e) in ids]
        if ours and len(ours) + len(nones) == len(found):
            return ours[0]
    return None

