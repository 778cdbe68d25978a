from __future__ import annotations

import ast

from ..model import Applicability, Edit, Range, Severity
from ..registry import Rule
from ..semantic import get_arg, parent
from ..flow.devices import device_var_in_scope
from ..flow.tensors import NO_DEVICE_KW, cpu_tensor_ctor
from ..flow.testing import expects_error
from ..flow.mentions import mentions
from ._common import D, callers_may_exist, const_str
from ..flow import for_context
from ..torch_api import argparse_default, attribute_store_value, dict_item_value
from ..flow.sinks import helper_sink_args

# op -> the (position, keyword) pairs of its tensor arguments, and the group position;
# keywords ending in ``_list`` name a list of tensors
_OPS = {
    "all_reduce": (((0, "tensor"),), 2),
    "broadcast": (((0, "tensor"),), 2),
    "reduce": (((0, "tensor"),), 3),
    "all_gather": (((1, "tensor"), (0, "tensor_list")), 2),
    "gather": (((0, "tensor"), (1, "gather_list")), 3),
    "scatter": (((0, "tensor"), (1, "scatter_list")), 3),
    "all_gather_into_tensor": (((0, "output_tensor"), (1, "input_tensor")), 2),
    "reduce_scatter_tensor": (((0, "output"), (1, "input")), 3),
    "all_to_all_single": (((0, "output"), (1, "input")), 4),
}
_OP_QNS = tuple((op, D + op, how) for op, how in _OPS.items())  # (spelled once, asked every check)


class CpuTensorWithNccl(Rule):
    """
    ## What it does
    Checks, in a file whose process groups are NCCL-only (`init_process_group("nccl")`; for a module
    that makes no group itself, such as an `evaluate.py` that a training script imports, the inits
    its callers' modules make, through their helpers: `device_sync.nccl_only`), for a
    tensor built on the CPU (`torch.tensor(...)`, `torch.zeros(...)` and the other factory
    functions with no `device=`, never moved with `.to(...)` / `.cuda()`) that is passed to a
    collective on the default group, directly or as the elements of its tensor list
    (`[torch.zeros(n) for _ in range(world_size)]` for `all_gather`). A tensor attribute of a class
    counts too (`self.stats = torch.zeros(2)` assigned once in the class and all-reduced in a
    method): a plain tensor attribute does not follow `module.cuda()`; one the class moves, rebinds
    or registers (`register_buffer("stats", ...)`) is left alone. A name bound on several paths
    (`if rank == 0: n = torch.tensor([len(x)])` / `else: n = torch.empty(1)`) counts when every
    binding that reaches the collective (`flow.bindings.reaching`) builds a CPU tensor; the fix
    then adds the device to each.

    Files that set a default device (`torch.set_default_device`), tensors created under
    `with torch.device(...)`, calls with an explicit `group=` (it may be a gloo group), and
    `"cpu:gloo,cuda:nccl"` backends are left alone.

    ## Why is this bad?
    An NCCL-only process group has no backend for CPU tensors. The collective raises:

    ```
    RuntimeError: No backend type associated with device type cpu
    ```

    (older versions: `RuntimeError: Tensors must be CUDA and dense`).

    ## Example
    ```python
    dist.init_process_group("nccl")
    loss = torch.tensor([running_loss])
    dist.all_reduce(loss)
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl")
    loss = torch.tensor([running_loss], device=device)
    dist.all_reduce(loss)
    ```

    ## Fix safety
    The fix adds `device=<the device variable in scope>` (`device`, `local_rank`, ...) to the
    constructor, or `device=torch.cuda.current_device()` when the file pins the device with
    `torch.cuda.set_device`. It is **unsafe**: the tensor then lives on the GPU for all its other
    uses too.
    """

    code = "DDP105"
    name = "cpu-tensor-with-nccl"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    # the backend string is compared lower-cased ("NCCL", "Nccl"), or `Backend.NCCL`
    requires_text_all = (("distributed",), ("reduce", "broadcast", "gather", "scatter", "all_to_all"))  # the _OPS

    @classmethod
    def reach(cls, text, filename):
        # the file makes its NCCL group, or a module of the project calls it (and may make one)
        if "init_process_group" in text and "nccl" in text.lower():
            return True, {}
        return callers_may_exist(text, filename, ())

    def finish(self, ctx) -> None:
        inits = ctx.calls_to(D + "init_process_group")
        if inits and not all(_nccl_only(ctx, get_arg(i, 0, "backend"), ctx.sem.scope_of(i)) for i in inits):
            return
        if mentions(ctx.sem, "set_default_device", "set_default_tensor_type", text=ctx.src.text):
            return
        # no init here: the group is the callers' (asked per collective, once a CPU tensor reaches one)
        nccl = (lambda call, op: True) if inits else _callers_nccl(ctx)
        sem = ctx.sem
        by_qn = sem.calls_by_qualname
        for op, qn, (specs, gpos) in _OP_QNS:
            for call in by_qn.get(qn, ()):
                grp = get_arg(call, gpos, "group")
                if grp is not None and not (isinstance(grp, ast.Constant) and grp.value is None):
                    continue
                scope = sem.scope_of(call)
                for spec in specs:
                    arg = get_arg(call, *spec)
                    if arg is None:
                        continue
                    others: list = []
                    if spec[1].endswith("_list"):
                        ctor = _cpu_tensor_list(ctx, arg, scope)
                    else:
                        ctor = _cpu_tensor(ctx, arg, scope, others)
                    if ctor is None:
                        continue
                    if expects_error(call) or not nccl(call, op):
                        break  # a test that makes the failure on purpose (asked last: a walk up)
                    ctx.report(
                        call,
                        f"`{op}` on an NCCL-only process group gets a CPU tensor: "
                        "RuntimeError: No backend type associated with device type cpu",
                        related=[(c, "the tensor is created on the CPU here") for c in (ctor, *others)]
                        if ctor is not arg else [],
                        fix=_make_fix(ctx, ctor, others),
                    )
                    break
        if inits:
            self._through_helpers(ctx)

    def _through_helpers(self, ctx) -> None:
        """``reduce_sum(torch.tensor([1.0]))`` where the helper (this file or another module of the
        project) passes that parameter as it is to a collective's tensor (``flow.sinks``)."""
        an = for_context(ctx)
        reported: set = set()  # one finding per call, at its first CPU-tensor sink
        for call, name, s, arg, scope in helper_sink_args(ctx, an, _SINK_OPS, (qn for _op, qn, _spec in _OP_QNS),
                                                           "ddp105"):
            if s.method is not None or call in reported:
                continue
            ctor = _cpu_tensor(ctx, arg, scope)
            if ctor is None or expects_error(call):
                continue
            reported.add(call)
            ctx.report(
                call,
                f"`{name}()` passes its parameter `{s.param}` to a collective on an NCCL-only process group, "
                "and it gets a CPU tensor: RuntimeError: No backend type associated with device type cpu",
                related=[(ctor, "the tensor is created on the CPU here")] if ctor is not arg else [],
            )


# the tensor argument a helper's parameter may reach, per collective (``flow.sinks``)
_SINK_OPS = {op: next(s for s in specs if not s[1].endswith("_list")) for op, (specs, _g) in _OPS.items()}


def _callers_nccl(ctx):
    """A test of a collective of a module without an init: the default group its callers' modules
    make (two calls up, across the project) is NCCL-only, and none of them sets a default device."""
    from ..flow.device_sync import nccl_only
    from ..flow.epoch_targets import caller_views
    from ._common import other_call_sites

    an = for_context(ctx)
    callers = other_call_sites(ctx, an)

    def test(call, op) -> bool:
        more = caller_views(an, an.main, call, callers)
        return bool(more) and not any(mentions(v.sem, "set_default_device", "set_default_tensor_type", text=v.text)
                                      for v in more) and nccl_only(an, an.main, call, op, more)
    return test


def _nccl_only(ctx, expr, scope, depth: int = 0) -> bool:
    if expr is None or depth > 4:
        return False
    s = const_str(expr)
    if s is not None:
        parts = [p.strip().lower() for p in s.split(",")]
        return bool(parts) and all(p == "nccl" or p == "cuda:nccl" for p in parts)
    if isinstance(expr, ast.Attribute):
        qn = ctx.qn(expr)
        if qn is None and isinstance(expr.value, ast.Name):
            # ``args.backend``: its argparse default, or the one ``args.backend = ...`` of the module
            val = argparse_default(ctx.sem, expr.attr)
            if val is None:
                val = attribute_store_value(ctx.sem, expr.value.id, expr.attr)
            return val is not None and _nccl_only(ctx, val, scope, depth + 1)
        return bool(qn) and qn.lower() == "torch.distributed.backend.nccl"
    if isinstance(expr, ast.Subscript):  # ``cfg["backend"]`` of a config dict literal
        val = dict_item_value(ctx.sem, expr, scope)
        return val is not None and _nccl_only(ctx, val, scope, depth + 1)
    if isinstance(expr, ast.Name):
        val = ctx.sem.single_value(expr.id, scope)
        if val is None and scope is not ctx.sem.tree:
            val = ctx.sem.single_value(expr.id, ctx.sem.tree)  # a module-level constant
        return val is not None and _nccl_only(ctx, val, ctx.sem.scope_of(val), depth + 1)
    return False


def _under_device_context(ctx, node) -> bool:
    p = parent(node)
    while p is not None:
        if isinstance(p, (ast.With, ast.AsyncWith)):
            for item in p.items:
                e = item.context_expr
                if isinstance(e, ast.Call) and ctx.qn(e) in ("torch.device", "torch.cuda.device"):
                    return True
        p = parent(p)
    return False


def _cpu_tensor(ctx, arg, scope, others: list | None = None):
    """The CPU constructor of the tensor ``arg`` (``others``, when given, gets the constructors of
    the other bindings that reach it: an ``if``/``else`` that builds it on each branch)."""
    if isinstance(arg, ast.Call):
        ctor = cpu_tensor_ctor(ctx, arg)
    elif isinstance(arg, ast.Name):
        val = ctx.sem.single_value(arg.id, scope)
        if val is None:
            ctors = _cpu_on_every_binding(ctx, arg, scope)
            if ctors and others is not None:
                others.extend(ctors[1:])
            return ctors[0] if ctors else None
        if ctx.sem.scope_of(val) is not scope:
            return None
        ctor = cpu_tensor_ctor(ctx, val)
        if ctor is not None and _moved_in_place(ctx, arg.id, scope):
            return None
    elif isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "self":
        ctor = _self_cpu_tensor(ctx, arg)
    else:
        return None
    if ctor is None or _under_device_context(ctx, ctor):
        return None
    return ctor


def _cpu_on_every_binding(ctx, arg: ast.Name, scope) -> list:
    """The constructors, when every binding of ``arg`` that reaches it (``flow.bindings.reaching``)
    is a plain assignment in ``scope`` of a CPU tensor (``t = torch.tensor([n])`` on rank 0,
    ``t = torch.zeros(1)`` on the others) and nothing moves it in place; else []."""
    from ..flow.bindings import reaching

    kind, evs = reaching(for_context(ctx).main, arg.id, arg)
    if kind != "events" or not evs or len(evs) > 8:
        return []
    ctors = []
    for e in evs:
        if not isinstance(e, ast.Assign) or len(e.targets) != 1 or not isinstance(e.targets[0], ast.Name) \
                or ctx.sem.scope_of(e) is not scope:
            return []
        c = cpu_tensor_ctor(ctx, e.value)
        if c is None or _under_device_context(ctx, c):
            return []
        ctors.append(c)
    return [] if _moved_in_place(ctx, arg.id, scope) else ctors


def _self_cpu_tensor(ctx, attr: ast.Attribute):
    """``self.total`` when the class assigns it exactly once, a CPU tensor constructor
    (``self.total = torch.zeros(2)`` in ``__init__``), and never moves it (no ``.data`` store,
    ``set_`` / ``copy_`` / ``to_``): a plain tensor attribute does not follow ``module.cuda()``."""
    cls = next((a for a in ctx.sem.ancestors(attr) if isinstance(a, ast.ClassDef)), None)
    if cls is None:
        return None
    found = []
    for n in ast.walk(cls):
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                for x in ast.walk(t):
                    if isinstance(x, ast.Attribute) and x.attr == attr.attr and isinstance(x.value, ast.Name) \
                            and x.value.id == "self" and isinstance(x.ctx, ast.Store):
                        found.append((n, x is t))
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == attr.attr \
                and isinstance(n.value.value, ast.Name) and n.value.value.id == "self" and (
                    (n.attr == "data" and isinstance(n.ctx, ast.Store)) or n.attr in ("set_", "copy_", "to_")):
            return None
        elif isinstance(n, ast.Constant) and n.value == attr.attr:
            return None  # ``setattr(self, "total", ...)`` / ``register_buffer("total", ...)``
    assigns = [n for n, _ in found if not isinstance(n, ast.AugAssign)]
    if len(assigns) != 1 or not all(plain for n, plain in found if n in assigns):
        return None
    st = assigns[0]
    value = st.value if isinstance(st, (ast.Assign, ast.AnnAssign)) else None
    return cpu_tensor_ctor(ctx, value) if value is not None else None


def _cpu_tensor_list(ctx, arg, scope):
    """The CPU constructor that fills a list of tensors: ``[torch.zeros(n) for _ in range(ws)]``."""
    lst = arg
    if isinstance(arg, ast.Name):
        lst = ctx.sem.single_value(arg.id, scope)
        if lst is None or ctx.sem.scope_of(lst) is not scope or _moved_in_place(ctx, arg.id, scope):
            return None
    if isinstance(lst, ast.IfExp):
        lst = lst.body
    elt = None
    if isinstance(lst, ast.ListComp) and len(lst.generators) == 1:
        elt = lst.elt
    elif isinstance(lst, ast.BinOp) and isinstance(lst.op, ast.Mult):
        for side in (lst.left, lst.right):
            if isinstance(side, ast.List) and len(side.elts) == 1:
                elt = side.elts[0]
    if elt is None:
        return None
    ctor = cpu_tensor_ctor(ctx, elt)
    if ctor is None or _under_device_context(ctx, ctor):
        return None
    return ctor


def _moved_in_place(ctx, name: str, scope) -> bool:
    """``t.data = t.data.cuda()`` or ``t.set_(...)``: the name now refers to a GPU tensor."""
    from ..semantic import iter_scope_nodes

    for n in iter_scope_nodes(scope):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == name and (
                (n.attr == "data" and isinstance(n.ctx, ast.Store)) or n.attr in ("set_", "copy_", "to_")):
            return True
    return False


def _make_fix(ctx, ctor: ast.Call, others=()):
    if ctx.qn(ctor) in NO_DEVICE_KW or any(ctx.qn(c) in NO_DEVICE_KW for c in others):
        return None
    sem = ctx.sem
    scope = sem.scope_of(ctor)
    dev = device_var_in_scope(ctx, scope) or (device_var_in_scope(ctx, sem.tree) if scope is not sem.tree else None)
    imp = []
    if dev is None:
        if not sem.calls_to("torch.cuda.set_device"):
            return None
        cur, imp = ctx.ref("torch.cuda.current_device")
        dev = f"{cur}()"
    edits = []
    for c in (ctor, *others):  # every constructor that reaches the collective
        parts = [*c.args, *c.keywords]
        if parts:
            end = ctx.src.node_end(parts[-1])
            edits.append(Edit(Range(end, end), f", device={dev}"))
        else:
            # ``torch.zeros()``: insert inside the parentheses
            end = ctx.src.node_end(c)
            pos = type(end)(end.line, end.column - 1)
            edits.append(Edit(Range(pos, pos), f"device={dev}"))
    return ctx.fix(Applicability.UNSAFE, f"Create the tensor on `{dev}`", [*edits, *imp])
