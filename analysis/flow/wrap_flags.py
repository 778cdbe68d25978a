"""A flag set together with a wrap: does a read's guard rule that wrap out?

``if rank is not None: self.wrapped = True; self.net = DDP(self.net) else: self.wrapped = False``
and later ``self.net.module.head if self.wrapped else self.net.head``: the bare read runs only
where ``self.wrapped`` is false, and the flag is true wherever that wrap ran (it is set in the
same branch, which always runs with the wrap). Sound only when no other store can give the flag
the value the read needs while the wrapper is there: every other store is a constant of the
read's truth only in the other arm of the ``if`` that holds the wrap (the path that does not wrap),
or a constant of the other truth anywhere. ``self`` flags are followed across the methods of the
class that wraps; a plain name within the wrap's function.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, parent


def guard_atoms(guards_: list) -> list[tuple[ast.AST, bool]]:
    """The tests a list of ``(test, branch)`` guards makes hold (``True``) or fail (``False``): an
    ``and`` that holds holds each of its operands, an ``or`` that fails fails each; ``not`` flips."""
    out, todo = [], list(guards_)
    while todo:
        t, br = todo.pop()
        if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not):
            todo.append((t.operand, not br))
        elif isinstance(t, ast.BoolOp) and isinstance(t.op, ast.And if br else ast.Or):
            todo.extend((v, br) for v in t.values)
        else:
            out.append((t, br))
    return out


def _flag_key(e: ast.AST, fn) -> tuple | None:
    """("self", attr) for ``self.attr`` (``self``: the method's first parameter), ("name", id) for
    a plain name; else None."""
    if isinstance(e, ast.Name):
        return ("name", e.id)
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and fn is not None \
            and fn.args.args and e.value.id == fn.args.args[0].arg:
        return ("self", e.attr)
    return None


def _class_of(fn):
    p = parent(fn) if fn is not None else None
    return p if isinstance(p, ast.ClassDef) else None


def _stores(key: tuple, scopes: list) -> list | None:
    """Every store of the flag in ``scopes``: [(statement, value or None)]; None when one is not a
    plain single-target assignment (an augmented, tuple or ``setattr`` store: not followed)."""
    out = []
    for fn in scopes:
        me = fn.args.args[0].arg if key[0] == "self" and fn.args.args else None
        for n in iter_scope_nodes(fn):
            if key[0] == "self":
                hit = isinstance(n, ast.Attribute) and n.attr == key[1] and isinstance(n.value, ast.Name) \
                    and n.value.id == me and not isinstance(n.ctx, ast.Load)
            else:
                hit = isinstance(n, ast.Name) and n.id == key[1] and not isinstance(n.ctx, ast.Load)
            if not hit:
                continue
            st = parent(n)
            if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and st.targets[0] is n):
                return None
            out.append((st, st.value))
    return out


def _truth(v) -> bool | None:
    return bool(v.value) if isinstance(v, ast.Constant) else None


def _arms(wrap, fn) -> tuple[list, list | None, list]:
    """The wrap's arm (the innermost ``if`` branch around it in ``fn``, else ``fn``'s body), the
    other arm of that ``if`` (None without one), and the blocks from the wrap's statement up to
    its arm (a store directly in one of them always runs with the wrap)."""
    blocks, child, p = [], wrap, parent(wrap)
    while p is not None and p is not fn:
        if isinstance(p, ast.If) and child is not p.test:
            arm = p.body if any(child is s for s in p.body) else p.orelse
            blocks.append(arm)
            return arm, (p.orelse if arm is p.body else p.body), blocks
        for f in ("body", "orelse", "finalbody"):
            blk = getattr(p, f, None)
            if isinstance(blk, list) and any(child is s for s in blk):
                blocks.append(blk)
        if isinstance(p, (ast.Try, ast.While, ast.For, ast.AsyncFor)):
            return [], None, []  # a loop or handler around the wrap: not one run with the store
        child, p = p, parent(p)
    blocks.append(fn.body)
    return fn.body, None, blocks


def flag_excludes_wrap(sem, node, guards_: list, wrap_sem, wrap) -> bool:
    """The read ``node`` runs only where a flag holds a truth (``guards_``: its ``(test, branch)``
    guards) that the flag never has while the wrap ``wrap`` has run."""
    fn = sem.enclosing_function(node)
    wfn = wrap_sem.enclosing_function(wrap)
    if fn is None or wfn is None or not isinstance(wfn, FUNC_TYPES):
        return False
    arm, other, blocks = _arms(wrap, wfn)
    if not blocks:
        return False
    for test, need in guard_atoms(guards_):
        key = _flag_key(test, fn)
        if key is None:
            continue
        if key[0] == "self":
            cls = _class_of(fn)
            if cls is None or sem is not wrap_sem or _class_of(wfn) is not cls \
                    or _flag_key(test, wfn) is None:
                continue
            scopes = [s for s in cls.body if isinstance(s, FUNC_TYPES)]
        else:
            if fn is not wfn:
                continue
            scopes = [fn]
        stores = _stores(key, scopes)
        if not stores:
            continue
        with_wrap = [st for st, v in stores if _truth(v) is (not need) and any(st in b for b in blocks)]
        if not with_wrap:
            continue
        if all(_truth(v) is (not need) or (other is not None and _within(st, other)) for st, v in stores):
            return True
    return False


def _within(st, block: list) -> bool:
    n = st
    while n is not None:
        if any(n is s for s in block):
            return True
        n = parent(n)
    return False
