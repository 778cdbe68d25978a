from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import parent
from ._common import D
from ._flow import scopes


class InitWhenAlreadyInitialized(Rule):
    """
    ## What it does
    Checks for `init_process_group` on a path where the default process group already exists:
    the code tested `dist.is_initialized()`, took the branch for an existing group (`if
    dist.is_initialized(): ...` that falls through, without a `return`), and then reaches an
    `init_process_group` that no `if not dist.is_initialized():` guards. The init may sit in a
    project function, in this file or another module, that initialises unconditionally
    (`setup_distributed()` called after the test); the test may be a project helper that returns
    `dist.is_initialized()` (`is_distributed()`). Paths are read from the program model
    (`flow.lifecycle.group_state_path`): a `destroy_process_group()` on the way, an `else:
    return`, or a test that excludes the init's branch ends the path. The file itself must call
    `dist.is_initialized()` or `init_process_group` (the other may come through a helper).

    ## Why is this bad?
    The default group can be created once per process. The second call raises:

    ```
    RuntimeError: trying to initialize the default process group twice!
    ```

    This is what happens when a launcher, a framework (DeepSpeed, Accelerate) or an earlier part
    of the program already initialised the group: the code noticed (it logs "already
    initialized") but goes on to initialise again.

    ## Example
    ```python
    def initialize(args):
        if dist.is_initialized():
            print("torch.distributed is already initialized")
            args.rank = dist.get_rank()
        else:
            torch.cuda.set_device(args.local_rank)
        dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)
    ```

    ## Use instead
    ```python
    def initialize(args):
        if dist.is_initialized():
            print("torch.distributed is already initialized")
            args.rank = dist.get_rank()
        else:
            torch.cuda.set_device(args.local_rank)
        if not dist.is_initialized():
            dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)
    ```

    ## Fix safety
    The fix wraps a direct `init_process_group(...)` statement in `if not dist.is_initialized():`.
    It is **unsafe**: where the group exists the program now goes on with that group, whose
    backend, timeout or world may differ from the arguments of the skipped call.
    """

    code = "DDP008"
    name = "init-when-already-initialized"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    # the file calls one of them itself (checked in ``finish``; the other may come through a helper)
    requires_text = ("init_process_group", "is_initialized")
    requires_text_all = (("distributed",),)

    def finish(self, ctx) -> None:
        from ..flow import for_context
        from ..flow.lifecycle import INIT, events, group_state_path, init_when_present

        sem = ctx.sem
        if not sem.calls_to(INIT, D + "is_initialized"):
            return
        an = None
        for scope in scopes(ctx):
            calls = sem.scope_calls(scope) or ()
            if not calls:
                continue
            if an is None:
                an = for_context(ctx)
            view = an.main
            helper_inits = {id(e.call): e for e in events(an, view, scope) if e.kind == "init" and e.where}
            for c in calls:
                qn = ctx.qn(c) or ""
                via = None
                if qn != INIT:
                    ev = helper_inits.get(id(c))
                    if ev is None:
                        continue
                    via = init_when_present(an, *ev.where)
                    if via is None:
                        continue
                est = group_state_path(an, view, c, scope, present=True)
                if est is None or est == "entry":
                    continue
                self._report(ctx, c, est, via)

    def _report(self, ctx, call, est, via) -> None:
        test = ctx.text(est.test)
        if len(test) > 60:
            test = test[:57] + "..."
        what = "`init_process_group(...)`" if via is None else f"`{ctx.text(call.func)}(...)`, which calls `init_process_group`,"
        related = [(est, "the branch taken when the group already exists")]
        if via is not None:
            vview, vcall = via
            if vview.sem is ctx.sem:
                related.append((vcall, "the unguarded init"))
        ctx.report(
            call,
            f"{what} runs where the default process group already exists: the branch of `{test}` "
            f"(line {est.lineno}) for an existing group goes on to it: RuntimeError: trying to "
            "initialize the default process group twice; guard it with `if not dist.is_initialized():`",
            related=related,
            fix=None if via is not None else _fix(ctx, call),
        )


def _fix(ctx, call):
    st = parent(call)
    if not isinstance(st, ast.Expr) or not ctx.stmt_starts_line(st):
        return None
    is_init, imp = ctx.ref(D + "is_initialized")
    indent = ctx.src.indent_of(st.lineno - 1)
    unit = "\t" if "\t" in indent else "    "
    body = ctx.text(st).replace(ctx.src.newline, ctx.src.newline + unit)
    code = f"if not {is_init}():{ctx.src.newline}{indent}{unit}{body}"
    return ctx.fix(Applicability.UNSAFE, f"Guard with `if not {is_init}():`", [ctx.replace(st, code), *imp])
