from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ._training import backward_calls, ddp_holder, enclosing_function

_LOOPS = (ast.For, ast.AsyncFor, ast.While)


class NoSyncMisuse(Rule):
    """
    ## What it does
    Checks how `DistributedDataParallel.no_sync()` is used, on a model that is provably the DDP
    wrapper (`model = DDP(...)` / `self.model = DDP(...)` assigned once):

    - `with model.no_sync(): loss.backward()` where the body has a `backward()` but no forward of
      `model`, and the forward ran before the block, in the same function;
    - a loop in which **every** `backward()` runs inside `with model.no_sync():` and the optimizer
      steps (`optimizer.step()`): the gradients it applies were never synchronised.

    A file that flips `require_backward_grad_sync`, or all-reduces gradients by hand
    (`dist.all_reduce` in the same function), is not judged.

    ## Why is this bad?
    DDP decides whether the next backward all-reduces **during the forward pass**
    (`require_backward_grad_sync` is read in `forward`, where the reducer is prepared). PyTorch's
    docs for `no_sync` warn: "The forward pass should be included inside the context manager, or
    else gradients will still be synchronized." A `no_sync()` around `backward()` alone saves
    nothing: every micro-batch is still all-reduced.

    The opposite mistake is worse: when no micro-batch ever leaves `no_sync()`, no all-reduce ever
    happens and each rank steps on its own gradients. The replicas drift apart without an error.

    ## Example
    ```python
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        if (i + 1) % accum != 0:
            with model.no_sync():  # too late: the forward already armed the all-reduce
                loss.backward()
        else:
            loss.backward()
            optimizer.step()
    ```

    ## Use instead
    ```python
    for i, (x, y) in enumerate(loader):
        if (i + 1) % accum != 0:
            with model.no_sync():
                loss_fn(model(x), y).backward()
        else:
            loss_fn(model(x), y).backward()
            optimizer.step()
    ```

    ## Fix safety
    There is no fix: the forward pass has to move into the block, which may take other statements
    with it.
    """

    code = "DDP208"
    name = "no-sync-misuse"
    severity = Severity.WARNING
    requires_text = ("no_sync",)

    def finish(self, ctx) -> None:
        if "require_backward_grad_sync" in ctx.src.text:
            return
        for w in _withs(ctx):
            holder = _no_sync_holder(w)
            if holder is None or not ddp_holder(ctx, holder, w):
                continue
            fn = enclosing_function(w)
            if fn is None or _manual_allreduce(ctx, fn):
                continue
            self._backward_only(ctx, w, holder, fn)
        self._never_synced(ctx)

    def _backward_only(self, ctx, w, holder, fn) -> None:
        body_nodes = [n for st in w.body for n in ast.walk(st)]
        backs = [b for b in backward_calls(ctx, fn) if any(b is n for n in body_nodes)]
        if not backs:
            return
        key = ast.dump(holder)
        def is_forward(c):  # noqa: E306
            return isinstance(c, ast.Call) and ast.dump(c.func) == key or (
                isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "forward"
                and ast.dump(c.func.value) == key)
        if any(is_forward(n) for n in body_nodes):
            return
        before = [c for c in ctx.sem.calls if enclosing_function(c) is fn and is_forward(c) and c.lineno < w.lineno]
        if not before:
            return
        h = ctx.text(holder)
        ctx.report(
            w.items[0].context_expr,
            f"`{h}.no_sync()` wraps only the backward; the forward on line {before[-1].lineno} ran outside, so "
            "DDP already armed the all-reduce and this backward still synchronises. Run the forward inside "
            "the block too",
            related=[(before[-1], "the forward that decides whether gradients are synchronised")],
        )

    def _never_synced(self, ctx) -> None:
        for loop in [n for n in _all_nodes(ctx) if isinstance(n, _LOOPS)]:
            fn = enclosing_function(loop)
            if fn is None or _manual_allreduce(ctx, fn):
                continue
            in_loop = {id(n) for st in loop.body for n in ast.walk(st)}
            backs = [b for b in backward_calls(ctx, fn) if id(b) in in_loop]
            steps = [c for c in ctx.sem.calls if id(c) in in_loop and isinstance(c.func, ast.Attribute)
                     and c.func.attr == "step" and not c.args and _is_optimizer(c.func.value)]
            if not backs or not steps:
                continue
            if any(b.lineno < loop.lineno or b.lineno > loop.end_lineno for b in backward_calls(ctx, fn)):
                continue  # a backward outside the loop: a final synchronising pass
            holders = []
            for b in backs:
                w = _unconditional_no_sync(ctx, b, loop)
                if w is None:
                    break
                holders.append(w)
            else:
                w = holders[0]
                ctx.report(
                    steps[0],
                    f"`{ctx.text(steps[0].func)}()` applies gradients that were never synchronised: every "
                    f"backward in this loop runs inside `{ctx.text(w.items[0].context_expr)}`, so no all-reduce "
                    "ever happens and the ranks drift apart",
                    related=[(w.items[0].context_expr, "every backward is inside this block")],
                )


def _all_nodes(ctx):
    for fnl in ctx.sem.functions.values():
        for fn in fnl:
            yield from ast.walk(fn)


def _withs(ctx):
    seen = set()
    for c in ctx.sem.calls:
        f = c.func
        if isinstance(f, ast.Attribute) and f.attr == "no_sync" and not c.args and not c.keywords:
            item = getattr(c, "_p", None)
            w = getattr(item, "_p", None)
            if isinstance(item, ast.withitem) and isinstance(w, ast.With) and id(w) not in seen:
                seen.add(id(w))
                yield w


def _no_sync_holder(w: ast.With):
    for item in w.items:
        e = item.context_expr
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "no_sync" \
                and isinstance(e.func.value, (ast.Name, ast.Attribute)):
            return e.func.value
    return None


def _unconditional_no_sync(ctx, node, loop):
    """The ``with X.no_sync():`` (X the DDP wrapper) around ``node`` inside ``loop``, when no
    ``if`` lies between the loop and that ``with``."""
    for a in ctx.sem.ancestors(node):
        if a is loop:
            return None
        if isinstance(a, (ast.If, ast.IfExp, ast.Try, ast.While, ast.For)):
            return None
        if isinstance(a, ast.With):
            h = _no_sync_holder(a)
            if h is not None and ddp_holder(ctx, h, a):
                # and nothing conditional between the with and the loop
                for b in ctx.sem.ancestors(a):
                    if b is loop:
                        return a
                    if isinstance(b, (ast.If, ast.Try, ast.While, ast.For, ast.With)):
                        return None
                return None
    return None


def _is_optimizer(expr) -> bool:
    name = expr.attr if isinstance(expr, ast.Attribute) else expr.id if isinstance(expr, ast.Name) else ""
    return "optim" in name.lower() or name.lower() in ("opt", "optimiser")


def _manual_allreduce(ctx, fn) -> bool:
    for c in ctx.sem.calls:
        qn = ctx.qn(c) or ""
        if qn.startswith("torch.distributed.") and "reduce" in qn and enclosing_function(c) is fn:
            return True
    return False
