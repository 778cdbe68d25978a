from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import NoCase, Rule
from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from ..flow.assignments import _is_param
from ..flow.devices import device_in_scope
from ._common import D
from ._flow import effect_related, effect_words
from ..flow import for_context
from ..flow.sinks import helper_sink_args


# op -> (position, keyword) of the tensor it reduces / sends in place
_OPS = {
    "all_reduce": (0, "tensor"), "broadcast": (0, "tensor"), "reduce": (0, "tensor"),
    "all_gather": (1, "tensor"), "gather": (0, "tensor"), "scatter": (0, "tensor"),
    "send": (0, "tensor"), "recv": (0, "tensor"), "isend": (0, "tensor"), "irecv": (0, "tensor"),
    "all_gather_into_tensor": (1, "input_tensor"), "reduce_scatter_tensor": (1, "input"),
}
_OP_QNS = tuple((op, D + op, spec) for op, spec in _OPS.items())  # (spelled once, asked every check)
_IN_PLACE = ("all_reduce", "broadcast", "reduce")
_NUMBER_FUNCS = frozenset({"len", "float", "int", "round", "abs", "min", "max"})


class ScalarToCollective(Rule):
    """
    ## What it does
    Checks for a Python number passed where a tensor collective needs a tensor: `loss.item()`, a
    `float`/`int`/`len(...)`, a numeric literal, arithmetic on those, or a local name that every
    assignment in its function binds to one of them (`total = 0.0` ... `total += loss.item()`).

    The collective may sit in a helper of this file or of another file of the project:
    `reduce_mean(loss.item())` where `reduce_mean(value)` runs `dist.all_reduce(value)` (directly
    or through further helpers) is flagged at the argument, naming the helper chain and the
    collective inside it. So is a helper that first calls a tensor-only method on it
    (`reduce_tensor(loss.item())` whose body is `rt = tensor.clone(); dist.all_reduce(rt)`): the
    number has no `clone`, and every rank raises `AttributeError`.

    Names that are parameters, or bound by anything else (a call whose result is unknown, a loop
    target), are never flagged, and neither is a helper that tests or converts its parameter
    (`isinstance(value, torch.Tensor)`, `torch.as_tensor(value)`) or calls the collective in a
    `try` block.

    ## Why is this bad?
    The tensor collectives (`all_reduce`, `broadcast`, `reduce`, `all_gather`, `send`, ...) work
    in place on a `torch.Tensor`; a Python number has no storage to reduce into. Every rank fails
    at the call:

    ```
    TypeError: Invalid function argument. Expected parameter `tensor` of type torch.Tensor
                 but got <class 'float'> instead.
    ```

    Even if it did not fail, the reduced value could not come back into a Python float: the
    metric would silently stay the local one.

    ## Example
    ```python
    total_loss = 0.0
    for x, y in loader:
        total_loss += loss_fn(model(x), y).item()
    dist.all_reduce(total_loss)  # TypeError
    ```

    ## Use instead
    ```python
    total_loss = 0.0
    for x, y in loader:
        total_loss += loss_fn(model(x), y).item()
    total_loss_t = torch.tensor(total_loss, device=device)
    dist.all_reduce(total_loss_t)
    total_loss = total_loss_t.item()
    ```

    ## Fix safety
    For an in-place collective (`all_reduce`, `broadcast`, `reduce`) called as a statement on a
    local name, when a device variable is in scope, the fix wraps the number in
    `torch.tensor(<name>, device=<device>)`, passes that, and reads the result back with `.item()`.
    It is **unsafe**: the reduction runs in the tensor's dtype (`float32` for a Python float, so a
    large sum loses precision; `int64` for an int), `.item()` hands back a Python number again, and
    the device must be the one the process group uses (a CUDA device for NCCL).
    """

    code = "DDP111"
    name = "scalar-to-collective"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    # the direct case needs torch.distributed; the helper case a project helper, usually named
    # after what it does (``reduce_mean``, ``comm.all_reduce``, ``dist_utils.sync``)
    requires_text = (NoCase("dist"), "comm", "reduce", "gather", "sync", "broadcast")
    requires_reach = True  # a collective site in this file or a module it imports (flow.reach)

    def finish(self, ctx) -> None:
        by_qn = ctx.sem.calls_by_qualname
        for op, qn, spec in _OP_QNS:
            for call in by_qn.get(qn, ()):
                arg = get_arg(call, *spec)
                if arg is None:
                    continue
                scope = ctx.sem.scope_of(call)
                what = _scalar(ctx, arg, scope, 0)
                if what is None:
                    continue
                fix = _make_fix(ctx, call, op, arg, scope)
                ctx.report(
                    arg,
                    f"`{op}` needs a tensor, but `{_short(ctx.text(arg))}` is {what}: every rank raises "
                    "TypeError ('Invalid function argument. Expected parameter `tensor` of type torch.Tensor'). "
                    "Wrap it in a tensor on the group's device",
                    fix=fix,
                )
        self._through_helpers(ctx)

    def _through_helpers(self, ctx) -> None:
        """``reduce_mean(loss.item())`` where the helper (this file or another one of the
        project) passes that parameter to ``dist.all_reduce``."""
        an = for_context(ctx)
        for _call, name, s, arg, scope in helper_sink_args(ctx, an, _OPS, (qn for _op, qn, _spec in _OP_QNS),
                                                           "ddp111"):
            what = _scalar(ctx, arg, scope, 0)
            if what is None:
                continue
            eff = s.effect.through(name)
            if s.method is None:
                words = (f"passes its parameter `{s.param}` to {effect_words(ctx, _Site(eff))}, which needs a "
                         "tensor: every rank raises TypeError ('Invalid function argument. Expected parameter "
                         "`tensor` of type torch.Tensor')")
            else:
                words = (f"calls `{s.param}.{s.method}()` to feed {effect_words(ctx, _Site(eff))}: every rank "
                         f"raises AttributeError (a Python number has no `{s.method}`)")
            ctx.report(
                arg,
                f"`{_short(ctx.text(arg))}` is {what}, but `{name}()` {words}. Pass a tensor on the group's device",
                related=effect_related(ctx, _Site(eff)),
            )


class _Site:
    def __init__(self, eff):
        self.effects = (eff,)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 40 else text[:37] + "..."


def _scalar(ctx, e, scope, depth: int) -> str | None:
    """What kind of Python number ``e`` provably is, else None."""
    if depth > 4 or e is None:
        return None
    # (exact node classes, as ``ast.parse`` builds them: this runs for every collective's argument)
    t = e.__class__
    if t is ast.Constant:
        return "a Python number" if type(e.value) in (int, float) else None
    if t is ast.Call:
        f = e.func
        if f.__class__ is ast.Attribute and f.attr in ("item", "tolist") and not e.args:
            return "a Python number (`.item()`)" if f.attr == "item" else "a Python list (`.tolist()`)"
        if f.__class__ is ast.Name and f.id in _NUMBER_FUNCS and f.id not in ctx.sem.aliases:
            if f.id in ("min", "max", "abs", "round") and not all(_scalar(ctx, a, scope, depth + 1) for a in e.args):
                return None
            return f"a Python number (`{f.id}(...)`)"
        callee = _own_callee(ctx, e)
        if callee is not None and depth < 3:
            rets = [n for n in ast.walk(callee) if isinstance(n, ast.Return)
                    and next((a for a in ctx.sem.ancestors(n) if isinstance(a, (*FUNC_TYPES, ast.Lambda))), None)
                    is callee]
            if rets and not any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(callee)) and all(
                    r.value is not None and _scalar(ctx, r.value, callee, depth + 1) for r in rets):
                return f"a Python number (`{callee.name}()` returns one)"
        return None
    if t is ast.BinOp:
        if _scalar(ctx, e.left, scope, depth + 1) and _scalar(ctx, e.right, scope, depth + 1):
            return "a Python number"
        return None
    if t is ast.UnaryOp:
        return _scalar(ctx, e.operand, scope, depth + 1)
    if t is ast.Name:
        if isinstance(scope, FUNC_TYPES) and _is_param(scope, e.id):
            return None
        binds = ctx.sem.assignments(scope).get(e.id)
        if not binds:
            return None
        for b in binds:
            bt = b.__class__
            if bt is ast.Assign:
                if len(b.targets) != 1 or b.targets[0].__class__ is not ast.Name:
                    return None
                if not _scalar(ctx, b.value, scope, depth + 1):
                    return None
            elif bt is ast.AugAssign:
                if not _scalar(ctx, b.value, scope, depth + 1):
                    return None
            elif bt is ast.AnnAssign:
                if b.value is None or not _scalar(ctx, b.value, scope, depth + 1):
                    return None
            else:
                return None
        if any(isinstance(n, (ast.Global, ast.Nonlocal)) and e.id in n.names for n in ast.walk(scope)):
            return None
        return "a Python number"
    return None


def _own_callee(ctx, call: ast.Call):
    """The function of this file that ``call`` runs: ``f(...)`` for a module-level ``def f``, or
    ``self.m(...)`` for a method of the enclosing class (defined once, not decorated)."""
    f = call.func
    if isinstance(f, ast.Name) and f.id not in ctx.sem.aliases:
        fns = [fn for fn in ctx.sem.functions.get(f.id, []) if isinstance(parent(fn), ast.Module)]
    elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
        cls = next((a for a in ctx.sem.ancestors(call) if isinstance(a, ast.ClassDef)), None)
        fns = [fn for fn in (cls.body if cls is not None else []) if isinstance(fn, FUNC_TYPES) and fn.name == f.attr]
    else:
        return None
    if len(fns) != 1 or fns[0].decorator_list:
        return None
    return fns[0]


def _make_fix(ctx, call, op, arg, scope):
    if op not in _IN_PLACE or not isinstance(arg, ast.Name):
        return None
    stmt = parent(call)
    if not isinstance(stmt, ast.Expr) or not ctx.stmt_starts_line(stmt) or stmt.lineno != stmt.end_lineno:
        return None
    device = device_in_scope(ctx, call)
    if device is None and isinstance(scope, FUNC_TYPES) and "device" in param_names(scope):
        device = "device"
    if device is None:
        return None
    name = arg.id
    taken = set(ctx.sem.assignments(scope)) | (set(param_names(scope)) if isinstance(scope, FUNC_TYPES) else set())
    tmp = f"{name}_t"
    i = 2
    while tmp in taken:
        tmp = f"{name}_t{i}"
        i += 1
    tensor, imp = ctx.ref("torch.tensor")
    nl = ctx.src.newline
    indent = ctx.src.indent_of(stmt.lineno - 1)
    call_text = ctx.text(call)
    rel_start = arg.col_offset - call.col_offset
    rel_end = arg.end_col_offset - call.col_offset
    new_call = call_text[:rel_start] + tmp + call_text[rel_end:]
    code = f"{tmp} = {tensor}({name}, device={device}){nl}{indent}{new_call}{nl}{indent}{name} = {tmp}.item()"
    return ctx.fix(Applicability.UNSAFE, f"Reduce a tensor: `{tmp} = torch.tensor({name}, device={device})`, then "
                   f"read it back", [ctx.replace(call, code), *imp])
