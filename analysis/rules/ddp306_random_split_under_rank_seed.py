from __future__ import annotations

import ast

from ..flow import for_context
from ..flow.seeds import seed_in_force
from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg, parent
from ._common import callers_may_exist

_SPLIT = ("torch.utils.data.random_split", "torch.utils.data.dataset.random_split")
# what a caller of another module needs to seed torch: a seeding call of some spelling
_CALLER_NEEDS = (("seed",),)


class RandomSplitUnderRankSeed(Rule):
    """
    ## What it does
    Checks for `torch.utils.data.random_split(dataset, lengths)` without a `generator=` where the
    seed in force for torch's global generator differs between ranks: the last seeding call
    before the split (`torch.manual_seed(args.seed + rank)`, or a project helper such as
    `seed_everything(base_seed, rank)` that seeds torch from a rank-varying value) in the split's
    function, before each call of that function in its module, or, for a module-level function or
    a class of a module that never calls it, before each call from the project's other modules
    (`dm = DataModule(cfg)` in the training script, after its seeding call). The seed in force is
    `flow/seeds.py`'s answer, its value a uniformity question.

    A split with its own generator (`generator=torch.Generator().manual_seed(42)`), or under a
    seed that is the same on every rank, is not flagged.

    ## Why is this bad?
    Without a generator, `random_split` draws its permutation from the global torch generator.
    Seeded per rank (often on purpose, to vary augmentation or dropout between ranks), each rank
    computes a *different* train/validation partition: samples one rank validates on are trained
    on by the others, so the validation score is inflated (and a "best" checkpoint is chosen on
    leaked data), and the `DistributedSampler`s slice different subsets, so the training shards
    overlap and miss samples. Nothing raises.

    ## Example
    ```python
    torch.manual_seed(args.seed + dist.get_rank())  # per-rank augmentation
    train_set, val_set = random_split(dataset, [0.9, 0.1])
    ```

    ## Use instead
    ```python
    torch.manual_seed(args.seed + dist.get_rank())
    split_gen = torch.Generator().manual_seed(args.seed)  # the same on every rank
    train_set, val_set = random_split(dataset, [0.9, 0.1], generator=split_gen)
    ```

    ## Fix safety
    There is no automatic fix: which shared seed the split should use is the program's choice.
    """

    code = "DDP306"
    name = "random-split-under-rank-seed"
    severity = Severity.ERROR
    fix_availability = "never"
    requires_text = ("random_split",)

    @classmethod
    def reach(cls, text, filename):
        # the seeding may be in this file, or before the call of a caller elsewhere
        if "seed" in text:
            return True, {}
        return callers_may_exist(text, filename, _CALLER_NEEDS)

    def finish(self, ctx) -> None:
        splits = ctx.calls_to(*_SPLIT)
        if not splits:
            return
        an = for_context(ctx)
        view = an.main
        for c in splits:
            if get_arg(c, 2, "generator") is not None or any(k.arg is None for k in c.keywords):
                continue
            seed = seed_in_force(an, view, c)
            if seed is not None:
                if seed.kind == "V":
                    self._report(ctx, c, seed, view)
                continue
            got = self._from_callers(ctx, c)
            if got is not None:
                self._report(ctx, c, *got)

    @staticmethod
    def _from_callers(ctx, c):
        """(the seed in force, its caller's view): where the split's function is a module-level
        function or the ``__init__`` of a module-level class that its own module never calls, and
        every call from the project's other modules runs under a rank-varying seed."""
        from ._common import project_callers

        fn = ctx.sem.enclosing_function(c)
        if fn is None or isinstance(fn, ast.Lambda):
            return None
        p = parent(fn)
        if isinstance(p, ast.Module):
            name, node = fn.name, fn
        elif fn.name == "__init__" and isinstance(p, ast.ClassDef) and isinstance(parent(p), ast.Module):
            name, node = p.name, fn
        else:
            return None
        an = for_context(ctx)
        if an.call_sites(an.main, fn):
            return None  # its module's calls decided (``seed_in_force``)
        found = None
        for caller, call, target in project_callers(ctx, {name}, _CALLER_NEEDS):
            if target is not node:
                continue
            can = for_context(caller)
            s = seed_in_force(can, can.main, call)
            if s is None or s.kind != "V":
                return None
            found = found or (s, can.main, caller, call)
        return found

    @staticmethod
    def _report(ctx, c, seed, sview, caller=None, via=None) -> None:
        seeding = seed.call
        if caller is None and seed.view is sview:
            loc = f"line {seeding.lineno}"
            related = [(seeding, "the rank-varying seed in force for the split")]
        else:
            name = str(seed.view.path).replace("\\", "/").rsplit("/", 1)[-1]
            loc = f"{name}:{seeding.lineno}"
            related = []
            if via is not None:
                cname = str(sview.path).replace("\\", "/").rsplit("/", 1)[-1]
                loc += f", in force when `{cname}:{via.lineno}` runs this code"
        ctx.report(
            c,
            f"`random_split` without a `generator=` draws from torch's global generator, seeded per rank "
            f"({loc}): every rank computes a different train/validation partition, so validation "
            "samples leak into the other ranks' training data; pass "
            "`generator=torch.Generator().manual_seed(<shared seed>)`",
            related=related,
        )
