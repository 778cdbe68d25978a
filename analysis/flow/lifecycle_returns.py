"""A destroy that a helper's non-init returns switch off (``lifecycle``'s events, read with the
values a project function returns on the paths where it does not init the group): DDP113."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, Semantic, parent
from .lifecycle import INIT


def skipped_without_init(hub, view, init, destroy) -> bool:
    """``init`` is a call of a project function that inits the group on some of its paths only
    (``rank, world, device = setup()``, where ``setup`` returns ``0, 1, dev`` before its
    ``init_process_group``), ``destroy`` runs under path conditions of the caller: every ``return``
    of the helper that no init comes before gives values (bound by the call's assignment: a name,
    or a tuple unpacked element by element) under which one of the destroy's conditions is false
    (``distributed = world > 1`` then ``if distributed: destroy_process_group()``; a flag returned
    after ``if flag: init_process_group(...)``, false wherever that init was skipped). Then the destroy
    never runs without the group. False whenever in doubt (a fall-through end, a value that is no
    constant, a condition not evaluated)."""
    if init.where is None:
        return False
    guards = []  # the ``if`` branches around the destroy (any test: its value is computed below)
    child, p = destroy.call, parent(destroy.call)
    while p is not None and not isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)):
        if isinstance(p, ast.If) and child is not p.test:
            guards.append((p, "body" if child in p.body else "orelse"))
        child, p = p, parent(p)
    if not guards:
        return False
    tv, fn = init.where
    if not isinstance(fn, FUNC_TYPES):
        return False
    st = parent(init.call)
    if not isinstance(st, ast.Assign) or st.value is not init.call or len(st.targets) != 1:
        return False
    target = st.targets[0]
    rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and Semantic.scope_of(n) is fn]
    if not rets or not fn.body or not isinstance(fn.body[-1], (ast.Return, ast.Raise)):
        return False  # it may fall off its end (None) or return from a nested path not read here
    plain = [r for r in rets if not _after_init(tv.sem, r, fn)]
    if not plain:
        return False
    for r in plain:
        env = _bind(target, r.value)
        if env is None:
            return False
        off = _skipped_flags(tv.sem, r, fn)  # ``if use_ddp: init(...)`` skipped: ``use_ddp`` is false here
        env = {k: (ast.Constant(False) if isinstance(v, ast.Name) and v.id in off else v) for k, v in env.items()}
        if not any(_cond_false(view, st, c, env) for c in guards):
            return False
    return True


def _after_init(sem, node, fn) -> bool:
    """An ``init_process_group(...)`` statement comes before ``node`` in one of its enclosing
    blocks (it ran on every path to ``node``)."""
    child, p = node, parent(node)
    while p is not None:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(p, field, None)
            if isinstance(block, list) and child in block:
                for s in block[: block.index(child)]:
                    if isinstance(s, ast.Expr) and isinstance(s.value, ast.Call) \
                            and (sem.call_qualname(s.value) or "") == INIT:
                        return True
        if p is fn:
            return False
        child, p = p, parent(p)
    return False


def _skipped_flags(sem, node, fn) -> set:
    """The names ``n`` of the ``if n: ...`` statements before ``node`` in its enclosing blocks whose
    body makes ``init_process_group(...)`` as a statement of its own (no ``else``), ``n`` not bound
    again between: on a path that reaches ``node`` without the init, ``n`` is false there."""
    out = set()
    child, p = node, parent(node)
    while p is not None:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(p, field, None)
            if isinstance(block, list) and child in block:
                before = block[: block.index(child)]
                for j, s in enumerate(before):
                    if isinstance(s, ast.If) and isinstance(s.test, ast.Name) and not s.orelse and any(
                            isinstance(b, ast.Expr) and isinstance(b.value, ast.Call)
                            and (sem.call_qualname(b.value) or "") == INIT for b in s.body) and not any(
                            isinstance(t, ast.Name) and t.id == s.test.id and isinstance(t.ctx, ast.Store)
                            for later in (*s.body, *before[j + 1:]) for t in ast.walk(later)):
                        out.add(s.test.id)
        if p is fn:
            return out
        child, p = p, parent(p)
    return out


def _bind(target, value) -> dict | None:
    """name -> the constant the call's assignment gives it on this return (None: not bound)."""
    if value is None:
        return None
    if isinstance(target, ast.Name):
        return {target.id: value}
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
            and len(target.elts) == len(value.elts) \
            and not any(isinstance(x, ast.Starred) for x in (*target.elts, *value.elts)):
        out = {}
        for t, v in zip(target.elts, value.elts):
            if isinstance(t, ast.Name):
                out[t.id] = v
        return out
    return None


def _cond_false(view, bind_stmt, cond, env) -> bool:
    """The path condition ``cond`` ((if, branch)) does not hold with the names the call binds set
    to ``env``'s values."""
    node, branch = cond
    if branch not in ("body", "orelse"):
        return False
    val = _const_eval(view, node.test, bind_stmt, env, 0)
    if val is None:
        return False
    return (not val) if branch == "body" else bool(val)


_CMP = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
        ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}


def _const_eval(view, e, bind_stmt, env, depth: int):
    """The value of ``e`` (a constant, a name the call binds, a name bound once to such an
    expression, a comparison, ``not``, ``and`` / ``or``), or None."""
    from .bindings import reaching

    if depth > 4:
        return None
    if isinstance(e, ast.Constant) and isinstance(e.value, (int, bool)):
        return e.value
    if isinstance(e, ast.UnaryOp) and isinstance(e.operand, ast.Constant) and isinstance(e.op, ast.USub):
        v = e.operand.value
        return -v if isinstance(v, int) else None
    if isinstance(e, ast.Name):
        kind, evs = reaching(view, e.id, e)
        if kind != "events" or not evs or len(evs) != 1:
            return None
        b = evs[0]
        if b is bind_stmt:
            v = env.get(e.id)
            return None if v is None or isinstance(v, ast.Name) else _const_eval(view, v, None, {}, depth + 1)
        if isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name):
            return _const_eval(view, b.value, bind_stmt, env, depth + 1)
        return None
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.Not):
        v = _const_eval(view, e.operand, bind_stmt, env, depth + 1)
        return None if v is None else not v
    if isinstance(e, ast.BoolOp):
        vals = [_const_eval(view, x, bind_stmt, env, depth + 1) for x in e.values]
        if isinstance(e.op, ast.And):
            return False if any(v is not None and not v for v in vals) else (True if all(vals) else None)
        return True if any(v for v in vals) else (False if all(v is not None for v in vals) else None)
    if isinstance(e, ast.Compare) and len(e.ops) == 1 and type(e.ops[0]) in _CMP:
        a = _const_eval(view, e.left, bind_stmt, env, depth + 1)
        b = _const_eval(view, e.comparators[0], bind_stmt, env, depth + 1)
        if a is None or b is None:
            return None
        return _CMP[type(e.ops[0])](a, b)
    return None
