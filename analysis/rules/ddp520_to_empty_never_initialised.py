from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import parent
from ..flow.helper_calls import calls_named
from ._common import callers_may_exist
from ._training import enclosing_function

# methods of a module that neither read nor write its parameters' values
_NEUTRAL_METHODS = frozenset({"train", "eval", "zero_grad", "requires_grad_", "register_forward_hook",
                              "register_forward_pre_hook", "extra_repr"})
_NEUTRAL_CALLS = frozenset({"print", "repr", "str", "len", "id", "type", "isinstance",
                            "torch.distributed.fsdp.fully_shard", "torch.distributed._composable.fsdp.fully_shard",
                            "torch.distributed.fsdp._fully_shard._fully_shard.fully_shard"})
_CLIPS = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_",
                    "torch.nn.utils.clip_grad.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_value_"})
_CALLER_NEEDS = (("parameters",),)


class ToEmptyNeverInitialised(Rule):
    """
    ## What it does
    Checks for a module materialised with `module.to_empty(device=...)` (the usual last step of
    building a model on the `meta` device, before or after `fully_shard`) that is then trained
    without its parameters ever being given values: after the `to_empty` call, the module is only
    called (`model(x)`), has its parameters handed to an optimizer (`torch.optim.AdamW(
    model.parameters())`) or to gradient clipping, is switched between `train()` and `eval()`, or
    is sharded. The module may be returned by the function that materialises it: each call of that
    function, in its file or in another module of the project, is judged the same way on the name
    it binds the result to.

    Any other use of the module counts as a possible initialisation and keeps the code clean:
    calling any other method (`model.init_weights()`, `model.reset_parameters()`,
    `model.apply(init_fn)`, `model.load_state_dict(...)`), passing it (or its parameters) to a
    function (`dcp.load`, `set_model_state_dict`, a project helper), reading an attribute
    (`model.layers`), storing it, or binding its name again. The rule is off by default: it only
    sees the uses of one name and one returned value.

    ## Why is this bad?
    `to_empty` allocates storage for every parameter and buffer without writing it: the values are
    whatever the allocator hands back (often zeros on a fresh device, often huge numbers or NaN
    after other allocations). Nothing raises: the loss is NaN or diverges, norm scales are
    arbitrary, and with FSDP every rank trains a different random shard. The module's own
    initialisation ran on the `meta` device, where it wrote nothing; it has to run again after
    `to_empty` (`init_weights()`, `reset_parameters()` on each submodule), or a checkpoint has to
    be loaded.

    ## Example
    ```python
    with torch.device("meta"):
        model = Transformer(args)
    fully_shard(model)
    model.to_empty(device="cuda")
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ```

    ## Use instead
    ```python
    with torch.device("meta"):
        model = Transformer(args)
    fully_shard(model)
    model.to_empty(device="cuda")
    model.init_weights()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    ```

    ## Fix safety
    There is no automatic fix: which initialisation (or checkpoint) the model needs is the user's
    choice.
    """

    code = "DDP520"
    name = "to-empty-never-initialised"
    severity = Severity.ERROR
    default_enabled = False
    requires_text = ("to_empty",)

    @classmethod
    def reach(cls, text, filename):
        # the file is judged on its own; callers in other modules of a function that returns the
        # materialised module are read too (a change in one of them re-checks this file)
        _may, deps = callers_may_exist(text, filename, _CALLER_NEEDS)
        return True, deps

    def finish(self, ctx) -> None:
        for call in calls_named(ctx, "to_empty"):
            f = call.func
            if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)):
                continue
            st = parent(call)
            name = f.value.id
            if isinstance(st, ast.Assign):
                if not (len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) and st.targets[0].id == name):
                    continue
            elif not isinstance(st, ast.Expr):
                continue
            fn = enclosing_function(call)
            if fn is None or isinstance(fn, ast.Lambda):
                continue
            got = _uses(ctx, fn, name, st, follow=True)
            if got is None or not got["forward"] or not got["optimizer"]:
                continue
            ctx.report(
                call,
                f"`{name}` is materialised with `to_empty()` and trained without ever being initialised: "
                "`to_empty` allocates its parameters and buffers without writing them, so they hold "
                "whatever memory they got (NaN, huge values, a different shard per rank); call the "
                "model's initialisation (`init_weights()`, `reset_parameters()`) or load a checkpoint "
                "after `to_empty`",
                related=[(got["forward"][0], "the uninitialised module is used here")],
            )


def _uses(ctx, fn, name: str, after: ast.stmt, follow: bool):
    """What the code does with ``name`` (a local of ``fn``) after the statement ``after``:
    {"forward": [calls], "optimizer": bool}, or None when one of its uses may give it values (or is
    not understood). A ``return name`` is followed to the callers of ``fn`` when ``follow``."""
    out = {"forward": [], "optimizer": False}
    end = (after.end_lineno, after.end_col_offset)
    loads = []
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id == name:
            if (n.lineno, n.col_offset) <= end and enclosing_function(n) is fn:
                continue
            if enclosing_function(n) is not fn or not isinstance(n.ctx, ast.Load):
                return None  # a closure or a new binding: not followed
            loads.append(n)
    if any(isinstance(a, (ast.For, ast.While, ast.AsyncFor)) for a in _ancestors_to(after, fn)):
        return None  # in a loop: earlier uses run again after it
    for n in loads:
        p = parent(n)
        if isinstance(p, ast.Call) and p.func is n:
            out["forward"].append(p)
            continue
        if isinstance(p, ast.Attribute) and p.value is n:
            call = parent(p)
            if not (isinstance(call, ast.Call) and call.func is p):
                return None
            if p.attr in _NEUTRAL_METHODS:
                continue
            if p.attr == "forward":
                out["forward"].append(call)
                continue
            if p.attr in ("parameters", "named_parameters") and not call.args and not call.keywords:
                user = parent(call)
                if isinstance(user, ast.Call) and call in user.args:
                    qn = ctx.qn(user) or ""
                    if _is_optimizer(ctx, user):
                        out["optimizer"] = True
                        continue
                    if qn in _CLIPS:
                        continue
            return None
        if isinstance(p, ast.Call) and n in p.args and (ctx.qn(p) or "") in _NEUTRAL_CALLS:
            continue
        if isinstance(p, ast.Return) and follow and isinstance(parent(fn), ast.Module):
            got = _callers(ctx, fn)
            if got is None:
                return None
            out["forward"] += got["forward"]
            out["optimizer"] = out["optimizer"] or got["optimizer"]
            continue
        return None
    return out


def _callers(ctx, fn):
    """The uses, by each caller of the module-level function ``fn``, of the module it returns (bound
    to a name: ``model = build(...)``), joined; None when a caller does anything else with it, or
    when no caller is seen."""
    from ..flow.calls import call_sites_here
    from ._common import project_callers

    sites = [(ctx, c) for c in call_sites_here(ctx, fn)]
    sites += [(caller, c) for caller, c, node in project_callers(ctx, {fn.name}, _CALLER_NEEDS) if node is fn]
    if not sites:
        return None
    out = {"forward": [], "optimizer": False}
    for cctx, c in sites:
        st = parent(c)
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
            return None
        g = enclosing_function(c)
        if g is None or isinstance(g, ast.Lambda):
            return None
        got = _uses(cctx, g, st.targets[0].id, st, follow=False)
        if got is None:
            return None
        if cctx is ctx:
            out["forward"] += got["forward"]
        out["optimizer"] = out["optimizer"] or got["optimizer"]
        out["forward_elsewhere"] = out.get("forward_elsewhere", False) or bool(got["forward"])
    if not out["forward"] and out.get("forward_elsewhere"):
        out["forward"] = [fn]  # the forward is in another module: the related node is the function
    return out


def _is_optimizer(ctx, call: ast.Call) -> bool:
    from ._training import _OPTIM_PREFIX

    return (ctx.qn(call) or "").startswith(_OPTIM_PREFIX)


def _ancestors_to(node, fn):
    p = parent(node)
    while p is not None and p is not fn:
        yield p
        p = parent(p)
