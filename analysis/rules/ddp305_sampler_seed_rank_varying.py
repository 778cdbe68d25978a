from __future__ import annotations

import ast

from ..flow import for_context
from ..flow.params import by_name_only, designates_by_default
from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ._flow import scopes, source_related, source_words, text

_SAMPLER = "torch.utils.data.DistributedSampler"


def _varying_beyond_entries(an, seed, v):
    """The rank-varying value (``v``, the seed's own, when that is the one) of some value ``seed``
    may hold (itself, or each binding of a name reaching it) that is not an entry read out of a
    container by a constant key (``cfg["train"]["seed"]``); None when there is none. The
    uniformity of a container joins all its entries, so a config dict that also stores the rank
    (``opt["rank"] = get_rank()``) would make its seed entry look rank-varying too."""
    from ..flow.bindings import reaching, target_path
    from ..flow.origins import const_key

    main = an.main
    ev = an.evaluator(main)
    values = [seed]
    if isinstance(seed, ast.Name):
        kind, evs = reaching(main, seed.id, seed)
        if kind == "events" and evs and all(isinstance(b, ast.Assign) for b in evs):
            values = []
            for b in evs:
                t = next((t for t in b.targets if target_path(t, seed.id) == []), None)
                if t is None:
                    return v  # unpacked from a tuple: judged as a whole
                values.append(b.value)
    for e in values:
        if isinstance(e, ast.Subscript) and isinstance(const_key(e.slice), str):
            e = None  # a config entry: not judged
        elif isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "get" \
                and e.args and isinstance(const_key(e.args[0]), str) \
                and main.sem.qualname(e.func.value) not in ("os.environ", "environ"):
            e = None  # ``cfg.get("seed", 0)``: the same entry, read with a default
        if e is not None and ev.value(e).varying:
            return ev.value(e) if e is not seed else v
    return None


class SamplerSeedRankVarying(Rule):
    """
    ## What it does
    Checks for a `DistributedSampler(..., seed=...)` whose seed differs between ranks: computed
    from the process rank (`seed=args.seed + rank`, `seed=base_seed + dist.get_rank()`), through
    names, helpers' returns and arithmetic (the uniformity analysis of `analysis/flow`). A seed
    that is the same on every rank (a constant, a parsed argument, a config value) is not
    flagged, and neither is a per-rank seed used only for augmentation or `torch.manual_seed`.

    ## Why is this bad?
    `DistributedSampler` shuffles the *whole* dataset with a generator seeded by `seed + epoch`,
    then hands rank `r` the slice `indices[r::num_replicas]`. The slices partition the dataset
    only when every rank builds the same permutation. With a per-rank seed each rank slices a
    different permutation: some samples are seen by several ranks in an epoch and others by none,
    so an "epoch" silently covers only part of the data. Nothing raises.

    ## Example
    ```python
    rank = dist.get_rank()
    seed = args.seed + rank  # per-rank augmentation
    torch.manual_seed(seed)
    sampler = DistributedSampler(dataset, shuffle=True, seed=seed)
    ```

    ## Use instead
    ```python
    rank = dist.get_rank()
    torch.manual_seed(args.seed + rank)  # per-rank augmentation is fine
    sampler = DistributedSampler(dataset, shuffle=True, seed=args.seed)  # one permutation for all
    ```

    ## Fix safety
    There is no automatic fix: which shared seed to use is the program's choice.
    """

    code = "DDP305"
    name = "sampler-seed-rank-varying"
    severity = Severity.ERROR
    fix_availability = "never"
    requires_text = ("DistributedSampler",)
    requires_text_all = (("seed",),)

    def finish(self, ctx) -> None:
        samplers = ctx.calls_to(_SAMPLER)
        if not samplers:
            return
        an = for_context(ctx)
        ev = an.evaluator(an.main)
        for c in samplers:
            seed = get_arg(c, 4, "seed")
            if seed is None:
                continue
            v = ev.value(seed)
            if not v.varying:
                continue
            if by_name_only(v) and designates_by_default(ctx.sem.enclosing_function(c), seed):
                continue
            v = _varying_beyond_entries(an, seed, v)
            if v is None:
                continue
            ctx.report(
                seed,
                f"the seed `{text(ctx, seed)}` of `DistributedSampler` is rank-varying ({source_words(ctx, v)}): "
                "each rank slices a different permutation of the dataset, so some samples are seen by "
                "several ranks in an epoch and others by none; pass the same seed on every rank",
                related=source_related(ctx, v),
            )
        self._through_helpers(ctx, an, samplers)

    def _through_helpers(self, ctx, an, samplers) -> None:
        """A function of this file that builds the sampler with a seed it takes as a parameter
        (``def make_loader(ds, seed): DistributedSampler(ds, seed=seed)``), called with a
        rank-varying argument: reported at the call, where the fix goes."""
        from ..flow.context import call_context

        main = an.main
        # the samplers whose seed the plain analysis cannot judge, by the function building them
        by_fn: dict = {}
        for c in samplers:
            seed = get_arg(c, 4, "seed")
            fn = ctx.sem.enclosing_function(c)
            if seed is not None and fn is not None and not an.evaluator(main).value(seed).varying:
                by_fn.setdefault(id(fn), []).append((c, seed))
        if not by_fn:
            return
        for sc in scopes(ctx):
            for call, target in an.helper_calls(main, sc):
                tv, fn = target
                if tv is not main or id(fn) not in by_fn:
                    continue
                cctx = call_context(an, main, call, target, None, want_wraps=False)
                if cctx is None or not cctx.binds:
                    continue
                ev = an.evaluator(main, cctx)
                for c, seed in by_fn[id(fn)]:
                    v = ev.value(seed)
                    if not v.varying:
                        continue
                    ctx.report(
                        call,
                        f"`{text(ctx, call)}` makes the seed `{text(ctx, seed)}` of the `DistributedSampler` on line "
                        f"{c.lineno} rank-varying ({source_words(ctx, v)}): each rank slices a different "
                        "permutation of the dataset, so some samples are seen by several ranks in an epoch "
                        "and others by none; pass the same seed on every rank",
                        related=[(seed, "the sampler's seed inside the helper"),
                                 *[r for r in source_related(ctx, v)
                                   if not (isinstance(r[0], ast.AST) and r[0] is call)]],
                    )
                    break
