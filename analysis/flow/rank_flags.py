"""A main-rank test kept in state: a flag whose bindings depend on a main-rank test.

- ``main_flag(ctx, expr, scope, depth, none)``: ``expr`` (a name, ``args.flag``, ``self.flag`` or
  ``self.cfg.out_dir`` read in another method than the constructor that sets it) holds a true
  value (``none``: a value other than None) only on the main rank, or in a run of one process.
  So ``if expr:`` (``if expr is not None:``) is a main-rank guard (``rank_tests.polarity``).

Every store of ``expr`` in its function (for ``self``'s attributes: all of them in ``__init__``,
the test in another method) is one of:

- a killer: a main-rank test (``flag = dist.get_rank() == 0``; not for ``none``), or a false
  constant (``None`` for ``none``) in the branch of a non-main-rank test (``if rank != 0: flag =
  False``), possibly under further ``if``s each of which lets it in only on a non-main rank or
  only on a distributed run (a test on the distributed mode, ``unconditional.passed_only_distributed``,
  or an ``if`` whose body creates the process group);
- a store only the main rank makes: under a main-rank test, or under a test of ``expr`` itself
  (``if cfg.out_dir is not None: cfg.out_dir = os.path.join(cfg.out_dir, name)``);
- any other value (a default ``True``, a configured value), and the value on entry, each followed
  on every straight path to the test by a killer's chain of ``if``s (skipped only on the main rank
  or in a run of one process) or by another store (itself judged).

A flag ``True`` on every rank of some path (``flag = True`` with no such killer after it; a
reset under a main-rank test; a reset under an unrelated ``if``) is not a main-rank flag.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, param_names, parent
from ..torch_api import D
from .assignments import self_attr_value

_INIT = D + "init_process_group"
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_STOPS = (*FUNC_TYPES, ast.Lambda, ast.ClassDef)


def main_flag(ctx, expr: ast.AST, scope: ast.AST, polarity, depth: int = 0, none: bool = False) -> bool:
    """See the module docstring. ``polarity``: ``rank_tests.polarity`` (which asks this module)."""
    if depth > 5 or not isinstance(expr, (ast.Name, ast.Attribute)):
        return False
    memo = ctx.memo("rank_flags.main_flag", dict)
    key = (id(expr), none, depth)
    if key in memo:
        return memo[key]
    memo[key] = False  # recursion guard
    memo[key] = got = _main_flag(ctx, expr, scope, polarity, depth, none)
    return got


def _main_flag(ctx, expr, scope, polarity, depth, none) -> bool:
    if isinstance(expr, ast.Name):
        if not isinstance(scope, FUNC_TYPES):
            return False
        stores = [(b, _bound(b, expr.id)) for b in ctx.sem.assignments(scope).get(expr.id, ())]
        entry = expr.id in param_names(scope)
        if not stores and not entry:
            return False
        return _judge(ctx, expr, scope, stores, entry, expr, polarity, depth, none)
    text = ctx.text(expr)
    chain = _attr_chain(expr)
    if chain is None:
        return False
    if chain[0] != "self":
        # ``args.flag`` stored in this function only: a store anywhere else of an attribute so named
        # (a callee given ``args``) may change it on the way
        if not isinstance(scope, FUNC_TYPES):
            return False
        stores = _attr_stores(ctx, text, chain[-1], lambda st: ctx.sem.enclosing_function(st) is scope)
        return stores is not None and bool(stores) and _judge(ctx, expr, scope, stores, True, expr, polarity, depth, none)
    # ``self.<attr>...``: every store in the constructor, read after it (another method)
    fn = ctx.sem.enclosing_function(expr)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef) or fn.name == "__init__":
        return False
    init = next((m for m in cls.body if isinstance(m, FUNC_TYPES) and m.name == "__init__"), None)
    if init is None:
        return False
    stores = _attr_stores(ctx, text, chain[-1], lambda st: _class_of(st) is cls)
    if not stores or any(ctx.sem.enclosing_function(s) is not init for s, _ in stores):
        return False
    for n in ast.walk(init):  # the constructor runs the testing method itself: before its stores
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == fn.name:
            return False
    if len(chain) > 2 and self_attr_value(ctx, expr.value if len(chain) == 3 else None) is None:
        return False  # ``self.cfg`` rebound elsewhere: another object
    return _judge(ctx, expr, init, stores, True, None, polarity, depth, none)


def _class_of(node):
    p = parent(node)
    while p is not None and not isinstance(p, ast.ClassDef):
        p = parent(p)
    return p


def _attr_chain(expr) -> list[str] | None:
    out = []
    while isinstance(expr, ast.Attribute):
        out.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    out.append(expr.id)
    return out[::-1]


def _bound(st, name: str):
    """The value ``st`` binds ``name`` to (a plain or tuple assignment), else None."""
    from ..semantic import bound_value

    if isinstance(st, ast.Assign):
        return bound_value(st, name)
    if isinstance(st, ast.AnnAssign):
        return st.value
    return None


def _attr_stores(ctx, text: str, attr: str, mine):
    """(statement, value) of each store of ``text`` in the module whose statement is ``mine`` (a
    tuple element's value too); None when the attribute is stored another way there, or, anywhere,
    under another spelling that may name the same object (``args.out_dir`` next to
    ``self.cfg.out_dir``; not ``self.out_dir``). Stores of ``text`` that are not ``mine`` (another
    class's ``self``, another function's ``args``) are left out."""
    index = _attr_index(ctx)
    if index.get(None):
        return None
    out = []
    for st, t, x in index.get(attr, ()):
        if x is None:
            return None
        if ctx.text(x) != text:
            if not text.startswith("self.") or _attr_chain(x) is None or _attr_chain(x)[0] != "self":
                return None
            continue
        if not mine(st):
            continue
        if isinstance(st, ast.AugAssign) or (isinstance(st, ast.AnnAssign) and st.value is None):
            return None
        out.append((st, _element(st, t, x)))
    return out


def _attr_index(ctx) -> dict:
    """attr -> (statement, target, attribute node) of each attribute store of the module; a
    ``setattr`` call stores an unknown attribute (key None: any answer is refused)."""
    def build():
        got: dict = {}
        for n in ctx.sem.walk_order():
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                    for x in ast.walk(t):
                        if isinstance(x, ast.Attribute) and isinstance(x.ctx, ast.Store):
                            got.setdefault(x.attr, []).append((n, t, x))
            elif isinstance(n, ast.Call) and getattr(n.func, "id", None) == "setattr" and len(n.args) > 1:
                a = n.args[1]
                key = a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None
                got.setdefault(key, []).append((n, None, None))
        return got
    return ctx.memo("rank_flags.attr_index", build)


def _element(st, target, x):
    if target is x:
        return st.value
    v = st.value
    if isinstance(target, ast.Tuple) and isinstance(v, ast.Tuple) and len(target.elts) == len(v.elts):
        for te, ve in zip(target.elts, v.elts):
            if te is x:
                return ve
    return None


def _judge(ctx, expr, fn, stores, entry: bool, at, polarity, depth: int, none: bool) -> bool:
    """Every store (and the entry value) is a killer, a main-rank store, or replaced after it;
    some killer depends on the rank. ``at``: the test (None: the end of ``fn``)."""
    text = ctx.text(expr)
    killers, plain, ranked = [], [], False
    for st, v in stores:
        if v is None:
            return False
        if _false_value(v, none):
            killers.append(st)
        elif not none and polarity(ctx, v, fn, depth + 1) is True:
            killers.append(st)
            ranked = True
        elif not _main_store(ctx, st, fn, text, polarity, depth):
            plain.append(st)
    tops = []  # statements that replace the flag's earlier value on every non-main rank
    for k in killers:
        chain = _chain(ctx, k, fn, polarity, depth)
        ranked = ranked or len(chain) > 1
        tops.extend(chain)
    if not ranked:
        return False  # no store depends on the rank: a flag false everywhere is no rank test
    tops.extend(st for st, _ in stores)  # any later store replaces it (judged itself)
    returns = [r for r in iter_scope_nodes(fn) if isinstance(r, ast.Return)] if at is None else []
    for p in [*plain, *([fn] if entry else [])]:
        if not any(_kills(p, k, fn, at, returns) for k in tops if k is not p):
            return False
    return True


def _false_value(v, none: bool) -> bool:
    if not isinstance(v, ast.Constant):
        return False
    return v.value is None if none else not v.value


def _main_store(ctx, st, fn, text: str, polarity, depth: int) -> bool:
    """``st`` runs only on the main rank: under a main-rank test, or in the body of a test of
    the flag itself (``if flag:``, ``if flag is not None and ...:``)."""
    child, p = st, parent(st)
    while p is not None and p is not fn:
        if isinstance(p, ast.If) and child is not p.test:
            if child in p.body and _tests_itself(ctx, p.test, text):
                return True
            pol = polarity(ctx, p.test, fn, depth + 1)
            if (pol is True and child in p.body) or (pol is False and child in p.orelse):
                return True
        child, p = p, parent(p)
    return False


def _tests_itself(ctx, test, text: str) -> bool:
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return any(_tests_itself(ctx, v, text) for v in test.values)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.IsNot) \
            and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value is None:
        test = test.left
    return isinstance(test, (ast.Name, ast.Attribute)) and ctx.text(test) == text


def _chain(ctx, killer, fn, polarity, depth: int) -> list:
    """``killer`` and each ``if`` around it (within ``fn``) whose branch holding it is entered only
    on a non-main rank or only on a distributed run: skipping any of them means the main rank or a
    run of one process. Stops at the first other holder."""
    out = [killer]
    child, p = killer, parent(killer)
    while isinstance(p, ast.If) and p is not fn:
        pol = polarity(ctx, p.test, fn, depth + 1)
        if child in p.body:
            ok = pol is False or _distributed_only(ctx, p, child)
        else:
            ok = child in p.orelse and pol is True
        if not ok:
            break
        out.append(p)
        child, p = p, parent(p)
    return out


def _distributed_only(ctx, if_node: ast.If, child) -> bool:
    """Only a distributed run enters ``if_node``'s body: a test on the distributed mode (also a
    flag bound once to one), or a body that creates the process group before ``child``."""
    from .mode_wraps import _positive

    test = if_node.test
    vals = [test]
    if isinstance(test, ast.Name):
        v = ctx.sem.single_value(test.id, ctx.sem.scope_of(test))
        if v is not None:
            vals.append(v)
    elif isinstance(test, ast.Attribute):
        v = self_attr_value(ctx, test)
        if v is not None:
            vals.append(v)
    if any(_positive(None, ctx, v) for v in vals):
        return True
    for s in if_node.body:
        if s is child:
            break
        if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) and ctx.sem.call_qualname(s.value) == _INIT:
            return True
    return False


def _kills(p, k, fn, at, returns) -> bool:
    """``k`` runs after ``p`` on every straight path from ``p`` to ``at`` (or to the end of
    ``fn``): it sits in a block around ``p`` (``p is fn``: the value on entry, any block that
    always runs), after it, before ``at``, with no loop or ``return`` between them."""
    holder = parent(k)
    if p is fn:
        if holder is not fn:
            return False
    else:
        if not (p.end_lineno < k.lineno):
            return False
        a = parent(p)
        while a is not None and a is not holder:
            if isinstance(a, (*_LOOPS, *_STOPS)):
                return False
            a = parent(a)
        if a is None:
            return False
    if at is not None:
        if not k.end_lineno < at.lineno:
            return False
        a = parent(at)
        while a is not None and a is not holder:
            if isinstance(a, _STOPS):
                return False
            a = parent(a)
        if a is None:
            return False
    start = fn.lineno if p is fn else p.end_lineno
    return not any(start < r.lineno < k.lineno for r in returns)
