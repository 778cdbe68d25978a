"""Passes over an iterable: the values that one round of a loop starts a new iteration of
(``for batch in loader``, ``enumerate(loader)``, ``iter(loader)``, ``tqdm(loader)``, ``yield from
loader``), in the loop's
body or in the project functions it calls (up to ``MAX_CALLS`` calls deep, in this module or
another, methods through ``self.m()``), with a callee's parameter rewritten as the argument of the
call that reaches it. A pass inside a nested loop's body belongs to that nested loop, not to this
one (the batch loop is not the epoch loop).

DDP301 asks which DataLoaders an epoch loop walks again on each round, wherever the batch loop
lives: ``for epoch in ...: train(epoch)`` where ``train`` iterates a module-level loader, or
``run_one_epoch(data_loader=train_loader)``. What a pass's value *is* (a DataLoader over which
sampler) is ``origins``'s answer, not this module's.

The epoch one level up: an *epoch iterator* is a class whose method advances its own epoch
counter (``self.epoch += 1``) and starts a new pass over a dataset it holds by building
``DataLoader(self.dataset, ...)`` (in that method or in a method it hands the counter to,
``epoch_advances``). A dataset class *takes the epoch* (``takes_epoch``) when its
``set_epoch(self, epoch)`` stores the epoch in ``self.<x>`` and another of its methods
(``__getitem__``, ``__iter__``, ...) reads ``self.<x>``: what it yields depends on the epoch.
"""
from __future__ import annotations

import ast
from collections import deque

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, terminal_name
from .bindings import reaching
from .calls import call_args
from .origins import const_key

MAX_CALLS = 3
MAX_PASSES = 32
_LOOP_TYPES = (ast.For, ast.AsyncFor, ast.While)
_NESTED_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef)
# calls that iterate (or hand on for iteration) their positional arguments
_ITERATING = frozenset({"enumerate", "iter", "zip", "tqdm", "islice", "chain", "list", "tuple", "trange"})


class Pass:
    """One new iteration of ``expr`` (a name or ``self.attr`` in ``view``, evaluated at ``at``);
    ``chain`` holds the module views of the loop and of every function on the way to it; ``walker``
    is (view, node) of what walks it where the walking happens (a ``for`` loop, a comprehension's
    clause, an ``iter(...)`` call), in a callee when the pass came through a call; ``frames``, the
    calls on the way there (``origins``' frames: a callee's parameter read as that call binds it)."""
    __slots__ = ("view", "expr", "at", "chain", "walker", "frames")

    def __init__(self, view, expr, at, chain, walker=None, frames=()):
        self.view, self.expr, self.at, self.chain = view, expr, at, chain
        self.walker = walker if walker is not None else (view, at)
        self.frames = frames  # (function, call, caller's view) of each call on the way, outermost first


def loop_passes(hub, view, loop) -> list[Pass]:
    """The passes one round of ``loop`` (a For/AsyncFor/While of ``view``) makes, excluding what its
    own header iterates."""
    memo = view.memo.setdefault("passes.loop", {})
    got = memo.get(id(loop))
    if got is None:
        got = memo[id(loop)] = _scan(hub, view, loop.body + getattr(loop, "orelse", []), 0, (view,),
                                     frozenset())
    return got


def iterated_leaves(it: ast.AST, calls: bool = False) -> list[ast.AST]:
    """The names / attributes of a name or of ``self.<attr>`` (or their entries under a literal
    key) an iteration header walks: ``loader``, ``enumerate(loader)``, ``zip(a, b)``,
    ``tqdm(loader, ...)``, ``self.loaders["train"]``, ``data.loader``; with ``calls``, also the
    other calls it walks the result of (``DataLoader(ds)``, ``make_loader(cfg)``)."""
    out: list[ast.AST] = []
    stack = [it]
    while stack:
        e = stack.pop()
        if isinstance(e, ast.Name):
            out.append(e)
        elif isinstance(e, ast.Attribute) and (isinstance(e.value, ast.Name) or _self_attr_name(e.value)):
            out.append(e)  # ``self.loader``; a loader an object holds: ``data.loader``, ``self.data.loader``
        elif isinstance(e, ast.Subscript) and const_key(e.slice) is not None and (
                isinstance(e.value, ast.Name) or _self_attr_name(e.value)):
            out.append(e)  # an entry of a container of loaders: ``loaders["train"]``, ``self.loaders["train"]``
        elif isinstance(e, ast.Call) and terminal_name(e.func) in _ITERATING:
            stack.extend(a for a in e.args if not isinstance(a, ast.Starred))
        elif calls and isinstance(e, ast.Call):
            out.append(e)  # what a call returns: ``DataLoader(ds, ...)``, ``make_loader(cfg)``
    return out


def scope_passes(hub, view, scope) -> list[Pass]:
    """Every pass a call of ``scope`` (a function of ``view``, or its module) makes, wherever it
    happens: at any depth of its loops, and in the project functions it calls (there, at any depth
    of their loops too), a callee's parameter rewritten as the caller's argument; ``walker`` says
    which loop (or clause, or ``iter`` call) walks each one."""
    memo = view.memo.setdefault("passes.scope", {})
    got = memo.get(id(scope))
    if got is None:
        body = scope.body if isinstance(scope, (*FUNC_TYPES, ast.Module)) else [scope]
        got = memo[id(scope)] = _scan(hub, view, body, 0, (view,), frozenset(), True)
    return got


def _nodes(stmts, into_loops: bool = False):
    """Nodes of ``stmts`` without nested scopes and (unless ``into_loops``) without nested loops'
    bodies (their headers stay: ``for batch in loader`` is a pass of the enclosing round)."""
    stack = list(reversed(stmts))
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, _NESTED_SCOPES):
            continue
        if isinstance(n, _LOOP_TYPES) and not into_loops:
            stack.append(n.iter if isinstance(n, (ast.For, ast.AsyncFor)) else n.test)
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(n))))


def _scan(hub, view, stmts, depth: int, chain: tuple, active: frozenset, into_loops: bool = False) -> list[Pass]:
    out: list[Pass] = []
    for n in _nodes(stmts, into_loops):
        if len(out) >= MAX_PASSES:
            break
        if isinstance(n, (ast.For, ast.AsyncFor)):
            out.extend(Pass(view, e, n, chain) for e in iterated_leaves(n.iter))
        elif isinstance(n, ast.comprehension):
            out.extend(Pass(view, e, n.iter, chain) for e in iterated_leaves(n.iter))
        elif isinstance(n, ast.YieldFrom):  # a generator that hands on every item: ``yield from loader``
            out.extend(Pass(view, e, n, chain) for e in iterated_leaves(n.value))
        elif isinstance(n, ast.Call):
            if terminal_name(n.func) == "iter" and isinstance(n.func, ast.Name):
                out.extend(Pass(view, e, n, chain) for e in iterated_leaves(n))
                continue
            if depth >= MAX_CALLS:
                continue
            try:
                got = hub.resolve_call(view, n)
            except Exception:  # noqa: BLE001 - an unresolvable call is simply not followed
                got = None
            if got is None or not isinstance(got[1], FUNC_TYPES) or got[1].name == "__init__" \
                    or id(got[1]) in active:
                continue
            tv, fn = got
            inner = _scan(hub, tv, fn.body, depth + 1, (*chain, tv), active | {id(fn)}, into_loops)
            bound = dict(call_args(n, fn))
            for p in inner:
                if isinstance(p.expr, ast.Name) and p.view is tv:
                    kind, where = reaching(tv, p.expr.id, p.at)
                    if kind == "param" and where is fn:
                        arg = bound.get(p.expr.id)
                        if arg is not None:  # the caller's argument, in the caller's terms
                            out.extend(Pass(view, e, n, p.chain, p.walker, ((fn, n, view), *p.frames))
                                       for e in iterated_leaves(arg))
                        continue
                p.frames = ((fn, n, view), *p.frames)
                out.append(p)
    return out


def _self_attr_name(e) -> str | None:
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return e.attr
    return None


# the fields that hold statements (or the handlers and cases whose bodies do): a class statement
# sits only under them, never in an expression
_BLOCK_FIELDS = frozenset(("body", "orelse", "finalbody", "handlers", "cases"))


def classes_of(sem) -> list:
    """The module's class statements: from ``by_type`` when it indexes them, else in the order of
    ``ast.walk`` (breadth first), found by a breadth-first walk of the blocks alone (the same
    depths and the same order among the fields followed, without the expressions)."""
    if ast.ClassDef in sem.wanted:
        return sem.by_type.get(ast.ClassDef, [])
    out = []
    todo = deque((sem.tree,))
    pop, extend = todo.popleft, todo.extend
    while todo:
        n = pop()
        if n.__class__ is ast.ClassDef:
            out.append(n)
        for f in n._fields:
            if f in _BLOCK_FIELDS:
                v = getattr(n, f, None)
                if v.__class__ is list:
                    extend(v)
    return out


def epoch_advances(ctx):
    """[(class, method, the ``self.<e> += ...`` statement, dataset attribute)] for each method of
    a class of this module that advances ``self.<e>`` by one and builds ``DataLoader(self.<d>, ...)``
    itself or through a method of the class it hands ``self.<e>`` to (``self.<m>(self.<e>)``)."""
    out = []
    for cls in classes_of(ctx.sem):
        methods = {f.name: f for f in cls.body if isinstance(f, FUNC_TYPES)}
        if not methods:
            continue
        for m in methods.values():
            steps = [n for n in iter_scope_nodes(m) if isinstance(n, ast.AugAssign) and isinstance(n.op, ast.Add)
                     and _self_attr_name(n.target) and isinstance(n.value, ast.Constant) and n.value.value == 1]
            if not steps:
                continue
            e = _self_attr_name(steps[0].target)
            # the pass for the new epoch: a DataLoader over ``self.<d>`` built in ``m`` or in a
            # method ``m`` hands the advanced epoch to (``self._iter_for(self.epoch, ...)``)
            walked = [m, *(methods[c.func.attr] for c in iter_scope_nodes(m) if isinstance(c, ast.Call)
                           and _self_attr_name(c.func) in methods and methods[c.func.attr] is not m
                           and any(_self_attr_name(n) == e for a in (*c.args, *(k.value for k in c.keywords))
                                   for n in ast.walk(a)))]
            ds = None
            for fn in walked:
                for c in iter_scope_nodes(fn):
                    if isinstance(c, ast.Call) and ctx.sem.call_qualname(c) == "torch.utils.data.DataLoader":
                        ds = _self_attr_name(get_arg(c, 0, "dataset")) or ds
            if ds is not None:
                out.append((cls, m, steps[0], ds))
    return out


def calls_set_epoch_outside_forwarders(sem) -> bool:
    """The module calls ``<x>.set_epoch(...)`` other than inside a function named ``set_epoch``
    (a forwarder passes on an epoch it was given; it does not start one)."""
    for c in sem.calls:
        if isinstance(c.func, ast.Attribute) and c.func.attr == "set_epoch":
            fn = sem.enclosing_function(c)
            if fn is None or fn.name != "set_epoch":
                return True
    return False


def takes_epoch(cls: ast.ClassDef) -> bool:
    """``cls`` is a dataset (it defines ``__getitem__`` or ``__iter__`` and no base of it is named
    like a sampler) and defines ``set_epoch(self, epoch)`` storing the epoch in ``self.<x>``, and another of
    its methods (not ``__init__``) reads ``self.<x>``."""
    names = {f.name for f in cls.body if isinstance(f, FUNC_TYPES)}
    if not names & {"__getitem__", "__iter__"} or any(
            (b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "").endswith("Sampler")
            for b in cls.bases):
        return False  # a dataset (map-style or iterable), not a sampler
    st = next((f for f in cls.body if isinstance(f, FUNC_TYPES) and f.name == "set_epoch"), None)
    if st is None or len(st.args.args) < 2:
        return False
    ep = st.args.args[1].arg
    stored = {_self_attr_name(t) for n in iter_scope_nodes(st) if isinstance(n, ast.Assign)
              and isinstance(n.value, ast.Name) and n.value.id == ep for t in n.targets} - {None}
    if not stored:
        return False
    for f in cls.body:
        if isinstance(f, FUNC_TYPES) and f.name not in ("set_epoch", "__init__"):
            if any(isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load) and _self_attr_name(n) in stored
                   for n in iter_scope_nodes(f)):
                return True
    return False
