"""One-shot iterators (DDP224): which values are generators that one pass uses up (a module's
``parameters()`` / ``named_parameters()`` / ``buffers()`` / ``modules()`` / ``children()``, and the
lazy views built on one: a generator expression over it, ``filter``/``map``/``zip``/``enumerate``/
``iter``/``itertools.chain``), which uses of a name consume it (a ``for``, a list/set/dict
comprehension, ``list``/``sum``/``max``..., a ``*`` unpacking, ``torch.optim``'s constructors and
``torch.nn.utils``' clipping and vector helpers, a project function that consumes the parameter it
binds, across modules), and the uses of one binding that a consumption before them on every path
has left empty: a later consumption in the same block, or one in a loop the binding is outside of.
Parameters are judged at the calls that bind them: ``consumed_twice`` is the summary of a helper."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, bound_value, get_arg, parent
from .bindings import LOOPS, contains, reaching
from .helper_calls import bind_args, resolved

ONE_SHOT_METHODS = frozenset({
    "parameters", "named_parameters", "buffers", "named_buffers", "modules", "named_modules",
    "children", "named_children"})
_LAZY = frozenset({"filter", "map", "zip", "enumerate", "iter", "reversed"})
_LAZY_QN = frozenset({"itertools.chain", "itertools.chain.from_iterable", "itertools.islice"})
_CONSUMING = frozenset({"list", "tuple", "set", "frozenset", "sorted", "sum", "max", "min", "any", "all",
                        "dict"})
_TORCH_UTILS = frozenset({
    "clip_grad_norm_", "clip_grad_norm", "clip_grad_value_", "clip_grads_with_norm_", "_clip_grads_with_norm_",
    "get_total_norm", "_get_total_norm", "parameters_to_vector", "vector_to_parameters"})
_MAX_DEPTH = 4
_SEQUENCES = frozenset({"list", "tuple", "List", "Tuple", "Sequence", "MutableSequence"})


def seq_checked(view, scope, name: str) -> bool:
    """``scope`` asks whether ``name`` is a list or tuple (``isinstance(name, list)``, in an
    ``assert``, an ``if`` that converts it, anywhere in its own body), or makes it one
    (``name = list(name)``, on some path): the code expects a generator there and makes a list of
    it, or refuses it."""
    memo = view.memo.setdefault("exhaust_seq_checked", {})
    got = memo.get(id(scope))
    if got is None:
        got = memo[id(scope)] = _seq_checked_names(scope)
    return name in got


def _seq_checked_names(scope) -> frozenset:
    out = set()
    for n in _own_nodes(scope):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and isinstance(n.value, ast.Call) and isinstance(n.value.func, ast.Name) \
                and n.value.func.id in ("list", "tuple") and n.value.args \
                and isinstance(n.value.args[0], ast.Name) and n.value.args[0].id == n.targets[0].id:
            out.add(n.targets[0].id)  # ``params = list(params)``: the code makes it a list
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "isinstance" \
                and len(n.args) == 2 and isinstance(n.args[0], ast.Name):
            t = n.args[1]
            for e in (t.elts if isinstance(t, ast.Tuple) else (t,)):
                last = e.attr if isinstance(e, ast.Attribute) else e.id if isinstance(e, ast.Name) else None
                if last in _SEQUENCES:
                    out.add(n.args[0].id)
    return frozenset(out)


def _own_nodes(fn):
    """The nodes of ``fn``'s own scope (not in a nested function, class or lambda)."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        n = stack.pop()
        if isinstance(n, (*FUNC_TYPES, ast.ClassDef, ast.Lambda)):
            continue
        yield n
        stack.extend(ast.iter_child_nodes(n))


def _builtin(view, f, names) -> bool:
    """``f`` is a builtin of ``names`` the module does not rebind (no import, def or class of it)."""
    return isinstance(f, ast.Name) and f.id in names and f.id not in view.sem.aliases \
        and f.id not in view.defs and f.id not in view.classes


def one_shot(an, view, expr, depth: int = 0, frame=None):
    """The module-iterator call (``m.parameters()``) that makes ``expr`` a one-shot iterator: the
    call itself, or one that a generator expression or a lazy builtin wraps, or the call of a
    project helper every ``return`` of which gives one; else None. A ``parameters`` method of a
    project class that does not ``yield`` returns something else. ``frame``: (function, call,
    the call's view) when ``expr`` is read in a helper as that call runs it (its parameters are
    the call's arguments)."""
    if depth > _MAX_DEPTH or expr is None:
        return None
    if isinstance(expr, ast.GeneratorExp):
        return one_shot(an, view, expr.generators[0].iter, depth + 1, frame)
    if not isinstance(expr, ast.Call):
        return None
    f = expr.func
    if isinstance(f, ast.Attribute) and f.attr in ONE_SHOT_METHODS:
        if view.sem.call_qualname(expr) is not None:
            return None  # ``torch.nn.Module.parameters(m)`` and the like, or an imported module's function
        if list_returning(view, f.value, expr) or _bound_list(view, f.value, expr, frame):
            return None  # a ``dist.GradBucket``'s ``parameters()`` is a list
        got = resolved(an, view, expr)
        if got is not None and not any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in ast.walk(got[1])):
            return None
        return expr
    if _builtin(view, f, _LAZY) or (view.sem.call_qualname(expr) or "") in _LAZY_QN:
        for a in expr.args:
            got = one_shot(an, view, a, depth + 1, frame)
            if got is not None:
                return got
        return None
    got = resolved(an, view, expr)
    if got is not None and isinstance(got[1], FUNC_TYPES) and _returns_one_shot(an, *got, depth + 1, (got[1], expr, view)):
        return expr  # a project helper that returns one: ``owned = trainable(model)``
    return None


def _returns_one_shot(an, view, fn, depth: int, frame) -> bool:
    """Every ``return`` of ``fn`` (at least one, none bare) gives a one-shot iterator, as the call
    of ``frame`` runs it."""
    rets = [n for n in _own_nodes(fn) if isinstance(n, ast.Return)]
    return bool(rets) and all(r.value is not None and one_shot(an, view, r.value, depth, frame) is not None
                              for r in rets)


def _bound_list(view, recv, at, frame) -> bool:
    """``recv``, a parameter of the helper of ``frame``, is given an argument that
    ``list_returning`` knows for such an object by that call."""
    if frame is None or not isinstance(recv, ast.Name):
        return False
    fn, call, cview = frame
    kind, evs = reaching(view, recv.id, at)
    if kind != "param" or evs is not fn:
        return False
    arg = bind_args(call, fn).get(recv.id)
    return arg is not None and list_returning(cview, arg, call)


# torch types, not modules, whose ``parameters()`` returns a list (torch/_C/_distributed_c10d.pyi:
# ``GradBucket.parameters() -> list[Tensor]``)
_LIST_TYPES = frozenset({"torch.distributed.GradBucket", "torch._C._distributed_c10d.GradBucket"})


def list_returning(view, recv, at) -> bool:
    """``recv`` (the receiver of ``recv.parameters()``) is known to be a torch object whose
    iterator methods return lists, not a module: a parameter annotated with such a type
    (``bucket: dist.GradBucket``), or the bucket parameter of a function that its module
    registers as a DDP communication hook (``ddp.register_comm_hook(state, hook)``: DDP calls
    ``hook(state, bucket)`` with a ``GradBucket``). Unknown receivers are not."""
    if not isinstance(recv, ast.Name):
        return False
    kind, fn = reaching(view, recv.id, at)
    if kind != "param" or not isinstance(fn, FUNC_TYPES):
        return False
    a = fn.args
    for p in (*a.posonlyargs, *a.args, *a.kwonlyargs):
        if p.arg == recv.id and p.annotation is not None:
            ann = p.annotation
            if isinstance(ann, ast.Constant) and isinstance(ann.value, str):  # ``bucket: "dist.GradBucket"``
                try:
                    ann = ast.parse(ann.value, mode="eval").body
                except SyntaxError:
                    return False
            return (view.sem.qualname(ann) or "") in _LIST_TYPES
    return recv.id in comm_hook_buckets(view, fn)


def comm_hook_buckets(view, fn) -> frozenset:
    """The names of ``fn``'s parameters that receive a ``GradBucket``: ``fn`` is the hook of a
    ``register_comm_hook(state, hook)`` call of its module (by name, in the scope that defines it;
    ``self.m`` of a method of the same class; ``functools.partial(fn, ...)``, which binds the
    leading parameters), and the bucket is the parameter after the state."""
    memo = view.memo.setdefault("exhaust_comm_hooks", {})
    got = memo.get(id(fn))
    if got is not None:
        return got
    sem = view.sem
    out = set()
    pos = [p.arg for p in (*fn.args.posonlyargs, *fn.args.args)]
    for c in sem.calls:
        if not (isinstance(c.func, ast.Attribute) and c.func.attr == "register_comm_hook"):
            continue
        hook = get_arg(c, 1, "hook")
        skip = 0
        if isinstance(hook, ast.Call) and (sem.call_qualname(hook) or "") == "functools.partial" and hook.args:
            skip, hook = len(hook.args) - 1, hook.args[0]
        if isinstance(hook, ast.Name) and hook.id == fn.name and _defines_here(sem, fn, c):
            i = 1 + skip
        elif isinstance(hook, ast.Attribute) and isinstance(hook.value, ast.Name) and hook.value.id == "self" \
                and hook.attr == fn.name and isinstance(parent(fn), ast.ClassDef) \
                and contains(parent(fn), c):
            i = 2 + skip  # a method: ``self`` first
        else:
            continue
        if i < len(pos):
            out.add(pos[i])
    got = memo[id(fn)] = frozenset(out)
    return got


def _defines_here(sem, fn, call) -> bool:
    """``fn``'s name, read at ``call``, is ``fn``: both in the scope that defines it."""
    scope = sem.enclosing_function(fn)
    return sem.enclosing_function(call) is scope if scope is not None else isinstance(parent(fn), ast.Module)


def consumes(an, view, use, depth: int = 0) -> bool:
    """Running the expression around ``use`` iterates ``use`` (to its end, or far enough that a
    second pass does not see what the first one took)."""
    p = parent(use)
    if isinstance(p, (ast.For, ast.AsyncFor)):
        return p.iter is use
    if isinstance(p, ast.comprehension):
        if p.iter is not use:
            return False
        comp = parent(p)
        return consumes(an, view, comp, depth) if isinstance(comp, ast.GeneratorExp) else True
    if isinstance(p, (ast.Starred, ast.YieldFrom)):
        return True
    if isinstance(p, ast.keyword):
        p, by_kw = parent(p), True
    else:
        by_kw = False
    if not isinstance(p, ast.Call) or p.func is use:
        return False
    f = p.func
    if _builtin(view, f, _CONSUMING):
        return True
    if _builtin(view, f, _LAZY) or (view.sem.call_qualname(p) or "") in _LAZY_QN:
        return consumes(an, view, p, depth)
    qn = view.sem.call_qualname(p) or ""
    if qn.startswith("torch.nn.utils.") and qn.rsplit(".", 1)[-1] in _TORCH_UTILS:
        return True
    if qn.startswith("torch.optim.") and not qn.startswith("torch.optim.lr_scheduler.") and (
            (not by_kw and p.args and p.args[0] is use) or any(k.value is use and k.arg == "params" for k in p.keywords)):
        return True
    if isinstance(f, ast.Attribute) and f.attr == "extend" and not by_kw:
        return True
    if depth >= _MAX_DEPTH:
        return False
    got = resolved(an, view, p)
    if got is None:
        return False
    fview, fn = got
    for pname, arg in bind_args(p, fn).items():
        if arg is use:
            return bool(param_consumptions(an, fview, fn, pname, depth + 1))
    return False


def _uses(fn, name: str) -> list:
    """The loads of ``name`` in ``fn``'s own scope (not in a nested function or class)."""
    out = [n for n in _own_nodes(fn) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)]
    out.sort(key=lambda n: (n.lineno, n.col_offset))
    return out


def param_consumptions(an, view, fn, pname: str, depth: int = 0) -> list:
    """The uses of parameter ``pname`` of ``fn`` that consume the value the call passed (the
    parameter's own binding reaches them)."""
    memo = an.__dict__.setdefault("_exhaust_params", {})
    key = (id(fn), pname)
    got = memo.get(key)
    if got is None:
        memo[key] = []  # a recursive call consumes nothing more
        if seq_checked(view, fn, pname):
            return []
        got = memo[key] = [u for u in _uses(fn, pname)
                           if reaching(view, pname, u)[0] in ("param", "events+param")
                           and consumes(an, view, u, depth)]
    return got


def _stmt(node):
    n = node
    while n is not None and not isinstance(n, ast.stmt):
        n = parent(n)
    return n


def runs_before(first, second) -> bool:
    """``first``'s statement runs before ``second`` on every path that reaches ``second`` through
    it: ``second`` is in a later statement of a block that holds ``first``'s statement, directly
    or through ``with`` / ``try`` bodies only."""
    x = _stmt(first)
    while x is not None:
        owner = parent(x)
        for field in ("body", "orelse", "finalbody"):
            lst = getattr(owner, field, None)
            if isinstance(lst, list) and x in lst:
                if any(contains(s, second) for s in lst[lst.index(x) + 1:]):
                    return True
                break
        if isinstance(owner, (ast.With, ast.AsyncWith)) or (isinstance(owner, ast.Try) and x in owner.body):
            x = owner
            continue
        return False
    return False


def repeated_in_loop(use, bound_outside) -> ast.AST | None:
    """The loop of ``use``'s function whose body holds ``use`` and none of the bindings
    ``bound_outside`` says reach it, a loop whose body does not end the loop in its own block
    (``break``/``return``/``raise`` at its top level): each round consumes the one iterator again."""
    n, child = parent(use), use
    while n is not None and not isinstance(n, (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)):
        if isinstance(n, LOOPS) and child in n.body and bound_outside(n):
            if not any(isinstance(s, (ast.Break, ast.Return, ast.Raise)) for s in n.body):
                return n
        child, n = n, parent(n)
    return None


def exhausted_uses(an, view, fn, name: str, consumed: list, binds):
    """(first, later, loop) for the consumptions ``consumed`` of ``name`` in ``fn``: a later one
    whose bindings (``binds(use)``) are the first one's and that runs after it, or one in a loop
    its bindings lie outside of (first is later, loop set)."""
    for i, u in enumerate(consumed):
        mine = binds(u)
        loop = repeated_in_loop(u, lambda lp: not any(contains(lp, b) for b in mine if isinstance(b, ast.AST)))
        if loop is not None:
            return u, u, loop
        for v in consumed[i + 1:]:
            if binds(v) == mine and runs_before(u, v):
                return u, v, None
    return None


def consumed_twice(an, view, fn, pname: str, depth: int = 0):
    """(first, later, loop) when ``fn`` uses up its parameter ``pname`` and then consumes it again
    (or in a loop), directly or by passing it to a project function that does; else None."""
    memo = an.__dict__.setdefault("_exhaust_twice", {})
    key = (id(fn), pname)
    if key in memo:
        return memo[key]
    memo[key] = None
    uses = param_consumptions(an, view, fn, pname, depth)

    def binds(u):
        kind, evs = reaching(view, pname, u)
        return (kind, tuple(evs) if isinstance(evs, list) else ())

    got = exhausted_uses(an, view, fn, pname, uses, binds)
    if got is None and depth < _MAX_DEPTH:
        for u in uses:
            c = parent(u)
            c = parent(c) if isinstance(c, ast.keyword) else c
            if not isinstance(c, ast.Call):
                continue
            t = resolved(an, view, c)
            if t is None:
                continue
            for q, arg in bind_args(c, t[1]).items():
                if arg is u and consumed_twice(an, t[0], t[1], q, depth + 1) is not None:
                    got = (u, u, None)
                    break
            if got is not None:
                break
    memo[key] = got
    return got


def one_shot_bindings(an, view, name: str, use) -> list:
    """The module-iterator calls among the bindings of ``name`` that reach ``use``."""
    kind, evs = reaching(view, name, use)
    out = []
    for e in evs or () if isinstance(evs, list) else ():
        if isinstance(e, ast.Assign):
            got = one_shot(an, view, bound_value(e, name))
            if got is not None:
                out.append(got)
    if out and seq_checked(view, view.sem.enclosing_function(use) or view.sem.tree, name):
        return []
    return out
