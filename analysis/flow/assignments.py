"""The plain assignments that give a name its value, for the per-file rules.

``bindings.reaching`` is the flow-aware answer (dominating bindings, conditional re-bindings,
loop-carried ones) that uniformity builds on; the queries here are the simpler, textual ones the
per-file rules were written against, over the same ``Semantic.assignments`` index:

- ``name_binding_kind(ctx, name, scope)``: is ``name`` a parameter, a loop variable, bound once
  (and to what), or bound several times;
- ``reaching_assignment(ctx, name, node)``: the last plain ``name = value`` before ``node``;
- ``dominates(stmt, node)`` / ``stmt_list_of(stmt)``: does ``stmt`` run, unconditionally, before
  ``node`` in the same block structure.

Nothing here walks the tree: parent pointers plus the semantic indexes.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, param_names, parent
from ..semantic import has_param as _is_param  # the flow modules and rules import it from here

_NESTED = (*FUNC_TYPES, ast.Lambda, ast.ClassDef)  # definitions a binding cannot leave


def has_ancestor(node: ast.AST, anc: ast.AST) -> bool:
    """``anc`` is a proper ancestor of ``node`` in the tree (by parent pointers): the one
    "is this node inside that one" test of the flow modules and the rules (``bindings.contains``
    is the source-span test)."""
    p = parent(node)
    while p is not None:
        if p is anc:
            return True
        p = parent(p)
    return False


def under_try(node: ast.AST, scope: ast.AST) -> bool:
    """``node`` sits under a ``try`` (``try``/``except*`` too) inside ``scope``: a failure there
    may be expected and handled."""
    p = parent(node)
    while p is not None and p is not scope:
        if isinstance(p, ast.Try) or p.__class__.__name__ == "TryStar":
            return True
        p = parent(p)
    return False


def name_binding_kind(ctx, name: str, scope: ast.AST):
    """('param' | 'loop' | 'single' | 'multi' | 'none', value-or-None) for ``name`` seen from
    ``scope`` (falls back to module level for names the function does not bind). For 'multi', the
    value is the list of the plain assignments' values when every binding is one, else None."""
    sem = ctx.sem
    while True:
        if isinstance(scope, FUNC_TYPES) or isinstance(scope, ast.Lambda):
            if _is_param(scope, name):
                return "param", None
        binds = sem.assignments(scope).get(name)
        if binds:
            break
        if isinstance(scope, ast.Module):
            return "none", None
        scope = sem.tree
    if any(isinstance(b, (ast.For, ast.AsyncFor)) for b in binds):
        return "loop", None
    if len(binds) == 1:
        return "single", sem.single_value(name, scope)
    vals = []
    for b in binds:
        if isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name):
            vals.append(b.value)
        elif isinstance(b, ast.AnnAssign) and b.value is not None:
            vals.append(b.value)
        else:
            return "multi", None
    return "multi", vals


def reaching_assignment(ctx, name: str, node: ast.AST):
    """The textually last plain assignment of ``name`` before ``node`` in ``node``'s scope (module
    level when the function does not bind the name). None when there is none, or when the name is a
    parameter, or bound by something other than ``name = value``."""
    last = _last_binding_before(ctx.sem, name, node)
    if last is None:
        return None
    if isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.targets[0], ast.Name):
        return last
    if isinstance(last, ast.AnnAssign) and last.value is not None:
        return last
    return None


def _last_binding_before(sem, name: str, node: ast.AST):
    """The textually last binding of ``name`` (``sem.assignments``) before ``node``'s line in its
    scope; a function that does not bind the name (nor has it as a parameter) sees the module's
    last one, wherever it is. None when there is none."""
    scope = sem.scope_of(node)
    assigns = sem.assignments(scope).get(name)
    if not assigns:
        if isinstance(scope, ast.Module) or name in param_names(scope):
            return None
        before = sem.assignments(sem.tree).get(name)  # module-level binding seen from a function: all of them
    else:
        before = [a for a in assigns if a.lineno < node.lineno]
    return before[-1] if before else None


def reaching_value(ctx, name: str, node: ast.AST) -> ast.AST | None:
    """The value the textually last assignment of ``name`` before ``node`` gives it: the right-hand
    side of ``name = value`` (``reaching_assignment``), or the matching element of a tuple
    assignment (``a, name = x, value``, nested tuples and lists too, no starred targets)."""
    st = reaching_assignment(ctx, name, node)
    if st is not None:
        return st.value
    last = _last_binding_before(ctx.sem, name, node)
    if not (isinstance(last, ast.Assign) and len(last.targets) == 1):
        return None
    target, value = last.targets[0], last.value
    while isinstance(target, (ast.Tuple, ast.List)):
        if not isinstance(value, (ast.Tuple, ast.List)) or len(value.elts) != len(target.elts) \
                or any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts)):
            return None
        for t, v in zip(target.elts, value.elts):
            if any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(t)):
                target, value = t, v
                break
        else:
            return None
    return value if isinstance(target, ast.Name) and target.id == name else None


def unpacked_call(ctx, name: str, node: ast.AST) -> ast.Call | None:
    """The call whose result the textually last assignment of ``name`` before ``node`` unpacks
    into it (``fd, name = tempfile.mkstemp()``: a flat tuple or list of names), else None."""
    last = _last_binding_before(ctx.sem, name, node)
    if isinstance(last, ast.Assign) and len(last.targets) == 1 and isinstance(last.value, ast.Call):
        t = last.targets[0]
        if isinstance(t, (ast.Tuple, ast.List)) and any(isinstance(e, ast.Name) and e.id == name for e in t.elts):
            return last.value
    return None


def stmt_list_of(node: ast.stmt) -> tuple[ast.AST, list[ast.stmt]] | None:
    """(the parent, the statement list holding ``node``), or None."""
    p = parent(node)
    if p is None:
        return None
    for field in ("body", "orelse", "finalbody", "handlers"):
        lst = getattr(p, field, None)
        if isinstance(lst, list) and node in lst:
            return p, lst
    return None


def dominates(stmt: ast.stmt, node: ast.AST) -> bool:
    """``stmt`` runs, unconditionally, before ``node`` in the same scope: it sits earlier in a block
    that contains ``node`` (so an ``if`` around ``stmt`` alone makes it not dominate)."""
    got = stmt_list_of(stmt)
    if got is None:
        return False
    _, lst = got
    n = node
    while n is not None:
        if n in lst:
            return lst.index(n) > lst.index(stmt)
        if isinstance(n, _NESTED):
            return False
        n = parent(n)
    return False


def self_attr_value(ctx, attr: ast.AST):
    """The value of ``self.<attr>`` when the class holding ``attr`` assigns it exactly once, by a
    plain ``self.<attr> = value`` (no augmented, tuple or ``setattr`` store, no other method
    rebinding it); None otherwise. One walk of the class per check (memoised)."""
    if not (isinstance(attr, ast.Attribute) and isinstance(attr.value, ast.Name) and attr.value.id == "self"):
        return None
    cls = None
    p = parent(attr)
    while p is not None:
        if isinstance(p, ast.ClassDef):
            cls = p
            break
        p = parent(p)
    if cls is None:
        return None
    stores = ctx.memo(("assignments.self_stores", id(cls)), lambda: _self_stores(cls))
    got = stores.get(attr.attr)
    if not got or len(got) != 1 or got[0] is None:
        return None
    return got[0]


def _self_stores(cls: ast.ClassDef) -> dict[str, list]:
    """attr -> the values of plain ``self.attr = value`` stores in the class (None for any other
    kind of store; a name given as a string constant, ``setattr(self, "attr", ...)``, counts too)."""
    out: dict[str, list] = {}
    for n in ast.walk(cls):
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in n.targets if isinstance(n, ast.Assign) else [n.target]:
                for x in ast.walk(t):
                    if isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and x.value.id == "self" \
                            and isinstance(x.ctx, ast.Store):
                        plain = isinstance(n, ast.Assign) and x is t and n.value is not None
                        out.setdefault(x.attr, []).append(n.value if plain else None)
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
            out.setdefault(n.value, []).append(None)
    return out


def values_through(sem, fn: ast.AST, through: ast.AST, name: str, site: ast.AST) -> list | None:
    """The values of the bindings of ``name`` in ``fn`` that may reach ``site`` on a path through
    ``through``: each plain ``name = value`` before ``site`` except those in the arm of an ``if``
    (around ``through``) that the path skips (``s = None`` in the arm of ``if deepspeed:``,
    ``through`` in its ``else``, with ``s = Scaler()`` nested there): two variables set together in
    one if/else. None when ``name`` is a parameter, has another kind of store, none before
    ``site``, or a binding after ``site`` in a loop around it (it may come round)."""
    binds = sem.assignments(fn).get(name)
    if not binds or name in param_names(fn):
        return None
    skipped, child, p = [], through, parent(through)
    while p is not None and p is not fn:
        if isinstance(p, ast.If) and child is not p.test:
            skipped.extend(p.orelse if any(child is s for s in p.body) else p.body)
        child, p = p, parent(p)
    looped, a = False, parent(site)
    while a is not None and a is not fn and not looped:
        looped, a = isinstance(a, (ast.For, ast.AsyncFor, ast.While)), parent(a)
    vals = []
    for b in binds:
        if not (isinstance(b, ast.Assign) and len(b.targets) == 1 and isinstance(b.targets[0], ast.Name)):
            return None
        if any(b is s or has_ancestor(b, s) for s in skipped):
            continue
        if (b.lineno, b.col_offset) >= (site.lineno, site.col_offset):
            if looped:
                return None
            continue
        vals.append(b.value)
    return vals or None
