from __future__ import annotations

import ast

from ..flow import for_context
from ..flow.imports import is_main_guard
from ..flow.seeds import project_seeding
from ..flow.shuffles import random_order, rank_partition
from ..flow.vocab import _SEEDS
from ..model import Applicability, Severity
from ..registry import NoCase, Rule
from ..semantic import get_arg
from ._common import project_files_naming

# the words a file that seeds a generator spells (which project files are read for seeding calls)
_SEED_WORDS = ("seed", "seed_everything", "set_seed", "manual_seed", "init_seeds", "set_random_seed", "setup_seed",
               "seed_all", "fix_seed", "random_seed", "seed_torch", "set_seeds")
_FAMILY_SEED = {"random": "random.seed", "numpy": "numpy.random.seed"}
_WHOSE = {"random": "Python's `random` module", "numpy": "numpy's global generator", "torch": "torch's global generator"}


class RankShardOfUnseededShuffle(Rule):
    """
    ## What it does
    Checks for a sequence partitioned by rank in the program's own code (`order[rank::world]`,
    `order[rank * per:(rank + 1) * per]`, `np.array_split(order, world)[rank]`) whose order comes
    from a global random generator that is not seeded alike on every rank: shuffled in place with
    `random.shuffle` or `np.random.shuffle`, or drawn with `random.sample`, `np.random.permutation`
    or `torch.randperm` (no `generator=`), before the partition in its function or inside the
    project function (a method, a generator of batches) that returns or yields it. The generator
    counts as not seeded alike when nothing in the program seeds it (a script: the file and the
    project modules it imports, transitively; a library module: every file of the project), since
    Python's `random` and numpy's generator start from fresh OS entropy in every process and
    `torch.manual_seed` seeds neither; or when every seeding of it is rank-varying
    (`random.seed(args.seed + rank)`). The rank, the
    order and the seeds are `analysis/flow` questions (`flow/shuffles.py`, `flow/seeds.py`).
    Only a file that spells the rank is checked (`rank` in any case, `SLURM_PROCID`,
    `process_index`, `current_device`, or an `mp.spawn` entry).

    A shuffle seeded the same on every rank (`random.seed(args.seed)` anywhere in the program, a
    library's `seed_everything`, a `random.Random(seed + epoch)` or a `torch.Generator` of its own),
    a sequence broadcast from one rank before the partition, and a rank's own shard shuffled
    *after* the partition are not flagged. Unseeded torch is not flagged: its default seed is the
    same in every process.

    ## Why is this bad?
    The slices `order[r::world]` partition the data only when every rank slices the *same* order.
    With a generator that differs per process, each rank shuffles differently and takes its slice
    of its own order: some samples (or batches) land on several ranks in an epoch and others on
    none, silently. Nothing raises; the effective data set just shrinks.

    ## Example
    ```python
    torch.manual_seed(args.seed)  # seeds torch only
    ...
    def __iter__(self):
        order = list(range(len(self.data)))
        random.shuffle(order)  # a different order on every rank
        return iter(order[self.rank::self.world])
    ```

    ## Use instead
    ```python
    torch.manual_seed(args.seed)
    random.seed(args.seed)  # the same order on every rank
    ...
    def __iter__(self):
        order = list(range(len(self.data)))
        random.Random(self.seed + self.epoch).shuffle(order)  # or: a generator of its own
        return iter(order[self.rank::self.world])
    ```

    ## Fix safety
    Where the generator is never seeded and this file seeds torch with a uniform seed, an unsafe
    fix seeds the generator with the same value right after it: it changes the random stream the
    program draws.
    """

    code = "DDP307"
    name = "rank-shard-of-unseeded-shuffle"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    node_types = (ast.Subscript,)
    # the spellings of the rank the partition reads (``get_rank``, ``self.rank``, ``LOCAL_RANK``,
    # ``SLURM_PROCID``, accelerate's ``process_index``, the device index, an ``mp.spawn`` index)
    requires_text = (NoCase("rank"), "PROCID", "process_index", "current_device", "spawn")

    def finish(self, ctx) -> None:
        subs = ctx.sem.by_type.get(ast.Subscript, ())
        cands = [s for s in subs if isinstance(s.ctx, ast.Load) and (
            isinstance(s.slice, ast.Slice) and s.slice.lower is not None
            and (s.slice.step is not None or s.slice.upper is not None)
            or isinstance(s.value, ast.Call))]
        if not cands:
            return
        an = for_context(ctx)
        view = an.main
        views = None
        judged: dict = {}
        for s in cands:
            base = rank_partition(an, view, s)
            if base is None:
                continue
            got = random_order(an, view, base, s)
            if got is None:
                continue
            family, shuffle, sview = got
            if family not in judged:
                if views is None:
                    views = _seeding_views(ctx, an, view)
                    if views is None:
                        return
                judged[family] = project_seeding(an, views, family)
            seeding = judged[family]
            if seeding is None or seeding is False and family == "torch":
                continue
            self._report(ctx, an, s, family, shuffle, sview, seeding)

    @staticmethod
    def _report(ctx, an, s, family, shuffle, sview, seeding) -> None:
        where = "" if sview is an.main else f" in `{str(sview.path).replace(chr(92), '/').rsplit('/', 1)[-1]}`"
        how = f"`{ast.unparse(shuffle.func)}()` on line {shuffle.lineno}{where}"
        related = [(shuffle, "the order each rank draws for itself")] if sview is an.main else []
        fix = None
        if seeding is False:
            why = f"{_WHOSE[family]} is seeded nowhere in the project, so every process draws its own order"
            fix = _seed_fix(ctx, an, family)
        else:
            why = f"{_WHOSE[family]} is seeded per rank (line {seeding.call.lineno})"
            if seeding.view is an.main:
                related.append((seeding.call, "the rank-varying seed"))
        ctx.report(
            s,
            f"this rank's share of a sequence ordered by {how}, but {why}: the ranks partition different "
            "orders, so some samples land on several ranks in an epoch and others on none; seed the "
            "generator with the same value on every rank (or shuffle with a generator of its own)",
            related=related,
            fix=fix,
        )


def _seeding_views(ctx, an, view):
    """The modules whose calls decide how the generators are seeded. For a program's entry (a
    ``__main__`` block, or top-level calls: a script), the program itself: this file and the project
    modules it imports, transitively (another script of the same project that seeds does not run
    in this one). For a library module, every file of the project that may seed one; where the
    project cannot be listed whole, None."""
    if _is_entry(ctx.sem.tree):
        return _program_views(an, view)
    found = project_files_naming(ctx, _SEED_WORDS)
    if found is not None:
        return [v for _c, v in found]
    return None


def _is_entry(tree) -> bool:
    return any(is_main_guard(st) or (isinstance(st, ast.Expr) and isinstance(st.value, ast.Call))
               for st in tree.body)


def _program_views(an, view, limit: int = 64):
    """``view`` and the project modules it imports, transitively (at most ``limit``)."""
    out, seen, i = [view], {view.path}, 0
    while i < len(out) and len(out) < limit:
        v = out[i]
        i += 1
        mods = []
        for node in v.sem.by_type.get(ast.Import, ()):
            mods.extend((a.name, 0) for a in node.names)
        for node in v.sem.by_type.get(ast.ImportFrom, ()):
            base = node.module or ""
            mods.append((base, node.level))
            mods.extend((f"{base}.{a.name}" if base else a.name, node.level) for a in node.names if a.name != "*")
        for mod, level in mods:
            if not mod and not level:
                continue
            w = an.module_view(v, mod, level)
            if w is not None and w.path is not None and w.path not in seen:
                seen.add(w.path)
                out.append(w)
    return out


def _seed_fix(ctx, an, family):
    """Seed ``family``'s generator right after this file's one torch seeding call of a uniform
    value, with that value."""
    ev = an.evaluator(an.main)
    calls = ctx.sem.calls_to(*_SEEDS["torch"])
    if len(calls) != 1:
        return None
    c = calls[0]
    arg = get_arg(c, 0, "seed")
    st = getattr(c, "_p", None)
    if arg is None or ev.value(arg).varying or not isinstance(st, ast.Expr):
        return None
    name, imp = ctx.ref(_FAMILY_SEED[family])
    code = f"{name}({ctx.text(arg)})"
    return ctx.fix(Applicability.UNSAFE, f"Insert `{code}`", [ctx.insert_after(st, code), *imp])
