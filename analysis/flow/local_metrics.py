"""Evaluation metrics of this rank's shard that the main rank reports as the job's.

An *unreduced shard metric* is a value that an evaluation loop of the checked file accumulates
(``total += loss``, ``losses.append(...)``, ``losses[k] = loss``) over batches of this rank's shard of a data set, that
no collective combines across ranks, and that the main rank alone reports (prints, logs):

- the loop evaluates: it runs under ``torch.no_grad()`` / ``torch.inference_mode()``
  (``summaries.under_no_grad``), runs no ``backward()`` and does not train
  (``training_loops.trains``);
- the data is a per-rank shard (``eval_walks.sharded``): the loop walks, or the body draws its
  batches from (a statement of its own, ``x, y = loader.next_batch()`` without arguments,
  ``batch = next(it)``), an object built from the rank
  (``ShardLoader(tokens, rank, world)``), a ``DataLoader`` over a ``DistributedSampler`` or one
  a Lightning Fabric set up (``fabric.shards``);
- what the loop's body writes is never passed to a data-combining collective (``all_reduce``,
  ``all_gather``, ..., also through a project helper that makes one: ``eval_walks.reduction``)
  in the loop's function after the loop, nor, when the function returns it, in the caller after
  the call;
- it reaches a report that only the main rank makes (``rank.rank0_guarded``): ``print``, a
  ``logging`` call or a ``Logger`` method, ``wandb.log``, a ``SummaryWriter`` scalar, a Fabric's
  ``print`` / ``log`` / ``log_dict``, or a
  project function whose parameter reaches such a report behind a main-rank test in its own body
  (``print0(msg, is_master)``), in the loop's function after the loop or in a caller (this module,
  or a module of the project that calls a module-level function). A message that also holds a
  rank (``f"rank {rank}: {loss}"``) reports the value as this rank's and does not count.

``unreduced_shard_metrics(hub, ctx)`` lists ``Metric`` objects for the checked file. Nothing here
reports a finding.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES
from .eval_walks import _names_in, _reduction, _returns_tainted, _sharded, _spread, _target_names, _walk
from .summaries import under_no_grad
from .training_loops import is_backward, trains

_LOG_METHODS = frozenset({"debug", "info", "warning", "warn", "error", "critical", "log", "exception"})
_LOG_QNS = frozenset({"print", "builtins.print", "wandb.log", "tqdm.write", "tqdm.tqdm.write"})
_WRITER_METHODS = frozenset({"add_scalar", "add_scalars"})
_WRITER_QNS = ("torch.utils.tensorboard.SummaryWriter", "torch.utils.tensorboard.writer.SummaryWriter",
               "tensorboardX.SummaryWriter")
_ACCUMULATE = frozenset({"append", "extend", "add_"})


class Metric:
    """``loop`` of the checked file accumulates ``names``; ``anchor`` is where to report (the
    return of the function when the report is in a caller, else the accumulation); ``sink`` the
    report ``(view, call)``."""

    __slots__ = ("loop", "names", "anchor", "sink", "shown")

    def __init__(self, loop, names, anchor, sink, shown):
        self.loop, self.names, self.anchor, self.sink = loop, names, anchor, sink
        self.shown = shown  # the accumulated names themselves


def unreduced_shard_metrics(hub, ctx) -> list[Metric]:
    view = hub.main
    out = []
    for loop in (*view.sem.by_type.get(ast.For, ()), *view.sem.by_type.get(ast.While, ())):
        got = _metric(hub, ctx, view, loop)
        if got is not None:
            out.append(got)
    return out


def _accumulated(loop) -> dict[str, ast.AST]:
    """The names a loop's body accumulates into across rounds (``x += ...``, ``x = x + ...``,
    ``xs.append(...)``, ``xs[k] = ...`` with ``k`` a name the ``for`` binds, into a container the
    body never rebinds), with the accumulating statement."""
    out: dict[str, ast.AST] = {}
    rounds = _target_names(loop.target) if isinstance(loop, ast.For) else set()
    rebound = {t for n in _walk(loop.body) if isinstance(n, ast.Assign) for x in n.targets
               if not isinstance(x, ast.Subscript) for t in _target_names(x)}
    for n in _walk(loop.body):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Subscript) \
                and isinstance(n.targets[0].value, ast.Name) and n.targets[0].value.id not in rebound \
                and _names_in(n.targets[0].slice) & rounds:
            out.setdefault(n.targets[0].value.id, n)
            continue
        if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add):
            for t in _target_names(n.target):
                out.setdefault(t, n)
        elif isinstance(n, ast.Assign) and len(n.targets) == 1:
            ts = _target_names(n.targets[0])
            if len(ts) == 1 and isinstance(n.value, ast.BinOp) and ts & _names_in(n.value):
                out.setdefault(next(iter(ts)), n)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _ACCUMULATE:
            for t in _target_names(n.func.value):
                out.setdefault(t, n)
    return out


def _shard_fed(hub, ctx, view, loop) -> bool:
    """The loop walks a per-rank shard, or its body draws batches from one (the receiver of a
    method call or the argument of ``next``)."""
    from .passes import iterated_leaves

    if isinstance(loop, ast.For):
        leaves = iterated_leaves(loop.iter)
        if len(leaves) == 1 and _sharded(hub, view, leaves[0], loop):
            return True
    seen = set()
    for st in _walk(loop.body):
        # a batch drawn by a statement of its own: ``x, y = loader.next_batch()``, ``b = next(it)``
        n = st.value if isinstance(st, ast.Assign) else None
        if not isinstance(n, ast.Call):
            continue
        recv = None
        if isinstance(n.func, ast.Attribute) and isinstance(n.func.value, (ast.Name, ast.Attribute)) \
                and not n.args and not n.keywords:
            recv = n.func.value
        elif isinstance(n.func, ast.Name) and n.func.id == "next" and len(n.args) == 1:
            recv = n.args[0]
        if recv is None or not isinstance(recv, (ast.Name, ast.Attribute)):
            continue
        if isinstance(recv, ast.Name) and recv.id == "self":
            continue
        t = ast.unparse(recv)
        if t in seen or len(seen) > 6:
            continue
        seen.add(t)
        if _sharded(hub, view, recv, n) or _ctor_param_sharded(hub, ctx, view, recv):
            return True
    return False


def _ctor_param_sharded(hub, ctx, view, recv) -> bool:
    """``self.<attr>`` whose only binding is ``self.<attr> = <param>`` in ``__init__`` of a
    module-level class (the parameter never rebound there), and every construction of the class
    (this module or another of the project; at least one) passes a per-rank shard for it."""
    from .calls import call_args
    from ..rules._common import project_callers

    if not (isinstance(recv, ast.Attribute) and isinstance(recv.value, ast.Name) and recv.value.id == "self"):
        return False
    fn = view.sem.enclosing_function(recv)
    cls = _parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef) or not isinstance(_parent(cls), ast.Module):
        return False
    init = next((f for f in cls.body if isinstance(f, FUNC_TYPES) and f.name == "__init__"), None)
    binds = hub.class_attr_bindings(view, cls, recv.attr)
    if init is None or len(binds) != 1 or not isinstance(binds[0], ast.Name):
        return False
    name = binds[0].id
    if name not in {a.arg for a in init.args.args} or view.sem.assignments(init).get(name):
        return False
    sites = [(view, c) for c in hub.call_sites(view, init)]
    for _cctx, call, node in project_callers(ctx, (cls.name,)):
        if node is init or node is cls:
            cv = hub.view_of(_cctx.filename)
            if cv is None:
                return False
            sites.append((cv, call))
    if not sites:
        return False
    for cv, c in sites:
        args = [a for p, a in call_args(c, init) if p == name]
        if len(args) != 1 or not _sharded(hub, cv, args[0], c):
            return False
    return True


def _metric(hub, ctx, view, loop):
    if not under_no_grad(view, loop):
        return None
    if any(isinstance(n, ast.Call) and is_backward(view, n) for n in _walk(loop.body)):
        return None
    acc = _accumulated(loop)
    if not acc:
        return None
    fn = view.sem.enclosing_function(loop)
    scope = fn if fn is not None else view.tree
    # a round's value combined across ranks before it is added (``dist.all_reduce(loss)`` then
    # ``total += loss.item()``) accumulates the same value on every rank: not a shard's metric
    acc = {k: n for k, n in acc.items() if not _combined_before(hub, view, scope, loop, k, n)}
    if not acc:
        return None
    names = _spread(scope, set(acc), loop.end_lineno)
    if trains(hub, view, loop) is not None or not _shard_fed(hub, ctx, view, loop):
        return None
    if _reduced(hub, view, scope, names, loop.lineno, loop):
        return None
    first = min(acc.values(), key=lambda n: (n.lineno, n.col_offset))
    sink = _reported(hub, ctx, view, scope, names, loop.end_lineno + 1)
    if sink is not None:
        return Metric(loop, names, first, sink, set(acc))
    if fn is None or not _returns_tainted(fn, names):
        return None
    ret = next(r for r in _walk(fn.body) if isinstance(r, ast.Return) and r.value is not None
               and _names_in(r.value) & names)
    got = _caller_report(hub, ctx, view, fn)
    if got is None:
        return None
    # a caller of this module: at the call whose unreduced result it reports (the helper's other
    # calls may reduce theirs); one of another module: at the helper's ``return``
    st, sink = got
    return Metric(loop, names, st if st is not None else ret, sink, set(acc))


def _caller_report(hub, ctx, view, fn, depth: int = 0):
    """``(statement, sink)`` of the first call of ``fn`` whose result reaches a main-rank report
    unreduced (``statement``: the call's, when it is in the checked module, else None); a caller that only
    hands the result on (``return evaluate(model, loader)``, ``loss = evaluate(...)`` then ``return
    loss``) is followed to its own callers, two levels up."""
    for cctx, cv, call in _callers(hub, ctx, view, fn):
        cfn = cv.sem.enclosing_function(call)
        cscope = cfn if cfn is not None else cv.tree
        st = call
        while st is not None and not isinstance(st, ast.stmt):
            st = _parent(st)
        bound = set()
        if isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is call:
            for t in (st.targets if isinstance(st, ast.Assign) else [st.target]):
                bound |= _target_names(t)
        if bound:
            bound = _spread(cscope, bound, call.lineno)
            if _reduced(hub, cv, cscope, bound, call.lineno + 1):
                continue
            sink = _reported(hub, cctx, cv, cscope, bound, call.lineno + 1)
        else:  # ``print(f"{evaluate()}")``: the call's own value
            sink, p = None, _parent(call)
            while sink is None and p is not None and not isinstance(p, ast.stmt):
                if isinstance(p, ast.Call):
                    sink = _report_of(hub, cctx, cv, p, lambda a, c=call: _holds(a, c))
                p = _parent(p)
        here = st if cv is hub.main else None
        if sink is not None:
            return here, sink
        handed_on = (isinstance(st, ast.Return) and st.value is call) or (
            bound and cfn is not None and _returns_tainted(cfn, bound))
        if handed_on and cfn is not None and depth < 2 and cfn is not fn:
            up = _caller_report(hub, cctx, cv, cfn, depth + 1)
            if up is not None:
                return (here if here is not None else up[0]), up[1]
    return None


def _combined_before(hub, view, scope, loop, name: str, n: ast.AST) -> bool:
    """The accumulating statement ``n`` of ``loop`` (into ``name``) adds a value that a
    data-combining collective of the same round made before it: written in place (the first
    argument of ``dist.all_reduce(loss)``, the output list of ``all_gather``) or returned by a
    helper that makes one (``loss = reduce_mean(loss)``)."""
    from ..semantic import parent
    from .eval_walks import DATA_REDUCTIONS

    if isinstance(n, ast.Call):
        read = set().union(*(_names_in(a) for a in n.args)) if n.args else set()
    else:
        read = _names_in(n.value) if getattr(n, "value", None) is not None else set()
    read.discard(name)
    read -= set(view.imports)  # ``dist.get_world_size()``: a module, not a value of the round
    read = {r for r in read if r not in _BUILTINS}
    if read:
        # a value bound outside the loop and the same on every rank (``world_size``) is no shard's data
        ev, bound = hub.evaluator(view), _bound_in(loop)
        src = n.args if isinstance(n, ast.Call) else [n.value]
        read -= {x.id for e in src for x in ast.walk(e)
                 if isinstance(x, ast.Name) and x.id in read and x.id not in bound and ev.value(x).kind == "U"}
    if not read:
        return False
    try:
        sites = hub.sites(view, scope)
    except Exception:  # noqa: BLE001 - an unreadable scope has no answer
        return False
    combined = set()
    for site in sites:
        c = site.node
        if site.kind == "implicit" or (c.lineno, c.col_offset) >= (n.lineno, n.col_offset) or not _holds(loop, c):
            continue
        ops = [e.op for e in site.effects if not e.grad]
        if not ops or len(ops) != len(site.effects) or not all(op in DATA_REDUCTIONS for op in ops):
            continue
        if c.args:
            combined |= _names_in(c.args[0]) & read
        st = parent(c)
        if isinstance(st, ast.Assign) and st.value is c:
            for t in st.targets:
                combined |= _target_names(t) & read
    return combined == read  # every value it adds (``loss.item() * n.item()`` with ``n`` alone reduced is not)


def _bound_in(loop) -> set:
    out = _target_names(loop.target) if isinstance(loop, ast.For) else set()
    for x in _walk(loop.body):
        if isinstance(x, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor, ast.With)):
            for t in (x.targets if isinstance(x, ast.Assign) else [getattr(x, "target", None)]
                      if not isinstance(x, ast.With) else [i.optional_vars for i in x.items]):
                if t is not None:
                    out |= _target_names(t)
    return out


_BUILTINS = frozenset({"len", "float", "int", "sum", "max", "min", "abs", "round"})


def _reduced(hub, view, scope, names, start, inside=None) -> bool:
    """A data-combining collective reads one of ``names`` at or after line ``start`` of ``scope``:
    ``eval_walks``' answer, or a direct ``torch.distributed`` call of one (``all_gather(banks,
    bank, group=...)``)."""
    from .eval_walks import DATA_REDUCTIONS

    if _reduction(hub, view, scope, names, start, inside=inside) is not None:
        return True
    for n in _walk(scope.body):
        if isinstance(n, ast.Call) and n.lineno >= start:
            qn = view.sem.call_qualname(n) or ""
            if qn.startswith("torch.distributed.") and qn.rpartition(".")[2] in DATA_REDUCTIONS and any(
                    _names_in(a) & names for a in (*n.args, *(k.value for k in n.keywords))):
                return True
    return False


def _parent(n):
    from ..semantic import parent

    return parent(n)


def _callers(hub, ctx, view, fn):
    """(ctx, view, call) of the calls of ``fn``: in its module, and in the project's other modules
    for a module-level function."""
    from ..rules._common import project_callers

    for c in hub.call_sites(view, fn):
        yield ctx, view, c
    if isinstance(_parent(fn), ast.Module):
        for cctx, call, node in project_callers(ctx, (fn.name,)):
            if node is fn:
                yield cctx, hub.view_of(cctx.filename) or None, call


def _reported(hub, ctx, view, scope, names, start):
    """The first main-rank report in ``scope`` at or after line ``start`` of a value of ``names``."""
    for n in _walk(scope.body):
        if isinstance(n, ast.Call) and n.lineno >= start:
            got = _report_of(hub, ctx, view, n, lambda a: bool(_names_in(a) & names))
            if got is not None:
                return got
    return None


def _message_args(call):
    return [*call.args, *(k.value for k in call.keywords)]


def _report_of(hub, ctx, view, call, reads, depth: int = 0):
    """``(view, call)`` when ``call`` reports the metric (in its arguments that ``reads`` accepts)
    on the main rank only, without the rank in its message."""
    from .fabric import REPORTS, method_call
    from .rank import rank0_guarded

    args = [a for a in _message_args(call) if reads(a)]
    if not args:
        return None
    ev = hub.evaluator(view)
    if any(_names_rank(ev, a) for a in args):
        return None  # reported as this rank's own value
    if method_call(hub, view, call, REPORTS):
        return view, call  # a Lightning Fabric's ``print`` / ``log`` / ``log_dict``: the main rank's alone
    if _is_log(view, call):
        return (view, call) if rank0_guarded(ctx, call) is True else None
    if depth > 1:
        return None
    try:
        got = hub.resolve_call(view, call)
    except Exception:  # noqa: BLE001 - unresolvable: not a report we know
        got = None
    if got is None or not isinstance(got[1], FUNC_TYPES):
        return None
    from .calls import call_args
    from .fs_effects import view_ctx

    gv, gfn = got
    params = {p for p, a in call_args(call, gfn) if any(a is x for x in args)}
    if not params:
        return None
    params = _spread(gfn, params, gfn.lineno)
    gctx = ctx if gv is view else view_ctx(gv)
    for n in _walk(gfn.body):
        if isinstance(n, ast.Call) and _is_log(gv, n) and any(_names_in(a) & params for a in _message_args(n)) \
                and rank0_guarded(gctx, n) is True:
            return view, call
    return None


def _holds(outer, inner) -> bool:
    return any(n is inner for n in ast.walk(outer))


def _names_rank(ev, arg) -> bool:
    """A part of the message is a rank (``f"rank {rank}: ..."``)."""
    from .values import RANK

    for n in ast.walk(arg):
        if isinstance(n, (ast.Name, ast.Attribute, ast.Call)) and not isinstance(getattr(n, "ctx", None), ast.Store):
            v = ev.value(n)
            if v.varying and v.src is not None and v.src.cat == RANK:
                return True
    return False


def _is_log(view, call) -> bool:
    sem = view.sem
    if isinstance(call.func, ast.Name) and call.func.id == "print":
        return not sem.assignments(sem.tree).get("print") and not sem.assignments(sem.scope_of(call)).get("print")
    qn = sem.call_qualname(call) or ""
    if qn in _LOG_QNS:
        return True
    if qn.startswith("logging.") and qn.rpartition(".")[2] in _LOG_METHODS:
        return True
    if isinstance(call.func, ast.Attribute):
        attr = call.func.attr
        if attr in _WRITER_METHODS and any(qn.startswith(w) for w in _WRITER_QNS):
            return True
        if attr in _LOG_METHODS and (qn.startswith("logging.getLogger") or qn.startswith("loguru.")):
            return True
        if attr in _LOG_METHODS and isinstance(call.func.value, ast.Name):
            # ``log = logging.getLogger(__name__)`` ... ``log.info(...)``
            from .fs_effects import bound_value, view_ctx

            v = bound_value(view_ctx(view), call.func.value.id, call)
            return isinstance(v, ast.Call) and (sem.call_qualname(v) or "") == "logging.getLogger"
    return False
