from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES

_ORDER = (ast.Lt, ast.Gt, ast.LtE, ast.GtE)


class BestCheckpointFromLocalMetric(Rule):
    """
    ## What it does
    Checks for a checkpoint that only the main rank saves, chosen by comparing a metric that is
    this rank's own: an `if` that only the main rank reaches (`flow.rank.rank0_guarded`: a rank
    test around it, an early exit, a decorator, every caller guarded), whose test orders a value
    (`<`, `>`, `<=`, `>=`) that the shared uniformity analysis finds rank-varying because it is
    computed from this rank's data and never reduced, and whose body writes a file (`torch.save`,
    `open(..., "wb")`, a project function that does, `flow.fs_effects`).

    The data must be a per-rank shard (`flow.eval_walks.sharded_walk`): the loop that produced the
    metric walks a value built from the rank (`make_iter("valid", rank, world)`) or a `DataLoader`
    over a `DistributedSampler` (or one that Lightning Fabric's `setup_dataloaders` set up,
    `flow.fabric`), there or at every call of the function that walks its parameter.
    The metric may come through a helper's return, another module, a tuple or a `self` attribute,
    as the uniformity analysis follows them; a metric all-reduced (or broadcast) before the test is
    uniform and not reported.

    ## Why is this bad?
    Each rank evaluates its own shard of the validation set. Without a reduction, the main rank's
    "validation loss" is the loss on 1/world of the data: the best checkpoint is picked on a
    fraction of the validation set, the choice changes with the world size, and the logged value
    is not the model's validation loss.

    ## Example
    ```python
    val_loss = evaluate(model, shard_loader)  # this rank's shard only
    if rank == 0 and val_loss < best:
        torch.save(model.state_dict(), "best.pt")
        best = val_loss
    ```

    ## Use instead
    ```python
    val_loss = torch.tensor(evaluate(model, shard_loader), device=device)
    dist.all_reduce(val_loss, op=dist.ReduceOp.AVG)
    val_loss = val_loss.item()
    if rank == 0 and val_loss < best:
        torch.save(model.state_dict(), "best.pt")
        best = val_loss
    ```

    ## Fix safety
    No fix is offered: how to combine the shards' metrics (a mean of means, a sum over samples
    divided by a summed count) depends on the metric.
    """

    code = "DDP226"
    name = "best-checkpoint-from-local-metric"
    severity = Severity.WARNING
    fix_availability = "never"
    requires_text = ("save", "open")
    requires_reach = True

    def finish(self, ctx) -> None:
        ifs = ctx.sem.by_type.get(ast.If, ())
        if not ifs:
            return
        from ..flow.eval_walks import sharded_walk
        from ..flow.modern import hub
        from ..flow.rank import rank0_guarded
        from ..flow.values import DATA

        an, view = hub(ctx)
        ev = None
        done: set[int] = set()
        for node in ifs:
            cmps = [c for c in _compares(node.test) if any(isinstance(o, _ORDER) for o in c.ops)]
            if not cmps:
                continue
            # the cheap questions first: only the main rank gets here (the ``if``'s own test counts:
            # ``if rank == 0 and loss < best``), and the body writes a file
            if rank0_guarded(ctx, node.body[0]) is not True or not _writes(an, view, node.body):
                continue
            if ev is None:
                ev = an.evaluator(view)
            for cmp in cmps:
                local = None
                for side in (cmp.left, *cmp.comparators):
                    v = ev.value(side)
                    if v.varying and v.src is not None and v.src.cat == DATA and sharded_walk(an, view, v.src):
                        local = (side, v)
                        break
                if local is None or id(cmp) in done:
                    continue
                done.add(id(cmp))
                side, v = local
                from ._flow import source_related, source_words

                ctx.report(
                    cmp,
                    f"only the main rank reaches this test, and `{ctx.text(side)}` is its own value "
                    f"({source_words(ctx, v)}), never reduced across ranks: the checkpoint saved below is "
                    "chosen on the main rank's shard of the data only; all-reduce the metric first",
                    related=[*source_related(ctx, v)],
                )


def _compares(test):
    stack = [test]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Compare):
            yield e
        elif isinstance(e, ast.BoolOp):
            stack.extend(e.values)
        elif isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
            stack.append(e.operand)


def _writes(an, view, body) -> bool:
    """A statement of ``body`` writes a file: a write of the filesystem vocabulary, or a call of a
    project function that writes on every call (``fs_effects``)."""
    from ..flow.fs_effects import WRITE, call_effects, function_effects, view_ctx

    vctx = view_ctx(view)
    stack = list(body)
    while stack:
        n = stack.pop()
        if isinstance(n, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(n, ast.Call):
            if any(e.kind == WRITE for e in call_effects(vctx, n)):
                return True
            try:
                got = an.resolve_call(view, n)
            except Exception:  # noqa: BLE001 - unresolvable: not followed
                got = None
            if got is not None and isinstance(got[1], FUNC_TYPES) and any(
                    e.kind == WRITE for e in function_effects(an, got[0], got[1])):
                return True
        stack.extend(ast.iter_child_nodes(n))
    return False
