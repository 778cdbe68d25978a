from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES
from ..flow.bindings import reaching
from ..flow.exhaustion import _uses, consumed_twice, consumes, exhausted_uses, one_shot, one_shot_bindings
from ..flow.helper_calls import bind_args, callee_name, resolved
from ..flow.modern import hub


class ExhaustedParameterGenerator(Rule):
    """
    ## What it does
    Checks for a module's `parameters()` (also `named_parameters()`, `buffers()`, `modules()`,
    `children()`, or a generator expression, `filter`, `map`, `zip`, `enumerate` or
    `itertools.chain` built on one, or a project helper that returns one) that is iterated twice: kept in a name and consumed by a `for`,
    a comprehension, `list(...)`, a `torch.optim` optimizer or `clip_grad_norm_`, then consumed
    again later in the same block, or consumed in a loop that runs it once per round; and for a
    call that passes such a generator to a project function (in any module, a method too) that
    iterates its parameter twice, for instance to compute the gradient norm and then to scale the
    gradients.

    Not flagged: the `parameters()` of a value known not to be a module: a DDP communication hook's
    bucket (`torch.distributed.GradBucket.parameters()` returns a list), whether the parameter is
    annotated `dist.GradBucket` or the function is the hook its module registers
    (`ddp.register_comm_hook(state, hook)`; also a method, or `functools.partial(hook, ...)`), and a
    project class's `parameters` method that does not `yield`.

    ## Why is this bad?
    `Module.parameters()` returns a generator: the first pass uses it up, and every later pass
    sees no parameter at all, silently. `clip_grad_norm_` then returns a norm and clips nothing;
    an optimizer built from it has no parameters, a second loop that scales, syncs or zeroes the
    gradients skips them all. Under DDP and FSDP this is worse than a crash: the norm is computed
    (often with a collective) and logged, so the run looks healthy while the update is not
    clipped, and the run diverges on spikes the clipping was meant to absorb.

    ## Example
    ```python
    def clip_sharded(params, max_norm):
        grads = [p.grad for p in params if p.grad is not None]
        total = get_total_norm(grads)
        clip_grads_with_norm_(params, max_norm, total)  # `params` is empty here
        return total

    clip_sharded(model.parameters(), 1.0)
    ```

    ## Use instead
    ```python
    def clip_sharded(params, max_norm):
        params = list(params)  # a list can be iterated again
        grads = [p.grad for p in params if p.grad is not None]
        total = get_total_norm(grads)
        clip_grads_with_norm_(params, max_norm, total)
        return total
    ```

    ## Fix safety
    There is no automatic fix: `list(...)` where the generator is made (or at the top of the
    helper) is the usual change.
    """

    code = "DDP224"
    name = "exhausted-parameter-generator"
    severity = Severity.ERROR
    requires_text = ("parameters", "buffers", "modules", "children")

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        sem = view.sem
        done: set = set()
        held: set = set()  # the names some assignment of the module binds to a one-shot iterator
        scopes = [sem.tree, *(fn for fns in sem.functions.values() for fn in fns)]
        for scope in scopes:
            for name, evs in sem.assignments(scope).items():
                srcs = [e for e in evs if isinstance(e, ast.Assign) and one_shot(an, view, _value(e, name)) is not None]
                if not srcs:
                    continue
                held.add(name)
                uses = [u for u in _uses(scope, name) if one_shot_bindings(an, view, name, u)]
                consumed = [u for u in uses if consumes(an, view, u)]
                if not consumed:
                    continue

                def binds(u, name=name):
                    return tuple(reaching(view, name, u)[1] or ())

                got = exhausted_uses(an, view, scope, name, consumed, binds)
                if got is None:
                    continue
                first, later, loop = got
                src = one_shot_bindings(an, view, name, later)[0]
                done.add(id(later))
                if loop is not None:
                    ctx.report(later, f"`{name}` holds `{ctx.text(src)}` (line {src.lineno}), a generator that "
                                      f"this use consumes on the loop's first round (line {loop.lineno}): every "
                                      "later round sees no element at all",
                               related=[(src, "the generator"), (loop, "the loop")])
                else:
                    ctx.report(later, f"`{name}` holds `{ctx.text(src)}` (line {src.lineno}), a generator that "
                                      f"line {first.lineno} already consumed: this use sees no element at all",
                               related=[(src, "the generator"), (first, "consumed here first")])
        for c in sem.calls:
            if not (c.args or c.keywords) or id(c) in done:
                continue
            cands = []
            for a in (*c.args, *(k.value for k in c.keywords)):
                src = one_shot(an, view, a)
                if src is None and isinstance(a, ast.Name) and a.id in held:
                    got = one_shot_bindings(an, view, a.id, a)
                    src = got[0] if got else None
                if src is not None:
                    cands.append((a, src))
            if not cands:
                continue
            target = resolved(an, view, c)
            if target is None or not isinstance(target[1], FUNC_TYPES):
                continue
            tview, fn = target
            for pname, arg in bind_args(c, fn).items():
                src = next((s for a, s in cands if a is arg), None)
                if src is None:
                    continue
                got = consumed_twice(an, tview, fn, pname)
                if got is None:
                    continue
                first, later, loop = got
                where = "" if tview is view else f" of `{tview.path.rsplit('/', 1)[-1]}`"
                how = (f"iterates it in a loop (line {loop.lineno}{where})" if loop is not None else
                       f"consumes it (line {first.lineno}{where}) and iterates it again (line {later.lineno})"
                       if later is not first else f"passes it on to a function that consumes it twice (line {first.lineno}{where})")
                ctx.report(c, f"`{ctx.text(src)}` is a generator, and `{callee_name(target)}` {how} through its "
                              f"parameter `{pname}`: the second pass sees no element at all",
                           related=[(src, "the generator")] + ([(later, "the second pass")] if tview is view else []))
                break


def _value(st, name):
    from ..semantic import bound_value

    return bound_value(st, name)
