from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg, parent
from ..flow.modern import holds_call, hub
from ..flow.group_free import program_without_group
from ..flow.imports import is_main_guard
from ..flow.origins import qn_suffix_pred
from ..flow.values import DATA
from ..flow.findings import node_related
from ._flow import source_related, source_words

_PLATEAU = qn_suffix_pred("lr_scheduler.ReduceLROnPlateau")


class ReplicatedSettingFromLocalValue(Rule):
    """
    ## What it does
    Checks for a learning rate that every replica must share, driven by a value that differs
    between ranks and was never reduced across them:

    - `scheduler.step(metric)` of a `torch.optim.lr_scheduler.ReduceLROnPlateau`, where `metric`
      is computed from this rank's own data (a validation loss over this rank's shard, returned
      by a helper of this file or another module, unpacked from a tuple, accumulated in a loop;
      not the `compute()` of a `torchmetrics` metric, which gathers its state over the group
      unless built with `sync_on_compute=False`);
    - a store of a value computed from this rank's data into a parameter group's `"lr"` (`for g in
      opt.param_groups: g["lr"] = ...`, `opt.param_groups[0]["lr"] = ...`).

    The scheduler may be built in a helper, another module or kept on `self`, or handed in by the
    callers of the function or method in the project's other files (a library trainer's
    `self.scheduler = scheduler`, given a `ReduceLROnPlateau` by a script's
    `trainer.train(scheduler=...)`). Values are judged by
    the shared uniformity analysis: a value a collective made equal (an all-reduced loss) is
    uniform, also when it is reduced in place only where a process group exists (`if
    dist.is_initialized(): dist.all_reduce(buf)`: without one the run is a single process), and a
    value the analysis cannot judge never produces a finding. A per-rank metric that only feeds
    logging is not flagged, nor a program with no replicas at all (it imports and calls nothing
    distributed, or nothing it runs, through the project's functions, starts a process group,
    spawns processes or wraps a model, even where the package it imports has a DDP trainer
    elsewhere; and no distributed program of the project calls it).

    ## Why is this bad?
    DDP averages the gradients, but each replica applies them with its own optimizer. When one
    rank's validation loss plateaus and another's does not, `ReduceLROnPlateau` cuts the learning
    rate on some ranks only: from then on the replicas take steps of different sizes and their
    weights drift apart silently. No error is raised, the rank-0 log looks normal, and a
    checkpoint saved from one rank is only one of several different models.

    ## Example
    ```python
    val_loss = evaluate(model, val_loader)  # this rank's shard of the validation set
    scheduler.step(val_loss)
    ```

    ## Use instead
    Reduce the metric first, so every rank steps the scheduler with the same value.
    ```python
    val_loss = torch.tensor(evaluate(model, val_loader), device=device)
    dist.all_reduce(val_loss, op=dist.ReduceOp.AVG)
    scheduler.step(val_loss.item())
    ```

    ## Fix safety
    There is no automatic fix: how the metric is reduced (a mean over samples, over ranks) depends
    on the program.
    """

    code = "DDP220"
    name = "replicated-setting-from-local-value"
    severity = Severity.ERROR
    fix_availability = "never"
    requires_text = ("step", "param_groups")
    requires_reach = True  # replicas exist only where a collective can be reached (flow.reach)

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        ev = an.evaluator(view)
        for c in view.sem.calls:
            f = c.func
            if not (isinstance(f, ast.Attribute) and f.attr == "step"):
                continue
            metric = get_arg(c, 0, "metrics")
            if metric is None:
                continue
            v = ev.value(metric)
            if not _local_data(v):
                continue
            got = holds_call(an, view, f.value, c, _PLATEAU, callers=_callers(ctx, an))
            if got is None or _one_job(ctx, an, view):
                continue
            sv, ctor = got
            made = f" (built at line {ctor.lineno})" if sv is view else ""
            built = [] if sv is view else [node_related(ctx, sv.path, ctor, "the `ReduceLROnPlateau` it holds")]
            ctx.report(
                c,
                f"`{ctx.text(f.value)}` is a `ReduceLROnPlateau`{made}, and `{ctx.text(metric)}` is rank-varying "
                f"({source_words(ctx, v)}) and never reduced: each rank decides on its own when to cut the "
                "learning rate, and the replicas' weights drift apart; all-reduce the metric first",
                related=[*source_related(ctx, v), *built],
            )
        for st in view.sem.by_type.get(ast.Assign, ()):
            for t in st.targets:
                if _group_lr(an, view, t, st):
                    v = ev.value(st.value)
                    if _local_data(v) and not _one_job(ctx, an, view):
                        ctx.report(
                            st,
                            f"`{ctx.text(t)}` is set from a rank-varying value ({source_words(ctx, v)}) that "
                            "was never reduced: each replica applies the averaged gradients with its own "
                            "learning rate, and their weights drift apart",
                            related=[*source_related(ctx, v)],
                        )
                    break


def _callers(ctx, an):
    """``origins``' callers: the calls of this file's functions, classes and methods in the
    project's other files (a library ``Trainer.train(self, scheduler)`` handed its scheduler by a
    script), asked lazily."""
    from ._common import other_call_sites  # lazy, as ``project_callers`` below

    return ctx.memo("ddp220.callers", lambda: other_call_sites(ctx, an, methods=True))


def _one_job(ctx, an, view) -> bool:
    """No replicas exist: the program this module starts never makes processes that share work
    (``group_free.program_without_group``: no distributed module imported or called, here or in
    the project modules it imports; or, where only its package names them, no path of it, through
    the project functions it calls, starts a group, spawns processes or wraps a model for one), and every other file of the project that calls its functions
    or classes is a script (``if __name__ == "__main__":``) whose program does not either (any
    other caller might run them in a distributed program of its own)."""
    from ._common import project_callers  # lazy: only a file whose program is not distributed asks

    def decide():
        if not _no_group(an, view):
            return False
        for cctx, _call, _fn in project_callers(ctx, [*view.defs, *view.classes]):
            cv = an.view_of(cctx.filename)
            if cv is None or not any(is_main_guard(st) for st in cv.tree.body) or not _no_group(an, cv):
                return False
        return True

    return ctx.memo("ddp220.one_job", decide)


def _no_group(an, view) -> bool:
    return program_without_group(an, view)


def _local_data(v) -> bool:
    """``v`` is rank-varying because it is computed from this rank's data (a batch, a metric over
    this rank's shard): the variance that decides a learning rate. (A value the analysis finds
    rank-varying only through the rank or a device, such as an iteration count read from a
    checkpoint loaded onto this rank's device, is left alone.)"""
    return v.varying and v.src is not None and v.src.cat == DATA


def _group_lr(an, view, t, at) -> bool:
    """``g["lr"]`` where ``g`` is a parameter group of an optimizer: ``opt.param_groups[i]``, or the
    target of a ``for`` over ``opt.param_groups``."""
    if not (isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant) and t.slice.value == "lr"):
        return False
    g = t.value
    if isinstance(g, ast.Subscript) and isinstance(g.value, ast.Attribute) and g.value.attr == "param_groups":
        return True
    if isinstance(g, ast.Name):
        p = parent(at)
        while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            if isinstance(p, ast.For) and isinstance(p.target, ast.Name) and p.target.id == g.id:
                it = p.iter
                return isinstance(it, ast.Attribute) and it.attr == "param_groups"
            p = parent(p)
    return False
