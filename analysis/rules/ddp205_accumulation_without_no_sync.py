from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..flow.assignments import stmt_list_of
from ..flow.helper_calls import calls_named
from ..flow.models import ddp_calls
from ..flow.mentions import mentions
from ..semantic import parent

_LOOPS = (ast.For, ast.AsyncFor, ast.While)


class AccumulationWithoutNoSync(Rule):
    """
    ## What it does
    Checks for gradient accumulation in a file that wraps its model in DDP without ever using
    `no_sync()` (or `require_backward_grad_sync`): a loop that calls `backward()` on every
    iteration but `optimizer.step()` only under a `% accum_steps` test.

    Only an optimizer's step counts (`optimizer.step()`, `opt.step()`, `scaler.step(optimizer)`), not
    a scheduler's or a logger's, and a loop that also steps an optimizer without the `%` test is not
    an accumulation loop. It is informational: the script trains correctly, only slower.

    ## Why is this bad?
    DDP all-reduces the gradients in every `backward()`. With accumulation, only the last
    `backward()` before `step()` needs that; the others send the full gradient size over the
    network for nothing, so `accum_steps - 1` of every `accum_steps` all-reduces are wasted. The
    symptom is a training step that scales badly with the number of nodes.

    ## Example
    ```python
    for i, (x, y) in enumerate(loader):
        loss = criterion(ddp_model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Use instead
    ```python
    for i, (x, y) in enumerate(loader):
        sync = (i + 1) % accum_steps == 0
        with contextlib.nullcontext() if sync else ddp_model.no_sync():
            loss = criterion(ddp_model(x), y) / accum_steps
            loss.backward()
        if sync:
            optimizer.step()
            optimizer.zero_grad()
    ```

    ## Fix safety
    There is no fix: the forward pass must move inside the `no_sync()` block too.
    """

    code = "DDP205"
    name = "accumulation-without-no-sync"
    severity = Severity.INFO
    requires_text = ("backward",)
    requires_text_all = (("DistributedDataParallel",),)  # ddp_calls

    def finish(self, ctx) -> None:
        if mentions(ctx.sem, "no_sync", "require_backward_grad_sync", text=ctx.src.text) or not ddp_calls(ctx):
            return
        steps_by_loop: dict[int, tuple[ast.AST, ast.If]] = {}
        backwards: list[tuple[ast.Call, ast.AST]] = []
        unguarded: dict[int, list] = {}  # loop -> optimizer steps without the `%` test
        # the ``.step`` calls, then the ``.backward`` calls, each in the file's order (what one
        # pass over all calls collected, without visiting the others)
        for c in calls_named(ctx, "step"):
            if c.func.__class__ is ast.Attribute and _optimizer_step(c):
                guard, loop = _mod_guard_and_loop(c)
                if guard is not None and loop is not None:
                    steps_by_loop.setdefault(id(loop), (loop, guard))
                elif loop is not None:
                    unguarded.setdefault(id(loop), []).append(c)
        for c in calls_named(ctx, "backward"):
            if c.func.__class__ is ast.Attribute:
                loop = _loop_of(c)
                if loop is not None:
                    backwards.append((c, loop))
        for c, loop in backwards:
            got = steps_by_loop.get(id(loop))
            if got is None or any(not _exclusive(c, s) for s in unguarded.get(id(loop), ())):
                continue
            _, guard = got
            if _inside(c, guard) or _mod_guard_and_loop(c)[0] is not None or not _same_block(c, guard):
                continue
            ctx.report(
                c,
                "gradient accumulation on a DDP model without `no_sync()`: every `backward()` all-reduces, "
                "but the optimizer steps only every few iterations; wrap the non-stepping iterations in "
                "`model.no_sync()`",
                related=[(guard.test, "the optimizer steps only under this test")],
            )


def _exclusive(a: ast.AST, b: ast.AST) -> bool:
    """``a`` and ``b`` sit in different branches of one ``if``."""
    anc_a = {id(x): x for x in _ancestors(a)}
    child = b
    for x in _ancestors(b):
        if id(x) in anc_a:
            if isinstance(x, ast.If):
                a_child = a
                for y in _ancestors(a):
                    if y is x:
                        break
                    a_child = y
                return (a_child in x.body) != (child in x.body)
            return False
        child = x
    return False


def _optimizer_like(e: ast.AST) -> bool:
    name = e.attr if isinstance(e, ast.Attribute) else e.id if isinstance(e, ast.Name) else ""
    name = name.lower()
    return ("optim" in name or name in ("opt", "optimiser")) and "sched" not in name


def _optimizer_step(c: ast.Call) -> bool:
    """``optimizer.step()`` or ``scaler.step(optimizer)`` (a GradScaler stepping an optimizer)."""
    recv = c.func.value
    if _optimizer_like(recv) and not c.args:
        return True
    return bool(c.args) and _optimizer_like(c.args[0])


def _loop_of(node: ast.AST):
    for a in _ancestors(node):
        if isinstance(a, _LOOPS):
            return a
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return None
    return None


def _mod_guard_and_loop(node: ast.AST):
    guard = None
    for a in _ancestors(node):
        if isinstance(a, ast.If) and guard is None and _has_mod(a.test):
            guard = a
        elif isinstance(a, _LOOPS):
            return guard, a
        elif isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return guard, None
    return guard, None


def _has_mod(test: ast.AST) -> bool:
    return any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod) for n in ast.walk(test))


def _inside(node: ast.AST, outer: ast.AST) -> bool:
    return any(a is outer for a in _ancestors(node))


def _ancestors(node: ast.AST):
    p = parent(node)
    while p is not None:
        yield p
        p = parent(p)


def _same_block(node: ast.AST, guard: ast.If) -> bool:
    """``node`` runs in the block that holds the guard (not in another branch of an outer ``if``)."""
    got = stmt_list_of(guard)
    if got is None:
        return False
    lst = got[1]
    n = node
    while n is not None:
        if n in lst:
            return True
        if n is got[0]:
            return False
        n = parent(n)
    return False
