"""DDP001's per-rank device analysis (split from the rule's file to keep it small): a per-rank CUDA
device that is never made current while the file uses the current device, and the branch helpers
the rule shares (which of two nodes' branches exclude each other)."""
from __future__ import annotations

import ast

from ..model import Applicability
from ..semantic import get_arg, parent
from ._common import DDP_CLASS, device_call_index
from ..flow.testing import is_test_file


_DEVICE_KWS = frozenset({"device", "device_ids", "output_device", "map_location", "device_id"})


def _device_position(ctx, node: ast.AST) -> bool:
    """``node`` is where a device goes: ``.to(node)``, ``.cuda(node)``, ``torch.device(..., node)``,
    ``device=node`` / ``device_ids=[node]`` / ``map_location=node``."""
    p = parent(node)
    if isinstance(p, (ast.List, ast.Tuple)):
        node, p = p, parent(p)
    if isinstance(p, ast.keyword):
        return p.arg in _DEVICE_KWS
    if isinstance(p, ast.Call) and node in p.args:
        f = p.func
        if isinstance(f, ast.Attribute) and f.attr in ("to", "cuda"):
            return True
        qn = ctx.qn(p) or ""
        return qn in ("torch.device", "torch.cuda.device", DDP_CLASS)
    return False


def _const_cuda(node) -> bool:
    return isinstance(node, ast.Constant) and node.value == "cuda"


def _report_per_rank_device(ctx, inits) -> None:
    """An NCCL group, no pin anywhere, and a per-rank CUDA device (``f"cuda:{local_rank}"``,
    ``torch.device("cuda", local_rank)``, ``.cuda(local_rank)``, ``device_ids=[local_rank]``) that
    places tensors or the model, that the object stores as its device (``self.device = ...``), or
    that a function of the module returns (``def dev(): return torch.device(f"cuda:{rank % 8}")``):
    every use of the *current* device (pinned memory, ``torch.cuda.synchronize()``, streams,
    compiled and third-party kernels, NCCL's own bookkeeping) still runs on cuda:0 in every rank.
    Reported at the init, with the device as the related location; a device getter apart from the
    init's function is reported at its ``return``, with the init as the related location."""
    if is_test_file(ctx.filename):
        return  # a harness-launched test on one node: not judged on this alone
    placed = _per_rank_placements(ctx)
    if not placed:
        return
    implicit = _implicit_device_uses(ctx)
    if not implicit and not any(_hands_out(b) for _, b in placed):
        return  # nothing here uses the current device, nor hands the device out (an object's own, a return)
    sem = ctx.sem
    for init in inits:
        path = _child_toward(init)
        mine = [p for p in placed if not _exclusive_branches(init, p[0], path)
                and (sem.scope_of(p[0]) is sem.scope_of(init) or len(inits) == 1)]
        if not mine:
            continue
        node = mine[0][0]
        binding = next((b for _, b in mine if isinstance(b, ast.Assign)), None) or _device_name_binding(ctx, mine, init)
        fix = None
        if binding is not None:
            target = binding.targets[0]
            set_device, imp = ctx.ref("torch.cuda.set_device")
            edit = ctx.insert_after(binding, f"{set_device}({ctx.text(target)})")
            if edit is not None and sem.statement_of(init).lineno <= binding.lineno:
                fix = ctx.fix(Applicability.SAFE, f"Insert `{set_device}({ctx.text(target)})`", [edit, *imp])
        at, related = init, [(node, "the per-rank device, never made current")]
        if implicit:
            use = implicit[0]
            what = f"`{_label(ctx, use)}` (line {use.lineno}) uses the current device"
        elif isinstance(handed := next((b for _, b in mine if _hands_out(b)), None), ast.Return):
            # the device getter of a setup module (``dev()``), apart from the init: reported at the
            # getter's return, the one place every user's device comes from
            fn = sem.enclosing_function(handed)
            what = f"`{fn.name}()` hands it to every caller, who relies on the current one"
            if fix is None and fn is not sem.enclosing_function(init):
                node = next(n for n, b in mine if b is handed)
                at, related = handed, [(init, "the NCCL group, with no torch.cuda.set_device(...)")]
        else:
            what = "whoever uses this object's device relies on the current one"
        ctx.report(
            at,
            f"NCCL process group but no `torch.cuda.set_device(...)`: this rank's device `{_label(ctx, node)}` "
            f"(line {node.lineno}) is never made current, so the current CUDA device stays cuda:0 on every rank; "
            f"{what}: every process makes a CUDA context and allocates on GPU 0",
            related=[*related, *((u, "uses the current CUDA device") for u in implicit[:5])],
            fix=fix,
        )


def _hands_out(binding) -> bool:
    """The per-rank device is handed out: stored as an object's own (``self.device = ...``) or
    returned by a function of the module or a method (``def dev(): return torch.device(...)``)."""
    return isinstance(binding, ast.Return) or (
        isinstance(binding, ast.Assign) and isinstance(binding.targets[0], ast.Attribute))


# calls that use the *current* CUDA device when given no device (pinned memory, synchronisation,
# streams, memory statistics, the CUDA generator of the current device)
_IMPLICIT_DEVICE_QNS = frozenset({
    "torch.cuda.synchronize", "torch.cuda.empty_cache", "torch.cuda.Stream", "torch.cuda.current_stream",
    "torch.cuda.default_stream", "torch.cuda.memory_allocated", "torch.cuda.max_memory_allocated",
    "torch.cuda.memory_reserved", "torch.cuda.max_memory_reserved", "torch.cuda.reset_peak_memory_stats",
    "torch.cuda.mem_get_info", "torch.cuda.manual_seed", "torch.cuda.get_rng_state", "torch.cuda.set_rng_state",
})


def _implicit_device_uses(ctx) -> list[ast.Call]:
    """The calls of the file that use the current CUDA device without naming one: the
    ``_IMPLICIT_DEVICE_QNS`` without a device argument, ``x.pin_memory()``, a ``DataLoader`` with
    ``pin_memory=True`` (its pinning thread takes the current device)."""
    sem = ctx.sem
    out = []
    for c in sem.calls_to(*_IMPLICIT_DEVICE_QNS):
        qn = ctx.qn(c)
        n_dev = 1 if qn in ("torch.cuda.manual_seed", "torch.cuda.set_rng_state") else 0
        if len(c.args) <= n_dev and not any(k.arg in ("device", None) for k in c.keywords):
            out.append(c)
    for c in sem.calls:
        f = c.func
        if isinstance(f, ast.Attribute) and f.attr == "pin_memory" and not c.args and not c.keywords \
                and ctx.qn(c) is None:
            out.append(c)
    for c in sem.calls_to("torch.utils.data.DataLoader"):
        pm = get_arg(c, None, "pin_memory")
        if isinstance(pm, ast.Constant) and pm.value is True \
                and get_arg(c, None, "pin_memory_device") is None:
            out.append(c)
    out.sort(key=lambda c: (c.lineno, c.col_offset))
    return out


def _per_rank_placements(ctx) -> list[tuple[ast.AST, ast.Assign | None]]:
    """(expression, the ``name = <it>`` / ``self.x = <it>`` statement binding it or None) for each
    per-rank CUDA device of the file that places something: in a device position itself
    (``.to(f"cuda:{rank}")``, ``.cuda(local_rank)``, ``device_ids=[local_rank]``), or bound to a
    name used in one (``device = f"cuda:{local_rank}"``; ``x.to(device)``), or stored as an
    attribute of ``self`` (the object hands it out as its device)."""
    return ctx.memo("ddp001.per_rank_placements", lambda: _per_rank_placements_of(ctx))


def _per_rank_placements_of(ctx):
    from ..flow import for_context
    from ..flow.values import RANK

    sem = ctx.sem
    an = for_context(ctx)
    ev = an.evaluator(an.main)

    def per_rank(e) -> bool:
        try:
            v = ev.value(e)
        except RecursionError:  # pragma: no cover - defensive
            return False
        return v.varying and v.src is not None and v.src.cat == RANK

    def cuda_index(e) -> bool:
        """``e`` names a per-rank CUDA device: ``f"cuda:{r}"``, ``"cuda:%d" % r``, ``"cuda:" + str(r)``,
        ``"cuda:{}".format(r)``, ``torch.device("cuda", r)``, ``torch.device(<one of those>)``."""
        if isinstance(e, ast.JoinedStr) and len(e.values) == 2:
            a, b = e.values
            return isinstance(a, ast.Constant) and a.value == "cuda:" and isinstance(b, ast.FormattedValue) \
                and per_rank(b.value)
        if isinstance(e, ast.BinOp) and isinstance(e.left, ast.Constant) and isinstance(e.left.value, str):
            if isinstance(e.op, ast.Mod) and e.left.value in ("cuda:%d", "cuda:%s", "cuda:%i"):
                return per_rank(e.right)
            if isinstance(e.op, ast.Add) and e.left.value == "cuda:":
                r = e.right
                if isinstance(r, ast.Call) and isinstance(r.func, ast.Name) and r.func.id == "str" and len(r.args) == 1:
                    r = r.args[0]
                return per_rank(r)
        if isinstance(e, ast.Call):
            f = e.func
            if isinstance(f, ast.Attribute) and f.attr == "format" and isinstance(f.value, ast.Constant) \
                    and f.value.value == "cuda:{}" and len(e.args) == 1:
                return per_rank(e.args[0])
            if ctx.qn(e) == "torch.device":
                idx = get_arg(e, 1, "index")
                if e.args and _const_cuda(e.args[0]) and idx is not None:
                    return per_rank(idx)
                if len(e.args) == 1 and not e.keywords:
                    return cuda_index(e.args[0])
        return False

    out: list[tuple[ast.AST, ast.Assign | None]] = []
    seen: set[int] = set()
    # direct placements: ``.cuda(r)``, ``device_ids=[r]``
    for c in device_call_index(ctx).moves:
        if len(c.args) == 1 and not isinstance(c.args[0], ast.Constant) and per_rank(c.args[0]):
            out.append((c, None))
            seen.add(id(c))
    for c in sem.calls_to(DDP_CLASS):
        ids = get_arg(c, None, "device_ids")
        if isinstance(ids, (ast.List, ast.Tuple)) and len(ids.elts) == 1 and per_rank(ids.elts[0]):
            out.append((ids.elts[0], None))
    # device expressions
    for node in ast.walk(sem.tree):
        if not isinstance(node, (ast.JoinedStr, ast.BinOp, ast.Call)) or id(node) in seen:
            continue
        if isinstance(parent(node), ast.Call) and ctx.qn(parent(node)) == "torch.device":
            continue  # judged as the torch.device(...) around it
        if not cuda_index(node):
            continue
        if _device_position(ctx, node):
            out.append((node, None))
            continue
        st = parent(node)
        while isinstance(st, ast.IfExp) and node is not st.test:  # ``return <it> if cuda else cpu``
            st = parent(st)
        if isinstance(st, ast.Return):
            # ``def dev(): return torch.device(f"cuda:{rank % 8}")``: a function of the module (or
            # a method of its class) that hands the device out to the code that places with it
            fn = sem.enclosing_function(st)
            if fn is not None and isinstance(parent(fn), (ast.Module, ast.ClassDef)):
                out.append((node, st))
            continue
        if not (isinstance(st, ast.Assign) and len(st.targets) == 1):
            continue
        t = st.targets[0]
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
            out.append((node, st))
        elif isinstance(t, ast.Name) and any(
                isinstance(n, ast.Name) and n.id == t.id and isinstance(n.ctx, ast.Load) and _device_position(ctx, n)
                for n in ast.walk(sem.tree)):
            out.append((node, st))
    out.sort(key=lambda a: (a[0].lineno, a[0].col_offset))
    return out


def _child_toward(a: ast.AST) -> dict[int, ast.AST]:
    """id(ancestor) -> its child on the way down to ``a``, for every ancestor of ``a``."""
    path_a = {}
    child = a
    p = parent(a)
    while p is not None:
        path_a[id(p)] = child
        child = p
        p = parent(p)
    return path_a


def _exclusive_branches(a: ast.AST, b: ast.AST, path_a: dict | None = None) -> bool:
    """``a`` and ``b`` sit in different branches of one ``if`` (or if-expression). ``path_a``:
    ``_child_toward(a)``, when the caller asks about several ``b``."""
    if path_a is None:
        path_a = _child_toward(a)
    child = b
    p = parent(b)
    while p is not None:
        if id(p) in path_a:
            ca = path_a[id(p)]
            if isinstance(p, ast.If):
                return (ca in p.body) != (child in p.body) and ca is not p.test and child is not p.test
            if isinstance(p, ast.IfExp):
                return ca is not p.test and child is not p.test and ca is not child
            return False
        child = p
        p = parent(p)
    return False


def _label(ctx, node: ast.AST) -> str:
    """A short spelling of an affected expression for a message: `dist.barrier()`, `model.cuda()`."""
    if isinstance(node, ast.Call):
        full = ctx.text(node)
        if len(full) <= 50 and "\n" not in full:
            return full
        text = ctx.text(node.func)
        if len(text) > 40 or "\n" in text:
            f = node.func
            text = "." + f.attr if isinstance(f, ast.Attribute) else text[:40]
        return text + "(...)"
    text = ctx.text(node)
    return text if len(text) <= 40 and "\n" not in text else text[:37] + "..."


def _device_name_binding(ctx, mine, init):
    """``device = <per-rank value>`` bound in the init's scope after it, whose name a placement
    passes (``model.to(device)``): where the fix pins it."""
    from ..flow.assignments import reaching_assignment

    sem = ctx.sem
    for node, _b in mine:
        args = node.args if isinstance(node, ast.Call) else [node]
        for a in args:
            if not isinstance(a, ast.Name):
                continue
            st = reaching_assignment(ctx, a.id, node)
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                    and sem.scope_of(st) is sem.scope_of(init) and st.lineno >= init.lineno:
                return st
    return None
