"""Optional synchronisation: a count a helper makes equal across ranks only when the caller passes
an optional parameter.

A helper that computes a count from this rank's own data (the number of micro-batches a token
budget gives, the number of chunks a batch splits into) often equalises it itself, with an
``all_reduce(n, op=MAX)`` (or ``MIN``, or a ``broadcast``), but only under a test on one of its
optional parameters: ``if group is not None:``, ``if sync:``. The helper's author makes the count
equal because it differs between ranks otherwise; a call that leaves that parameter at its default
(``None`` / ``False``: not passed, or passed as that constant) gets the count each rank computed
for itself. A return summary keyed on the parameter: ``skipped_sync(hub, view, expr, mode)`` says
whether ``expr`` of the calling module (the iterable of a ``for``, or a count: ``range(n)``) is
built from what such a call returns, as that call runs the helper.

Inside the helper, a backward slice from each ``return`` (the element of a returned tuple the
caller unpacks) looks for a use of the equalised name that the value from before the collective
still reaches (both it and the guarded collective reach the use). Two questions: what a value is
computed from (``value``), and what decides how many items a sequence has (``extent``: the
iterables of a comprehension and its filters, the bound of ``range``, the list a loop appends to
and that loop's iterable, the count given to ``split``/``chunk``, the arguments a project helper
turns into its result's length). A padded list's length is not its items' values: a helper that
pads every sequence to an equalised length, and returns as many as it got, is not one of these.

Not one of these: a helper that always synchronises (the collective reaches every use), a call that
passes the parameter (by position or by keyword, whatever its value), a call with ``*args`` or
``**kwargs``, and a count uniform by construction (the value before the collective is uniform, or
computed from parameters the call binds to uniform values: config, constants).
"""
from __future__ import annotations

import ast
import builtins

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, param_defaults, param_names, parent
from .bindings import comp_binder, reaching, target_path
from .values import DATA, Src, Value

_D = "torch.distributed."
_SYNC_OPS = frozenset({"MAX", "MIN", "max", "min"})
_SEQ_BUILTINS = frozenset({"list", "tuple", "sorted", "reversed", "enumerate", "iter", "set", "zip"})
_SPLITTERS = frozenset({"torch.split", "torch.chunk", "torch.tensor_split", "numpy.array_split", "numpy.split"})
_SPLIT_METHODS = frozenset({"split", "chunk", "tensor_split"})
_WRAPPERS = frozenset({"enumerate", "tqdm", "iter", "list", "tuple", "sorted", "reversed"})
_MAX_DEPTH = 3
_MAX_STEPS = 4000


class Guard:
    """An equalising collective of ``fn`` on the name ``name``, run only when the optional
    parameter ``param`` is not at its default."""

    __slots__ = ("call", "name", "param", "default")

    def __init__(self, call, name, param, default):
        self.call, self.name, self.param, self.default = call, name, param, default


def skipped_sync(hub, view, expr, mode: str = "extent", d: int = 0) -> Src | None:
    """Where ``expr`` (of ``view``) comes from a call of a project helper that equalises the
    count behind it only under an optional parameter the call leaves at its default: the source of
    the variance for messages; else None. ``mode``: ``"extent"`` for an iterable (how many items
    it yields), ``"value"`` for a count."""
    if d > 6 or expr is None:
        return None
    t = expr.__class__
    if t is ast.Name:
        kind, evs = reaching(view, expr.id, expr)
        if kind != "events" or not evs:
            return None
        got = None
        for ev in evs:
            one = _from_binding(hub, view, ev, expr.id, mode, d)
            if one is None:
                return None  # another path may give a count that is the same everywhere
            got = got or one
        return got
    if t is ast.Call:
        f = expr.func
        qn = view.sem.call_qualname(expr)
        if qn is None and isinstance(f, ast.Name):
            if f.id == "len" and mode == "value" and len(expr.args) == 1:
                return skipped_sync(hub, view, expr.args[0], "extent", d + 1)
            if f.id == "int" and mode == "value" and len(expr.args) == 1:
                return skipped_sync(hub, view, expr.args[0], "value", d + 1)
            if f.id == "range" and mode == "extent":
                for a in expr.args:
                    got = skipped_sync(hub, view, a, "value", d + 1)
                    if got is not None:
                        return got
                return None
            if f.id in _WRAPPERS and mode == "extent" and expr.args:
                return skipped_sync(hub, view, expr.args[0], "extent", d + 1)
        if isinstance(f, ast.Attribute) and f.attr == "item" and not expr.args and mode == "value" and qn is None:
            return skipped_sync(hub, view, f.value, "value", d + 1)
        if qn is None and isinstance(f, ast.Name) and f.id == "tqdm" and expr.args and mode == "extent":
            return skipped_sync(hub, view, expr.args[0], "extent", d + 1)
        return _at_call(hub, view, expr, None, mode)
    return None


def unsynced_trip(ev, it, got):
    """``uniformity.trip_count``'s answer ``got`` for ``for x in it``, made rank-varying when it is
    unknown and ``it`` comes from a call that leaves a helper's count unequalised
    (``make_batches(seqs)`` without its ``group=``)."""
    if got.kind == "X" and it.__class__ in (ast.Name, ast.Call):
        src = skipped_sync(ev.hub, ev.view, it, "extent")
        if src is not None:
            return Value("V", src)
    return got


def _from_binding(hub, view, ev, name, mode, d):
    if isinstance(ev, ast.Assign) and len(ev.targets) == 1:
        path = target_path(ev.targets[0], name)
        if path is None:
            return None
        value = ev.value
        while path and isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) > path[0] \
                and not any(isinstance(x, ast.Starred) for x in value.elts):
            value, path = value.elts[path[0]], path[1:]
        if not path:
            return skipped_sync(hub, view, value, mode, d + 1)
        if len(path) == 1 and isinstance(value, ast.Call):
            return _at_call(hub, view, value, path[0], mode)
        return None
    if isinstance(ev, ast.AnnAssign) and ev.value is not None:
        return skipped_sync(hub, view, ev.value, mode, d + 1)
    return None


def _at_call(hub, view, call, index, mode) -> Src | None:
    """``call`` runs a project function that returns (element ``index`` of) a value built from a
    count it equalises only under an optional parameter this call leaves at its default."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    target = hub.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES) or target[1].name == "__init__":
        return None
    tv, fn = target
    guards = guards_of(tv, fn)
    if not guards:
        return None
    from .calls import call_args  # lazy: calls sits above this module's neighbours

    passed = dict(call_args(call, fn))
    for g in guards:
        arg = passed.get(g.param)
        if arg is not None and not (isinstance(arg, ast.Constant) and arg.value == g.default
                                    and type(arg.value) is type(g.default)):
            continue
        if not _reaches(hub, tv, fn, g, index, mode):
            continue
        if _uniform_before(hub, tv, fn, g, view, call, passed):
            continue
        op = _op_words(tv, g.call)
        where = f"line {g.call.lineno}" if tv is view else f"{_short(tv.path)}:{g.call.lineno}"
        what = "the count" if mode == "value" else "the number of items"
        how = "does not pass it" if arg is None else f"passes `{g.param}={g.default}`"
        desc = (f"{what} `{fn.name}()` returns, from this rank's own data: the helper makes it equal across "
                f"ranks (`{op}` at {where}) only when `{g.param}` is given, and this call {how}")
        return Src(DATA, desc, call.lineno, view.path)
    return None


def _short(path):
    from .values import _short as short

    return short(path or "?")


def _op_words(view, call) -> str:
    qn = view.sem.call_qualname(call) or ""
    op = qn.rsplit(".", 1)[-1]
    o = get_arg(call, 1, "op")
    if op == "all_reduce" and isinstance(o, ast.Attribute):
        return f"all_reduce(..., op={o.attr})"
    return op


# -- the helper's own summary -----------------------------------------------------------------------
def guards_of(view, fn) -> list[Guard]:
    """The equalising collectives of ``fn`` that run only when one of its optional parameters
    (default ``None`` or ``False``) is given: under ``if p is not None:`` / ``if p:`` (also as one
    operand of an ``and``), or in the ``else`` of ``if p is None:`` / ``if not p:``."""
    memo = view.memo.setdefault("optional_syncs.guards", {})
    got = memo.get(fn)
    if got is None:
        got = memo[fn] = _guards(view, fn)
    return got


def _defaults(fn) -> dict:
    return {k: v.value for k, v in param_defaults(fn).items()
            if isinstance(v, ast.Constant) and (v.value is None or v.value is False)}


def _guards(view, fn) -> list[Guard]:
    optional = _defaults(fn)
    if not optional:
        return []
    sem = view.sem
    out = []
    for c in sem.function_calls(fn):
        qn = sem.call_qualname(c) or ""
        if qn == _D + "all_reduce":
            o = get_arg(c, 1, "op")
            if not (isinstance(o, ast.Attribute) and o.attr in _SYNC_OPS):
                continue
        elif qn != _D + "broadcast":
            continue
        a = get_arg(c, 0, "tensor")
        if not isinstance(a, ast.Name):
            continue
        p = _guard_param(c, fn, optional)
        if p is not None:
            out.append(Guard(c, a.id, p, optional[p]))
    return out


def _guard_param(c, fn, optional):
    child, p = c, parent(c)
    while p is not None and p is not fn and not isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
        if isinstance(p, ast.If) and child is not p.test:
            want = child in p.body  # the body runs when the test holds
            for name in optional:
                if _at_default(p.test, name, optional[name]) is (not want):
                    return name
        child, p = p, parent(p)
    return None


def _at_default(test, name, default):
    """The truth of ``test`` when parameter ``name`` holds ``default`` (None or False): True,
    False, or None when it depends on something else."""
    t = test.__class__
    if t is ast.Name:
        return bool(default) if test.id == name else None
    if t is ast.UnaryOp and isinstance(test.op, ast.Not):
        v = _at_default(test.operand, name, default)
        return None if v is None else not v
    if t is ast.BoolOp:
        vals = [_at_default(v, name, default) for v in test.values]
        if isinstance(test.op, ast.And):
            return False if False in vals else (True if all(v is True for v in vals) else None)
        return True if True in vals else (False if all(v is False for v in vals) else None)
    if t is ast.Compare and len(test.ops) == 1 and isinstance(test.left, ast.Name) and test.left.id == name:
        r = test.comparators[0]
        if isinstance(r, ast.Constant) and r.value is None:
            op = test.ops[0]
            if isinstance(op, (ast.Is, ast.Eq)):
                return default is None
            if isinstance(op, (ast.IsNot, ast.NotEq)):
                return default is not None
    return None


# -- the slice ------------------------------------------------------------------------------------
class _Slice:
    """A backward slice over one function: which parameters a value or an extent is computed from,
    and whether it meets a use of a guard's name that the value from before the collective
    reaches."""

    def __init__(self, hub, view, fn, guard, depth):
        self.hub, self.view, self.fn, self.guard, self.depth = hub, view, fn, guard, depth
        # the guarded collectives of ``fn`` on the same parameter as ``guard``
        self.same = {x.call for x in guards_of(view, fn) if x.param == guard.param} if guard is not None else set()
        self.seen: set = set()
        self.params: set = set()
        self.hit = False
        self.steps = 0
        self._mut = None

    def run(self, items):
        work = list(items)
        while work and not self.hit:
            e, m = work.pop()
            key = (id(e), m)
            if key in self.seen:
                continue
            self.seen.add(key)
            self.steps += 1
            if self.steps > _MAX_STEPS:
                return
            work.extend(self._step(e, m))
        return self

    # one node: the (expression, mode) pairs it depends on
    def _step(self, e, m):
        if m == "value":
            return self._value(e)
        return self._extent(e)

    def _value(self, e):
        out = []
        todo = [e]
        while todo:
            n = todo.pop()
            t = n.__class__
            if t is ast.Lambda or isinstance(n, FUNC_TYPES):
                continue
            if t is ast.Name:
                out.extend(self._name(n, "value"))
                continue
            if t is ast.Call and isinstance(n.func, ast.Name) and n.func.id == "len" and len(n.args) == 1 \
                    and self.view.sem.qualname(n.func) is None:
                out.append((n.args[0], "extent"))
                continue
            if t is ast.Call:
                got = self._project_call(n, None, "value")
                if got is not None:
                    out.extend(got)
                    if isinstance(n.func, ast.Attribute):
                        todo.append(n.func.value)
                    continue
            todo.extend(ast.iter_child_nodes(n))
        return out

    def _name(self, n, m):
        if not isinstance(n.ctx, ast.Load):
            return []
        g = comp_binder(n)
        if g is not None:
            return [(g.iter, "value")] if m == "value" else []
        kind, evs = reaching(self.view, n.id, n)
        if kind == "param" and evs is self.fn:
            self.params.add((n.id, m))
            return []
        if kind not in ("events", "events+param") or not evs:
            return []
        if kind == "events+param":
            self.params.add((n.id, m))
        g = self.guard
        if g is not None and m == "value" and n.id == g.name and any(ev is g.call for ev in evs):
            # the value from before the collective reaches the use, and every collective that may
            # equalise it first runs only when the parameter is given (one in the ``else`` branch
            # of the same test runs when it is not: no path is left unequalised)
            if any(ev.__class__ is not ast.Call for ev in evs) and all(
                    ev.__class__ is not ast.Call or ev in self.same for ev in evs):
                self.hit = True
            return []
        out = []
        for ev in evs:
            out.extend(self._binding(ev, n.id, m))
        if m == "extent":
            out.extend(self._mutations(n))
        return out

    def _binding(self, ev, name, m):
        t = ev.__class__
        if t is ast.Assign:
            for tgt in ev.targets:
                path = target_path(tgt, name)
                if path is None:
                    continue
                value = ev.value
                while path and isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) > path[0] \
                        and not any(isinstance(x, ast.Starred) for x in value.elts):
                    value, path = value.elts[path[0]], path[1:]
                if not path:
                    return [(value, m)]
                if len(path) == 1 and isinstance(value, ast.Call):
                    got = self._project_call(value, path[0], m)
                    if got is not None:
                        return got
                return [(value, "value")] if m == "value" else []
            return []
        if t is ast.AnnAssign:
            return [(ev.value, m)] if ev.value is not None else []
        if t is ast.AugAssign:
            prev_kind, prev = reaching(self.view, name, ev)
            out = [(ev.value, m)]
            if prev_kind == "events":
                for p in prev or ():
                    if p is not ev:
                        out.extend(self._binding(p, name, m))
            return out
        if t is ast.NamedExpr:
            return [(ev.value, m)]
        if t in (ast.For, ast.AsyncFor):
            return [(ev.iter, "value")] if m == "value" else []
        return []

    def _mutations(self, n):
        """A list grown in place: the loops and tests around each ``append``/``extend``/``insert``
        of it decide how many items it gets."""
        if self._mut is None:
            self._mut = {}
            for c in self.view.sem.function_calls(self.fn):
                f = c.func
                if isinstance(f, ast.Attribute) and f.attr in ("append", "extend", "insert") \
                        and isinstance(f.value, ast.Name):
                    self._mut.setdefault(f.value.id, []).append(c)
        out = []
        for c in self._mut.get(n.id, ()):
            if c.func.attr == "extend" and c.args:
                out.append((c.args[0], "extent"))
            child, p = c, parent(c)
            while p is not None and p is not self.fn:
                if isinstance(p, (ast.For, ast.AsyncFor)) and child is not p.iter:
                    out.append((p.iter, "extent"))
                elif isinstance(p, (ast.If, ast.While)) and child is not p.test:
                    out.append((p.test, "value"))
                child, p = p, parent(p)
        return out

    def _extent(self, e):
        t = e.__class__
        if t is ast.Name:
            return self._name(e, "extent")
        if t in (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp):
            out = []
            for g in e.generators:
                out.append((g.iter, "extent"))
                out.extend((c, "value") for c in g.ifs)
            return out
        if t in (ast.List, ast.Tuple, ast.Set):
            return [(x.value, "extent") for x in e.elts if isinstance(x, ast.Starred)]
        if t is ast.BinOp:
            out = [(e.left, "extent"), (e.right, "extent")]
            if isinstance(e.op, ast.Mult):
                out += [(e.left, "value"), (e.right, "value")]
            return out
        if t is ast.IfExp:
            return [(e.body, "extent"), (e.orelse, "extent"), (e.test, "value")]
        if t is ast.Subscript and isinstance(e.slice, ast.Slice):
            sl = e.slice
            return [(e.value, "extent"), *((x, "value") for x in (sl.lower, sl.upper, sl.step) if x is not None)]
        if t is ast.Call:
            f = e.func
            qn = self.view.sem.call_qualname(e)
            if qn is None and isinstance(f, ast.Name):
                if f.id == "range":
                    return [(a, "value") for a in e.args]
                if f.id in _SEQ_BUILTINS:
                    return [(a, "extent") for a in e.args]
            if qn in _SPLITTERS and e.args:
                return [(e.args[0], "extent"), *((a, "value") for a in e.args[1:2])]
            if qn is None and isinstance(f, ast.Attribute) and f.attr in _SPLIT_METHODS and e.args:
                return [(f.value, "extent"), (e.args[0], "value")]
            got = self._project_call(e, None, "extent")
            return got or []
        return []

    def _project_call(self, call, index, m):
        """A call of a project function: the arguments that reach (element ``index`` of) its
        result in mode ``m``, as its own slice over its parameters says; None when ``call`` runs no
        project function (or it cannot tell)."""
        if self.depth >= _MAX_DEPTH:
            return None
        target = self.hub.resolve_call(self.view, call)
        if target is None or not isinstance(target[1], FUNC_TYPES) or target[1].name == "__init__":
            return None
        tv, callee = target
        if callee is self.fn:
            return None
        deps = _return_deps(self.hub, tv, callee, index, m, self.depth + 1)
        if deps is None:
            return None
        from .calls import call_args  # lazy

        args = dict(call_args(call, callee))
        return [(args[p], pm) for p, pm in deps if p in args]


def _returns(fn, index):
    out = []
    for n in iter_scope_nodes(fn):
        if n.__class__ in (ast.Yield, ast.YieldFrom):
            return None
        if n.__class__ is ast.Return and n.value is not None:
            v = n.value
            if index is not None:
                if not (isinstance(v, ast.Tuple) and index < len(v.elts)
                        and not any(isinstance(x, ast.Starred) for x in v.elts)):
                    return None
                v = v.elts[index]
            out.append(v)
    return out


def _return_deps(hub, view, fn, index, m, depth):
    """(parameter, mode) pairs (element ``index`` of) what ``fn`` returns is computed from, in
    mode ``m``; None when it cannot tell (a generator, an odd ``return``)."""
    memo = view.memo.setdefault("optional_syncs.return_deps", {})
    key = (fn, index, m)
    if key in memo:
        return memo[key]
    memo[key] = None  # recursion guard
    rets = _returns(fn, index)
    if rets is None:
        return None
    s = _Slice(hub, view, fn, None, depth).run([(r, m) for r in rets])
    got = memo[key] = frozenset(s.params)
    return got


def _reaches(hub, view, fn, guard, index, mode) -> bool:
    memo = view.memo.setdefault("optional_syncs.reaches", {})
    key = (fn, guard.call, index, mode)
    got = memo.get(key)
    if got is None:
        rets = _returns(fn, index)
        got = False
        if rets:
            got = _Slice(hub, view, fn, guard, 0).run([(r, mode) for r in rets]).hit
        memo[key] = got
    return got


def _uniform_before(hub, tv, fn, guard, view, call, passed) -> bool:
    """The value from before the collective is the same on every rank as ``call`` runs ``fn``:
    uniform in the helper (config, constants), or computed from parameters alone that the call
    binds to uniform values (a default counts as one)."""
    ev = hub.evaluator(tv)
    pres = []
    kind, evs = reaching(tv, guard.name, guard.call)
    if kind != "events" or not evs:
        return False
    for b in evs:
        if b is guard.call:
            continue
        if not isinstance(b, (ast.Assign, ast.AnnAssign)) or b.value is None:
            return False
        pres.append(b.value)
    if not pres:
        return False
    if all(ev.value(v).uniform for v in pres):
        return True
    s = _Slice(hub, tv, fn, None, _MAX_DEPTH).run([(v, "value") for v in pres])
    if not s.params or not _params_only(tv, fn, pres):
        return False
    cev = hub.evaluator(view)
    names = set(param_names(fn))
    for p, _m in s.params:
        if p not in names:
            return False
        a = passed.get(p)
        if a is not None and not cev.value(a).uniform:
            return False
    return True


def _params_only(view, fn, exprs) -> bool:
    """Every name the expressions (and the local bindings they read, transitively) use is a
    parameter of ``fn``, a name bound in ``fn`` from such names, or a builtin/module name: nothing
    else the value could come from."""
    seen = set()
    todo = list(exprs)
    while todo:
        e = todo.pop()
        for n in ast.walk(e):
            if not isinstance(n, ast.Name) or not isinstance(n.ctx, ast.Load) or id(n) in seen:
                continue
            seen.add(id(n))
            if comp_binder(n) is not None:
                continue
            kind, evs = reaching(view, n.id, n)
            if kind == "param":
                continue
            if kind == "events":
                for b in evs:
                    if isinstance(b, (ast.Assign, ast.AnnAssign, ast.AugAssign)) and b.value is not None:
                        todo.append(b.value)
                    else:
                        return False
                continue
            if kind == "none" and (n.id in view.imports or hasattr(builtins, n.id)):
                continue
            return False
    return True


__all__ = ["Guard", "guards_of", "skipped_sync", "unsynced_trip"]
