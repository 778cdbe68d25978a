"""Evaluation walks whose results are reduced across ranks.

A *reduced evaluation walk* is a loop that walks a data iterable (``passes.Pass.walker``) without
training (no ``backward()`` in its rounds, ``training_loops.trains`` finds none either), under
``torch.no_grad()`` / ``torch.inference_mode()`` (around the loop, a decorator of its function, or
around a call on the way to it, ``Pass.frames``), and whose per-batch values reach a collective
that combines the ranks' data (``all_reduce``, ``reduce``, ``all_gather``, ``gather`` and their
object and tensor variants, also through a project helper that makes one: ``summaries.sites``):

- in the loop's own function, inside the loop or after it, on a value the loop's body writes
  (assigns, augments, or fills with ``append`` / ``extend`` / ``update`` / ``add_``), or one
  computed after the loop from such a value (``torch.stack([loss_sum, n])``);
- or, when the function returns such a value, in the caller (the last frame of the pass), after
  the call, on a value computed from what the call returned.

A reduction whose gathered result is then cut to a length (``preds[:len(dataset)]``, the usual
undoing of a sampler's padding) does not count.

DDP308 asks whether the loader of such a walk pads its dataset across ranks.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, parent
from .summaries import under_no_grad
from .training_loops import is_backward, trains, walking_loop

# the collectives that combine the ranks' data into one result
DATA_REDUCTIONS = frozenset({
    "all_reduce", "reduce", "all_gather", "all_gather_object", "gather", "gather_object",
    "all_gather_into_tensor", "_all_gather_base", "all_reduce_coalesced", "all_gather_coalesced",
})
_FILLERS = frozenset({"append", "extend", "update", "add_", "insert", "copy_", "fill_"})
_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef)


class ReducedWalk:
    __slots__ = ("view", "loop", "site_view", "site", "op")

    def __init__(self, view, loop, site_view, site, op):
        self.view, self.loop, self.site_view, self.site, self.op = view, loop, site_view, site, op


def reduced_eval_walk(hub, p) -> ReducedWalk | None:
    """The reduced evaluation walk of the pass ``p`` (``passes.Pass``), or None."""
    wv, wnode = p.walker
    loop = walking_loop(wv, wnode)
    if not isinstance(loop, (ast.For, ast.AsyncFor)):
        return None
    memo = wv.memo.setdefault("eval_walks", {})
    key = (id(loop), tuple(id(c) for _f, c, _v in p.frames))
    if key not in memo:
        memo[key] = None
        memo[key] = _compute(hub, wv, loop, tuple(p.frames))
    return memo[key]


def _compute(hub, view, loop, frames):
    if not (under_no_grad(view, loop) or any(under_no_grad(cv, c) for _f, c, cv in frames)):
        return None
    if any(isinstance(n, ast.Call) and is_backward(view, n) for n in _walk(loop.body)):
        return None
    if trains(hub, view, loop, frames) is not None:
        return None
    fn = view.sem.enclosing_function(loop)
    scope = fn if fn is not None else view.tree
    tainted = _written(loop.body)
    if not tainted:
        return None
    tainted = _spread(scope, tainted, loop.end_lineno)
    got = _reduction(hub, view, scope, tainted, loop.lineno, inside=loop, receivers=True)
    if got is not None:
        return ReducedWalk(view, loop, view, got[0], got[1])
    if fn is None or not frames or frames[-1][0] is not fn or not _returns_tainted(fn, tainted):
        return None
    _f, call, cv = frames[-1]
    st = parent(call)
    if not isinstance(st, (ast.Assign, ast.AnnAssign)) or st.value is not call:
        return None
    names = set()
    for t in (st.targets if isinstance(st, ast.Assign) else [st.target]):
        names |= _target_names(t)
    cfn = cv.sem.enclosing_function(call)
    cscope = cfn if cfn is not None else cv.tree
    names = _spread(cscope, names, call.lineno)
    got = _reduction(hub, cv, cscope, names, call.lineno + 1, receivers=True)
    if got is None:
        return None
    return ReducedWalk(view, loop, cv, got[0], got[1])


def _walk(stmts):
    stack = list(stmts)
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, _SCOPES):
            stack.extend(ast.iter_child_nodes(n))


def _target_names(t) -> set[str]:
    if isinstance(t, ast.Name):
        return {t.id}
    if isinstance(t, (ast.Tuple, ast.List)):
        out = set()
        for e in t.elts:
            out |= _target_names(e.value if isinstance(e, ast.Starred) else e)
        return out
    if isinstance(t, ast.Subscript):
        return _target_names(t.value)
    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
        return {f"self.{t.attr}"}
    return set()


def _names_in(node) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            out.add(f"self.{n.attr}")
    return out


def _written(stmts) -> set[str]:
    """The names (and ``self.<attr>``) a loop's body writes: assignment targets, augmented
    targets, receivers of a filling method call."""
    out: set[str] = set()
    for n in _walk(stmts):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                out |= _target_names(t)
        elif isinstance(n, (ast.AugAssign, ast.AnnAssign)) and n.value is not None:
            out |= _target_names(n.target)
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _FILLERS:
            out |= _target_names(n.func.value)
    return out


def _spread(scope, names: set[str], after: int) -> set[str]:
    """``names`` and the names assigned, after line ``after`` of ``scope``, from one of them."""
    names = set(names)
    assigns = [n for n in _walk(scope.body) if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign))
               and n.lineno > after and n.value is not None]
    grew = True
    while grew:
        grew = False
        for a in assigns:
            if _names_in(a.value) & names:
                ts = a.targets if isinstance(a, ast.Assign) else [a.target]
                for t in ts:
                    new = _target_names(t) - names
                    if new:
                        names |= new
                        grew = True
    return names


def _reduction(hub, view, scope, names: set[str], start: int, inside=None, receivers: bool = False):
    """(call, op) of a data-combining collective of ``scope`` at or after line ``start`` whose
    arguments read one of ``names``, unless the gathered result is cut to a length after it.
    ``receivers``: a method of a project class that makes one reads its object too (``acc.compute()``
    all-reducing the counts ``acc.update(...)`` kept in ``self``)."""
    try:
        sites = hub.sites(view, scope)
    except Exception:  # noqa: BLE001 - an unreadable scope has no answer
        return None
    for s in sites:
        if s.kind == "implicit" or s.node.lineno < start:
            continue
        ops = [e.op for e in s.effects if not e.grad]
        if not ops or len(ops) != len(s.effects) or not all(op in DATA_REDUCTIONS for op in ops):
            continue
        args = [*s.node.args, *(k.value for k in s.node.keywords)]
        if s.kind == "explicit" and isinstance(s.node.func, ast.Attribute) and not args:
            continue
        read = set()
        for a in args:
            read |= _names_in(a)
        if receivers and s.kind == "helper" and isinstance(s.node.func, ast.Attribute):
            read |= _names_in(s.node.func.value)
        if not read & names:
            continue
        if _trimmed(scope, s.node, names | read):
            continue
        return s.node, ops[0]
    return _fabric_reduction(hub, view, scope, names, start)


def _fabric_reduction(hub, view, scope, names: set[str], start: int):
    """(call, op) of a Lightning Fabric's ``all_reduce`` / ``all_gather`` of ``scope`` at or after
    line ``start`` whose arguments read one of ``names`` (``fabric.REDUCTIONS``)."""
    from .fabric import REDUCTIONS, method_call

    for n in _walk(scope.body):
        if isinstance(n, ast.Call) and n.lineno >= start and isinstance(n.func, ast.Attribute) \
                and n.func.attr in REDUCTIONS and any(_names_in(a) & names for a in (*n.args, *(k.value for k in n.keywords))):
            op = method_call(hub, view, n, REDUCTIONS)
            if op is not None and not _trimmed(scope, n, names):
                return n, op
    return None


def _trimmed(scope, site, names: set[str]) -> bool:
    """A value of ``names`` (or one computed from the collective's buffers) is cut to a length after
    ``site``: ``x[:n]``, the undoing of a sampler's padding."""
    for n in _walk(scope.body):
        if isinstance(n, ast.Subscript) and n.lineno >= site.lineno and isinstance(n.slice, ast.Slice) \
                and n.slice.upper is not None and n.slice.lower is None and _names_in(n.value) & names:
            return True
    return False


def _returns_tainted(fn, names: set[str]) -> bool:
    return any(isinstance(r, ast.Return) and r.value is not None and _names_in(r.value) & names
               for r in _walk(fn.body))


def sharded_walk(hub, view, src) -> bool:
    """The data-varying source ``src`` (``values.Src`` of category ``DATA``: a loop over this
    rank's batches, at ``src.line`` of ``src.path``) walks a per-rank shard: the walked value is
    built from the rank (``make_iter(split, rank, world)``) or is a DataLoader over a
    ``DistributedSampler`` on every path, there or, for a parameter of the loop's function, at every
    call of that function in its module."""
    from .bindings import reaching
    from .calls import call_args
    from .passes import iterated_leaves

    v = view if src.path in (None, view.path) else hub.view_of(src.path)
    if v is None:
        return False
    loops = [n for n in (*v.sem.by_type.get(ast.For, ()), *v.sem.by_type.get(ast.AsyncFor, ()))
             if n.lineno == src.line]
    if len(loops) != 1:
        return False
    loop = loops[0]
    leaves = iterated_leaves(loop.iter)
    if len(leaves) != 1:
        return False
    leaf = leaves[0]
    if isinstance(leaf, ast.Name):
        kind, where = reaching(v, leaf.id, loop)
        if kind == "param":
            sites = list(hub.call_sites(v, where))
            cv = v
            if not sites and isinstance(src.call, ast.Call):
                # the call the value came through, in another module (``values.Src.call``)
                cv = view if src.call_path in (None, view.path) else hub.view_of(src.call_path)
                got = hub.resolve_call(cv, src.call) if cv is not None else None
                if got is None or got[1] is not where:
                    return False
                sites = [src.call]
            args = [a for c in sites for p, a in call_args(c, where) if p == leaf.id]
            return bool(sites) and len(args) == len(sites) and all(
                _sharded(hub, cv, a, c) for a, c in zip(args, sites))
    return _sharded(hub, v, leaf, loop)


def _sharded(hub, view, expr, at) -> bool:
    # (not the evaluator's rank-varying answer alone: a loader unpacked from a builder's list is
    # rank-varying when any of the list's loaders is, a train loader's sampler for a test loader)
    from .fabric import shards

    return _over_dist_sampler(hub, view, expr, at) or _built_from_rank(hub, view, expr, at) \
        or shards(hub, view, expr, at)


def _origins(hub, view, expr, at) -> list:
    """What ``expr`` may hold at ``at`` (``origins.branch_origins``, 10 levels deep); empty when
    the question has no answer."""
    from .origins import branch_origins

    try:
        return branch_origins(hub, view, expr, at, limit=10)
    except Exception:  # noqa: BLE001 - no answer
        return []


def _built_from_rank(hub, view, expr, at) -> bool:
    """Every value ``expr`` may hold is what a call given the rank returns
    (``corpus.iterator("valid", rank, world)``, ``ds.shard(world, rank)``): where the call resolves
    to a project function, the rank must reach its return (``return_deps``)."""
    from .return_deps import reaching_args

    found = _origins(hub, view, expr, at)
    if not found:
        return False
    for v, e, _fr in found:
        if not isinstance(e, ast.Call):
            return False
        ev = hub.evaluator(v)
        ranked = [a for a in (*e.args, *(k.value for k in e.keywords)) if _is_rank(hub, v, ev, a, e, _fr)]
        if not ranked:
            return False
        try:
            target = hub.resolve_call(v, e)
        except Exception:  # noqa: BLE001 - unresolvable: judged by its arguments
            target = None
        if target is not None and isinstance(target[1], FUNC_TYPES):
            reach = {id(a) for a in reaching_args(e, target)} if target[1].name != "__init__" \
                else _kept_by_ctor(e, target[1])
            if not any(id(a) in reach for a in ranked):
                return False
    return True


def _kept_by_ctor(call, init) -> set[int]:
    """The arguments of a construction (``call`` of the class whose ``__init__`` is ``init``) that
    the object keeps: passed to a parameter that a store into a ``self`` attribute reads."""
    from .calls import call_args

    kept = set()
    for n in _walk(init.body):
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and n.value is not None and any(
                isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and x.value.id == "self"
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]) for x in ast.walk(t)):
            kept |= _names_in(n.value)
    return {id(a) for p, a in call_args(call, init) if p in kept}


def _is_rank(hub, view, ev, a, at, frames) -> bool:
    """``a`` holds the rank: by its value here, or, for a parameter of a builder reached through
    the calls ``frames`` (``build_loaders(args, rank, world)``), by the argument each call gives."""
    from .origins import branch_origins
    from .values import RANK

    x = ev.value(a)
    if x.varying and x.src is not None and x.src.cat == RANK:
        return True
    if not frames or not isinstance(a, ast.Name):
        return False
    try:
        got = branch_origins(hub, view, a, at, frames=frames, limit=4)
    except Exception:  # noqa: BLE001 - no answer
        return False
    return bool(got) and all(
        (y := hub.evaluator(cv).value(ce)).varying and y.src is not None and y.src.cat == RANK
        for cv, ce, _f in got)


_SAMPLER_QNS = ("torch.utils.data.DistributedSampler", "torch.utils.data.distributed.DistributedSampler")


def _over_dist_sampler(hub, view, expr, at) -> bool:
    """Every DataLoader ``expr`` may hold takes a ``DistributedSampler`` (and at least one does)."""
    from .origins import branch_origins
    from .uniformity import _LOADER_QNS

    found = _origins(hub, view, expr, at)
    if not found:
        return False
    for lv, ld, fr in found:
        if not (isinstance(ld, ast.Call) and (lv.sem.call_qualname(ld) or "") in _LOADER_QNS):
            return False
        s = get_arg(ld, 2, "sampler")
        if s is None:
            return False
        samp = [(lv, s, fr)] if isinstance(s, ast.Call) else branch_origins(hub, lv, s, ld, frames=fr)
        if not samp or not all(isinstance(e, ast.Call) and (sv.sem.call_qualname(e) or "") in _SAMPLER_QNS
                               for sv, e, _f in samp):
            return False
    return True
