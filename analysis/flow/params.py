"""What a function's parameter holds when value flow can tell from its callers.

A parameter's *name* (``rank``, ``rank0``, ``is_main``) is only a guess at what it holds; the
callers know. When every call of the function in its module passes a literal constant (or leaves a
constant default), the parameter is the same on every rank, whatever it is called (issue 25: a name
heuristic may only follow the value-flow answer)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, param_defaults, parent
from .calls import call_args


def constant_at_every_call(view, hub, fn: ast.AST, name: str, depth: int = 0) -> bool:
    """Every call of ``fn`` in its module passes a literal constant as ``name`` (or leaves a
    constant default), there is at least one, and ``fn`` is used nowhere else in the module (not
    passed as a value: ``mp.spawn(fn)``, a callback...). Callers in other modules are not seen, so
    a function its module never calls keeps the name's answer. An argument that is itself a
    parameter of the calling function, never rebound there, counts when that parameter is constant
    at every call in turn (``def load(rank0=False): return _inner(rank0)``), a few levels deep."""
    memo = view.memo.setdefault("constant_param", {})
    key = (id(fn), name, depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    got = memo.get(key)
    if got is not None:
        return got
    got = False
    sites = [*hub.call_sites(view, fn), *_subclass_calls(hub, view, fn)] if isinstance(fn, FUNC_TYPES) else []
    if sites and not hub.is_spawn_target(view, fn) and not _used_as_value(view, fn, sites):
        default = _default_of(fn, name)
        got = True
        for c in sites:
            a = next((a for p, a in call_args(c, fn) if p == name), None)
            if a is None:
                if any(isinstance(x, ast.Starred) for x in c.args) or any(k.arg is None for k in c.keywords):
                    got = False  # ``*args`` / ``**kwargs`` may carry it
                    break
                a = default
            if isinstance(a, ast.Constant) or _loop_index(view, a, c):
                continue
            caller = _enclosing_function(c)
            if not (depth < 3 and isinstance(a, ast.Name) and caller is not None and caller is not fn
                    and _is_unbound_param(caller, a.id)
                    and constant_at_every_call(view, hub, caller, a.id, depth + 1)):
                got = False
                break
    memo[key] = got
    return got


def _subclass_calls(hub, view, fn: ast.AST) -> list:
    """``self.m(...)`` in the methods of the module's other classes that run the method ``fn``
    (``resolve_call``: a subclass that inherits it), which ``call_sites`` (its own class) does not
    list."""
    cls = parent(fn)
    if not isinstance(cls, ast.ClassDef):
        return []
    sem = view.sem
    out = []
    for i in sem.callee_index()[1].get(fn.name, ()):
        c = sem.calls[i]
        recv = c.func.value
        if isinstance(recv, ast.Name) and recv.id == "self" and not cls.lineno <= c.lineno <= cls.end_lineno:
            got = hub.resolve_call(view, c)
            if got is not None and got[1] is fn:
                out.append(c)
    return out


def _loop_index(view, a: ast.AST, call: ast.Call) -> bool:
    """``a`` is, at ``call``, only the index of a loop over ``range(...)`` or ``enumerate(...)``
    (``for r in range(world_size): self.add_peers(r, ...)``): the call passes each index in turn,
    the same on every rank that makes that round, not the process's own rank."""
    from .bindings import reaching  # lazy: bindings sits above this module's importers

    if not isinstance(a, ast.Name):
        return False
    kind, evs = reaching(view, a.id, call)
    if kind != "events" or not evs:
        return False
    for e in evs:
        it, t = getattr(e, "iter", None), getattr(e, "target", None)
        if not (isinstance(e, (ast.For, ast.AsyncFor)) and isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                and it.func.id in ("range", "enumerate") and it.func.id not in view.defs
                and it.func.id not in view.imports):
            return False
        first = t.elts[0] if it.func.id == "enumerate" and isinstance(t, ast.Tuple) and t.elts else t
        if not (isinstance(first, ast.Name) and first.id == a.id) or (it.func.id == "enumerate" and first is t):
            return False
    return True


def _default_of(fn: ast.AST, name: str):
    """The default expression of parameter ``name`` of ``fn``, or None."""
    return param_defaults(fn).get(name)


def _used_as_value(view, fn: ast.AST, sites) -> bool:
    """``fn``'s name is read in its module other than as the callee of ``sites``."""
    loads = view.memo.get("name_loads")
    if loads is None:
        loads = {}
        for n in view.sem.walk_order():  # once per module, and only for a rank-named parameter
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                loads[n.id] = loads.get(n.id, 0) + 1
        view.memo["name_loads"] = loads
    callees = sum(1 for c in sites if isinstance(c.func, ast.Name) and c.func.id == fn.name)
    return loads.get(fn.name, 0) > callees


def _enclosing_function(node: ast.AST):
    from ..semantic import parent

    p = parent(node)
    while p is not None and not isinstance(p, FUNC_TYPES):
        p = parent(p)
    return p


def _is_unbound_param(fn: ast.AST, name: str) -> bool:
    """``name`` is a parameter of ``fn`` that no statement of ``fn`` rebinds."""
    a = fn.args
    if name not in {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}:
        return False
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load):
            return False
        if isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
            return False
    return True


_OWN_RANK_QNS = frozenset({"torch.distributed.get_rank", "torch.distributed.distributed_c10d.get_rank"})


def compared_with_own_rank(view, fn: ast.AST, name: str, hub=None, depth: int = 0) -> bool:
    """``fn`` compares its parameter ``name`` with this process's own rank (``if dist.get_rank()
    == name:``, ``!=``), with ``name`` never rebound: the parameter designates a rank (a source, a
    root), the same on every rank; were it the process's own rank, the test would always hold.
    With ``hub``, also when ``fn`` hands the parameter as it is to a project function (this module
    or another) whose parameter is such a designated rank, a few calls deep."""
    memo = view.memo.setdefault("params.compared_with_own_rank", {})
    key = (fn, name, depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    got = memo.get(key)
    if got is not None:
        return got
    memo[key] = False  # recursion guard
    got = False
    if _is_unbound_param(fn, name):
        sem = view.sem
        for n in ast.walk(fn):
            if not (isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], (ast.Eq, ast.NotEq))):
                continue
            a, b = n.left, n.comparators[0]
            for x, y in ((a, b), (b, a)):
                if isinstance(x, ast.Name) and x.id == name and isinstance(y, ast.Call) and not y.args \
                        and (sem.call_qualname(y) or "") in _OWN_RANK_QNS:
                    got = True
            if got:
                break
        if not got and hub is not None and depth < 3:
            got = _passed_to_designated(view, fn, name, hub, depth) or _given_designated(view, fn, name, hub, depth)
    memo[key] = got
    return got


def _given_designated(view, fn, name, hub, depth) -> bool:
    """Every call of ``fn`` in its module (at least one, ``fn`` used nowhere else) passes, as
    ``name``, a parameter of the calling function that designates a rank."""
    sites = hub.call_sites(view, fn)
    if not sites or hub.is_spawn_target(view, fn) or _used_as_value(view, fn, sites):
        return False
    for c in sites:
        a = next((a for p, a in call_args(c, fn) if p == name), None)
        caller = _enclosing_function(c)
        if not (isinstance(a, ast.Name) and caller is not None and caller is not fn
                and compared_with_own_rank(view, caller, a.id, hub, depth + 1)):
            return False
    return True


def _passed_to_designated(view, fn, name, hub, depth) -> bool:
    for n in ast.walk(fn):
        if not isinstance(n, ast.Call) or not any(
                isinstance(a, ast.Name) and a.id == name for a in (*n.args, *(k.value for k in n.keywords))):
            continue
        try:
            target = hub.resolve_call(view, n)
        except Exception:  # pragma: no cover - defensive: a helper of the hub on odd input
            target = None
        if target is None or not isinstance(target[1], FUNC_TYPES) or target[1] is fn:
            continue
        for p, a in call_args(n, target[1]):
            if isinstance(a, ast.Name) and a.id == name and compared_with_own_rank(
                    target[0], target[1], p, hub, depth + 1):
                return True
    return False


def designates_by_default(fn: ast.AST, expr) -> bool:
    """``expr`` (a name or its string) is a parameter of ``fn`` with an integer-constant default, never rebound in ``fn``
    (``def sync(obj, rank: int = 0)``): as a collective's root it designates the rank the callers
    choose, whatever its name; what a call passes decides (``roots.varying_roots``)."""
    name = expr.id if isinstance(expr, ast.Name) else expr
    if not isinstance(fn, FUNC_TYPES) or not isinstance(name, str):
        return False
    d = _default_of(fn, name)
    if not (isinstance(d, ast.Constant) and type(d.value) is int):
        return False
    return not any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store)
                   for n in ast.walk(fn))


def by_name_only(value) -> bool:
    """The value is rank-varying only because a parameter's name says rank (``param_value``'s
    fallback), not by any flow."""
    src = value.src
    return src is not None and not src.via and src.desc.startswith("the process rank from parameter `")


# -- branches no caller takes -----------------------------------------------------------------------

def truth_at_every_call(view, hub, fn: ast.AST, name: str, depth: int = 0, others: bool = False) -> bool | None:
    """The truth value parameter ``name`` of ``fn`` holds at every call: each call of ``fn`` in its
    module passes a literal (or leaves a literal default, or passes a parameter of its own caller
    that holds one truth at every call in turn), all of one truth, there is at least one, and
    ``fn`` is used nowhere else in the module. None when unknown. Only the module's own calls are
    seen, and with ``others`` also the calls in the project's other modules (``hub.other_callers``,
    for a function of the checked file): a caller judges whether a module the project does not
    hold may call ``fn`` (``dead_for_callers``)."""
    memo = view.memo.setdefault("param_truth", {})
    key = (id(fn), name, depth, others)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    if key in memo:
        return memo[key]
    memo[key] = None  # (a recursion through the same parameter answers unknown)
    got: bool | None = None
    sites = [(view, c) for c in hub.call_sites(view, fn)] \
        if isinstance(fn, FUNC_TYPES) and _is_unbound_param(fn, name) else []
    if sites and others:
        more = getattr(hub, "other_callers", None)
        sites += [s for s in (more(view, fn) if more is not None else ()) if s not in sites]
    if sites and not hub.is_spawn_target(view, fn) and not _used_as_value(view, fn, [c for v, c in sites if v is view]):
        default = _default_of(fn, name)
        seen: set[bool] = set()
        for cv, c in sites:
            a = next((a for p, a in call_args(c, fn) if p == name), None)
            if a is None:
                if any(isinstance(x, ast.Starred) for x in c.args) or any(k.arg is None for k in c.keywords):
                    seen = {True, False}  # ``*args`` / ``**kwargs`` may carry it
                    break
                a = default
            if isinstance(a, ast.Constant):
                seen.add(bool(a.value))
                continue
            caller = _enclosing_function(c)
            t = None
            if depth < 3 and isinstance(a, ast.Name) and caller is not None and caller is not fn:
                t = truth_at_every_call(cv, hub, caller, a.id, depth + 1)
            if t is None:
                seen = {True, False}
                break
            seen.add(t)
        if len(seen) == 1:
            got = next(iter(seen))
    memo[key] = got
    return got


def _test_truth(view, hub, fn, test, depth: int = 0, others: bool = False) -> bool | None:
    """What ``test`` (in ``fn``) evaluates to on every call, when it is made of parameters that
    hold one truth at every call (``distributed``, ``not distributed``, ``a and b``)."""
    if depth > 4:
        return None
    if isinstance(test, ast.Name):
        return truth_at_every_call(view, hub, fn, test.id, others=others)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        t = _test_truth(view, hub, fn, test.operand, depth + 1, others)
        return None if t is None else not t
    if isinstance(test, ast.BoolOp):
        ts = [_test_truth(view, hub, fn, v, depth + 1, others) for v in test.values]
        stop = isinstance(test.op, ast.Or)  # ``or`` is settled by one true operand, ``and`` by one false
        if stop in ts:
            return stop
        return (not stop) if all(t is not None for t in ts) else None
    return None


def dead_for_callers(view, hub, node: ast.AST, scripts: bool = False) -> bool:
    """``node`` sits in a branch that no call of its function takes: in the body of ``if flag:``
    (or of ``x if flag else y``) where ``flag`` holds a false value at every call
    (``truth_at_every_call``: ``train(cfg, distributed=False)``), or in the ``else`` of a test
    that is true at every call. Only where the calls the project holds are all the calls
    (``_callers_visible``): a function of a notebook (no module imports a notebook); an
    undecorated module-level function of the checked file that is private to its module
    (``_load``), its calls in the project's other modules counted too; with ``scripts`` (a
    question about the programs the project runs, DDP004's), also such a function of a script (a
    file with an ``if __name__ == "__main__":`` block). Any other function of a ``.py`` file may be
    called by a user's module with a true flag."""
    from ..io import is_notebook

    fn = _enclosing_function(node)
    if fn is None:
        return False
    notebook = is_notebook(getattr(view, "path", "") or "")
    if not notebook and not _callers_visible(view, hub, fn, scripts):
        return False
    child, p = node, parent(node)
    while p is not None and p is not fn:
        if isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            return False  # a nested definition runs when it is called, not on the calls of ``fn``
        if isinstance(p, (ast.If, ast.IfExp)) and child is not p.test:
            body = child in p.body if isinstance(p, ast.If) else child is p.body
            t = _test_truth(view, hub, fn, p.test, others=not notebook)
            if t is not None and t is not body:
                return True
        child, p = p, parent(p)
    return False


def _callers_visible(view, hub, fn: ast.AST, scripts: bool = False) -> bool:
    """Every call of ``fn`` is in the project the check sees: ``fn`` is a module-level function of
    the checked file (its other modules' calls reach ``hub.other_callers``), no decorator hands it
    to a framework that calls it with its own arguments (a CLI command, a registry), and its name is
    private to its module or (``scripts``) its file is a script (an ``if __name__ == "__main__":``
    block: a program, whose own calls decide what it runs)."""
    from .calls import is_main_guard

    if not isinstance(fn, FUNC_TYPES) or fn.decorator_list or not isinstance(parent(fn), ast.Module) \
            or view is not getattr(hub, "main", None) or getattr(hub, "other_callers", None) is None:
        return False
    return fn.name.startswith("_") or scripts and any(is_main_guard(st) for st in view.sem.tree.body)


def literal_truth(sem, test: ast.AST, scope: ast.AST, depth: int = 0) -> bool | None:
    """The truth ``test`` has wherever it runs, when it is made of literals and of names bound once
    in its scope (or the module's) to one: ``is_dist, world = (False, 1)`` binds each name of the
    tuple to its element (``Semantic.single_value``); ``not``, ``and``, ``or`` of such tests. Names
    only: an ``args.x`` option or a config entry may be set at run time. None when unknown."""
    if depth > 4:
        return None
    if isinstance(test, ast.Constant):
        return bool(test.value)
    if isinstance(test, ast.Name):
        if sem.global_stores(test.id):
            return None  # rebound by a function that declares it ``global``
        v = sem.single_value(test.id, scope)
        if v is None or not isinstance(v, (ast.Constant, ast.Name, ast.UnaryOp, ast.BoolOp)):
            return None
        return literal_truth(sem, v, sem.scope_of(v), depth + 1)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        t = literal_truth(sem, test.operand, scope, depth + 1)
        return None if t is None else not t
    if isinstance(test, ast.BoolOp):
        ts = [literal_truth(sem, v, scope, depth + 1) for v in test.values]
        stop = isinstance(test.op, ast.Or)  # ``or`` is settled by one true operand, ``and`` by one false
        if stop in ts:
            return stop
        return (not stop) if all(t is not None for t in ts) else None
    return None


def dead_branch(sem, node: ast.AST, hub=None, view=None, scripts: bool = False) -> bool:
    """``node`` sits in a branch that never runs: in the body of an ``if`` / ``while`` / conditional
    expression of its function (or of the module) whose test is false wherever it runs
    (``literal_truth``: ``is_dist = False`` or a constant tuple unpacked, then ``if is_dist:``), or
    in the ``else`` of one that is true. With ``hub`` (the check's flow analysis; ``view``, the
    module of ``node``, its main one by default), also a branch on a parameter that every call of
    the function leaves at, or sets to, values of one truth (``dead_for_callers``:
    ``def load(path, init_dist=False)`` that no call in the project passes ``True``; ``scripts``:
    also for a function of a script)."""
    if hub is not None and dead_for_callers(view or hub.main, hub, node, scripts):
        return True
    scope = sem.scope_of(node)
    child, p = node, parent(node)
    while p is not None:
        if isinstance(child, ast.stmt) and _after_exit(sem, child, p):
            return True  # below a ``return`` / ``raise`` / ``sys.exit()`` of the same block
        if p is scope:
            break
        if isinstance(p, (ast.If, ast.IfExp, ast.While)) and child is not p.test:
            body = child in p.body if isinstance(p.body, list) else child is p.body
            t = literal_truth(sem, p.test, scope)
            if t is not None and t is not body:
                return True
        child, p = p, parent(p)
    return False


_EXIT_CALLS = frozenset({"sys.exit", "os._exit", "builtins.exit", "builtins.quit"})


def _after_exit(sem, stmt: ast.stmt, block: ast.AST) -> bool:
    """``stmt`` follows, in the same statement list of ``block``, a statement that always leaves it:
    ``return``, ``raise``, ``break``, ``continue``, or a call of ``sys.exit`` / ``os._exit`` / the
    ``exit`` / ``quit`` builtins (not shadowed here) as a statement of its own."""
    for field in ("body", "orelse", "finalbody"):
        stmts = getattr(block, field, None)
        if isinstance(stmts, list) and stmt in stmts:
            return any(_leaves(sem, s) for s in stmts[:stmts.index(stmt)])
    return False


def _leaves(sem, s: ast.stmt) -> bool:
    if isinstance(s, (ast.Return, ast.Raise, ast.Break, ast.Continue)):
        return True
    if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Call)):
        return False
    c = s.value
    qn = sem.call_qualname(c)
    if qn is not None:
        return qn in _EXIT_CALLS
    return isinstance(c.func, ast.Name) and c.func.id in ("exit", "quit") and c.func.id not in sem.functions


def constant_at_call(call_view, call: ast.Call, fn_view, fn: ast.AST, name: str):
    """The literal parameter ``name`` of ``fn`` holds at ``call``: the argument ``call`` passes
    (``torch_api.constant_of`` in the calling module: a literal, a name bound once, ``args.x``...),
    or, when ``call`` omits it, the parameter's default (read in ``fn``'s module:
    ``def start(backend="gloo")`` called as ``start(rank)`` runs with ``"gloo"``). None when
    unknown: a ``*args`` / ``**kwargs`` that may carry it, no default, a value not constant."""
    from ..torch_api import constant_of  # lazy

    if not isinstance(fn, FUNC_TYPES) or not _is_unbound_param(fn, name):
        return None
    a = next((a for p, a in call_args(call, fn) if p == name), None)
    if a is not None:
        return constant_of(call_view.sem, a)
    if any(isinstance(x, ast.Starred) for x in call.args) or any(k.arg is None for k in call.keywords):
        return None
    d = _default_of(fn, name)
    return None if d is None else constant_of(fn_view.sem, d, fn_view.sem.tree)


def constants_at_calls(view, hub, fn: ast.AST, name: str, others: bool = False) -> list | None:
    """The literal parameter ``name`` of ``fn`` holds at each call of ``fn`` in its module
    (``constant_at_call``: passed, or the default left), when every call gives one, there is at
    least one, and ``fn`` is neither spawned nor used as a value in the module; else None.
    ``others``: the calls in the project's other modules count too (``hub.other_callers``, for a
    function of the checked file: ``init_local_pg(backend="gloo")`` in the project's tests)."""
    own = hub.call_sites(view, fn) if isinstance(fn, FUNC_TYPES) else []
    sites = [(view, c) for c in own]
    if others and isinstance(fn, FUNC_TYPES):
        more = getattr(hub, "other_callers", None)
        sites += [s for s in (more(view, fn) if more is not None else ()) if s not in sites]
    if not sites or hub.is_spawn_target(view, fn) or _used_as_value(view, fn, own):
        return None
    out = []
    for cv, c in sites:
        v = constant_at_call(cv, c, view, fn, name)
        if v is None:
            return None
        out.append(v)
    return out


def dead_at_call(call_view, call: ast.Call, fn_view, fn: ast.AST, node: ast.AST) -> bool:
    """``node`` (in ``fn``) sits in a branch that this ``call`` of ``fn`` never takes: on the way
    from ``node`` up to ``fn``, an ``if`` / ``elif`` / conditional expression whose test is made of
    parameters of ``fn`` (never rebound there) that ``call`` writes as literals (or leaves a
    literal default for), and that decides for the other branch
    (``if backend == "nccl":`` when the call passes ``"gloo"``; ``elif algo == "ring":`` when it
    passes ``"zigzag"``). Unknown parts leave the branch live."""
    if not isinstance(fn, FUNC_TYPES):
        return False
    child, p = node, parent(node)
    while p is not None and p is not fn:
        if isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
            return False  # a nested definition runs when it is called, not here
        if isinstance(p, (ast.If, ast.IfExp)) and child is not p.test:
            body = child in p.body if isinstance(p, ast.If) else child is p.body
            t = _test_at_call(call_view, call, fn_view, fn, p.test, 0)
            if t is not None and t is not body:
                return True
        child, p = p, parent(p)
    return False


def dead_in_frame(view, node: ast.AST, frames) -> bool:
    """``node`` (of ``view``) sits in a branch that the last call of ``frames`` (``origins``' frames:
    (function, call, calling view)) never takes: ``dead_at_call`` (``sampler = DistributedSampler(ds)
    if distributed else None`` in a builder called with ``distributed`` left at ``False``)."""
    if not frames or not isinstance(frames[-1], tuple) or len(frames[-1]) != 3:
        return False
    fn, call, call_view = frames[-1]
    return isinstance(call, ast.Call) and dead_at_call(call_view, call, view, fn, node)


def taken_at_call(call_view, call: ast.Call, fn_view, fn: ast.AST, cond) -> bool:
    """The path condition ``cond`` of a statement of ``fn`` (``(if, "body" | "orelse" | "after")``,
    ``flow.lifecycle.conditions``) holds on this ``call`` of ``fn``: the test is made of parameters
    the call writes as literals or leaves at a literal default (``_test_at_call``) and decides for
    that branch (``if distributed:`` with ``def setup(distributed=True)`` called as ``setup(path)``;
    ``after``: the early exit of ``if not distributed: return`` is not taken)."""
    node, branch = cond
    if not isinstance(fn, FUNC_TYPES) or not isinstance(node, (ast.If, ast.IfExp)):
        return False
    t = _test_at_call(call_view, call, fn_view, fn, node.test, 0)
    if t is None:
        return False
    return t is (branch == "body") if branch in ("body", "orelse") else t is False


_NO_VALUE = object()


def _literal(e):
    """The Python value of a literal (a constant, or a tuple / list / set of constants), else
    ``_NO_VALUE``."""
    if isinstance(e, ast.Constant):
        return e.value
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)) and all(isinstance(x, ast.Constant) for x in e.elts):
        return [x.value for x in e.elts]
    return _NO_VALUE


def _param_at_call(call_view, call, fn_view, fn, e):
    """The value the parameter ``e`` (a name, never rebound in ``fn``) holds at ``call`` when the
    call writes it as a literal, or leaves a literal default; else ``_NO_VALUE``. A value only
    known as a command-line default (``args.mode``) is not taken: the run may pass another."""
    if not isinstance(e, ast.Name) or not _is_unbound_param(fn, e.id):
        return _NO_VALUE
    a = next((a for p, a in call_args(call, fn) if p == e.id), None)
    if a is None:
        if any(isinstance(x, ast.Starred) for x in call.args) or any(k.arg is None for k in call.keywords):
            return _NO_VALUE
        a = _default_of(fn, e.id)
    return a.value if isinstance(a, ast.Constant) else _NO_VALUE


def _test_at_call(call_view, call, fn_view, fn, test, depth: int) -> bool | None:
    """What ``test`` (in ``fn``) evaluates to on ``call``, when it is made of parameters bound to
    literals there: ``p``, ``not p``, ``p == lit`` / ``!=`` / ``in (lits)`` / ``not in`` / ``is None``,
    and ``and`` / ``or`` of those; None when unknown."""
    if depth > 4:
        return None
    if isinstance(test, ast.Name):
        v = _param_at_call(call_view, call, fn_view, fn, test)
        return None if v is _NO_VALUE else bool(v)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        t = _test_at_call(call_view, call, fn_view, fn, test.operand, depth + 1)
        return None if t is None else not t
    if isinstance(test, ast.BoolOp):
        ts = [_test_at_call(call_view, call, fn_view, fn, v, depth + 1) for v in test.values]
        stop = isinstance(test.op, ast.Or)  # ``or`` is settled by one true operand, ``and`` by one false
        if stop in ts:
            return stop
        return (not stop) if all(t is not None for t in ts) else None
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right, op = test.left, test.comparators[0], test.ops[0]
        lv = _param_at_call(call_view, call, fn_view, fn, left)
        rv = _literal(right)
        if lv is _NO_VALUE or rv is _NO_VALUE:
            lv, rv = _param_at_call(call_view, call, fn_view, fn, right), _literal(left)
            if lv is _NO_VALUE or rv is _NO_VALUE or isinstance(op, (ast.In, ast.NotIn)):
                return None
            lv, rv = rv, lv  # ``"nccl" == backend``: the same test
        if isinstance(op, (ast.Eq, ast.NotEq)) and not isinstance(rv, list):
            return (lv == rv) is isinstance(op, ast.Eq)
        if isinstance(op, (ast.In, ast.NotIn)) and isinstance(rv, list):
            return (lv in rv) is isinstance(op, ast.In)
        if isinstance(op, (ast.Is, ast.IsNot)) and rv is None:
            return (lv is None) is isinstance(op, ast.Is)
    return None
