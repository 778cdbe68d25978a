from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..flow.assignments import has_ancestor, stmt_list_of
from ..flow.helper_calls import calls_named
from ..flow.models import ddp_calls
from ..flow.mentions import mentions
from ..semantic import Semantic, parent
from ._common import ddp_or_callers_reach

_LOOPS = (ast.For, ast.AsyncFor, ast.While)


class AccumulationWithoutNoSync(Rule):
    """
    ## What it does
    Checks for gradient accumulation through a DDP model in a file that never uses `no_sync()` (or
    `require_backward_grad_sync`), in two shapes:

    - a loop that calls `backward()` on every iteration but `optimizer.step()` only under a
      `% accum_steps` test, in a file that wraps its model in DDP, or through a model that may be
      the DDP wrapper;
    - a `for` loop over micro-batches whose forward pass goes through a model that may be the DDP
      wrapper and reaches `backward()`, with no optimizer step inside it and one after it
      (`for _ in range(accum): model(x).backward()`, then `optimizer.step()`);
    - an accumulation loop of the first shape that hands each micro-batch to a function or method
      of the same file (`self.micro_step(batch, is_last)`) whose forward pass goes through a
      model that may be the DDP wrapper and reaches its `backward()` (outside a loop of its own,
      with no optimizer step of its own). The finding is on that forward call, where the
      `no_sync()` block has to start, with the loop's call as related information. A flag the
      method is given and ignores (`ctx = nullcontext()` whatever `is_last` says) changes nothing.

    The `%` test may be the step's own `if`, or an earlier `if <test>: continue` of the loop that
    skips to the next micro-batch (`if not last: continue`, then the step), and it may read a
    name bound to the `%` expression (`last = (i + 1) % accum == 0`).

    The wrapper may be built in this file (also under `if distributed:`: the distributed path sees
    it), held on `self` by a trainer class, unpacked from a tuple, or passed by a caller in another
    module of the project to a helper's parameter or a class's constructor (the finding is on the
    helper's `backward()`, with the caller's wrap as related information). A helper that every
    caller gives an unwrapped model stays clean, and so does a loop whose forward passes reaching
    the `backward()` all go through the module read out of the wrapper (`net = model.module if
    isinstance(model, DDP) else model; net(x)`) with none through a value that may be the wrapper:
    DDP's forward never arms its reducer there, so nothing is all-reduced (DDP207 reports that).

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

    # the wrap: in this file, or in a caller of the project that passes the wrapper to a helper
    # or a class of this file (``_training.ddp_wraps_of``)
    reach = classmethod(ddp_or_callers_reach)

    def finish(self, ctx) -> None:
        if mentions(ctx.sem, "no_sync", "require_backward_grad_sync", text=ctx.src.text):
            return
        local = bool(ddp_calls(ctx))
        steps_by_loop: dict[int, tuple[ast.AST, ast.If]] = {}
        backwards: list[tuple[ast.Call, ast.AST]] = []
        unguarded: dict[int, list] = {}  # loop -> optimizer steps without the `%` test
        steps: list[ast.Call] = []
        # the ``.step`` calls, then the ``.backward`` calls, each in the file's order (what one
        # pass over all calls collected, without visiting the others)
        for c in calls_named(ctx, "step"):
            if c.func.__class__ is ast.Attribute and _optimizer_step(c):
                steps.append(c)
                guard, loop = _mod_guard_and_loop(ctx, c)
                if guard is not None and loop is not None:
                    steps_by_loop.setdefault(id(loop), (loop, guard))
                elif loop is not None:
                    unguarded.setdefault(id(loop), []).append(c)
        if not steps:
            return
        self._through_callee(ctx, steps_by_loop, unguarded, local)
        for c in calls_named(ctx, "backward"):
            if c.func.__class__ is ast.Attribute:
                loop = _loop_of(c)
                if loop is not None:
                    backwards.append((c, loop))
        for c, loop in backwards:
            got = steps_by_loop.get(id(loop))
            if got is None:
                # the micro-batch shape: a ``for`` loop of forward/backward that steps no optimizer,
                # followed in its function by the step (``for _ in range(accum): ...; opt.step()``)
                if not isinstance(loop, ast.For) or any(has_ancestor(s, loop) for s in steps):
                    continue
                step = _step_after(loop, steps)
                if step is None:
                    continue
                wraps = _ddp_forward(ctx, loop, c)
                if wraps:
                    self._report(ctx, c, wraps, (step, "the optimizer steps once, after the loop"))
                continue
            if any(not _exclusive(c, s) for s in unguarded.get(id(loop), ())):
                continue
            _, guard = got
            if has_ancestor(c, guard) or _mod_guard_and_loop(ctx, c)[0] is not None or not _same_block(c, guard):
                continue
            # a wrap of this file (the file's own contract), or a forward in the loop through a
            # value that may be the wrapper, also one a caller in another module passes
            wraps = [] if local else _ddp_forward(ctx, loop, c)
            if local and _bypasses_wrapper(ctx, loop, c):
                continue  # no forward of this loop arms the reducer: nothing is all-reduced
            if local and not wraps and _wrapped_on_other_runs(ctx, c):
                continue  # ``if cfg.eval_only: DDP(...)`` and the loop under ``if not cfg.eval_only``
            if local or wraps:
                self._report(ctx, c, wraps, (guard.test, "the optimizer steps only under this test"))

    def _through_callee(self, ctx, steps_by_loop, unguarded, local) -> None:
        """The accumulation loop calls a function or method of this file once per micro-batch
        (``self.micro_step(batch, sync)``), and that callee runs the forward through a model that
        may be the DDP wrapper and its ``backward()``, outside any loop of its own and without
        stepping an optimizer. The finding is on the callee's forward call, where the
        ``no_sync()`` block has to start, with the call in the loop as related information."""
        from ..flow.helper_calls import resolved
        from ..flow.modern import hub
        from ._training import backward_calls, enclosing_function

        an, view = hub(ctx)
        done: set[int] = set()
        for loop, guard in steps_by_loop.values():
            fn = enclosing_function(loop)
            for call in ast.walk(loop):
                if not isinstance(call, ast.Call) or enclosing_function(call) is not fn \
                        or _loop_of(call) is not loop or has_ancestor(call, guard) \
                        or _mod_guard_and_loop(ctx, call)[0] is not None or not _same_block(call, guard):
                    continue
                if any(not _exclusive(call, s) for s in unguarded.get(id(loop), ())):
                    continue
                target = resolved(an, view, call)
                if target is None or target[0] is not view or target[1] is fn or id(target[1]) in done:
                    continue
                callee = target[1]
                if any(enclosing_function(s) is callee for s in calls_named(ctx, "step") if _optimizer_step(s)):
                    continue  # a training step of its own: the loop's ``%`` test is about something else
                for b in backward_calls(ctx, callee):
                    if _loop_of(b) is not None:
                        continue  # a micro-batch loop of the callee's own (the other shape)
                    got = _ddp_forward_call(ctx, callee, b)
                    if got is None:
                        continue
                    fwd, wraps = got
                    done.add(id(callee))
                    related = [(call, "called once per micro-batch here"),
                               (guard.test, "the optimizer steps only under this test")]
                    self._report(ctx, fwd, wraps, *related)
                    break

    @staticmethod
    def _report(ctx, c, wraps, step_related, *more) -> None:
        related = [step_related, *more]
        where = ""
        if wraps:
            from ..flow.findings import node_related
            from ..flow.modern import hub

            w, call = wraps[0]
            if w is not hub(ctx)[1]:
                where = f" (wrapped in DistributedDataParallel in {_shown(ctx, w.path)} line {call.lineno})"
            related.append(node_related(ctx, w.path, call, "wrapped in DistributedDataParallel here"))
        ctx.report(
            c,
            f"gradient accumulation on a DDP model{where} without `no_sync()`: every `backward()` "
            "all-reduces, but the optimizer steps only every few iterations; wrap the non-stepping "
            "iterations in `model.no_sync()`",
            related=related,
        )


def _shown(ctx, path) -> str:
    import os

    if not path or not ctx.filename:
        return str(path)
    try:
        return os.path.relpath(path, os.path.dirname(os.path.abspath(ctx.filename)))
    except ValueError:
        return path


def _step_after(loop: ast.AST, steps: list[ast.Call]):
    """An optimizer step that runs after ``loop`` in its function: in a statement that follows the
    loop, or one of the statements around it, in the same block."""
    node = loop
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda,
                                                     ast.ClassDef, ast.Module)):
        got = stmt_list_of(node) if isinstance(node, ast.stmt) else None
        if got is not None:
            later = got[1][got[1].index(node) + 1:]
            for s in steps:
                # (a step in a later loop of its own steps per iteration: not this accumulation)
                if any(has_ancestor(s, st) for st in later) and _loop_of(s) in (None, *_enclosing_loops(loop)):
                    return s
        node = parent(node)
    return None


def _enclosing_loops(node: ast.AST) -> list:
    out = []
    for a in Semantic.ancestors(node):
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            break
        if isinstance(a, _LOOPS):
            out.append(a)
    return out


def _ddp_forward(ctx, loop: ast.AST, backward: ast.Call) -> list:
    """The wraps (``_training.ddp_wraps_of``) of a model called in ``loop`` (``model(x)``,
    ``self.model(x)``, ``model.forward(x)``) whose result reaches a ``backward`` of its function."""
    from ._training import enclosing_function

    fn = enclosing_function(backward)
    got = _forward_in(ctx, loop, fn) if fn is not None else None
    return got[1] if got else []


def _ddp_forward_call(ctx, fn: ast.AST, backward: ast.Call):
    """(forward call, wraps) of the first call in ``fn`` of a model that may be the DDP wrapper
    (``_training.ddp_wraps_of``) whose result reaches ``backward``'s function, else None."""
    return _forward_in(ctx, fn, fn, before=backward.lineno)


def _forward_in(ctx, scope: ast.AST, fn: ast.AST, before: int | None = None):
    """(call, wraps) of the first call of function ``fn`` inside ``scope`` (up to line ``before``)
    of a model that may be the DDP wrapper and whose result reaches a ``backward`` of ``fn``."""
    from ._training import ddp_wraps_of, enclosing_function, module_ref, reaches_backward

    memo = ctx.memo("ddp205.wraps", dict)
    for n in ast.walk(scope):
        if not isinstance(n, ast.Call) or enclosing_function(n) is not fn or (before is not None and n.lineno > before):
            continue
        f = n.func
        holder = f.value if isinstance(f, ast.Attribute) and f.attr == "forward" else f
        ref = module_ref(holder) if isinstance(holder, (ast.Name, ast.Attribute)) else None
        if ref is None or ref == ("self", "forward") or ctx.qn(holder) is not None:
            continue
        if not reaches_backward(ctx, n, fn):
            continue
        key = (id(fn), ref)
        if key not in memo:
            memo[key] = ddp_wraps_of(ctx, holder, n)
        if memo[key]:
            return n, memo[key]
    return None


def _bypasses_wrapper(ctx, loop: ast.AST, backward: ast.Call) -> bool:
    """The forward in ``loop`` whose result reaches ``backward``'s function goes through the module
    read out of its wrapper (``net = model.module if isinstance(model, DDP) else model; net(x)``,
    ``flow.wrapped.unwrapped_only``), and no call there reaching it may be the wrapper
    (``_training.ddp_wraps_of``): DDP's forward never runs, so its backward hooks reduce nothing
    and ``no_sync()`` has nothing to skip."""
    from ..flow.modern import hub
    from ..flow.wrapped import is_unwrap, unwrapped_only
    from ._training import ddp_wraps_of, enclosing_function, module_ref, reaches_backward

    fn = enclosing_function(backward)
    if fn is None:
        return False
    an, view = hub(ctx)
    seen = False
    for n in ast.walk(loop):
        if not isinstance(n, ast.Call) or enclosing_function(n) is not fn:
            continue
        f = n.func
        holder = f.value if isinstance(f, ast.Attribute) and f.attr == "forward" else f
        if not isinstance(holder, (ast.Name, ast.Attribute)) or ctx.qn(holder) is not None:
            continue
        if is_unwrap(holder) or unwrapped_only(an, view, holder, n):
            seen = seen or reaches_backward(ctx, n, fn)
        elif module_ref(holder) is not None and ddp_wraps_of(ctx, holder, n):
            return False
    return seen


def _exclusive(a: ast.AST, b: ast.AST) -> bool:
    """``a`` and ``b`` sit in different branches of one ``if``."""
    anc_a = {id(x): x for x in Semantic.ancestors(a)}
    child = b
    for x in Semantic.ancestors(b):
        if id(x) in anc_a:
            if isinstance(x, ast.If):
                a_child = a
                for y in Semantic.ancestors(a):
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
    for a in Semantic.ancestors(node):
        if isinstance(a, _LOOPS):
            return a
        if isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return None
    return None


def _mod_guard_and_loop(ctx, node: ast.AST):
    """(the ``if`` with a ``%`` test that ``node`` runs under, the loop around it): an ``if`` that
    holds ``node``, or an earlier ``if <test>: continue`` of the loop's body that skips the
    iterations before ``node`` is reached (``if not last: continue``, then the step)."""
    guard = None
    child = node
    for a in Semantic.ancestors(node):
        if isinstance(a, ast.If) and guard is None and _has_mod(ctx, a.test):
            guard = a
        elif isinstance(a, _LOOPS):
            if guard is None and isinstance(child, ast.stmt):
                guard = _skip_before(ctx, child)
            return guard, a
        elif isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return guard, None
        if guard is None and isinstance(child, ast.stmt) and isinstance(a, (ast.If, ast.With, ast.AsyncWith, ast.Try)):
            guard = _skip_before(ctx, child)
        child = a
    return guard, None


def _skip_before(ctx, st: ast.stmt):
    """An ``if <test with %>: continue`` (no ``else``) before ``st`` in its statement list."""
    got = stmt_list_of(st)
    if got is None or st not in got[1]:
        return None
    for prev in got[1][:got[1].index(st)]:
        if isinstance(prev, ast.If) and not prev.orelse and prev.body \
                and isinstance(prev.body[-1], ast.Continue) and _has_mod(ctx, prev.test):
            return prev
    return None


def _has_mod(ctx, test: ast.AST) -> bool:
    """``test`` computes a ``%``, itself or through a name bound to one before it in the same
    iteration of its loop (``last = (i + 1) % k == 0`` ... ``if last:``; not a counter set before
    the loop, as a resume's ``skip = step % n_batches``)."""
    for n in ast.walk(test):
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mod):
            return True
    loop = _loop_of(test)
    if loop is None:
        return False
    for n in ast.walk(test):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            from ..flow.assignments import reaching_assignment

            st = reaching_assignment(ctx, n.id, test)
            if st is not None and _loop_of(st) is loop and not _in_loop_elsewhere(ctx, n.id, loop, st) \
                    and any(isinstance(m, ast.BinOp) and isinstance(m.op, ast.Mod) for m in ast.walk(st.value)):
                return True
    return False


def _in_loop_elsewhere(ctx, name: str, loop: ast.AST, st: ast.stmt) -> bool:
    """``name`` is bound in ``loop`` by another statement than ``st`` (``x -= 1``, a second
    assignment): its value at the test is not the one ``st`` gives."""
    for n in ast.walk(loop):
        if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) \
                and ctx.sem.statement_of(n) is not st:
            return True
    return False


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


def _wrapped_on_other_runs(ctx, backward: ast.Call) -> bool:
    """Every ``DDP(...)`` of this file runs only where a flag holds that the ``backward()`` needs
    false (or the other way round): the runs that accumulate never wrap in DDP (``flow.exclusive.contradictory``)."""
    from ..flow.exclusive import contradictory

    scope = ctx.sem.enclosing_function(backward)
    calls = ddp_calls(ctx)
    return bool(calls) and scope is not None and all(
        ctx.sem.enclosing_function(d) is scope and contradictory(d, backward, scope) for d in calls)
