from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import get_arg, iter_scope_nodes, parent
from ..flow.hidden import fsdp1_sharded
from ..flow.origins import origins
from ._common import D, other_call_sites
from ..flow.modern import hub
from ..flow.sharded_params import over_sharded_params, params_modules

_NORMS = ("torch.norm", "torch.linalg.norm", "torch.linalg.vector_norm")
_CLIP = ("torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_",
         "torch.nn.utils.clip_grad_norm", "torch.nn.utils.clip_grad.clip_grad_norm")


class LocalGradNorm(Rule):
    """
    ## What it does
    Checks for a gradient norm computed from the *local shards* of a sharded module's gradients:

    - under FSDP2 (`fully_shard`), from `p.grad.to_local()` / `p.grad._local_tensor` for `p` in
      `model.parameters()`, in a function that never reduces it across ranks (no `all_reduce`,
      no `full_tensor()`); the model may reach the function as a parameter or an attribute of
      `self`;
    - under FSDP1 (`FullyShardedDataParallel` with a sharding strategy: the default
      `FULL_SHARD`, `SHARD_GRAD_OP`, `HYBRID_SHARD`), from
      `torch.nn.utils.clip_grad_norm_(model.parameters(), ...)` (or a list or filtered
      comprehension of them) instead of the wrapper's own `model.clip_grad_norm_(...)`. The wrap
      may be made in a helper (of another module), kept on `self`, or unpacked from a tuple.
      `NO_SHARD`, a strategy not known, or an infinite `max_norm` whose result the function
      all-reduces is not flagged. (Under FSDP2 the parameters are DTensors and torch's
      `clip_grad_norm_` reduces the norm itself.)
    - under FSDP2 or tensor parallel (`parallelize_module` with `ColwiseParallel` /
      `RowwiseParallel`), a norm of `p.grad` (`p.grad.norm()`, `torch.linalg.vector_norm(p.grad)`,
      or a sum of its squares) turned into a Python number with `.item()` or `float(...)` in a
      function that never reduces it. The gradient is a sharded DTensor and its norm a *partial*
      DTensor: `.item()` reads this rank's part (torch 2.13, verified on gloo). The parameters
      may come from `model.parameters()` through a list, a helper's parameter (called from
      another module), a method of a trainer, or a helper that returns the parallelized model.

    ## Why is this bad?
    Each rank holds 1/N of every gradient. The norm of the local shards is this rank's part of
    the global norm, and differs between ranks: logged as "grad norm" it is wrong by about a
    factor of sqrt(N), and used to clip or to skip a step it makes the ranks decide differently
    (a skipped step on some ranks is a hang at the next reduce-scatter). FSDP1's parameters
    (flat parameters, or with `use_orig_params=True` views into them) are plain tensors holding
    this rank's shard: `torch.nn.utils.clip_grad_norm_` scales each rank's shard by its own
    coefficient, so the update is no longer a uniformly clipped gradient. Under tensor
    parallelism the clip coefficient then depends on the rank and the TP degree.

    ## Example
    ```python
    sq = sum(p.grad.to_local().norm() ** 2 for p in model.parameters() if p.grad is not None)
    logger.log({"grad_norm": sq.sqrt().item()})

    model = parallelize_module(net, tp_mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
    total = sum(p.grad.norm().item() ** 2 for p in model.parameters()) ** 0.5

    model = FullyShardedDataParallel(net)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    ```

    ## Use instead
    ```python
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float("inf"))
    logger.log({"grad_norm": grad_norm.full_tensor().item()})

    model = FullyShardedDataParallel(net)
    model.clip_grad_norm_(1.0)  # all-reduces the norm over the shards

    total = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).full_tensor().item()
    ```

    ## Fix safety
    There is no automatic fix.
    """

    code = "DDP516"
    name = "local-grad-norm"
    severity = Severity.WARNING
    requires_text = ("to_local", "_local_tensor", "clip_grad_norm", "item", "float")
    # every finding reads ``.grad`` (or calls ``clip_grad_norm_``) and takes a norm or a sum
    requires_text_all = (("grad",), ("norm", "sum"))

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        sem = view.sem
        reduced = {sem.enclosing_function(c) for c in ctx.calls_to(D + "all_reduce", D + "reduce")}
        reduced |= {sem.enclosing_function(c) for c in sem.calls
                    if isinstance(c.func, ast.Attribute) and c.func.attr in ("full_tensor", "redistribute")}
        self._fsdp1_clips(ctx, an, view, reduced)
        callers = other_call_sites(ctx, an)
        done = set()
        cands = list(sem.calls)
        if "_local_tensor" in ctx.src.text:
            cands += [n for n in ast.walk(sem.tree) if isinstance(n, ast.Attribute) and n.attr == "_local_tensor"]
        for c in cands:
            local = _local_grad(c) or _local_grad_via_helper(an, view, c)
            if local is None:
                continue
            fn = sem.enclosing_function(c)
            if fn in reduced or id(fn) in done:
                continue
            p = local.value  # ``p`` of ``p.grad``
            if not isinstance(p, ast.Name) or not over_sharded_params(an, view, p.id, c, callers):
                continue
            norm = _norm_around(ctx, c) or _norm_of_list(view, c)
            if norm is None:
                continue
            done.add(id(fn))
            ctx.report(norm, f"`{ctx.text(norm)}` is the norm of this rank's gradient shards "
                             f"(`{ctx.text(local)}`) and is never reduced across ranks: it is not the global "
                             "gradient norm, and differs between ranks")
        reads_grad: dict = {}  # scope -> whether it reads a ``.grad`` (a finding needs one)
        for c in sem.calls:
            fn = sem.enclosing_function(c)
            if fn in reduced or id(fn) in done or not _numbers(c):
                continue
            if fn not in reads_grad:
                reads_grad[fn] = any(isinstance(n, ast.Attribute) and n.attr == "grad"
                                     for n in ast.walk(fn if fn is not None else sem.tree))
            if not reads_grad[fn]:
                continue
            grad = _number_of_partial(an, view, c)
            if grad is None or not isinstance(grad.value, ast.Name) or \
                    not over_sharded_params(an, view, grad.value.id, c, callers):
                continue
            done.add(id(fn))
            ctx.report(c, f"`{ctx.text(c)}` turns the norm of a sharded DTensor gradient (`{ctx.text(grad)}`) into a "
                          "Python number without reducing it: the norm is a partial DTensor, and `.item()` / "
                          "`float()` read this rank's part only, so the total differs between ranks and with the "
                          "sharding degree; call `.full_tensor()` on the norm first, or use "
                          "`torch.nn.utils.clip_grad_norm_`")


    def _fsdp1_clips(self, ctx, an, view, reduced) -> None:
        """``torch.nn.utils.clip_grad_norm_(model.parameters(), ...)`` of an FSDP1 module that
        shards its parameters: the norm of this rank's shards."""
        for c in ctx.calls_to(*_CLIP):
            mod = _params_module(an, view, get_arg(c, 0, "parameters"), c)
            if mod is None:
                continue
            got = fsdp1_sharded(an, view, mod, c)
            if got is None:
                continue
            wv, w = got
            m = get_arg(c, 1, "max_norm")
            if _infinite(m) and view.sem.enclosing_function(c) in reduced:
                continue  # only the norm, reduced across ranks afterwards
            here = wv is view
            ctx.report(c, f"`{ctx.text(c.func)}` over the parameters of `{ctx.text(mod)}`, an FSDP1 module that "
                          f"shards them{f' (line {w.lineno})' if here else ''}: each rank computes the norm of its own shards and "
                          "scales them by its own coefficient, and the norm returned is not the global one; "
                          f"use `{ctx.text(mod)}.clip_grad_norm_(max_norm)`",
                       related=[(w, "the FSDP1 wrap that shards the parameters")] if here else [])

def _params_module(an, view, expr, at, seen=None):
    """The module whose parameters ``expr`` is, in this module (``_params_modules``); else None."""
    got = params_modules(an, view, expr, at, seen)
    return got[0][1] if got is not None and len(got) == 1 and got[0][0] is view else None


def _infinite(e) -> bool:
    """``float("inf")``, ``math.inf``, ``torch.inf``."""
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "float" and e.args and \
            isinstance(e.args[0], ast.Constant) and str(e.args[0].value).lower() in ("inf", "infinity"):
        return True
    return isinstance(e, ast.Attribute) and e.attr == "inf"


def _local_of(node):
    """``t`` of ``t.to_local()`` / ``t._local_tensor``, or None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to_local":
        return node.func.value
    if isinstance(node, ast.Attribute) and node.attr == "_local_tensor":
        return node.value
    return None


def _local_grad(node):
    """``p.grad.to_local()`` / ``p.grad._local_tensor``: the ``p.grad`` attribute, or None."""
    g = _local_of(node)
    return g if isinstance(g, ast.Attribute) and g.attr == "grad" else None


def _local_grad_via_helper(an, view, call):
    """``p.grad`` of ``_local(p.grad)``: a call of a project function whose every return is its
    parameter's local tensor (``t.to_local()``, or ``t`` itself where ``t`` is no DTensor:
    ``return t.to_local() if isinstance(t, DTensor) else t``); else None."""
    if not (isinstance(call, ast.Call) and len(call.args) == 1 and not call.keywords):
        return None
    g = call.args[0]
    if not (isinstance(g, ast.Attribute) and g.attr == "grad"):
        return None
    target = an.resolve_call(view, call)
    if target is None or not isinstance(target[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    fn = target[1]
    if len(fn.args.args) != 1:
        return None
    name = fn.args.args[0].arg
    local = False
    for r in (n.value for n in iter_scope_nodes(fn) if isinstance(n, ast.Return)):
        for e in (r.body, r.orelse) if isinstance(r, ast.IfExp) else (r,):
            if isinstance(e, ast.Name) and e.id == name:
                continue
            inner = _local_of(e)
            if not (isinstance(inner, ast.Name) and inner.id == name):
                return None
            local = True
    return g if local else None


def _norm_of_list(view, node):
    """The norm of a list of local gradients: ``node`` is the element of a comprehension bound to a
    name (``grads = [_local(p.grad) for p in params]``) that the same function squares or takes
    the norm of element by element (``[g.pow(2).sum() for g in grads]``, ``for g in grads: ...
    g.norm()``, ``torch._foreach_norm(grads)``): that expression; else None."""
    comp, child = parent(node), node
    while comp is not None and not isinstance(comp, (ast.ListComp, ast.GeneratorExp)) and not isinstance(comp, ast.stmt):
        comp, child = parent(comp), comp
    if not isinstance(comp, (ast.ListComp, ast.GeneratorExp)) or child is not comp.elt:
        return None
    st = parent(comp)
    if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
        return None
    name = st.targets[0].id
    fn = view.sem.enclosing_function(st)
    for n in ast.walk(fn if fn is not None else view.sem.tree):
        if isinstance(n, ast.Call) and (view.sem.call_qualname(n) or "") == "torch._foreach_norm" and n.args \
                and isinstance(n.args[0], ast.Name) and n.args[0].id == name:
            return n
        gens = n.generators if isinstance(n, (ast.ListComp, ast.GeneratorExp)) else [n] if isinstance(n, ast.For) else []
        for g in gens:
            if not (isinstance(g.iter, ast.Name) and g.iter.id == name and isinstance(g.target, ast.Name)):
                continue
            body = [n.elt] if isinstance(n, (ast.ListComp, ast.GeneratorExp)) else n.body
            for x in (y for b in body for y in ast.walk(b)):
                base = _squared(x)
                if base is None and isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute) and x.func.attr == "norm":
                    base = x.func.value
                while isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) and base.func.attr in (
                        "detach", "float", "double"):
                    base = base.func.value
                if isinstance(base, ast.Name) and base.id == g.target.id:
                    return n
    return None


def _norm_around(ctx, node):
    """The norm computed from ``node``: ``node.norm(...)``, ``torch.norm(node)``, or a
    ``vector_norm`` of it, up a few enclosing expressions."""
    p, child = parent(node), node
    for _ in range(4):
        if p is None or isinstance(p, ast.stmt):
            return None
        if isinstance(p, ast.Attribute) and p.attr == "norm" and p.value is child:
            q = parent(p)
            return q if isinstance(q, ast.Call) else None
        if isinstance(p, ast.Call) and (ctx.qn(p) or "") in _NORMS:
            return p
        p, child = parent(p), p
    return None


_ITEM = frozenset({"item"})


def _numbers(call) -> bool:
    """``x.item()`` / ``float(x)``: a tensor made a Python number (``_number_of_partial``)."""
    f = call.func
    return (isinstance(f, ast.Attribute) and f.attr in _ITEM and not call.args and not call.keywords) or (
        isinstance(f, ast.Name) and f.id == "float" and len(call.args) == 1 and not call.keywords)


def _number_of_partial(an, view, call):
    """``p.grad`` when ``call`` makes a Python number of a partial reduction of it: ``N.item()`` or
    ``float(N)``, ``N`` a norm of the gradient (``.norm()``, ``torch.norm``, ``torch.linalg``'s
    norms) or a sum of its squares (``(g ** 2).sum()``, ``g.pow(2).sum()``, ``g.square().sum()``),
    directly or a name every binding of which is one. On a sharded DTensor those are partial
    DTensors, and the number is this rank's part. (Arithmetic on the partial norm first, ``n **
    2``, makes it replicated: torch reduces it there.)"""
    f = call.func
    if isinstance(f, ast.Attribute) and f.attr in _ITEM and not call.args and not call.keywords:
        x = f.value
    elif isinstance(f, ast.Name) and f.id == "float" and len(call.args) == 1 and not call.keywords \
            and view.sem.call_qualname(call) in (None, "float", "builtins.float"):
        x = call.args[0]
    else:
        return None
    if isinstance(x, ast.Name):
        got = origins(an, view, x, call, limit=2)
        grads = [_partial_grad(view, e) if v is view else None for v, e in got]
        return grads[0] if grads and all(g is not None and g is grads[0] for g in grads) else None
    return _partial_grad(view, x)


def _partial_grad(view, e):
    """``p.grad`` of a norm or sum of squares ``e`` of it (``_number_of_partial``); else None."""
    g = None
    if not isinstance(e, ast.Call) or any(k.arg == "dim" for k in e.keywords):
        return None
    if (view.sem.call_qualname(e) or "") in _NORMS:
        g = e.args[0] if e.args and len(e.args) <= 2 else None
    elif isinstance(e.func, ast.Attribute):
        if e.func.attr == "norm" and len(e.args) <= 1:
            g = e.func.value
        elif e.func.attr == "sum" and not e.args and not e.keywords:
            g = _squared(e.func.value)
    while isinstance(g, ast.Attribute) and g.attr == "data" or (
            isinstance(g, ast.Call) and isinstance(g.func, ast.Attribute) and g.func.attr == "detach" and not g.args):
        g = g.value if isinstance(g, ast.Attribute) else g.func.value
    return g if isinstance(g, ast.Attribute) and g.attr == "grad" else None


def _squared(e):
    """``g`` of ``g ** 2`` / ``g.pow(2)`` / ``g.square()`` / ``g * g``; else None."""
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Pow) and isinstance(e.right, ast.Constant) and e.right.value == 2:
        return e.left
    if isinstance(e, ast.BinOp) and isinstance(e.op, ast.Mult) and ast.dump(e.left) == ast.dump(e.right):
        return e.left
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and not e.keywords and (
            (e.func.attr == "pow" and len(e.args) == 1 and isinstance(e.args[0], ast.Constant) and e.args[0].value == 2)
            or (e.func.attr == "square" and not e.args)):
        return e.func.value
    return None
