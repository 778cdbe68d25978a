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

    - on one tensor under two names (`flow.aliases`): `same = total` (or `total.view(-1)`,
      `.detach()`, `.data`) and then both names all-reduced in place; or two entries of a dict or
      list that are one tensor object (a helper that returns `hits, seen, hits`, both stored into
      the container) and a loop that all-reduces every element in place
      (`for v in stats.values(): dist.all_reduce(v)`). The finding is then where the tensor gets
      its second name (the second `hits` of the `return`, the `total` of `same = total`) when that
      is in this file.

    The second reduction must follow the first on every path (an earlier statement of a block
    that holds it) and no code between them may read or write the tensor's name (a rescale or a
    reset makes the second sum something else), and the tensor must be read after it (a sum
    nobody reads is no wrong value). It must run on every rank that made the first: a second sum
    that a rank test after the first lets only some ranks make (`if rank == 0:
    dist.all_reduce(t)`, an early `if rank != 0: return`) is an unmatched collective, which hangs
    (DDP104), not a sum added twice (unless the other ranks sum it again in the other branch).
    Two names are one tensor only where each is followed back to
    one binding: a name bound on one path again, or a copy (`.clone()`, `x * 1`), is another
    tensor. A helper's world reduction behind a test of one of
    its parameters (`if group is None:`) is the caller's choice and is not used; one behind a test
    of the instance's state (`if self.mp_group is None:`) is.

    ## Why is this bad?
    After the first sum every rank of the group holds the group's total. Summing that over the
    world adds each total once per member of its group: the result is the true sum times the group
    size (times the world size when the first sum was over the world too). A gradient norm or a
    token count reduced this way is silently too large on every rank; there is no error.

    The same happens when one tensor sits under two names or two entries of a container that is
    reduced element by element: its storage is summed once per name, and every value that shares
    it comes out too large by the world size (an accuracy above 1).

    ## Example
    ```python
    norm_sq = local_norm_sq(grads)
    dist.all_reduce(norm_sq, group=dp_group)
    dist.all_reduce(norm_sq)  # the data-parallel copies are added again


    def counts(pred, gold):
        hits = (pred == gold).sum().float()
        return hits, hits  # one tensor for both numerators


    strict, loose = counts(pred, gold)
    stats = {"strict": strict, "loose": loose}
    for v in stats.values():
        dist.all_reduce(v)  # the shared storage is summed twice
    ```

    ## Use instead
    ```python
    norm_sq = local_norm_sq(grads)
    dist.all_reduce(norm_sq, group=dp_group)
    if mp_group is not None:
        dist.all_reduce(norm_sq, group=mp_group)  # the other, orthogonal dimension only


    def counts(pred, gold):
        hits = (pred == gold).sum().float()
        return hits, hits.clone()  # two tensors
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
        from ..flow.aliases import aliased_sums, shared_entry_sums
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
                for first, second, fork in aliased_sums(an, an.main, fn):
                    self._report_alias(ctx, an, first, second, fork, seen)
                for fact in shared_entry_sums(an, an.main, fn):
                    self._report_entries(ctx, an, fact, seen)

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

    @staticmethod
    def _where(ctx, an, fork, fallback):
        """The fork when it is in this file, else ``fallback``."""
        view, node = fork
        if view is an.main and hasattr(node, "lineno"):
            return node
        return fallback

    def _report_alias(self, ctx, an, first, second, fork, seen) -> None:
        at = self._where(ctx, an, fork, second.call)
        if id(at) in seen:
            return
        seen.add(id(at))
        ctx.report(
            at,
            f"`{second.name}` and `{first.name}` are one tensor: summing `{first.name}` in place at line "
            f"{first.call.lineno} already summed `{second.name}`, and line {second.call.lineno} sums the same "
            f"storage again over the whole world, so it ends up too large by the world size. Reduce it once, "
            f"or make the second name a copy (`.clone()`)",
            related=[(first.call, "the first sum"), (second.call, "the second sum")],
        )

    def _report_entries(self, ctx, an, fact, seen) -> None:
        second = fact.second if fact.store_view is an.main else fact.red.call
        at = self._where(ctx, an, fact.fork, second)
        if id(at) in seen:
            return
        seen.add(id(at))
        cont = ctx.text(fact.loop.iter)
        where = f"line {fact.second.lineno}" if fact.store_view is an.main else "another module"
        related = [(fact.red.call, "the in-place sum of each element")]
        if fact.store_view is an.main:
            related += [(fact.first, "one entry"), (fact.second, "the other entry")]
        ctx.report(
            at,
            f"this is the same tensor as another entry of the container that `for ... in {cont}` sums "
            f"element by element in place (line {fact.red.call.lineno}; the entries are stored at {where}): "
            f"the shared storage is summed over the ranks once per entry, so both values end up too large by "
            f"the world size. Store a copy (`.clone()`) in one of the entries",
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
