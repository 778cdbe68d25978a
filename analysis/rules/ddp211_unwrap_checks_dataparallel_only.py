from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import iter_scope_nodes, param_names, parent
from ..flow.calls import call_args
from ..torch_api import DDP_CLASS
from ..flow.modern import hub
from ..flow.wrapped import wrap_origins
from ._training import callers_pass_wrapper
from ._common import shown_path

_DP = frozenset({"torch.nn.DataParallel", "torch.nn.parallel.DataParallel",
                 "torch.nn.parallel.data_parallel.DataParallel"})
_DDP = frozenset({DDP_CLASS, "torch.nn.parallel.distributed.DistributedDataParallel"})


class UnwrapChecksDataParallelOnly(Rule):
    """
    ## What it does
    Checks for a test that decides whether to read a model's `.module` by asking only whether it
    is a `DataParallel` (`isinstance(model, nn.DataParallel)`, `type(model) is DataParallel`), where
    the program model says the tested value may hold a `DistributedDataParallel(...)` wrapper:
    through names, `self` attributes (of any method, in any order) and base classes, helpers'
    returns, and the parameters of a helper, filled by the calls of its own module or, for a
    module-level helper, by a caller in another file of the project (two files up:
    `trainer.py` passes `self.model` to `build_optimizer(model, cfg)` of `build.py`, which passes it
    to `param_groups(model, cfg)` of `optim.py`).

    The test counts when the branch it guards reads `<value>.module` (directly, or through a flag:
    `is_parallel = isinstance(model, nn.DataParallel)` then `if is_parallel: ... model.module`).
    A predicate helper counts at its callers: `def is_parallel(m): return isinstance(m,
    nn.DataParallel)` and `model.module if is_parallel(model) else model`. A test that also checks
    `DistributedDataParallel` (in a tuple, or with `or`) or `hasattr(m, "module")`, and a value the
    program model never sees wrapped in DDP (single-GPU `DataParallel` code; a DataParallel
    strategy class of a framework that also has a DDP one) are not flagged.

    ## Why is this bad?
    `DistributedDataParallel` is not a subclass of `DataParallel`. Under DDP the test is false, so
    the model is not unwrapped: the code then reads its own hooks on the wrapper (which has none,
    an `AttributeError`, or a silently skipped branch: `hasattr(model, "get_optimizer_parameters")`
    is false on the wrapper and the model's parameter groups are dropped), or saves the wrapper's
    `module.`-prefixed state dict.

    ## Example
    ```python
    def param_groups(model, cfg):
        if isinstance(model, nn.DataParallel):
            model = model.module
        return model.param_groups_for(cfg)
    ```

    ## Use instead
    ```python
    def param_groups(model, cfg):
        if isinstance(model, (nn.DataParallel, nn.parallel.DistributedDataParallel)):
            model = model.module
        return model.param_groups_for(cfg)
    ```

    ## Fix safety
    No fix is offered: adding `DistributedDataParallel` to the test changes which branch runs
    under DDP, which is the point, but the unwrapped branch may then need other changes.
    """

    code = "DDP211"
    name = "unwrap-checks-dataparallel-only"
    severity = Severity.WARNING
    requires_text = ("DataParallel",)

    def finish(self, ctx) -> None:
        tests = []
        for c in ctx.sem.calls:
            f = c.func
            if isinstance(f, ast.Name) and f.id == "isinstance" and len(c.args) == 2:
                kinds = _kinds(ctx, c.args[1])
                if kinds and kinds <= {"dp"}:
                    tests.append((c, c.args[0]))
            elif isinstance(f, ast.Name) and f.id == "type" and len(c.args) == 1:
                cmp = parent(c)
                if isinstance(cmp, ast.Compare) and cmp.left is c and len(cmp.ops) == 1 \
                        and isinstance(cmp.ops[0], (ast.Is, ast.Eq, ast.In)):
                    kinds = _kinds(ctx, cmp.comparators[0])
                    if kinds and kinds <= {"dp"}:
                        tests.append((cmp, c.args[0]))
        if not tests:
            return
        an, view = hub(ctx)
        for test, value0 in tests:
            top0 = _test_root(test)
            if _checks_ddp_too(ctx, top0, ctx.text(value0)):
                continue
            found = _decides_module_read(ctx, an, view, top0, value0)
            if found is None:
                continue
            guarded, value, at = found
            h = ctx.text(value)
            wraps, _always = wrap_origins(an, view, value, at, ordered=False)
            if not wraps:
                wraps = callers_pass_wrapper(ctx, value, at)
            if not wraps:
                continue
            why = f"`{h}` may be the DistributedDataParallel wrapper (built on line {wraps[0][1].lineno}" + (
                "" if wraps[0][0] is view else f" of {shown_path(ctx, wraps[0][0].path)}") + ")"
            ctx.report(
                test,
                f"only `DataParallel` is checked before reading `{h}.module`, but {why}: a DDP wrapper is not a "
                f"DataParallel, so it is not unwrapped here; test "
                f"`isinstance({h}, (nn.DataParallel, nn.parallel.DistributedDataParallel))` or `hasattr({h}, \"module\")`",
                related=[(guarded, "the unwrapped module is read here")],
            )


def _decides_module_read(ctx, an, view, top, value):
    """(the ``.module`` read, the tested value, where) when the condition ``top`` decides a read of
    ``value.module``: in the branch it guards, or, for a predicate helper (``def is_parallel(m):
    return isinstance(m, nn.DataParallel)``), in the branch its callers' ``is_parallel(model)``
    guards (the module's calls of it, the argument for the parameter)."""
    guarded = _guarded_module_read(ctx, top, ctx.text(value))
    if guarded is not None:
        return guarded, value, top
    ret = parent(top)
    fn = ctx.sem.enclosing_function(top)
    if not (isinstance(ret, ast.Return) and ret.value is top and isinstance(value, ast.Name) and fn is not None
            and value.id in param_names(fn) and not ctx.sem.assignments(fn).get(value.id)):
        return None
    for c in an.call_sites(view, fn)[:8]:
        arg = next((a for p, a in call_args(c, fn) if p == value.id), None)
        if isinstance(arg, (ast.Name, ast.Attribute)):
            root = _test_root(c)
            if _checks_ddp_too(ctx, root, ctx.text(arg)):
                continue
            guarded = _guarded_module_read(ctx, root, ctx.text(arg))
            if guarded is not None:
                return guarded, arg, c
    return None


def _kinds(ctx, t) -> set:
    """{"dp", "ddp", "other"} of the classes a type test names (a tuple of them, or one)."""
    elts = t.elts if isinstance(t, ast.Tuple) else [t]
    out = set()
    for e in elts:
        qn = ctx.qn(e) or ""
        out.add("dp" if qn in _DP else "ddp" if qn in _DDP else "other")
    return out


def _test_root(node):
    """The whole condition ``node`` is part of (up through ``and``/``or``/``not``)."""
    p = parent(node)
    while isinstance(p, (ast.BoolOp, ast.UnaryOp)):
        node, p = p, parent(p)
    return node


def _checks_ddp_too(ctx, top, h: str) -> bool:
    """The condition also names DistributedDataParallel, or asks ``hasattr(h, "module")``."""
    for n in ast.walk(top):
        if isinstance(n, (ast.Name, ast.Attribute)) and (ctx.qn(n) or "") in _DDP:
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "hasattr" and n.args \
                and ctx.text(n.args[0]) == h and len(n.args) > 1 and isinstance(n.args[1], ast.Constant) \
                and n.args[1].value == "module":
            return True
    return False


def _reads_module(ctx, nodes, h: str):
    for body in nodes:
        for n in ast.walk(body):
            if isinstance(n, ast.Attribute) and n.attr == "module" and isinstance(n.ctx, ast.Load) \
                    and ctx.text(n.value) == h:
                return n
    return None


def _guarded_module_read(ctx, top, h: str):
    """The ``h.module`` read of the branch the condition guards (an ``if``/``elif``, a conditional
    expression, or a flag assigned the condition and tested later in the same function)."""
    p = parent(top)
    if isinstance(p, (ast.If, ast.IfExp, ast.While)) and p.test is top:
        return _reads_module(ctx, p.body if isinstance(p.body, list) else [p.body], h)
    if isinstance(p, ast.Assign) and p.value is top and len(p.targets) == 1 and isinstance(p.targets[0], ast.Name):
        flag = p.targets[0].id
        fn = ctx.sem.enclosing_function(p) or ctx.sem.tree
        for n in iter_scope_nodes(fn):
            if isinstance(n, (ast.If, ast.IfExp)) and n.lineno > p.lineno and any(
                    isinstance(x, ast.Name) and x.id == flag for x in ast.walk(n.test)):
                got = _reads_module(ctx, n.body if isinstance(n.body, list) else [n.body], h)
                if got is not None:
                    return got
    return None
