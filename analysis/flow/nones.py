"""Whether a value is None, as a uniformity question (``x is None`` / ``x is not None``).

Whether a value exists is usually the same on every rank (an optional argument, a configured
feature), so the evaluator answers unknown for ``x is None`` unless value flow shows a choice: a
rank-varying test that picks between None and a value that is never None (a display, a literal,
the construction of a project class: ``Writer(path)``). That test may be the
``test`` of ``x = v if test else None`` (or the reverse, or a ``self.x`` its class binds so), or one that decides which of the
bindings ``x = None`` / ``x = <never None>`` reaches the use (``images = None`` ... ``if
has_image: images = []``: the evaluator's control dependence, on this rank's data, the clock or
random numbers). A parameter analysed under a call context that binds it asks the same of the
argument in the caller's module; without one, the function's summary over its calls in its
module answers (``callers_none_ness``), each caller read as its own callers run it
(``caller_context``), so a choice made several calls up a chain of helpers is still seen. A value
that may be None on every rank (a call's result, a parameter no known call chooses) is never judged.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, parent
from .bindings import reaching
from .values import X, Value, summary

_NEVER_NONE_BUILTINS = frozenset({"list", "dict", "set", "tuple", "str", "int", "float", "bool", "len", "sorted"})
_NEVER_NONE_NODES = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp,
                     ast.GeneratorExp, ast.JoinedStr, ast.BinOp, ast.Compare)


def none_ness(ev, x: ast.AST, d: int) -> Value:
    """Uniformity of ``x is None`` for the evaluator ``ev``: rank-varying, or unknown. ``x`` is a
    name, or ``self.<attr>`` read in a method (what the methods of its class bind to it)."""
    if d > 30:
        ev.cs.n += 1  # a cut: what it makes is not memoised for good (``values.keep``)
        return X
    if isinstance(x, ast.Attribute) and isinstance(x.value, ast.Name) and x.value.id == "self":
        vals = ev.hub.self_attr_bindings(ev.view, x)
        if not vals or len(vals) > 8 or not all(_is_none(v) or _none_arm(v) for v in vals):
            # unseen, bound by unpacking or an augmented assignment, or to a value by some method
            # (which runs before the test is not known across methods)
            return X
        return _choice(ev, [(parent(v), v) for v in vals], f"self.{x.attr}", d)
    if not isinstance(x, ast.Name):
        return X
    kind, got = reaching(ev.view, x.id, x)
    if kind == "param":
        return _param_none_ness(ev, got, x.id, d)
    if kind != "events" or not got:
        return X
    pairs = []
    for b in got:
        e = assigned_value(b, x.id)
        if e is None:
            return X
        pairs.append((b, e))
    return _choice(ev, pairs, x.id, d)


def _choice(ev, pairs: list, name: str, d: int) -> Value:
    """Whether the bindings ``pairs`` ((statement, value bound to ``name``)) let a rank-varying
    test choose between None and a value never None: the test of ``v if test else None``, or one
    that decides which of ``name = None`` / ``name = <never None>`` runs."""
    nones, somes = [], []
    for b, e in pairs:
        if _is_none(e):
            nones.append(b)
            continue
        if _none_arm(e):
            other = e.orelse if _is_none(e.body) else e.body
            if never_none(ev, other, d + 1):
                tv = ev.value(e.test, d + 1)
                if tv.varying:
                    return Value("V", tv.src.step(f"which decides whether line {b.lineno} sets `{name}` to None"))
            return X
        if not never_none(ev, e, d + 1):
            return X
        somes.append(b)
    if not nones or not somes:
        return X  # always None, or never None: the same everywhere, but nothing to report
    for b in (*somes, *nones):
        v = ev._control_dependent(b, d + 1, name)
        if v is not None:
            return v
    return X


def _param_none_ness(ev, fn: ast.AST, name: str, d: int) -> Value:
    """A parameter under a call context that binds it: whether the argument the call passes is
    None, asked in the caller's module (``share(pics)`` with ``pics = {} if batch["n"] else None``).
    Otherwise the function's summary over its calls in its module (``callers_none_ness``)."""
    ctx = ev.ctx
    if ctx is not None and fn is ctx.fn and name in ctx.binds:
        from .calls import call_args  # lazy: calls sits above uniformity
        arg = next((a for p, a in call_args(ctx.call, fn) if p == name), None)
        caller = ev.hub.view_of(ctx.call_path)
        if arg is not None and caller is not None:
            v = none_ness(ev.hub.evaluator(caller), arg, d + 1)
            if v.varying:
                return Value("V", v.src.step(ctx.passed(name), ctx.call, ctx.call_path))
    return callers_none_ness(ev.hub, ev.view, fn, name, d)


_MAX_SITES = 16  # the calls of one function a summary reads


def callers_none_ness(hub, view, fn: ast.AST, name: str, d: int = 0) -> Value:
    """Summary: whether some call of ``fn`` in its module (by name, ``self.m(...)``, a method on
    an instance of its class: ``hub.call_sites``) passes ``name`` an argument whose None-ness is
    rank-varying, with the caller analysed as its own callers run it (``caller_context``). A chain
    of helpers that hand the value on (``collect -> run -> share``) is followed to the call that
    makes the choice, however many calls deep; one such call is enough (on that call the ranks
    disagree). Memoised per function and parameter; a cycle of calls reads as unknown where it
    closes, and what that made is not memoised for good (``values.summary``): the answer is the
    same whichever function of the cycle was asked first."""
    if not isinstance(fn, FUNC_TYPES):
        return X
    if d > 30:
        hub.cut_state.n += 1
        return X

    def compute() -> Value:
        from .calls import call_args  # lazy: calls sits above uniformity
        for c in hub.call_sites(view, fn)[:_MAX_SITES]:
            arg = next((a for p, a in call_args(c, fn) if p == name), None)
            if arg is None:
                continue
            g = view.sem.enclosing_function(c)
            if g is fn:
                continue
            cev = hub.evaluator(view, caller_context(hub, view, g, d + 1) if g is not None else None)
            v = none_ness(cev, arg, d + 1)
            if v.varying:
                fname = getattr(fn, "name", "?")
                return Value("V", v.src.step(f"passed to `{fname}` as `{name}` at line {c.lineno}", c, view.path))
        return X

    return summary(hub.cut_state, view.memo.setdefault("callers_none_ness", {}), (id(fn), name), compute, X)


def caller_context(hub, view, g: ast.AST, d: int = 0):
    """Summary context of ``g``: its parameters bound to the rank-varying values one call of
    ``g`` in its module passes (that caller itself analysed so, up the chain), for the None-ness
    questions of ``callers_none_ness``; None when no call passes one. Memoised for the check (a
    context holds the check's evaluators); a cycle of calls reads as None where it closes, as
    ``callers_none_ness`` reads one."""
    if not isinstance(g, FUNC_TYPES):
        return None
    if d > 30:
        hub.cut_state.n += 1
        return None

    def compute():
        from .calls import call_args  # lazy: calls sits above uniformity
        base = hub.evaluator(view)
        for c in hub.call_sites(view, g)[:_MAX_SITES]:
            h = view.sem.enclosing_function(c)
            if h is g:
                continue
            ev = hub.evaluator(view, caller_context(hub, view, h, d + 1) if h is not None else None)
            binds = {}
            for p, a in call_args(c, g):
                v = ev.value(a)
                if v.varying and not base.param_value(g, p, g).varying:
                    binds[p] = v
            if binds:
                return hub.summary_context(view, g, binds, c)
        return None

    return summary(hub.cut_state, hub.contexts.setdefault(("none_caller_context", id(view)), {}), id(g), compute,
                   None)


def never_none(ev, e: ast.AST, d: int) -> bool:
    """``e`` is never None: a literal other than None, a display, a comprehension, an f-string,
    arithmetic, a builtin constructor, or a name every reaching binding of which is such a value."""
    if isinstance(e, ast.Constant):
        return e.value is not None
    if isinstance(e, _NEVER_NONE_NODES):
        return True
    if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id in _NEVER_NONE_BUILTINS \
            and ev.sem.qualname(e.func) is None:
        return True
    if isinstance(e, ast.Call) and isinstance(e.func, (ast.Name, ast.Attribute)):
        # ``Writer(path)``: constructing a class of the project (one that does not define
        # ``__new__``) gives an instance, never None
        cls = ev.hub.resolve_class(ev.view, e.func)
        return cls is not None and not any(
            isinstance(s, FUNC_TYPES) and s.name == "__new__" for s in cls[1].body)
    if isinstance(e, ast.Name):
        if d >= 30:
            ev.cs.n += 1
            return False
        kind, got = reaching(ev.view, e.id, e)
        if kind != "events" or not got:
            return False
        for b in got:
            v = assigned_value(b, e.id)
            if v is None or not never_none(ev, v, d + 1):
                return False
        return True
    return False


def _none_arm(e: ast.AST) -> bool:
    """``v if test else None`` (or the reverse)."""
    return isinstance(e, ast.IfExp) and _is_none(e.body) != _is_none(e.orelse)


def _is_none(e: ast.AST) -> bool:
    return isinstance(e, ast.Constant) and e.value is None


def assigned_value(b: ast.AST, name: str):
    """The expression a plain ``name = <expr>`` (or ``name: T = <expr>``) binding gives ``name``,
    or its element of ``m, name = a, b``; None for any other binding (unpacking a value that is no
    display, a loop variable, an augmented assignment...)."""
    if isinstance(b, ast.AnnAssign) and isinstance(b.target, ast.Name) and b.target.id == name:
        return b.value
    if not isinstance(b, ast.Assign) or len(b.targets) != 1:
        return None
    t, v = b.targets[0], b.value
    if isinstance(t, ast.Name):
        return v if t.id == name else None
    if isinstance(t, ast.Tuple) and isinstance(v, ast.Tuple) and len(t.elts) == len(v.elts):
        for te, ve in zip(t.elts, v.elts):
            if isinstance(te, ast.Name) and te.id == name:
                return ve
    return None
