from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import parent
from ..flow.lifecycle import DESTROY, INIT, both_branches, covered, events
from ..flow.lifecycle_returns import skipped_without_init
from ._common import D
from ._flow import scopes


class DestroyWithoutInit(Rule):
    """
    ## What it does
    Checks for `dist.destroy_process_group()` on a path where the `init_process_group` of the same
    function did not run: the init sits under a condition (`if args.distributed:`,
    `if world_size > 1:`, after `if not distributed: return`) and the destroy does not. Path
    conditions are compared, not names: a destroy under the same condition (the same `if`, or an
    `if` with the same test), under `if dist.is_initialized():`, or after an init made on both
    branches (`if use_nccl: init("nccl") else: init("gloo")`) is fine; an init whose other branch
    leaves (`else: raise`) runs on every path that goes on.

    Inits and destroys are followed through project functions, in this file or another module of
    the project (`flow.lifecycle`): `setup(args)` that initialises only when `RANK` is set (an early
    `return` otherwise) is a conditional init at its call, and `cleanup()` whose body destroys
    unconditionally is a destroy at its call. Such a helper's returns are read too: when every
    `return` that no init comes before gives values that switch the destroy's guard off
    (`return 0, 1, device` before the init, `rank, world, device = setup()`, then `distributed =
    world > 1` ... `if distributed: destroy_process_group()`; a `False` returned and tested; the flag
    itself returned after `if flag: init_process_group(...)`, false wherever that init was skipped),
    the destroy never runs without the group and is not flagged. Nor is a destroy that a run without
    a group never reaches: between the init and the destroy, a call that needs the group (a
    collective, `get_rank()`, the DDP constructor, a `DistributedSampler` built without
    `num_replicas` and `rank`, a project function that makes one of these on every call) runs
    wherever the destroy runs (each `if` around it has a test and branch the destroy's own path
    shares; no loop or `try` of its own, though a loop's iterable counts),
    so such a run stops at that call first. The file itself must call `init_process_group` or
    `destroy_process_group` (the other may come through a helper). Only conditions on the
    distributed mode count (`args.distributed`, `world_size > 1`, `"RANK" in os.environ`: the
    path where they fail is the single-process run); an init under any other test (a rank, a mode
    of the program) is taken as the program's business.

    A destroy is also flagged on the path that a test on the group itself keeps for a run without
    one (`flow.lifecycle.group_state_path`): after `if not dist.is_initialized(): ...` that falls
    through, or in the `else` of `if dist.is_initialized():`, with no init on the way.

    ## Why is this bad?
    The single-process run (no launcher, one GPU, a debugging session) takes the branch without the
    init and then fails at the very end, after the whole training ran, instead of exiting:

    ```
    AssertionError: Process group cannot be None
    ```

    (`ValueError: Default process group has not been initialized, please make sure to call
    init_process_group.` on older PyTorch versions.)

    ## Example
    ```python
    if args.distributed:
        dist.init_process_group("nccl")
    train(args)
    dist.destroy_process_group()
    ```

    ## Use instead
    ```python
    if args.distributed:
        dist.init_process_group("nccl")
    train(args)
    if dist.is_initialized():
        dist.destroy_process_group()
    ```

    ## Fix safety
    The fix wraps a direct `destroy_process_group()` statement in `if dist.is_initialized():`.
    It is **safe**: where the group exists the destroy runs as before; where it does not, the call
    could only fail. No fix is offered for a destroy through a helper.
    """

    code = "DDP113"
    name = "destroy-without-init"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    # the file calls one of them itself (the other may come through a helper): checked in ``finish``
    requires_text = ("init_process_group", "destroy_process_group")

    def finish(self, ctx) -> None:
        from ..flow import for_context

        sem = ctx.sem
        if not ctx.calls_to(INIT, DESTROY):
            return
        an = None
        done: set = set()
        for scope in scopes(ctx):
            if an is None:
                an = for_context(ctx)
            evs = events(an, an.main, scope)
            if not any(e.kind == "destroy" for e in evs) or not any(e.kind == "init" for e in evs):
                continue
            inits = [e for e in evs if e.kind == "init"]
            both = both_branches(inits)
            for d in evs:
                if d.kind != "destroy" or d.sure != "must":
                    continue
                key = (d.call.lineno, d.call.col_offset)
                prior = [i for i in inits if (i.call.lineno, i.call.col_offset) < key]
                if not prior:
                    continue
                conds = {i: [c for c in i.conds if id(c[0]) not in both] for i in prior}
                if any(i.sure == "must" and covered(sem, conds[i], d.conds) for i in prior):
                    continue
                if all(not conds[i] and skipped_without_init(an, an.main, i, d) for i in prior):
                    continue  # every path of a helper that does not init switches the destroy off
                if _group_used_first(an, sem, scope, prior[-1], d):
                    continue  # a run without a group fails earlier, at a call that needs one
                self._report(ctx, d, prior[-1], conds[prior[-1]])
                done.add(id(d.call))
        self._no_group_path(ctx, done)

    def _no_group_path(self, ctx, done) -> None:
        """A destroy on the path that a test on the group keeps for a run without one
        (``flow.lifecycle.group_state_path``): ``if not dist.is_initialized(): ...`` that falls
        through to ``destroy_process_group()``."""
        from ..flow import for_context

        sem = ctx.sem
        tests = ctx.calls_to(D + "is_initialized")
        if not tests:
            return
        an = for_context(ctx)
        seen_scopes = set()
        for t in tests:
            scope = sem.scope_of(t)
            if id(scope) in seen_scopes:
                continue
            seen_scopes.add(id(scope))
            for e in events(an, an.main, scope):
                if e.kind == "destroy" and e.sure == "must" and id(e.call) not in done:
                    self._no_group_destroy(ctx, an, e.call, scope)

    def _no_group_destroy(self, ctx, an, d, scope) -> None:
        from ..flow.lifecycle import group_state_path

        est = group_state_path(an, an.main, d, scope, present=False)
        if est is None or est == "entry":
            return
        what = "`destroy_process_group()`" if (ctx.qn(d) or "") == DESTROY else \
            f"`{ctx.text(d.func)}()`, which destroys the group,"
        ctx.report(
            d,
            f"{what} runs where no process group exists: `{ctx.text(est.test)}` (line {est.lineno}) "
            "keeps a path for a run without one, and it leads here: it fails with `AssertionError: "
            "Process group cannot be None`; guard it with `if dist.is_initialized():`",
            related=[(est, "the branch taken when no process group exists")],
            fix=_fix(ctx, _Ev(d)),
        )

    def _report(self, ctx, d, init, conds) -> None:
        if conds:
            node, branch = conds[-1]
            test = ctx.text(node.test)
            when = (f"when `{test}` is false" if branch == "body" else
                    f"when `{test}` is true" if branch == "orelse" else f"when `{test}` returns early")
            why = f"{when}, the init (line {init.call.lineno}) did not run"
        else:
            name = getattr(init.where[1], "name", "?") if init.where else "?"
            why = f"`{name}()` (line {init.call.lineno}) initialises the group only on some of its paths"
        what = "`destroy_process_group()`" if (ctx.qn(d.call) or "") == DESTROY else f"`{ctx.text(d.call.func)}()`, which destroys the group,"
        ctx.report(
            d.call,
            f"{what} runs on every path, but {why}: it fails with `AssertionError: Process group "
            "cannot be None` in a single-process run; guard it with the init's condition or "
            "`if dist.is_initialized():`",
            related=[(init.call, "the conditional init")],
            fix=_fix(ctx, d),
        )


def _group_used_first(an, sem, scope, init, d) -> bool:
    """Between ``init`` and the destroy ``d``, a call that needs the default group (a collective,
    ``get_rank``, a DDP/FSDP wrapper, a ``DistributedSampler`` without ``num_replicas`` and
    ``rank``, a project function whose unconditional path does: ``imports.use_of_call``;
    ``ValueError: Default process group has not been initialized`` without one) runs wherever the
    destroy runs: each ``if`` around it is one the
    destroy's own path conditions hold (the same test, the same branch), and any other block around
    it (a loop, a ``try``) holds the destroy too. A run without a group then stops at that call and
    never reaches the destroy; the destroy is not the line that fails."""
    from ..flow.imports import use_of_call
    from ..flow.lifecycle import GROUP_USES

    lo, hi = (init.call.lineno, init.call.col_offset), (d.call.lineno, d.call.col_offset)
    d_up = set()
    p = parent(d.call)
    while p is not None and p is not scope:
        d_up.add(id(p))
        p = parent(p)
    for c in sem.scope_calls(scope) or ():
        if not lo < (c.lineno, c.col_offset) < hi:
            continue
        if (sem.call_qualname(c) or "") not in GROUP_USES and use_of_call(an, an.main, c) is None:
            continue
        child, p, ok = c, parent(c), True
        while ok and p is not None and p is not scope:
            if id(p) in d_up or isinstance(p, (ast.With, ast.AsyncWith, ast.expr, ast.Expr, ast.Assign,
                                               ast.AnnAssign, ast.AugAssign, ast.keyword)):
                if isinstance(p, (ast.IfExp, ast.BoolOp, ast.Lambda, ast.comprehension, *_COMPS)):
                    ok = False
            elif isinstance(p, (ast.For, ast.AsyncFor)) and child is p.iter:
                pass  # the iterable is made whenever the loop is reached
            elif isinstance(p, ast.If) and child is not p.test:
                ok = covered(sem, [(p, "body" if child in p.body else "orelse")], d.conds)
            else:
                ok = False
            child, p = p, parent(p)
        if ok and p is scope:
            return True
    return False


_COMPS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class _Ev:
    __slots__ = ("call",)

    def __init__(self, call):
        self.call = call


def _fix(ctx, d):
    if (ctx.qn(d.call) or "") != DESTROY:
        return None
    st = parent(d.call)
    if not isinstance(st, ast.Expr) or st.lineno != st.end_lineno or not ctx.stmt_starts_line(st):
        return None
    p = parent(st)
    if isinstance(p, ast.If) and st in p.body and len(p.body) == 1 and p.lineno == st.lineno:
        return None  # ``if x: destroy()`` on one line
    is_init, imp = ctx.ref(D + "is_initialized")
    indent = ctx.src.indent_of(st.lineno - 1)
    unit = "\t" if "\t" in indent else "    "
    code = f"if {is_init}():{ctx.src.newline}{indent}{unit}{ctx.text(st)}"
    return ctx.fix(Applicability.SAFE, f"Guard with `if {is_init}():`", [ctx.replace(st, code), *imp])
