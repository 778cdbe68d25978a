from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, parent
from ..flow.calls import scope_calls
from ._flow import scopes
from ..flow.helper_calls import bind_args, callee_name, resolved
from ..flow.reductions import mean_valued, reads_world_size, sum_reach, world_sum_return

# how a value is read without changing it: ``r.item()``, ``float(r)``, ``r.cpu()``
_READS = frozenset({"item", "cpu", "detach", "tolist", "float", "double", "numpy"})


class SumOfMeansUsedAsMean(Rule):
    """
    ## What it does
    Checks for a mean (a loss computed with the default `reduction="mean"`, `x.mean()`) handed to
    a helper of the project (this file or another module, a function or a method) that returns
    its `SUM` over all ranks without dividing (`rt = t.clone(); dist.all_reduce(rt); return rt`),
    where the result is then used as it is: logged (a call argument, an f-string), given to a
    meter, or compared with a threshold.

    The helper must return the reduced copy of its parameter on its last line, with nothing done
    to it after the `all_reduce` (or a `dist.reduce` onto one rank, the rank that logs it; a `SUM`
    over the default group, not under a `try` or a test of its parameters, possibly inside a
    `with torch.no_grad():` block). The value given must be a mean by value flow (a `torch.nn.functional` loss,
    a `torch.nn` loss module built with the default reduction, `mean()`, through `.detach()`,
    `.clone()`, `.data`). The result must never take part in arithmetic, be returned or stored,
    and neither the function using it nor a project function it is passed to may use a number
    of processes (`get_world_size()`, a `world_size` name) other than in a comparison
    (`if world_size < 2:`) or in a name nothing reads: a sum that may be scaled back anywhere is
    not flagged. A sum of counts, and a `ReduceOp.AVG`, are correct and not flagged.

    ## Why is this bad?
    Each rank's loss is already a mean over its batch. Summing it over the ranks gives
    `world_size` times the mean: the logged loss doubles when the job moves from one GPU to two,
    and a divergence guard or an early-stopping threshold fires on a healthy run. Gradients are
    unaffected (DDP averages them), so only the numbers are wrong, and nothing raises.

    ## Example
    ```python
    def reduce_tensor(t):
        rt = t.clone()
        dist.all_reduce(rt, op=dist.ReduceOp.SUM)
        return rt

    loss = F.cross_entropy(model(x), y)
    meter.update(reduce_tensor(loss.detach()).item())  # world_size times the mean loss
    ```

    ## Use instead
    ```python
    def reduce_tensor(t):
        rt = t.clone()
        dist.all_reduce(rt, op=dist.ReduceOp.SUM)
        return rt / dist.get_world_size()
    ```
    Or all-reduce with `ReduceOp.AVG` (NCCL).

    ## Fix safety
    There is no automatic fix: the helper may also serve sums of counts, which must stay sums.
    """

    code = "DDP118"
    name = "sum-of-means-used-as-mean"
    severity = Severity.WARNING
    # the reducing helper may be in another module: the file or a module it imports spells
    # ``all_reduce``
    reach = classmethod(sum_reach)

    def finish(self, ctx) -> None:
        from ..flow import for_context

        an = for_context(ctx)
        view = an.main
        done = set()
        for scope in scopes(ctx):
            if scope is not ctx.sem.tree and not isinstance(scope, FUNC_TYPES):
                continue
            for c in scope_calls(view, scope):
                if id(c) in done or not isinstance(c.func, (ast.Name, ast.Attribute)):
                    continue
                target = resolved(an, view, c)
                if target is None or not isinstance(target[1], FUNC_TYPES) or target[1] is scope:
                    continue
                param = world_sum_return(target[0], target[1])
                if param is None:
                    continue
                arg = bind_args(c, target[1]).get(param)
                if arg is None or not mean_valued(an, view, arg, c):
                    continue
                if reads_world_size(view, scope) or not _used_as_is(an, view, scope, c):
                    continue
                done.add(id(c))
                name = callee_name(target)
                ctx.report(
                    c,
                    f"`{ctx.text(arg)}` is a mean, and `{name}()` returns its SUM over all ranks without dividing "
                    f"by the world size; the result is used as it is (logged or compared): it is `world_size` "
                    f"times the mean, and changes with the number of GPUs. Divide the sum by the world size "
                    f"(or reduce with `ReduceOp.AVG`)",
                    related=[(arg, "the mean")],
                )


def _uses(view, scope, c) -> list | None:
    """The reads of the result of ``c``: ``c`` itself when used in place, else the loads of the
    name it is assigned to (alone, or as one element of a tuple assignment) after it in ``scope``;
    None when the result goes anywhere else."""
    p = parent(c)
    if isinstance(p, ast.Tuple) and isinstance(parent(p), ast.Assign):
        i = p.elts.index(c)
        tgt = parent(p).targets
        if len(tgt) != 1 or not isinstance(tgt[0], ast.Tuple) or len(tgt[0].elts) != len(p.elts):
            return None
        target = tgt[0].elts[i]
    elif isinstance(p, ast.Assign):
        if len(p.targets) != 1:
            return None
        target = p.targets[0]
    else:
        return [c]
    if not isinstance(target, ast.Name):
        return None
    name = target.id
    stores = [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)]
    if len(stores) != 1:
        return None
    return [n for n in ast.walk(scope) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]


def _used_as_is(an, view, scope, c) -> bool:
    uses = _uses(view, scope, c)
    if not uses:
        return False
    for u in uses:
        # through the reads that keep the value: ``r.item()``, ``float(r)``
        while True:
            q = parent(u)
            if isinstance(q, ast.Attribute) and q.attr in _READS and isinstance(parent(q), ast.Call) \
                    and parent(q).func is q and not parent(q).args:
                u = parent(q)
                continue
            if isinstance(q, ast.Call) and isinstance(q.func, ast.Name) and q.func.id == "float" and q.args == [u]:
                u = q
                continue
            break
        q = parent(u)
        if isinstance(q, ast.FormattedValue) or isinstance(q, ast.Compare):
            continue
        if isinstance(q, ast.keyword):
            q = parent(q)
        if isinstance(q, ast.Dict) and u in q.values:
            u, q = q, parent(q)
            if isinstance(q, ast.keyword):
                q = parent(q)
        if isinstance(q, ast.Call) and q.func is not u:
            target = resolved(an, view, q)
            if target is not None and isinstance(target[1], FUNC_TYPES) and reads_world_size(*target):
                return False
            continue
        return False
    return True
