from __future__ import annotations

import ast
import os

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES


class SumReducedAgainOverWorld(Rule):
    """
    ## What it does
    Checks for a tensor that is all-reduced with `SUM` (over a group, or over the world) and then,
    with nothing done to it in between, all-reduced with `SUM` again over the whole world
    (`flow.reductions.summed_again`):

    - directly: `dist.all_reduce(t, group=dp_group)` and then `dist.all_reduce(t)`;
    - through a helper of the project (this file or another module) that all-reduces its
      parameter over the world: `self._mp_all_reduce(t)` whose body runs
      `dist.all_reduce(tensor, op=op)` when `self.mp_group is None`, called with a `SUM` op (or
      none). The finding is then on that `all_reduce` in the helper when the helper is in this
      file, else on the call.

    The second reduction must follow the first on every path (an earlier statement of a block
    that holds it) and no code between them may read or write the tensor's name (a rescale or a
    reset makes the second sum something else), and it must run on every rank that made the first: a
    second sum that a rank test after the first lets only some ranks make (`if rank == 0:
    dist.all_reduce(t)`, an early `if rank != 0: return`) is an unmatched collective, which hangs
    (DDP104), not a sum added twice (unless the other ranks sum it again in the other branch). A helper's world reduction behind a test of one of
    its parameters (`if group is None:`) is the caller's choice and is not used; one behind a test
    of the instance's state (`if self.mp_group is None:`) is.

    ## Why is this bad?
    After the first sum every rank of the group holds the group's total. Summing that over the
    world adds each total once per member of its group: the result is the true sum times the group
    size (times the world size when the first sum was over the world too). A gradient norm or a
    token count reduced this way is silently too large on every rank; there is no error.

    ## Example
    ```python
    norm_sq = local_norm_sq(grads)
    dist.all_reduce(norm_sq, group=dp_group)
    dist.all_reduce(norm_sq)  # the data-parallel copies are added again
    ```

    ## Use instead
    ```python
    norm_sq = local_norm_sq(grads)
    dist.all_reduce(norm_sq, group=dp_group)
    if mp_group is not None:
        dist.all_reduce(norm_sq, group=mp_group)  # the other, orthogonal dimension only
    ```

    ## Fix safety
    There is no fix: which group the second reduction was meant for (an orthogonal group, or
    none) only the program knows.
    """

    code = "DDP116"
    name = "sum-reduced-again-over-world"
    severity = Severity.ERROR
    requires_text = ("all_reduce",)

    def finish(self, ctx) -> None:
        from ..flow import for_context
        from ..flow.reductions import summed_again

        an = None
        seen = set()
        here = os.path.abspath(ctx.filename) if not ctx.filename.startswith("<") else None
        for fns in ctx.sem.functions.values():
            for fn in fns:
                if not isinstance(fn, FUNC_TYPES):
                    continue
                if an is None:
                    an = for_context(ctx)
                for first, second in summed_again(an, an.main, fn):
                    if _some_ranks_only(ctx, an, fn, first, second):
                        continue
                    self._report(ctx, first, second, here, seen)

    def _report(self, ctx, first, second, here, seen) -> None:
        name = second.name
        over = f"over `{ctx.text(first.group)}`" if first.group is not None else "over the world"
        if second.via is None:
            at, where = second.call, f"`{name}` was summed {over} at line {first.call.lineno}"
            related = [(first.call, "the first sum")]
        elif second.path in (None, here):
            at = second.at
            where = (f"`{second.via}()` is called at line {second.call.lineno} with `{name}`, which was summed "
                     f"{over} at line {first.call.lineno}")
            related = [(second.call, "the call"), (first.call, "the first sum")]
        else:
            at = second.call
            where = (f"`{second.via}()` sums `{name}` over the world, and it was summed {over} at line "
                     f"{first.call.lineno}")
            related = [(first.call, "the first sum")]
        if id(at) in seen:
            return
        seen.add(id(at))
        ctx.report(
            at,
            f"{where}; {'this call' if at is second.call and second.via else 'this `all_reduce`'} sums it again "
            f"over the whole world: each rank adds the "
            f"total of its group once per member, so the result is too large by the group's size "
            f"(the world size when both sums span the world). Reduce over the orthogonal group, or "
            f"not again",
            related=related,
        )


def _some_ranks_only(ctx, an, fn, first, second) -> bool:
    """The second sum runs only on the ranks that a rank test after the first selects
    (``flow.rank.rank_guard``), and the other branch of that test makes no second sum of the same
    tensor: the ranks do not all reach it, so it cannot complete as a world sum."""
    from ..flow.rank import rank_guard
    from ..flow.reductions import sum_reductions

    g = rank_guard(ctx, second.call)
    if g is None or (g.if_node.lineno, g.if_node.col_offset) <= (first.call.end_lineno, first.call.end_col_offset):
        return False  # every rank that summed first gets here, or the test is around both sums
    if g.branch == "after":
        return True
    other = g.if_node.orelse if g.branch == "body" else g.if_node.body
    inside = {id(n) for st in other for n in ast.walk(st)}
    return not any(s.world and s.name == first.name and id(s.call) in inside
                   for s in sum_reductions(an, an.main, fn))
