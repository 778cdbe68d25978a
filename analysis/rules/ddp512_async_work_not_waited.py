from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import parent
from ..torch_api import constant_of
from ._common import ALL_COLLECTIVES, D
from ..flow.modern import hub, key_of, uses_after
from ..flow.origins import helper_results
from ..flow.device_sync import completed_by_device_sync
from ..flow.sync import completed_by_barrier

_P2P = ("isend", "irecv")
_ASYNC_OPS = frozenset((*ALL_COLLECTIVES, *_P2P))


class AsyncWorkNotWaited(Rule):
    """
    ## What it does
    Checks for a collective called with `async_op=True` whose work handle is dropped: the call is
    a statement of its own, or the handle is bound to a name that nothing reads (no `.wait()`,
    not returned, stored or passed on). Also `dist.isend` / `dist.irecv` handles.

    A dropped collective handle followed by a blocking `dist.barrier()` of the same group, before
    anything reads its tensors (they may be put in a list), is not flagged: a group runs its
    collectives in order and the barrier returns after the earlier ones ended. Point-to-point
    handles are not ordered that way and are always flagged.

    A dropped collective handle followed in the same way by a device-wide CUDA synchronisation
    (`torch.cuda.synchronize()`, with or without a device, taken to be the one the collective runs
    on; `torch.accelerator.synchronize()`; a name bound to one, such as `from torch.cuda import
    synchronize` or `wait = torch.cuda.synchronize`, here or in the project module it is imported
    from; or a project function whose body surely makes one) is not flagged either when the group
    runs NCCL alone. With NCCL the collective is a
    kernel on the device, queued when the call returns, and the device synchronisation returns after
    it ended. The group runs NCCL alone when it is `dist.new_group(backend="nccl")`, or is the
    default group and every `init_process_group` the file can see (its own, those of the project
    functions it calls, and those of the callers' files below) asks for `"nccl"` (or
    `"cuda:nccl"`, `dist.Backend.NCCL`, a value that resolves to one). Gloo runs the collective on
    a thread of the host that no CUDA synchronisation waits for, and a `"cpu:gloo,cuda:nccl"` or a
    bare `init_process_group()` sends a CPU tensor there: those stay flagged. So does a file that
    sees no init at all (a helper module whose group is made elsewhere): the backend is unknown,
    and the finding is kept. `torch.cuda.current_stream().synchronize()` waits for one stream, not
    for NCCL's own: it never counts.

    When the collective is the last thing its function does with the tensors (a helper such as
    `def launch(t): dist.all_reduce(t, async_op=True)`), the synchronisation may come from its
    callers: a module-level function all of whose uses are calls, in its file and the project's
    other files, each followed by a device synchronisation before the tensors are read (a caller
    in the same file may leave it to its own callers, up to three levels). A function that a hook
    or a callback takes as a value (`p.register_post_accumulate_grad_hook(f)`, a closure handed to
    `grad_fn.register_hook`) and a method called in a later step of the same object are not
    followed: nothing in the program orders the hook, the synchronisation and the read (the
    backward pass, a `sync()` in another method, then `optimizer.step()`), so the finding stays,
    even where the code synchronises the device on every path before its optimizer steps.

    ## Why is this bad?
    With `async_op=True` the call returns before the collective has finished. Reading or writing
    the tensor before `work.wait()` races with the communication: the result is the local value,
    a partial reduction, or garbage, and nothing raises. On NCCL the tensor may also be freed
    while the kernel still uses it.

    ## Example
    ```python
    dist.all_reduce(grad, async_op=True)
    grad /= world_size
    ```

    ## Use instead
    ```python
    work = dist.all_reduce(grad, async_op=True)
    ...  # overlap other work
    work.wait()
    grad /= world_size
    ```

    ## Fix safety
    For a collective the fix removes `async_op=True`, making the call blocking. It is safe: the
    dropped handle could not be waited, and the blocking call gives the result the code reads.
    """

    code = "DDP512"
    name = "async-work-not-waited"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    requires_text = ("async_op", "isend", "irecv")

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        calls = ctx.calls_to(*(D + n for n in (*ALL_COLLECTIVES, *_P2P)))
        # and the calls of project helpers that return such a work handle (``return dist.isend(...)``)
        found = helper_results(an, view, _is_async)
        helpers = {id(c): got for c, got in found}  # -> (the helper's view, its async call)
        for c in [*calls, *(h for h, _ in found)]:
            inner = helpers.get(id(c))
            if inner is None and not _is_async(view, c):
                continue
            op = ((inner[0].sem.call_qualname(inner[1]) or D) if inner is not None else ctx.qn(c))[len(D):]
            kw = next((k for k in c.keywords if k.arg == "async_op"), None) if inner is None else None
            p = parent(c)
            if isinstance(p, ast.Expr):
                if inner is None and op not in _P2P and completed_by_barrier(view.sem, c, op) is not None:
                    continue  # a blocking barrier of the same group ends it before the tensor is read
                dropped = "is dropped"
            elif isinstance(p, ast.Assign) and len(p.targets) == 1 and key_of(p.targets[0]) is not None \
                    and not uses_after(view.sem, key_of(p.targets[0]), p):
                dropped = f"is bound to `{key_of(p.targets[0])}`, which nothing reads"
            else:
                continue
            why = ""
            if inner is None and op not in _P2P:
                callers = _callers(ctx, an)
                if completed_by_device_sync(an, view, c, op, callers) is not None:
                    continue  # an NCCL collective: a device-wide synchronisation ends it before the read
                if completed_by_device_sync(an, view, c, op, callers, nccl=False) is not None:
                    why = (" (the device synchronisation after it ends only an NCCL collective, and this "
                           "process group is not known to run NCCL alone)")
            fix = None
            if kw is not None and isinstance(p, ast.Expr):
                fix = ctx.fix(Applicability.SAFE, "Make the call blocking (remove `async_op=True`)",
                              [_remove_keyword(ctx, c, kw)])
            ctx.report(c, f"the work handle of `{ctx.text(c)}` {dropped}: nothing waits for the "
                          f"{'transfer' if op in _P2P else 'collective'}, so the tensor is used before it ends{why}",
                       fix=fix)


def _callers(ctx, an):
    """The calls (view, call) of a module-level function of this file, in it and in the project's
    other files, when those calls are all its uses (no hook, callback or spawn takes it as a
    value); None otherwise. A method's callers are not all seen (``obj.m()`` of another module)."""
    from ..flow.calls import call_sites_here
    from ._common import other_call_sites

    other = other_call_sites(ctx, an)

    def get(view, fn):
        if view is not an.main or not isinstance(parent(fn), ast.Module):
            return None
        here = call_sites_here(ctx, fn)
        if not here and _loads(view.sem, fn.name):
            return None  # used otherwise in its own module
        there = other(view, fn)
        if any(_loads(cv.sem, _callee_word(c)) > sum(1 for _v, x in there if _v is cv and _callee_word(x) ==
                                                     _callee_word(c)) for cv, c in there):
            return None  # a caller's module also uses it as a value
        return [(view, c) for c in here] + there or None

    return get


def _callee_word(call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _loads(sem, word: str) -> int:
    """How many times ``word`` is read as a name or an attribute in the module."""
    return sum(1 for n in ast.walk(sem.tree) if isinstance(n, ast.Name) and n.id == word
               and isinstance(n.ctx, ast.Load) or isinstance(n, ast.Attribute) and n.attr == word
               and isinstance(n.ctx, ast.Load))


def _is_async(view, c) -> bool:
    """``c`` returns a work handle: a point-to-point ``isend``/``irecv``, or a collective with
    ``async_op=True`` (a literal, or a value that resolves to it)."""
    qn = view.sem.call_qualname(c) or ""
    if not qn.startswith(D) or qn[len(D):] not in _ASYNC_OPS:
        return False
    if qn[len(D):] in _P2P:
        return True
    kw = next((k for k in c.keywords if k.arg == "async_op"), None)
    return kw is not None and _is_true(constant_of(view.sem, kw.value))


def _is_true(c) -> bool:
    return isinstance(c, ast.Constant) and c.value is True


def _remove_keyword(ctx, call, kw):
    """An edit removing ``, async_op=True`` (with the comma before it, or after it when first)."""
    src = ctx.src
    items = [*call.args, *call.keywords]
    i = next(j for j, x in enumerate(items) if x is kw)
    from ..model import Edit, Range
    kr = src.node_range(kw)
    if i > 0:
        prev = src.node_range(items[i - 1])
        return Edit(Range(prev.end, kr.end), "")
    if len(items) > 1:
        nxt = src.node_range(items[1])
        return Edit(Range(kr.start, nxt.start), "")
    return Edit(kr, "")
