from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg
from ._common import D, DDP_CLASS, const_str

# op -> ((position, keyword), is a list of objects)
_OPS = {
    "all_gather_object": ((1, "obj"), False),
    "gather_object": ((0, "obj"), False),
    "broadcast_object_list": ((0, "object_list"), True),
    "scatter_object_list": ((1, "scatter_object_input_list"), True),
    "send_object_list": ((0, "object_list"), True),
}


class TensorThroughObjectCollective(Rule):
    """
    ## What it does
    Checks for GPU tensors, models and state dicts sent through an object collective
    (`all_gather_object`, `gather_object`, `broadcast_object_list`, `scatter_object_list`,
    `send_object_list`): a `model.state_dict()`, a DDP model, a `torch.load(...)` checkpoint loaded
    without `map_location`, a tensor moved with `.cuda()` / `.to(...)` or built with a CUDA
    `device=`, directly, through a name assigned once, or inside a list / tuple / dict literal.

    Info, off by default: small tensors sent this way work, only slowly.

    ## Why is this bad?
    Object collectives pickle. A CUDA tensor is copied to the host, pickled, sent as bytes, and
    unpickled **onto the device it had on the sender**: rank 0's `cuda:0`. Every receiving rank then
    holds the tensors on GPU 0 (extra memory there, device mismatches later), or fails when that
    device does not exist in the process. The PyTorch docs warn: "Calling `all_gather_object()` with
    GPU tensors is not well supported and inefficient as it incurs GPU -> CPU transfer since tensors
    would be pickled. Please consider using `all_gather()` instead."

    ## Example
    ```python
    objs = [model.state_dict()] if rank == 0 else [None]
    dist.broadcast_object_list(objs, src=0)
    model.load_state_dict(objs[0])
    ```

    ## Use instead
    ```python
    for p in model.state_dict().values():
        dist.broadcast(p, src=0)
    ```

    ## Fix safety
    There is no automatic fix.
    """

    code = "DDP106"
    name = "tensor-through-object-collective"
    severity = Severity.INFO
    default_enabled = False
    fix_availability = "never"
    requires_text = ("_object",)
    requires_text_all = (("distributed",),)  # every qualified name it resolves is torch.distributed.*

    def finish(self, ctx) -> None:
        for op, (spec, is_list) in _OPS.items():
            for call in ctx.calls_to(D + op):
                arg = get_arg(call, *spec)
                if arg is None:
                    continue
                scope = ctx.sem.scope_of(call)
                if is_list:
                    lst = _resolve(ctx, arg, scope)
                    if not isinstance(lst, (ast.List, ast.Tuple)):
                        continue
                    found = next((w for e in lst.elts if (w := _tensorish(ctx, e, scope)) is not None), None)
                else:
                    found = _tensorish(ctx, arg, scope)
                if found is None:
                    continue
                node, what = found
                ctx.report(
                    call,
                    f"{what} sent through `{op}`: pickled through host memory and unpickled onto the "
                    "sender's device on every rank; use tensor collectives (`broadcast`, `all_gather`)",
                    related=[(node, what)] if node is not arg else [],
                )


def _resolve(ctx, expr, scope):
    if isinstance(expr, ast.Name):
        val = ctx.sem.single_value(expr.id, scope)
        return val
    if isinstance(expr, ast.IfExp):
        return expr.body
    return expr


def _tensorish(ctx, expr, scope, depth: int = 0):
    """(node, description) when ``expr`` is a GPU tensor, a model or a state dict."""
    if depth > 3 or expr is None:
        return None
    if isinstance(expr, ast.Name):
        val = ctx.sem.single_value(expr.id, scope)
        if val is None:
            return None
        return _tensorish(ctx, val, ctx.sem.scope_of(val), depth + 1)
    if isinstance(expr, ast.IfExp):
        return _tensorish(ctx, expr.body, scope, depth + 1) or _tensorish(ctx, expr.orelse, scope, depth + 1)
    if isinstance(expr, (ast.List, ast.Tuple)):
        for e in expr.elts:
            got = _tensorish(ctx, e, scope, depth + 1)
            if got:
                return got
        return None
    if isinstance(expr, ast.Dict):
        for e in expr.values:
            got = _tensorish(ctx, e, scope, depth + 1)
            if got:
                return got
        return None
    if not isinstance(expr, ast.Call):
        return None
    qn = ctx.qn(expr)
    f = expr.func
    if qn == DDP_CLASS:
        return expr, "a DistributedDataParallel model"
    if qn == "torch.load":
        ml = get_arg(expr, 1, "map_location")
        if ml is None:
            return expr, "a checkpoint loaded without `map_location`"
        return None
    if qn and qn.startswith("torch.") and qn != "torch.device":
        dev = get_arg(expr, None, "device")
        if dev is not None and _is_gpu_device(dev):
            return expr, "a CUDA tensor"
        return None
    if isinstance(f, ast.Attribute):
        if f.attr == "state_dict" and not expr.args:
            return expr, "a state dict"
        if f.attr == "cuda":
            return expr, "a CUDA tensor"
        if f.attr == "to" and expr.args and _is_gpu_device(expr.args[0]):
            return expr, "a CUDA tensor"
    return None


def _is_gpu_device(node) -> bool:
    s = const_str(node)
    if s is not None:
        return s.startswith("cuda")
    if isinstance(node, ast.Name):
        return node.id in ("device", "local_rank", "gpu", "device_id", "cuda_device", "gpu_id", "local_device")
    if isinstance(node, ast.Attribute):
        return node.attr in ("device", "local_rank", "gpu")
    return False
