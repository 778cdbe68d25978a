"""The order of a class's ``self.<attr>`` bindings against a read of the attribute in one of its
methods: the binding of the read's own method that runs before it on every path
(``dominating_binding``), the bindings of that method that may still give the value read
(``may_reach``: statement order, or a loop around both), and a method that runs only from
another one, before that one's binding (``runs_only_before``). ``wrapped.py`` asks it which
``self.model = DDP(self.model)`` a read of ``self.model`` may see (DDP210)."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from .assignments import has_ancestor
from .bindings import contains
from .calls import call_sites_here
from .class_chains import self_bindings
from .origins import _attr_path
from .viewctx import view_ctx


def dominating_binding(fn, attr: str, at, base: str = "self", binds=None):
    """The last ``self.<attr> = ...`` statement of ``fn`` that runs before ``at`` on every path
    through it: in the statement list of ``at`` or of one of its enclosing statements, before
    them (``self.m = Net()`` two lines above ``self.m.layers``); None when no binding does.
    ``base``: of ``<base>.<attr>`` (``args.local_rank``), ``fn`` then may be the module; ``binds(st)``:
    another statement that binds it (a call of a helper that stores into its parameter's attribute)."""
    if fn is None:
        return None
    best, node = None, at
    while node is not None and node is not fn:
        up = parent(node)
        if up is None:
            return best
        for field in ("body", "orelse", "finalbody"):
            block = getattr(up, field, None)
            if isinstance(block, list) and node in block:
                for st in reversed(block[:block.index(node)]):
                    if isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None and any(
                            _attr_path(t, attr, base) is not None
                            for t in (st.targets if isinstance(st, ast.Assign) else [st.target])) or (
                            binds is not None and binds(st)):
                        best = st if best is None or st.lineno > best.lineno else best
                        break
        # a closure runs when called; a callback handed to a method of the class, ``self.m(lambda: ...)``, there
        call = parent(up) if isinstance(up, ast.Lambda) else None
        call = parent(call) if isinstance(call, ast.keyword) else call
        if isinstance(up, FUNC_TYPES + (ast.ClassDef,)) or call is not None and not (
                isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                and call.func.value.id == "self"):
            return best
        node = up
    return best


def may_reach(st, at) -> bool:
    """A binding statement ``st`` of the function that reads at ``at`` may give the value read
    there: it runs before the read (statement order; the read inside ``st``'s own value comes
    first), or a loop of that function holds both (the next round reads it)."""
    if not contains(st, at) and (st.lineno, st.col_offset) < (at.lineno, at.col_offset):
        return True
    node = parent(at)
    while node is not None and not isinstance(node, FUNC_TYPES + (ast.Lambda, ast.ClassDef)):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and has_ancestor(st, node):
            return True
        node = parent(node)
    return False


def own_bindings(fn, attr: str, at) -> tuple:
    """The ``self.<attr>`` binding statements of ``fn`` itself that may give the value read at
    ``at`` (``may_reach``)."""
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef):
        return ()
    return tuple(parent(val) for m, val, _p in self_bindings(cls, attr) if m is fn and may_reach(parent(val), at))


def runs_only_before(view, fn, m, st) -> bool:
    """Every call of method ``fn`` in its module is a ``self.fn(...)`` of method ``m`` that runs
    before ``m``'s statement ``st`` (and no loop of ``m`` brings it round again), and the module
    names ``fn`` nowhere else: ``fn`` reads what was there before ``st``."""
    sites = call_sites_here(view_ctx(view), fn, strict=True)
    return bool(sites) and all(view.sem.enclosing_function(c) is m and not may_reach(st, c) for c in sites)


def still_reaches(st, last, at) -> bool:
    """``st`` (a binding statement) may still give the value read at ``at`` once ``last`` ran:
    it is ``last``, it runs between the two, or it is in a loop around ``at`` that ``last`` is
    outside of (the next iteration reads it)."""
    if st is last:
        return True
    if st is None:
        return False
    if (last.lineno, last.col_offset) < (st.lineno, st.col_offset) < (at.lineno, at.col_offset):
        return True
    node = parent(at)
    while node is not None and not isinstance(node, FUNC_TYPES + (ast.Lambda, ast.ClassDef)):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
            if has_ancestor(last, node):
                return False
            if has_ancestor(st, node):
                return True
        node = parent(node)
    return False
