"""Path sensitivity for one pattern: a binding that reaches a use only along a path where the same,
unchanged test gave the other answer.

``if is_main: model = unwrap(model)`` then, later in the same block, ``if is_main:
model.save(...)``: plain reaching definitions let the ``model`` bound before the first ``if`` reach
the read (through the first test's false branch), but the read runs only where the test holds, and
where it holds the first ``if`` rebound ``model``. The tests must be spelled the same (up to
``not``), read only names and their attributes (no call: a call may answer differently each time),
and nothing they read may be stored between the two tests."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from .type_guards import spelling

_STABLE = (ast.Name, ast.Attribute, ast.Constant, ast.Compare, ast.BoolOp, ast.UnaryOp, ast.Load,
           ast.cmpop, ast.boolop, ast.unaryop)


def _norm(test, branch: bool):
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _norm(test.operand, not branch)
    return test, branch


def _stable(test) -> bool:
    return all(isinstance(n, _STABLE) for n in ast.walk(test))


def _stored_between(fn, test, start: int, end: int) -> bool:
    """A name or attribute path that ``test`` reads (or a prefix of one) is stored (or deleted)
    on lines ``start`` to ``end`` of ``fn``."""
    reads = {q for n in ast.walk(test) if (q := spelling(n)) is not None}
    for n in ast.walk(fn):
        if isinstance(n, (ast.Name, ast.Attribute)) and not isinstance(n.ctx, ast.Load) \
                and start <= n.lineno <= end and (q := spelling(n)) is not None:
            if any(r == q or r.startswith(q + ".") for r in reads):
                return True
    return False


def _binds(target, name: str) -> bool:
    if isinstance(target, ast.Name):
        return target.id == name
    if isinstance(target, (ast.Tuple, ast.List)):
        return any(_binds(x.value if isinstance(x, ast.Starred) else x, name) for x in target.elts)
    return False


def _rebinds(arm: list, name: str) -> bool:
    """A statement of ``arm`` itself (not one in a nested block) binds ``name``."""
    for st in arm:
        if isinstance(st, ast.Assign) and any(_binds(t, name) for t in st.targets):
            return True
        if isinstance(st, ast.AnnAssign) and st.value is not None and _binds(st.target, name):
            return True
    return False


def _statement(node):
    while node is not None and not isinstance(node, ast.stmt):
        node = parent(node)
    return node


def ruled_out_by_same_test(binding_node, use, name: str) -> bool:
    """The binding of ``name`` made at ``binding_node`` (a node of its statement, in the function
    of ``use``) never reaches ``use``: an ``if`` statement between them in the block around
    ``use`` asks the same unchanged test that ``use`` runs under, on the same branch, and that
    branch rebinds ``name`` (see the module's docstring)."""
    bind = _statement(binding_node)
    if bind is None:
        return False
    fn = parent(bind)
    while fn is not None and not isinstance(fn, (*FUNC_TYPES, ast.Module)):
        fn = parent(fn)
    up = parent(use)
    while up is not None and not isinstance(up, (*FUNC_TYPES, ast.Module)):
        up = parent(up)
    if up is not fn:
        return False  # a use in another function: its tests are not the binding's
    child, p = use, parent(use)
    while p is not None and p is not fn and not isinstance(p, (*FUNC_TYPES, ast.ClassDef, ast.Lambda)):
        if isinstance(p, (ast.If, ast.IfExp)) and child is not p.test and _stable(p.test):
            body = p.body if isinstance(p.body, list) else [p.body]
            want = _norm(p.test, any(child is b for b in body))
            if _earlier_rebind(p, want, bind, name, fn):
                return True
        child, p = p, parent(p)
    return False


def _earlier_rebind(guard, want, bind, name: str, fn) -> bool:
    """An ``if`` before ``guard`` (or before a statement holding it) in the same block, after the
    binding ``bind``, with the test ``want`` whose arm rebinds ``name``."""
    stmt, p = guard if isinstance(guard, ast.stmt) else _statement(guard), None
    key = (ast.dump(want[0]), want[1])
    while stmt is not None and stmt is not fn:
        p = parent(stmt)
        for field in ("body", "orelse", "finalbody"):
            block = getattr(p, field, None)
            if not isinstance(block, list) or not any(s is stmt for s in block):
                continue
            for s in block:
                if s is stmt:
                    break
                if not isinstance(s, ast.If) or s.lineno <= bind.end_lineno:
                    continue
                test, branch = _norm(s.test, True)
                if ast.dump(test) != key[0]:
                    continue
                arm = s.body if branch == key[1] else s.orelse
                if _rebinds(arm, name) and not _stored_between(fn, test, s.lineno, guard.lineno):
                    return True
        if isinstance(p, (ast.For, ast.AsyncFor, ast.While)):
            return False  # a loop's back edge: the binding may come round without the test
        stmt = p if isinstance(p, ast.stmt) else None
    return False
