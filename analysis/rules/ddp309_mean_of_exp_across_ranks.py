from __future__ import annotations

from ..model import Severity
from ..registry import Rule
from ._flow import scopes
from ..flow.reductions import mean_reduced_exps, sum_reach


class MeanOfExpAcrossRanks(Rule):
    """
    ## What it does
    Checks for the exponential of a mean (`torch.exp(loss)`, `math.exp(...)`, `x.exp()` of a
    mean loss, `x.mean()`, or a total divided by a count, `total / steps` where a loop adds to
    `total`) that is then averaged across ranks: `dist.all_reduce(t, op=ReduceOp.AVG)`, or a
    helper of the project (this file or another module, a function or a method) that returns its
    parameter's mean over all ranks (`dist.all_reduce(t)` then `return t / get_world_size()`).
    The value is followed through names, a tuple assignment, a `try`/`except OverflowError` or
    conditional-expression fallback (`float("inf")`), `.detach()` / `.clone()`, a number made a
    tensor (`torch.tensor(math.exp(avg))`), and a helper's return. A loss averaged first and
    exponentiated after, a `SUM` of exponentials (a softmax denominator), and the exponential of
    a value that is not a mean (a learned log-scale) are not flagged.

    ## Why is this bad?
    The mean of the ranks' perplexities is not the perplexity of the job: `exp` is convex, so
    averaging `exp(loss_r)` over ranks gives more than `exp` of the mean loss, and the gap grows
    with the spread of the ranks' losses. The reported perplexity changes with the number of
    processes and how the data is split. Nothing fails: the number is just wrong.

    ## Example
    ```python
    def all_reduce_mean(t):
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t / dist.get_world_size()

    total = 0.0
    for step, batch in enumerate(loader):
        total += model(**batch).loss.float()
    ppl = torch.exp(total / (step + 1))
    ppl = all_reduce_mean(ppl)  # a mean of per-rank perplexities
    ```

    ## Use instead
    ```python
    loss = all_reduce_mean(total / (step + 1))
    ppl = torch.exp(loss)
    ```
    Average the loss across ranks first, then take the exponential.

    ## Fix safety
    No fix is offered: the reduced value may be used for other things than the report.
    """

    code = "DDP309"
    name = "mean-of-exp-across-ranks"
    severity = Severity.WARNING
    fix_availability = "never"
    requires_text = ("exp",)
    # the averaging helper may be in another module: the file or a module it imports spells
    # ``all_reduce``
    reach = classmethod(sum_reach)

    def finish(self, ctx) -> None:
        from ..flow import for_context

        an = for_context(ctx)
        view = an.main
        done = set()
        for scope in scopes(ctx):
            for call, value, exp in mean_reduced_exps(an, view, scope):
                if id(call) in done:
                    continue
                done.add(id(call))
                ctx.report(
                    call,
                    f"`{ctx.text(value)}` is the exponential of this rank's mean (line {exp.lineno}), and it is "
                    f"averaged across ranks here: the mean of the ranks' exponentials is larger than the "
                    f"exponential of the mean loss and changes with the number of processes. Average the "
                    f"loss across ranks first, then take `exp`",
                    related=[(exp, "the exponential of this rank's mean")],
                )
