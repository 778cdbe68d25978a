"""Which parameters of a function may reach what it returns.

The uniformity evaluator cannot always say what a project function returns (a value read from a
file, a field of an object it does not model). It then takes the call's result to vary like its
arguments: a conservative join. That join is too coarse when a rank-varying argument only *receives*
data: ``load_checkpoint(path, ddp_model)[0]`` loads the file into the model (placed on this rank's
device) and returns the epoch read from the file, which is the same on every rank.

This module answers the narrower question by a backward slice over names, from the ``return``
values: a name is in the slice when something in the slice may be computed from it. Scopes are
ignored (a nested helper's names count as the function's own), so the slice can only grow:

- an assignment (``=``, ``+=``, annotated, walrus, ``for`` and ``with`` targets, comprehension
  targets) whose target's root name is in the slice adds every name of its value (and of the
  target's own subscripts and attributes);
- a plain call (``rec(nested, "", flat)``) with a name of the slice among its arguments may fill any
  of them from the others: it adds every name it holds;
- a method call whose receiver's root is in the slice (``flat.update(nested)``) adds every name of
  the call; one whose only link to the slice is an argument (``model.load_state_dict(ckpt)``) reads
  that argument and adds nothing;
- the test of an ``if``, ``while`` or conditional expression that holds a ``return`` or an assignment
  of a name in the slice adds its names (what is returned depends on the branch taken).

A name read only by a type test (``isinstance(t, DTensor)``, ``hasattr``, ``callable``, ``type``)
does not enter the slice from a returned or assigned value: the answer is a fact of the value's
type (set by the mesh layout, the same on every rank), not computed from its contents.

A ``global``/``nonlocal`` statement, a ``yield`` or a function too large to slice gives None:
unknown, and the caller keeps the conservative join.

The same fixpoint, over plain assignments alone, is ``names_reaching``: the names whose values reach
given expressions (a ``backward`` call's receiver and arguments, for ``wrapped`` and the training
rules).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, param_names

_MAX_NODES = 20_000


def params_reaching_return(view, fn: ast.AST) -> frozenset | None:
    """The parameters of ``fn`` (in ``view``) that may flow into a value it returns; None when it
    cannot tell."""
    if not isinstance(fn, FUNC_TYPES):
        return None
    memo = view.memo.setdefault("return_deps", {})
    key = id(fn)
    if key in memo:
        return memo[key]
    got = memo[key] = _slice(fn)
    return got


def reaching_args(call: ast.Call, target) -> list[ast.AST]:
    """The arguments of ``call`` to ``target`` = (view, function) that may reach what it returns:
    those passed to a parameter in its slice, and every argument no parameter receives by name
    (``*args``, ``**kwargs``, extra positional ones); all of them when the slice is unknown."""
    args = [*call.args, *(k.value for k in call.keywords)]
    deps = params_reaching_return(*target)
    if deps is None:
        return args
    from .calls import call_args  # lazy: calls imports the evaluator's neighbours

    pairs = call_args(call, target[1])
    passed = {id(a) for _, a in pairs}
    return [a for name, a in pairs if name in deps] + [a for a in args if id(a) not in passed]


def names_in(node: ast.AST | None) -> set[str]:
    """The names ``node`` holds (read or stored)."""
    if node is None:
        return set()
    return {n.id for n in ast.walk(node) if n.__class__ is ast.Name}


# builtins whose result is a fact about the type of their argument, not a value computed from it
_TYPE_TESTS = frozenset({"isinstance", "issubclass", "hasattr", "callable", "type", "id"})


def value_names(node: ast.AST | None) -> set[str]:
    """``names_in`` less the names read only by a type test (``isinstance(t, DTensor)``): whether a
    value is a DTensor is not computed from its contents, so it does not carry them into a result."""
    if node is None:
        return set()
    out: set[str] = set()
    work = [node]
    while work:
        n = work.pop()
        if n.__class__ is ast.Name:
            out.add(n.id)
        elif n.__class__ is ast.Call and n.func.__class__ is ast.Name and n.func.id in _TYPE_TESTS:
            continue
        work.extend(ast.iter_child_nodes(n))
    return out


def _root(t: ast.AST) -> list[str]:
    """The names a store into target ``t`` changes (``a``, ``a.b[i]`` -> ``a``, ``a, *b`` -> both)."""
    if isinstance(t, (ast.Tuple, ast.List)):
        return [r for e in t.elts for r in _root(e)]
    if isinstance(t, ast.Starred):
        return _root(t.value)
    while isinstance(t, (ast.Attribute, ast.Subscript)):
        t = t.value
    return [t.id] if isinstance(t, ast.Name) else []


def _holds_store_of(node: ast.AST, live: set[str]) -> bool:
    for n in ast.walk(node):
        if n.__class__ is ast.Return:
            return True
        if isinstance(n, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(r in live for t in targets for r in _root(t)):
                return True
    return False


def target_names(stmt: ast.AST) -> set[str]:
    """The names in the targets of an assignment statement (``a[i] = v``: ``a`` and ``i``)."""
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    return {n.id for t in targets for n in ast.walk(t) if n.__class__ is ast.Name}


def names_reaching(seeds, stmts) -> frozenset:
    """The names whose values reach one of the expressions ``seeds``: the names they hold, and,
    backwards through the assignments ``stmts`` (``=``, ``+=``, annotated; one without a value
    is skipped) whose targets hold one of them, the names their values hold (a superset: order and
    kills are ignored)."""
    live: set[str] = set()
    for e in seeds:
        live |= names_in(e)
    if not live:
        return frozenset()
    return frozenset(_grow(live, [(target_names(s), names_in(s.value)) for s in stmts if s.value is not None]))


def _grow(live: set[str], edges: list) -> set[str]:
    """``live`` grown, to a fixpoint, by the names of each ``(triggers, names)`` edge one of whose
    triggers it holds (a store: its targets' names, its value's names)."""
    changed = True
    while changed:
        changed = False
        for triggers, names in edges:
            if not names <= live and any(t in live for t in triggers):
                live |= names
                changed = True
    return live


def _slice(fn: ast.AST) -> frozenset | None:
    live = _live(fn, None, yields=False)
    return None if live is None else frozenset(p for p in param_names(fn) if p in live)


def output_names(fn: ast.AST, seeds=None) -> frozenset | None:
    """The names of ``fn`` whose values may reach what it returns or yields (or, given ``seeds``,
    those expressions of its body instead), by the slice ``params_reaching_return`` takes; None
    when it cannot tell (a ``global``/``nonlocal`` statement, a function too large)."""
    live = _live(fn, seeds, yields=True)
    return None if live is None else frozenset(live)


def _live(fn: ast.AST, seeds, yields: bool) -> set | None:
    nodes = []
    for n in ast.walk(fn):
        nodes.append(n)
        if len(nodes) > _MAX_NODES:
            return None
        if isinstance(n, (ast.Global, ast.Nonlocal)) or not yields and isinstance(n, (ast.Yield, ast.YieldFrom)):
            return None
    if isinstance(fn, (*FUNC_TYPES, ast.Lambda)):
        nodes = nodes[1:]  # the function itself: its decorators and defaults are not its body
    live: set[str] = set()
    for e in seeds or ():
        live |= names_in(e)
    for n in nodes if seeds is None else ():
        if n.__class__ in (ast.Return, ast.Yield, ast.YieldFrom):
            live |= value_names(n.value)
    # (targets, value names) of every store; calls; conditional nodes
    stores: list[tuple[list[str], set[str]]] = []
    calls: list[tuple[bool, set[str], set[str]]] = []  # (method call, receiver root names, all names)
    tests: list[ast.AST] = []
    for n in nodes:
        t = n.__class__
        if t is ast.Assign:
            stores.append(([r for x in n.targets for r in _root(x)],
                           value_names(n.value) | {m for x in n.targets for m in names_in(x)}))
        elif t is ast.AugAssign or (t is ast.AnnAssign and n.value is not None):
            stores.append((_root(n.target), names_in(n.value) | names_in(n.target)))
        elif t is ast.NamedExpr:
            stores.append((_root(n.target), names_in(n.value)))
        elif t in (ast.For, ast.AsyncFor, ast.comprehension):
            stores.append((_root(n.target), names_in(n.iter)))
        elif t in (ast.With, ast.AsyncWith):
            for it in n.items:
                if it.optional_vars is not None:
                    stores.append((_root(it.optional_vars), names_in(it.context_expr)))
        elif t is ast.Call:
            f = n.func
            method = isinstance(f, ast.Attribute)
            calls.append((method, set(_root(f.value)) if method else set(), names_in(n)))
        elif t in (ast.If, ast.While, ast.IfExp):
            tests.append(n)
    edges = stores + [(recv if method else names, names) for method, recv, names in calls]
    while True:
        before = len(live)
        _grow(live, edges)
        for n in tests:
            if n.test is not None and not value_names(n.test) <= live and (
                    isinstance(n, ast.IfExp) and names_in(n) & live or _holds_store_of(n, live)):
                live |= value_names(n.test)
        if len(live) == before:
            break
    return live
