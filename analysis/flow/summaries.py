"""Collective effects and function summaries.

A *site* is a call that makes (or may make) a collective on the default group:
- an explicit ``torch.distributed`` collective (without ``group=``);
- an implicit one: the forward of a DDP/FSDP-wrapped module with gradients enabled (DDP broadcasts
  buffers), ``backward()`` of a value computed from such a forward (the gradient all-reduce),
  ``ZeroRedundancyOptimizer.step()``;
- a call to a function whose summary says it may run a collective.

A function's *summary* is plain data (safe to cache across checks): the collectives it may run,
whether it needs an initialised process group before doing anything conditional, and the
uniformity of what it returns. Summaries are computed on demand, to a fixpoint over recursion, and
across files (see ``project``).
"""
from __future__ import annotations

import ast

from ..torch_api import D
from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, parent, bound_value as _bound
from .uniformity import U, X, join
from .values import summary
from .bindings import reaching
from .records import callee_name
from .buffers import module_buffers
from .context import call_args, call_context
from .calls import (  # noqa: F401  (re-exported: rules import these from here)
    GROUP_POS, ROOTS, WRAPPERS, _is_ctor, _memo, _name_of, _name_of_any, _on_self_attr, _wrapped, calls_by_name,
    instance_names, method_names, on_fresh_instance, on_subgroup, root_arg, scope_calls, scope_calls_in_class,
    self_offset, wrapped_names, instance_method_calls,)
from .roots import Roots
from .origins import ZERO, ZERO_METHODS, zero_call  # noqa: F401  (ZERO re-exported)
from .hidden import hidden_sites
from .gathers import helper_gather
from .arg_guards import guard_params, unguarded
from .mode_wraps import self_wrapper, wrapped_when_distributed
from .unconditional import _return_holders, dist_mode_test, unconditional  # noqa: F401  (re-exported)

COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "_all_gather_base", "all_gather_coalesced",
    "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "all_to_all", "all_to_all_single",
    "broadcast", "reduce", "gather", "scatter", "all_reduce_coalesced", "all_gather_object", "gather_object",
    "scatter_object_list", "broadcast_object_list", "barrier", "monitored_barrier",
)
# rooted collective -> (position, keyword) of its root rank
INIT = D + "init_process_group"
_PG_USES = frozenset(D + n for n in (*COLLECTIVES, "get_rank", "get_world_size", "new_group", "new_subgroups"))
_NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "torch.set_grad_enabled"})
_NOT_PROJECT_QN = ("torch.", "math.", "os.", "sys.", "time.", "numpy.", "logging.", "json.", "random.")
_CONDITIONAL_EXPR = (ast.IfExp, ast.BoolOp, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_DEFS = (*FUNC_TYPES, ast.ClassDef)


class Effect:
    """One collective a site runs: ``op`` (``all_reduce``, ``gradient all-reduce``), where, and the
    chain of functions it was reached through."""

    __slots__ = ("op", "line", "col", "end_line", "end_col", "path", "via", "grad", "what")

    def __init__(self, op, node, path, via=(), grad=False, what=None):
        self.op = op
        self.line, self.col = node.lineno, node.col_offset
        self.end_line, self.end_col = node.end_lineno, node.end_col_offset
        self.path, self.via, self.grad = path, tuple(via), grad
        self.what = what or f"`{op}`"

    def through(self, fname: str) -> "Effect":
        e = object.__new__(Effect)  # a copy of every slot, ``via`` extended
        e.op, e.line, e.col, e.end_line, e.end_col = self.op, self.line, self.col, self.end_line, self.end_col
        e.path, e.grad, e.what = self.path, self.grad, self.what
        e.via = (fname, *self.via)
        return e


class Summary:
    """The collectives a function may make (``collectives``) and those every call makes (``must``: not
    behind a condition or an early exit in its body; ``guards``: per ``must``, ``arg_guards.guard_params``),
    as plain data. What it returns and whether it needs the process group: ``returns_of``, ``requires_pg_of``."""

    __slots__ = ("collectives", "must", "guards")

    def __init__(self, collectives=(), must=(), guards=()):
        self.collectives, self.must, self.guards = tuple(collectives), tuple(must), tuple(guards)

    def same(self, o: "Summary") -> bool:
        return ([e.op for e in self.collectives] == [e.op for e in o.collectives]
                and [e.op for e in self.must] == [e.op for e in o.must])


EMPTY = Summary()


class Site:
    __slots__ = ("node", "effects", "kind")

    def __init__(self, node: ast.Call, effects, kind: str):
        self.node, self.effects, self.kind = node, tuple(effects), kind  # kind: explicit|implicit|helper


def under_no_grad(view, node: ast.AST) -> bool:
    sem = view.sem
    p = parent(node)
    while p is not None:
        if isinstance(p, (ast.With, ast.AsyncWith)):
            for it in p.items:
                e = it.context_expr
                if isinstance(e, ast.Call) and (sem.call_qualname(e) or "") in _NO_GRAD:
                    if not (sem.call_qualname(e) == "torch.set_grad_enabled" and e.args
                            and not (isinstance(e.args[0], ast.Constant) and e.args[0].value is False)):
                        return True
        if isinstance(p, FUNC_TYPES):
            for dec in p.decorator_list:
                f = dec.func if isinstance(dec, ast.Call) else dec
                if (sem.qualname(f) or "") in _NO_GRAD:
                    return True
            return False
        if isinstance(p, (ast.Lambda, ast.ClassDef)):
            return False
        p = parent(p)
    return False


class Summaries(Roots):
    """Mixed into the hub: sites, summaries, and what a module-typed value is. Every query takes
    an optional call-site context (``context.Ctx``): the same question about the function as one
    call runs it."""

    # -- wrapped modules ----------------------------------------------------------------------
    def wrapper_ctor(self, view, expr: ast.AST, at: ast.AST, depth: int = 0, ctx=None):
        """The ``DDP(...)``/``FSDP(...)`` call that ``expr`` holds at ``at``, or None."""
        if depth > 3:
            return None
        sem = view.sem
        if isinstance(expr, ast.Call):
            if (sem.call_qualname(expr) or "") in WRAPPERS:
                return expr
            return self._returned_wrapper(view, expr, depth, ctx)
        if isinstance(expr, ast.Name):
            kind, evs = reaching(view, expr.id, at)
            if kind in ("events", "global") and evs:
                got = [self.wrapper_ctor(view, _bound(e, expr.id), e, depth + 1, ctx) if isinstance(e, ast.Assign)
                       else None for e in evs]  # or wrapped on the distributed path only (``mode_wraps``)
                return got[-1] if all(got) else wrapped_when_distributed(self, view, evs, got, at)
            if kind == "param":
                if ctx is not None and evs is ctx.fn and expr.id in ctx.wraps:
                    return ctx.wraps[expr.id]
                return self._param_wrapper(view, evs, expr.id, depth)
            return None
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
            if ctx is not None and expr.attr in ctx.self_wraps:
                return ctx.self_wraps[expr.attr]
            vals = self.self_attr_bindings(view, expr)
            got = [self.wrapper_ctor(view, v, v, depth + 1) for v in vals]
            return self_wrapper(self, view, expr.attr, vals, got)
        return None

    def _returned_wrapper(self, view, call: ast.Call, depth: int, ctx=None):
        """The wrapper that a project function called by ``call`` returns (every return holds one): of
        this module, or of another (``parallel.wrap(net)``: its arguments are then read there)."""
        name = getattr(call.func, "id", None) or getattr(getattr(call.func, "value", None), "id", None)
        t = self.resolve_call(view, call) if name in view.defs or name in view.imports else None
        if t is None or (name in view.defs and t[0] is not view) or not isinstance(t[1], FUNC_TYPES) or t[1].name == "__init__":
            return None
        got = [self.wrapper_ctor(t[0], r.value, r, depth + 1) if r.value is not None else None
               for r in iter_scope_nodes(t[1]) if isinstance(r, ast.Return)]
        if not got or not all(got):
            return None
        if t[0] is not view:
            self.ctor_views.setdefault(id(got[-1]), t[0])
        return got[-1]

    def param_wrapper(self, view, fn: ast.AST, name: str):
        return self._param_wrapper(view, fn, name, 0)

    def _param_wrapper(self, view, fn: ast.AST, name: str, depth: int):
        """Every call of ``fn`` in this module passes a wrapped module as ``name``."""
        memo = view.memo.setdefault("param_wrapper", {})
        key = (id(fn), name, depth)  # keyed by depth too: an answer cut at the depth limit is not the top's
        if key not in memo:
            memo[key] = None  # recursion guard
            memo[key] = self._param_wrapper_uncached(view, fn, name, depth)
        return memo[key]

    def _param_wrapper_uncached(self, view, fn: ast.AST, name: str, depth: int):
        if not isinstance(fn, FUNC_TYPES):
            return None
        sites = self.call_sites(view, fn)
        if not sites:
            return None
        found = None
        for c in sites:
            a = next((a for p, a in call_args(c, fn) if p == name), None)
            w = self.wrapper_ctor(view, a, c, depth + 1) if a is not None else None
            if w is None:
                return None
            found = w
        return found

    def call_sites(self, view, fn: ast.AST) -> list:
        """The calls of ``fn`` in its own module: by name for a module-level function, as
        ``self.f(...)`` inside its class or ``Cls(...).f(...)`` for a method, ``Cls(...)`` for
        ``__init__``."""
        memo = view.memo.setdefault("call_sites", {})
        got = memo.get(id(fn))
        if got is None:
            got = []
            p = parent(fn)
            if isinstance(p, ast.Module):
                got = list(calls_by_name(view).get(fn.name, ()))
            elif isinstance(p, ast.ClassDef) and isinstance(parent(p), ast.Module):
                if fn.name == "__init__":
                    got = list(calls_by_name(view).get(p.name, ()))
                else:
                    for c in scope_calls_in_class(view, p):
                        f = c.func
                        if isinstance(f, ast.Attribute) and f.attr == fn.name and isinstance(f.value, ast.Name) \
                                and f.value.id == "self":
                            got.append(c)
                    for c in calls_by_name(view).get(p.name, ()):  # ``Cls(...).method(...)`` anywhere in the module
                        if (a := parent(c)).__class__ is ast.Attribute and a.attr == fn.name and getattr(parent(a), "func", 0) is a:
                            got.append(parent(a))
                    got.extend(instance_method_calls(self, view, fn, p))
            memo[id(fn)] = got
        return got

    def from_wrapped_forward(self, view, expr: ast.AST, at: ast.AST, depth: int = 0, ctx=None) -> ast.Call | None:
        """The forward call of a wrapped module that ``expr`` is computed from, or None."""
        if depth > 4 or expr is None:
            return None
        memo = _memo(view, ctx, "wrapped_forward")
        if (key := (id(expr), depth)) in memo:  # keyed by depth too: a cut answer is not the top's
            return memo[key]
        memo[key] = None  # recursion guard
        got = memo[key] = self._from_wrapped_forward(view, expr, at, depth, ctx)
        return got

    def _from_wrapped_forward(self, view, expr, at, depth, ctx):
        wrapped = _wrapped(view, ctx)
        if not wrapped:
            return None
        scope = view.sem.enclosing_function(at) or view.sem.tree
        has = _memo(view, ctx, "scope_has_forward")
        got = has.get(id(scope))
        if got is None:
            # a call that may be a forward of a wrapped module (for a name, one whose binding
            # here is a wrapper: in a function nobody calls with a DDP model, ``model(x)`` is a
            # plain module's forward), or a call of a function of this module that may return one
            methods, defs = method_names(view), view.defs
            got = False
            for c in scope_calls(view, scope):
                f = c.func
                if f.__class__ is ast.Name:
                    if f.id in defs or (f.id in wrapped and self.wrapper_ctor(view, f, c, ctx=ctx) is not None):
                        got = True
                        break
                elif f.__class__ is ast.Attribute and (f.attr in wrapped or f.attr in methods):
                    got = True
                    break
            has[id(scope)] = got
        if not got:
            return None  # no forward of a wrapped module in this function, nor a call that may return one
        stack = [expr]
        seen = 0
        Call, Name, Attribute = ast.Call, ast.Name, ast.Attribute
        skip = (ast.Lambda, *FUNC_TYPES, ast.Constant)
        while stack and seen < 200:
            n = stack.pop()
            seen += 1
            t = n.__class__
            if t is Call:
                f = n.func
                key = f.id if f.__class__ is Name else (f.attr if f.__class__ is Attribute else None)
                if key in wrapped and self.wrapper_ctor(view, f, n, ctx=ctx) is not None:
                    return n
                if key is not None and depth < 3:
                    # ``loss = self.compute_loss(batch)``: a function of this module that returns
                    # what a forward of the wrapped module computed
                    got = self._returned_forward(view, n, depth, ctx)
                    if got is not None:
                        return got
                stack.append(f)
                stack.extend(n.args)
                stack.extend(k.value for k in n.keywords)
                continue
            if t is Name:
                kind, evs = reaching(view, n.id, n)
                if kind in ("events", "global"):
                    for e in evs or ():
                        if e.__class__ is ast.Assign or e.__class__ is ast.AugAssign:
                            got = self.from_wrapped_forward(view, e.value, e, depth + 1, ctx)
                            if got is not None:
                                return got
                continue
            if t is Attribute:
                stack.append(n.value)
                continue
            if isinstance(n, skip) or not isinstance(n, ast.expr):
                continue
            stack.extend(ast.iter_child_nodes(n))
        return None

    def _returned_forward(self, view, call: ast.Call, depth: int, ctx):
        """The wrapped forward that a function of this module called by ``call`` returns (every
        ``return`` with a value computes from one), or None."""
        f = call.func
        if f.__class__ is ast.Attribute:
            if not (f.value.__class__ is ast.Name and f.value.id == "self" and f.attr in method_names(view)):
                return None
        elif f.__class__ is not ast.Name or f.id not in view.defs:
            return None
        target = self.resolve_call(view, call)
        if target is None or target[0] is not view or not isinstance(target[1], FUNC_TYPES):
            return None
        fn = target[1]
        rets = [r for r in view.sem.by_type.get(ast.Return, ()) if r.value is not None
                and view.sem.enclosing_function(r) is fn] if ast.Return in view.sem.wanted else [
            r for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None
            and view.sem.enclosing_function(r) is fn]
        got = None
        for r in rets:
            got = self.from_wrapped_forward(view, r.value, r, depth + 1, ctx)
            if got is None:
                return None
        return got

    def forward_effect(self, view, ctor: ast.Call, call: ast.Call):
        """The collective of a forward through the wrapper ``ctor`` at ``call``, or None: DDP's
        buffer broadcast, when the module has buffers (see ``buffers``) and ``broadcast_buffers``
        is on. A forward without gradients still broadcasts (the flag that skips it is set only
        by a forward without gradients, after it ran), so it counts when the module is known to
        have buffers; with unknown buffers only a forward with gradients counts."""
        bb = get_arg(ctor, None, "broadcast_buffers")
        if isinstance(bb, ast.Constant) and bb.value is False:
            return None
        cview = self.ctor_views.get(id(ctor), view)
        memo = cview.memo.setdefault("ctor_buffers", {})
        if id(ctor) not in memo:
            memo[id(ctor)] = module_buffers(self, cview, ctor, ctor)
        buf = memo[id(ctor)]
        if buf is False:
            return None
        if buf is None and under_no_grad(view, call):
            return None
        return Effect("broadcast", call, view.path, grad=buf is None, what="DDP's buffer broadcast in the forward")

    def call_context(self, view, call, target, pctx, want_binds: bool = True, want_wraps: bool = True):
        """``context.call_context`` (the evaluator reaches it through the hub)."""
        return call_context(self, view, call, target, pctx, want_binds, want_wraps)

    # -- sites -------------------------------------------------------------------------------
    def sites(self, view, scope: ast.AST, ctx=None) -> list[Site]:
        if ctx is None:
            memo = view.memo.get("sites")
            if memo is None:
                memo = view.memo["sites"] = {}
        elif not ctx.wraps and not ctx.self_wraps:
            return self.sites(view, scope)  # rank-varying arguments change no site
        else:
            memo = _memo(view, ctx, "sites")
        got = memo.get(scope)  # keyed by the node (an ``id()`` key allocates an int per query)
        if got is not None:
            return got
        out = []
        calls_out = []  # (call, target) of the calls to project functions, for ``helper_calls``
        sem = view.sem
        pre = view.memo.get("sites_prelude")
        if pre is None:
            pre = _sites_prelude(view)
        has_zero, instances, methods, cands, plain_wrapped = pre
        hidden = hidden_sites(self, view, Effect, Site, helper_gather)  # the modern stack's hidden collectives (flow/hidden.py)
        if ctx is None:
            wrapped = plain_wrapped
            # only the calls that can pass the rejects below (the rest would ``continue``)
            calls = [c for c in scope_calls(view, scope) if c in cands or c in hidden or _on_self_attr(c.func)]
        else:
            wrapped = _wrapped(view, ctx)
            calls = scope_calls(view, scope)
        defs, classes, imports = view.defs, view.classes, view.imports
        Name, Attribute = ast.Name, ast.Attribute
        for c in calls:
            qn = c._qn or ""  # set on every call when ``calls_to`` above built the qualified-name index
            if qn.startswith(D):
                op = qn[len(D):]
                if op in COLLECTIVES and not on_subgroup(c, op):
                    out.append(Site(c, [Effect(op, c, view.path)], "explicit"))
                elif c in hidden:
                    out.append(hidden[c])
                continue
            if c in hidden:
                out.append(hidden[c])
                if hidden[c].kind != "helper":
                    continue
            f = c.func
            # fast rejects: nothing below can apply to these calls
            if f.__class__ is Name:
                if f.id not in wrapped and f.id not in defs and f.id not in classes and f.id not in imports:
                    continue
            elif f.__class__ is Attribute:
                a = f.attr
                if a != "backward" and a not in ZERO_METHODS and a not in wrapped:
                    b = f.value
                    if not (b.__class__ is Name and ((b.id == "self" and a in methods) or b.id in imports
                            or b.id in instances)) and not on_fresh_instance(f, view) and not _on_self_attr(f):
                        continue
                if a == "step" and not has_zero and not (f.value.__class__ is Name and (
                        f.value.id == "self" or f.value.id in instances)):
                    continue
            else:
                continue
            if qn.startswith(_NOT_PROJECT_QN):
                continue
            if wrapped and isinstance(f, ast.Attribute) and f.attr == "backward":
                fwd = self.from_wrapped_forward(view, f.value, c, ctx=ctx)
                if fwd is not None:
                    out.append(Site(c, [Effect("all_reduce", c, view.path,
                                               what="DDP's gradient all-reduce")], "implicit"))
                    continue
            if isinstance(f, ast.Attribute) and f.attr in ZERO_METHODS and zero_call(self, view, f, c):
                out.append(Site(c, [Effect("broadcast", c, view.path, what=ZERO_METHODS[f.attr])], "implicit"))
                continue
            w = None
            if wrapped and ((isinstance(f, ast.Name) and f.id in wrapped) or (
                    isinstance(f, ast.Attribute) and f.attr in wrapped and isinstance(f.value, ast.Name)
                    and f.value.id == "self")):
                w = self.wrapper_ctor(view, f, c, ctx=ctx)
            if w is not None:
                eff = self.forward_effect(view, w, c)
                if eff is not None:
                    out.append(Site(c, [eff], "implicit"))
                continue
            target = self.resolve_call(view, c)
            if target is None and f.__class__ is Attribute and f.value.__class__ is Name and f.value.id in instances:
                # ``for cb in self.callbacks: cb.m(self)`` over instances of several classes: the
                # method of each may run (``elements``)
                more = [t for t in self.resolve_targets(view, c) if t[1] is not scope]
                effs = [e.through(getattr(t[1], "name", "?")) for t in more for e in self.summary(*t).must]
                calls_out.extend((c, t) for t in more)
                if effs and c not in hidden:
                    out.append(Site(c, effs[:6], "helper"))
                continue
            if target is not None and target[1] is not scope:
                calls_out.append((c, target))
                sub = None
                if wrapped and (any(_name_of_any(a) in wrapped or _is_ctor(sem, a)
                                    for a in (*c.args, *(k.value for k in c.keywords)))
                                or (f.__class__ is Attribute and (on_fresh_instance(f, view) or f.value.__class__ is Name
                                    and (f.value.id in instances or (f.value.id == "self" and ctx is not None
                                                                     and ctx.self_wraps))))):
                    sub = call_context(self, view, c, target, ctx, want_binds=False)
                if ctx is None:
                    _memo(view, None, "wrap_contexts")[id(c)] = sub  # for ``control.context_divergences``
                s = self.summary(*target, ctx=sub)
                effs = s.must if not any(s.guards) else unguarded(self, view, c, target[1], s)
                if effs and under_no_grad(view, c):
                    effs = tuple(e for e in effs if not e.grad)
                if effs and c not in hidden:
                    name = callee_name(target)
                    out.append(Site(c, [e.through(name) for e in effs], "helper"))
        memo[scope] = out
        _memo(view, ctx, "helper_calls")[scope] = calls_out
        return out

    def helper_calls(self, view, scope: ast.AST) -> list:
        """(call, (view, function)) of the calls in ``scope`` to functions of the project (not
        torch, not third-party), in source order: what ``sites`` resolved on its way."""
        got = view.memo.get("helper_calls", {}).get(scope)
        if got is None:
            self.sites(view, scope)
            got = view.memo.get("helper_calls", {}).get(scope, [])
        return got

    # -- summaries ---------------------------------------------------------------------------
    def summary(self, view, fn: ast.AST, ctx=None) -> Summary:
        if ctx is not None and not ctx.wraps and not ctx.self_wraps:
            ctx = None
        if ctx is not None:
            # recursion under a context reads as empty (the plain summary's fixpoint covers it), and
            # what it made is not memoised for good (``values.summary``)
            def compute():
                key = (id(view), id(fn), id(ctx))  # in flight: a plain summary below is not at the top
                self._in_progress.add(key)
                try:
                    return self._compute(view, fn, ctx)
                finally:
                    self._in_progress.discard(key)

            return summary(self.cut_state, ctx.memo.setdefault("summaries", {}), id(fn), compute, EMPTY)
        memo = view.memo.setdefault("summaries", {})
        got = memo.get(id(fn))
        if got is not None:
            return got
        key = (id(view), id(fn))
        if key in self._in_progress:
            self._cycle = True
            return self._provisional.get(key, EMPTY)
        top = not self._in_progress
        for _round in range(4):
            self._in_progress.add(key)
            self._view_stack.append(view)
            try:
                s = self._compute(view, fn)
            finally:
                self._in_progress.discard(key)
                self._view_stack.pop()
            if not self._cycle:
                memo[id(fn)] = s
                return s
            prev = self._provisional.get(key)
            self._provisional[key] = s
            if not top:
                return s
            if prev is not None and prev.same(s):
                break
            self._cycle = False
        self._cycle = False
        self._provisional.clear()
        memo[id(fn)] = s
        return s

    def _compute(self, view, fn: ast.AST, ctx=None) -> Summary:
        effects, must, guards = [], [], []
        for site in self.sites(view, fn, ctx):
            sure = unconditional(view, site.node, fn)
            g = guard_params(self, view, site.node, fn) if sure else ()
            for e in site.effects:
                if len(effects) < 6:
                    effects.append(e)
                if sure and len(must) < 6:
                    must.append(e)
                    guards.append(g)
        return Summary(effects, must, guards)

    def returns_of(self, view, fn: ast.AST, ctx=None):
        """(uniformity of what ``fn`` returns, per-element uniformity of a returned tuple or None),
        computed on demand (recursion: unknown)."""
        def compute():
            self._view_stack.append(view)
            try:
                return self._returns(view, fn, ctx)
            finally:
                self._view_stack.pop()

        # a recursion reads as unknown, and what it made is not memoised for good (``values.summary``)
        return summary(self.cut_state, _memo(view, ctx, "returns"), id(fn), compute, (X, None))

    def requires_pg_of(self, view, fn: ast.AST):
        """The first use of the process group on ``fn``'s unconditional path, or None (on demand)."""
        def compute():
            self._view_stack.append(view)
            try:
                return self._requires_pg(view, fn)
            finally:
                self._view_stack.pop()

        # a recursion reads as None, and what it made is not memoised for good (``values.summary``)
        return summary(self.cut_state, view.memo.setdefault("requires_pg", {}), id(fn), compute, None)

    def _returns(self, view, fn: ast.AST, ctx=None):
        if isinstance(fn, ast.Lambda) or getattr(fn, "name", "") == "__init__":
            return X, None
        ev = self.evaluator(view, ctx)
        rets = []
        for n in iter_scope_nodes(fn):
            if n.__class__ is ast.Return:
                rets.append(n.value)
            elif n.__class__ in (ast.Yield, ast.YieldFrom):
                return X, None
            if len(rets) > 12:
                return X, None
        if not rets:
            return X, None
        whole = join(ev.value(r) if r is not None else U for r in rets)
        elts = None
        if all(isinstance(r, ast.Tuple) and not any(isinstance(x, ast.Starred) for x in r.elts) for r in rets) \
                and len({len(r.elts) for r in rets}) == 1:
            elts = tuple(join(ev.value(r.elts[i]) for r in rets) for i in range(len(rets[0].elts)))
        return whole, elts

    def _requires_pg(self, view, fn: ast.AST):
        """The first use of the process group on ``fn``'s unconditional path (before any early
        exit or conditional), unless ``fn`` initialises the group first."""
        sem = view.sem
        body = list(getattr(fn, "body", ()))
        stack = list(reversed(body))
        while stack:
            st = stack.pop()
            if isinstance(st, (ast.If, ast.For, ast.AsyncFor, ast.While)) or st.__class__.__name__ == "Match":
                if st in _return_holders(view) or any((sem.call_qualname(c) or "") == INIT for c in _all_calls(st)):
                    return None
                continue
            if isinstance(st, (ast.Return, ast.Raise)):
                calls = _calls_in(st)
            elif isinstance(st, (ast.With, ast.AsyncWith)):
                calls = [c for it in st.items for c in _calls_in(it.context_expr)]
                stack.extend(reversed(st.body))
            elif isinstance(st, ast.Try) or st.__class__.__name__ == "TryStar":
                return None  # a failure may be expected and handled
            elif isinstance(st, _DEFS):
                continue
            else:
                calls = _calls_in(st)
            for c in calls:
                qn = sem.call_qualname(c) or ""
                if qn == INIT:
                    return None
                if qn in _PG_USES:
                    return Effect(qn[len(D):], c, view.path, what=f"`{qn[len(D):]}()`")
                if qn in WRAPPERS:
                    return Effect("DistributedDataParallel", c, view.path, what="the DistributedDataParallel constructor")
                if qn == "torch.utils.data.DistributedSampler" and not (
                        get_arg(c, 1, "num_replicas") is not None and get_arg(c, 2, "rank") is not None):
                    return Effect("DistributedSampler", c, view.path,
                                  what="`DistributedSampler(...)` without `num_replicas` and `rank`")
                if qn.startswith(D):
                    continue
                target = self.resolve_call(view, c)
                if target is not None and target[1] is not fn:
                    req = self.requires_pg_of(*target)
                    if req is not None:
                        name = callee_name(target)
                        return req.through(name)
                    if _inits(self, target):
                        return None
        return None


def _sites_prelude(view) -> tuple:
    """What ``Summaries.sites`` asks of the module before its loop, once per module:
    (has a ZeroRedundancyOptimizer, ``instance_names``, ``method_names``, the calls that may pass
    its rejects without a context (a set of nodes: they hash by identity), ``wrapped_names``).

    The candidates come from the file's call indexes: a ``torch.distributed`` call; a call of a
    plain name that may hold a wrapped module or names a function, class or import; a call of an
    attribute ``backward``/``step`` or one that may hold a wrapped module; a call on an import, an
    instance or (of one of its methods) ``self``. Then those whose qualified name is outside the
    project go (``_NOT_PROJECT_QN``). Every other call is one that ``sites`` rejects with no
    context (its fast rejects, in the same terms)."""
    sem = view.sem
    by_qn = sem.calls_by_qualname  # sets ``_qn`` on every call
    wrapped = wrapped_names(view)
    instances, methods = instance_names(view), method_names(view)
    calls = sem.calls
    names, attrs, _, base = sem.callee_index()
    defs, classes, imports, aliases = view.defs, view.classes, view.imports, sem.aliases
    pos: list[int] = []  # positions of calls whose qualified name is yet to be tested
    for k in names.keys() & (wrapped | defs.keys() | classes.keys() | imports.keys()):
        pos += names[k]
    for k in attrs.keys() & (wrapped | {"backward", *ZERO_METHODS}):
        pos += attrs[k]
    pos += [i for i in base.get("self", ()) if calls[i].func.attr in methods]
    cands = set()
    for i in pos:
        c = calls[i]
        if not (c._qn or "").startswith(_NOT_PROJECT_QN):
            cands.add(c)
            # ``Cls(...).m(...)``: the method call on the fresh instance is a candidate too
            p = parent(c)
            if p.__class__ is ast.Attribute and p.value is c:
                outer = parent(p)
                if outer.__class__ is ast.Call and outer.func is p and c.func.__class__ is ast.Name \
                        and (c.func.id in classes or c.func.id in imports):
                    cands.add(outer)
    for k in base.keys() & (imports.keys() | instances):
        a = aliases.get(k)
        if a is not None and (a + ".").startswith(_NOT_PROJECT_QN):
            # every call on ``k`` has a qualified name under ``a`` (canonical names only rename
            # within ``torch.``): outside the project, all of them
            continue
        cands.update([calls[i] for i in base[k]])
    for qn, lst in by_qn.items():
        if qn.startswith(D):
            cands.update(lst)
    got = view.memo["sites_prelude"] = (bool(sem.calls_to(ZERO)), instances, methods, cands, wrapped)
    return got


def _inits(hub, target) -> bool:
    view, fn = target
    return any((view.sem.call_qualname(c) or "") == INIT for c in scope_calls(view, fn))


def _calls_in(node: ast.AST, enter: bool = False) -> list[ast.Call]:
    """Calls in ``node`` that run whenever it runs (not under a conditional expression, a lambda,
    a comprehension or a nested definition), in evaluation order (roughly). ``enter``: ``node``
    itself is entered whatever it is (a test that runs: ``if a() and b():``)."""
    out = []
    stack = [node]
    while stack:
        n = stack.pop()
        if (isinstance(n, _CONDITIONAL_EXPR) or isinstance(n, _DEFS)) and (n is not node or not enter):
            continue
        if isinstance(n, ast.Call):
            out.append(n)
        stack.extend(ast.iter_child_nodes(n))
    out.sort(key=lambda c: (c.lineno, c.col_offset))
    return out


def _all_calls(node: ast.AST):
    return [n for n in ast.walk(node) if isinstance(n, ast.Call)]
