"""Roots of rooted collectives (``broadcast``'s ``src``, ``reduce``'s ``dst``...) as a call runs
a helper: the root inside the helper (or a helper it calls) that is rank-varying only because of
what the call passes it (``sync_weights(w, rank)`` with ``dist.broadcast(t, src=owner)``).
Mixed into the hub."""
from __future__ import annotations

import ast

from ..torch_api import D
from .calls import ROOTS, on_subgroup, root_arg, scope_calls
from .context import call_context
from .params import by_name_only, designates_by_default


class Roots:
    def rooted_calls(self, view, fn: ast.AST) -> list:
        """(call, op, root expression) of the rooted collectives directly in ``fn`` (default group)."""
        memo = view.memo.setdefault("rooted", {})
        got = memo.get(id(fn))
        if got is None:
            got = []
            sem = view.sem
            for c in scope_calls(view, fn):
                qn = sem.call_qualname(c) or ""
                if not qn.startswith(D) or qn[len(D):] not in ROOTS:
                    continue
                op = qn[len(D):]
                if on_subgroup(c, op):
                    continue
                root = root_arg(c, op)
                if root is not None:
                    got.append((c, op, root))
            memo[id(fn)] = got
        return got

    def varying_roots(self, view, call: ast.Call, target, pctx=None) -> list:
        """The roots inside ``target`` (and the helpers it calls, one level) that are rank-varying
        as ``call`` runs it, though not on their own: (callee view, collective call, op, root,
        value) for each."""
        tv, fn = target
        rooted = self.rooted_calls(tv, fn)
        inner = self._rooted_callees(tv, fn) if pctx is None else ()
        if not rooted and not inner:
            return []
        ctx = call_context(self, view, call, target, pctx, want_wraps=False)
        if ctx is None:
            return []
        ev, base = self.evaluator(tv, ctx), self.evaluator(tv)
        out = []
        for c, op, root in rooted:
            v = ev.value(root)
            if not v.varying:
                continue
            b = base.value(root)
            # varying on its own, unless only by its name as a parameter with a constant default
            # (``def sync(obj, rank=0)``): that parameter designates the root the call chooses
            if not b.varying or (by_name_only(b) and designates_by_default(tv.sem.enclosing_function(c), root)):
                out.append((tv, c, op, root, v))
        for c, t2 in inner:
            out.extend(self.varying_roots(tv, c, t2, ctx))
        return out

    def _rooted_callees(self, view, fn: ast.AST) -> list:
        """(call, target) of the calls in ``fn`` to project functions with a rooted collective."""
        memo = view.memo.setdefault("rooted_callees", {})
        got = memo.get(id(fn))
        if got is None:
            got = memo[id(fn)] = []
            defs, classes, imports = view.defs, view.classes, view.imports
            for c in scope_calls(view, fn):
                f = c.func
                if not (c.args or c.keywords):
                    continue
                if f.__class__ is ast.Name:
                    if f.id not in defs and f.id not in classes and f.id not in imports:
                        continue
                elif not (f.__class__ is ast.Attribute and f.value.__class__ is ast.Name
                          and (f.value.id == "self" or f.value.id in imports)):
                    continue
                t2 = self.resolve_call(view, c)
                if t2 is not None and t2[1] is not fn and self.rooted_calls(*t2):
                    got.append((c, t2))
        return got

