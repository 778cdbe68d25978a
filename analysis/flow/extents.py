"""Extents: how many items a sequence or an iterable has on this rank (the trip count of a loop
over it), for the shape analysis (``shapes.Shapes`` mixes this in).

Rank-varying: a list grown under a test on this rank's data (or in a loop whose trip count
varies), a comprehension filtered by a rank-varying test (except the symmetric ``r == rank`` /
``r != rank`` over a ``range``), this rank's piece of an uneven split, the contents of a file
whose name depends on the rank (or the files a per-rank pattern matches), a generator that yields
in a loop over such a source, a project Dataset / iterable whose ``__len__`` / ``__iter__`` reads
one, and a DataLoader over such a dataset without a ``DistributedSampler``.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, parent
from .bindings import LOOPS, reaching, target_path
from .calls import scope_calls
from .helper_calls import is_method, resolved
from .uniformity import RANK, Src, X as VX, join
from .values import summary
from .shape_facts import (
    SU,
    SX,
    Sh,
    _DIST_SAMPLER,
    _LISTERS,
    _MUTATORS,
    _SPLITTERS,
    _terminal,
    _text,
    join_any,
    join_paths,
)

# where the walks up from a node stop (module-level tuples: the walks test one per level)
_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)
_FUNCS_OR_MODULE = (*FUNC_TYPES, ast.Module)


class Extents:
    """Mixed into ``shapes.Shapes``: lengths, trip counts and the project's data sources."""

    def _enclosing_loop_extent(self, node, d) -> Sh | None:
        """A counter bumped in a loop whose trip count varies (``n += 1`` per line of this rank's
        shard) is rank-varying."""
        p = parent(node)
        while p is not None and not isinstance(p, _SCOPES):
            if isinstance(p, (ast.For, ast.AsyncFor)) and node is not p.iter:
                sh = self.shape(p.iter, d)
                if sh.kind == "V":
                    return Sh("V", sh.src)
            p = parent(p)
        return None

    def _mutations(self, e, d) -> Sh | None:
        """A list grown (``append``/``extend``) under a rank-varying test or in a loop with a
        rank-varying trip count has a rank-varying length."""
        scope = self.sem.scope_of(e)
        idx = self.view.memo.setdefault("shapes.mutations", {})
        per = idx.get(id(scope))
        if per is None:
            per = idx[id(scope)] = {}
            for n in scope_calls(self.view, scope):
                f = n.func
                if f.__class__ is ast.Attribute and f.attr in _MUTATORS and f.value.__class__ is ast.Name:
                    per.setdefault(f.value.id, []).append(n)
        deps = None
        for c in per.get(e.id, ()):
            if (c.lineno, c.col_offset) > (e.lineno, e.col_offset) and not self._in_loop_with(c, e):
                continue
            if c.func.attr in ("pop", "remove", "clear", "discard", "popleft"):
                continue
            why = self._growth(c, d)
            if why is not None:
                if why.kind == "V":
                    return why
                deps = (deps or frozenset()) | why.deps
        # grown once per item of a parameter (``for b in loader: outs.append(...)``): as long as
        # what the caller passes
        return Sh("U", deps=deps) if deps else None

    def _in_loop_with(self, c, e) -> bool:
        p = parent(c)
        while p is not None and not isinstance(p, _FUNCS_OR_MODULE):
            if isinstance(p, LOOPS):
                n = parent(e)
                while n is not None:
                    if n is p:
                        return True
                    n = parent(n)
            p = parent(p)
        return False

    def _growth(self, c, d) -> Sh | None:
        """Why ``c`` grows its list a rank-varying number of times (a ``V`` fact), or how that
        number depends on the parameters (``U`` with deps: the innermost loop over a parameter),
        or None."""
        deps = None
        if c.func.attr == "extend" and c.args:
            sh = self.shape(c.args[0], d)
            if sh.kind == "V":
                return Sh("V", sh.src, frozenset({0}))
        child, p = c, parent(c)
        while p is not None and not isinstance(p, _SCOPES):
            if isinstance(p, (ast.If, ast.While)) and child is not p.test:
                v = self.ev.value(p.test)
                # data, clocks and random numbers: a rank test is usually one of the symmetric
                # ``for r in range(world): if r == rank:`` kind (as in ``uniformity``)
                if v.varying and v.src.cat != RANK:
                    src = v.src
                    return Sh("V", Src(src.cat, f"{src.desc}, which decides whether line {c.lineno} adds an item",
                                       src.line, src.path), frozenset({0}))
            if isinstance(p, (ast.For, ast.AsyncFor)) and child is not p.iter:
                sh = self.shape(p.iter, d)
                if sh.kind == "V":
                    return Sh("V", sh.src, frozenset({0}))
                if sh.kind == "U" and sh.deps and deps is None:
                    deps = items_of(sh)
            child, p = p, parent(p)
        return deps

    def _padded_first(self, base, use) -> bool:
        """The list ``base`` (a name, or a ``self`` attribute) grows in place before ``use``
        (``ids += ids[:extra]``, ``ids.extend(...)``): a rank's slice of it may be of a list padded
        to a multiple of the world size, as ``DistributedSampler`` pads."""
        if isinstance(base, ast.Name):
            kind, evs = reaching(self.view, base.id, base)
            if kind != "param" and any(ev.__class__ is ast.AugAssign for ev in evs or ()):
                return True
            scope = self.sem.scope_of(base)
            for c in scope_calls(self.view, scope):
                f = c.func
                if f.__class__ is ast.Attribute and f.attr in ("extend", "append", "insert") \
                        and f.value.__class__ is ast.Name and f.value.id == base.id \
                        and (c.lineno, c.col_offset) < (use.lineno, use.col_offset):
                    return True
            return False
        if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == "self":
            vals = self.hub.self_attr_bindings(self.view, base) or ()
            return any(isinstance(v, ast.stmt) for v in vals)
        return False

    def _comp_value(self, node, comp, d=0):
        """Uniformity of ``node`` in a comprehension, its targets standing for the elements of
        their iterables (the general evaluator does not see into comprehension scopes)."""
        if d > 12:
            return VX
        t = node.__class__
        if t is ast.Name:
            for g in comp.generators:
                path = target_path(g.target, node.id)
                if path is not None:
                    return self.ev.element(g.iter, 0)
            return self.ev.value(node)
        if t is ast.Compare:
            if any(isinstance(o, (ast.Is, ast.IsNot)) for o in node.ops):
                return VX
            parts = [node.left, *node.comparators]
        elif t is ast.BoolOp:
            parts = node.values
        elif t is ast.BinOp:
            parts = [node.left, node.right]
        elif t is ast.UnaryOp:
            parts = [node.operand]
        elif t is ast.Subscript:
            parts = [node.value, node.slice]
        elif t is ast.Attribute:
            parts = [node.value]
        elif t is ast.Call:
            if _terminal(node.func) in ("isinstance", "hasattr", "callable", "getattr"):
                return VX
            parts = [*node.args, *((node.func.value,) if isinstance(node.func, ast.Attribute) else ())]
        elif t is ast.Constant:
            return self.ev.value(node)
        else:
            return self.ev.value(node)
        vals = [self._comp_value(x, comp, d + 1) for x in parts]
        v = join(vals)
        return v

    def _value_deps(self, expr) -> frozenset:
        """(fn, param, "val") for the parameters whose value ``expr`` is computed from."""
        out = set()
        for n in ast.walk(expr):
            if isinstance(n, ast.Name):
                kind, got = reaching(self.view, n.id, n)
                if kind == "param":
                    out.add((id(got), n.id, "val"))
            elif isinstance(n, ast.Lambda):
                return frozenset()
        return frozenset(out)

    def _comprehension(self, e, d) -> Sh:
        parts = []
        for g in e.generators:
            for cond in g.ifs:
                v = self._comp_value(cond, e)
                if v.varying and not (v.src.cat == RANK and _symmetric_rank_test(cond, e)):
                    return Sh("V", Src(v.src.cat, f"{v.src.desc}, which filters the items of line {e.lineno}",
                                       v.src.line, v.src.path), frozenset({0}))
            parts.append(self.shape(g.iter, d))
        got = join_any(parts)
        if got.kind == "V":
            return Sh("V", got.src, frozenset({0}))
        return got if not isinstance(e, (ast.SetComp, ast.DictComp)) or got.kind != "U" else SX

    def _uneven_split(self, base, d) -> bool:
        for _ in range(4):
            if isinstance(base, ast.Call):
                qn = self.sem.call_qualname(base)
                if qn in _SPLITTERS:
                    return True
                if qn is None and isinstance(base.func, ast.Attribute) and base.func.attr in ("chunk", "tensor_split"):
                    return True
                return False
            if isinstance(base, ast.Name):
                kind, evs = reaching(self.view, base.id, base)
                if kind == "events" and evs and len(evs) == 1 and isinstance(evs[0], ast.Assign) \
                        and len(evs[0].targets) == 1 and isinstance(evs[0].targets[0], ast.Name):
                    base = evs[0].value
                    continue
            return False
        return False

    def _per_rank_file(self, e, d) -> Sh:
        """Contents of a file (or the files a pattern matches) whose name depends on the rank."""
        args = [*e.args, *(k.value for k in e.keywords if k.arg in ("file", "f", "path", "pathname", "fname",
                                                                    "filepath_or_buffer", "name", "dataset_path"))]
        if isinstance(e.func, ast.Attribute) and self.sem.call_qualname(e) is None:
            args.append(e.func.value)
        for a in args[:2]:
            v = self.ev.value(a)
            if v.varying and v.src.cat == RANK:
                qn = self.sem.call_qualname(e) or ""
                lists = qn in _LISTERS or qn == "pathlib.Path.glob" or _terminal(e.func) in ("glob", "rglob", "iterdir")
                what = (f"the files that `{_text(a)}` matches, a path named after the rank" if lists
                        else f"the contents of `{_text(a)}`, a file named after the rank")
                return Sh("V", Src(RANK, f"{what} ({v.src.desc})", e.lineno, self.view.path), frozenset({0}))
            s = self.shape(a, d) if isinstance(a, ast.Name) else SX
            if s.kind == "V" and s.src.cat == RANK:
                return Sh("V", s.src, frozenset({0}))
            if v.kind == "X":
                # a path built from parameters (``f"{root}/shard_{shard_id}.txt"``): per rank when the
                # caller's argument is the rank
                deps = self._value_deps(a)
                if deps:
                    return Sh("U", deps=frozenset((f, p, "file") for f, p, _m in deps))
        return SX

    def _elements(self, seq, d):
        """Shapes of the items appended to the list ``seq`` (a name), or None."""
        if not isinstance(seq, ast.Name):
            return None
        scope = self.sem.scope_of(seq)
        self._mutations(seq, d)  # builds the index
        calls = self.view.memo.get("shapes.mutations", {}).get(id(scope), {}).get(seq.id, [])
        out = [self.shape(c.args[0], d) for c in calls if c.func.attr == "append" and c.args]
        return out or None

    def loader(self, e, d) -> Sh:
        for kw, pos in (("sampler", 2), ("batch_sampler", 3)):
            s = get_arg(e, None, kw)
            if s is not None and not (isinstance(s, ast.Constant) and s.value is None):
                return SU if self._dist_sampler(s) else self._sampler(s, d)
        ds = get_arg(e, 0, "dataset")
        if ds is None:
            return SX
        sh = self.shape(ds, d)
        if sh.kind == "V":
            if sh.src.cat != RANK:
                return SX
            return Sh("V", Src(RANK, f"the dataset holds this rank's own items ({sh.src.desc}) and is loaded "
                                     "without a DistributedSampler", sh.src.line, sh.src.path), frozenset({0}))
        return sh if sh.kind == "U" and sh.deps else SX

    def _dist_sampler(self, s) -> bool:
        if isinstance(s, ast.Call):
            qn = self.sem.call_qualname(s) or ""
            return qn == _DIST_SAMPLER or "Distributed" in (_terminal(s.func) or "")
        if isinstance(s, ast.Name):
            kind, evs = reaching(self.view, s.id, s)
            return kind in ("events", "global") and bool(evs) and all(
                isinstance(x, ast.Assign) and self._dist_sampler(x.value) for x in evs)
        return False

    def _sampler(self, s, d) -> Sh:
        """How many indices a project sampler given to a ``DataLoader`` hands this rank: its
        ``__iter__`` (``object_extent``), bound to the constructor's arguments.
        Rank-varying only by the rank (``indices[rank::world]`` with no padding); a sampler whose
        ``__iter__`` never ends, or one the analysis cannot follow, is unknown."""
        for _ in range(4):
            if isinstance(s, ast.Name):
                kind, evs = reaching(self.view, s.id, s)
                if kind != "events" or not evs or len(evs) != 1 or not isinstance(evs[0], ast.Assign) \
                        or len(evs[0].targets) != 1 or not isinstance(evs[0].targets[0], ast.Name):
                    return SX
                s = evs[0].value
                continue
            break
        if not isinstance(s, ast.Call):
            return SX
        target = resolved(self.hub, self.view, s)
        if target is None or getattr(target[1], "name", "") != "__init__":
            return SX
        tv, init = target
        other = self if tv is self.view else type(self).of(self.hub, tv)
        cls = parent(init)
        for m in getattr(cls, "body", ()):
            if isinstance(m, FUNC_TYPES) and m.name == "__iter__" and any(
                    isinstance(n, ast.While) for n in iter_scope_nodes(m)):
                return SX  # an endless (or self-refilling) index stream
        got = self.bind(other.object_extent(init, sampler=True), s, init, d, f"`{_terminal(s.func)}()`")
        if got.kind == "V" and got.src.cat == RANK:
            return Sh("V", Src(RANK, f"the sampler hands this rank its own indices with no padding ({got.src.desc})",
                               got.src.line, got.src.path), frozenset({0}))
        return SX

    def returns(self, fn, mode, index: int | None = None) -> Sh:
        """The size or shape of what ``fn`` returns (element ``index`` of the tuple every
        ``return`` spells, when given)."""
        def compute():
            self.hub._view_stack.append(self.view)
            try:
                return self._returns(fn, mode, index)
            finally:
                self.hub._view_stack.pop()

        # a recursion reads as unknown, and what it made is not memoised for good (``values.summary``)
        return summary(self.hub.cut_state, self.view.memo.setdefault("shapes.returns", {}), (id(fn), mode, index),
                       compute, SX)

    def _returns(self, fn, mode, index: int | None = None) -> Sh:
        if isinstance(fn, ast.Lambda):
            return SX
        rets, yields = [], []
        for n in iter_scope_nodes(fn):
            if n.__class__ is ast.Return:
                rets.append(n.value)
            elif n.__class__ in (ast.Yield, ast.YieldFrom):
                yields.append(n)
        if yields:
            return self._generator_extent(fn, yields) if mode == "shape" and index is None else SX
        if not rets or len(rets) > 12:
            return SX
        if index is not None:
            # ``return torch.cat(embs), torch.cat(ids)``: that element of each tuple returned
            if not all(isinstance(r, ast.Tuple) and index < len(r.elts)
                       and not any(isinstance(x, ast.Starred) for x in r.elts) for r in rets):
                return SX
            rets = [r.elts[index] for r in rets]
        fn_ = self.size if mode == "size" else self.shape
        return join_paths(fn_(r) if r is not None else SX for r in rets)

    def _generator_extent(self, fn, yields) -> Sh:
        """How many items a generator yields: varying when a ``yield`` sits in a loop with a
        varying trip count or under a rank-varying test."""
        facts = []
        for y in yields:
            if isinstance(y, ast.YieldFrom):
                facts.append(self.shape(y.value))
            child, p = y, parent(y)
            while p is not None and p is not fn:
                if isinstance(p, (ast.For, ast.AsyncFor)) and child is not p.iter:
                    facts.append(self.shape(p.iter))
                elif isinstance(p, (ast.If, ast.While)) and child is not p.test:
                    v = self.ev.value(p.test)
                    if v.varying and v.src.cat == RANK:
                        facts.append(Sh("V", v.src, frozenset({0})))
                child, p = p, parent(p)
        vary = [s for s in facts if s.kind == "V"]
        if vary:
            return Sh("V", vary[0].src, frozenset({0}))
        deps = [s for s in facts if s.kind == "U" and s.deps]
        return join_any(deps) if deps else SX

    def _endless(self, it) -> bool:
        """``it`` may never end: ``itertools.count/cycle/repeat``, or a call of a project
        generator that yields inside ``while True:``."""
        if not isinstance(it, ast.Call):
            return False
        qn = self.sem.call_qualname(it) or ""
        if qn in ("itertools.count", "itertools.cycle", "itertools.repeat"):
            return True
        target = resolved(self.hub, self.view, it)
        if target is None:
            return False
        for n in iter_scope_nodes(target[1]):
            if isinstance(n, ast.While) and isinstance(n.test, ast.Constant) and n.test.value:
                return True
        return False

    def object_extent(self, init, sampler: bool = False) -> Sh:
        """The number of items of an instance of ``init``'s class (a Dataset or an iterable):
        from ``__len__`` and ``__iter__``, with ``self.`` attributes bound to ``__init__``'s
        parameters. A ``Sampler`` subclass only when ``sampler`` (asked by ``loader`` for the
        indices it hands a ``DataLoader``)."""
        memo = self.view.memo.setdefault("shapes.objects", {})
        key = (id(init), sampler)
        got = memo.get(key)
        if got is None:
            memo[key] = SX
            cls = parent(init)
            facts = []
            if not sampler and any((_terminal(b) or "").endswith("Sampler") for b in getattr(cls, "bases", ())):
                # as an iterable of its own, a sampler shards by rank by design and answers for
                # the counts it hands out (DistributedSampler pads; training samplers are often
                # endless)
                return SX
            # a sampler: the indices ``__iter__`` hands out (``__len__`` is only what it reports)
            wanted = ("__iter__",) if sampler else ("__len__", "__iter__")
            for m in getattr(cls, "body", ()):
                if isinstance(m, FUNC_TYPES) and m.name in wanted:
                    facts.append(self.returns(m, "size" if m.name == "__len__" else "shape"))
            vary = [s for s in facts if s.kind == "V"]
            if vary:
                got = vary[0]
            else:
                known = [s for s in facts if s.kind == "U" and s.deps and all(fid == id(init) for fid, _p, _m in s.deps)]
                got = join_any(known) if known else SX
            memo[key] = got
        return got

    @classmethod
    def of(cls, hub, view):
        """The analyser of ``view`` for this analysis, built once (facts are memoised on it)."""
        cache = hub.__dict__.setdefault("_shapes", {})
        got = cache.get(id(view))
        if got is None:
            got = cache[id(view)] = cls(hub, view)
        return got

    def trip_count(self, it, more_sites=None) -> Sh:
        """The trip count of ``for x in it`` from the rank's own shard (rank-varying, category
        RANK) or unknown: values computed from this rank's batches do not count here.

        A loop over a parameter (``def evaluate(loader): for b in loader``), or over a ``self``
        attribute that ``__init__`` stores from one (``self.loader = loader``), is judged at the
        calls of that function (``evaluate(shard_loader)``, ``Evaluator(model, shard_loader)``):
        in this module, and through ``more_sites(view, fn)`` (``(view, call)`` pairs: a rule's
        project callers) in the project's other files. One call that passes this rank's own shard
        is enough: the loop runs over it whenever that call runs."""
        sh = self.shape(it)
        if sh.kind == "V" and sh.src.cat == RANK:
            return sh
        if sh.kind == "U" and sh.deps:
            return self._at_callers(sh, it, more_sites)
        return SX

    def at_callers(self, fact: Sh, at, more_sites=None) -> Sh:
        """``fact`` when it is symbolic in the parameters of the function around ``at``: as its
        calls bind them (``_at_callers``: rank-varying by the rank at one call, else unknown);
        any other fact as it is. A tensor concatenated from the batches of a ``loader``
        parameter (``def evaluate(loader)``) is rank-varying where a call passes this rank's own
        shard."""
        if fact.kind == "U" and any(m == "items" for _f, _p, m in fact.deps):
            return self._at_callers(fact, at, more_sites)
        return fact

    def _at_callers(self, fact: Sh, at, more_sites, depth: int = 0) -> Sh:
        """``fact``, symbolic in the parameters of one function (the function around ``at``, or
        the ``__init__`` of its class), as a call of that function binds them: the first binding
        that is rank-varying by the rank, else unknown. A method is judged at the calls that
        resolve to it (``self.train_epoch(loader)``, ``Trainer(cfg).fit(loader)``); a binding that
        is itself symbolic in the caller's parameters (``def fit(self, loader):
        self.train_epoch(loader)``) is judged at that caller's calls in turn (two steps up)."""
        fids = {f for f, _p, _m in fact.deps}
        fn = _dep_function(at, fids.pop()) if len(fids) == 1 else None
        if fn is None:
            return SX
        owner = parent(fn)
        method = False
        if isinstance(owner, ast.ClassDef) and fn.name == "__init__" and isinstance(parent(owner), ast.Module):
            name = owner.name
        elif isinstance(owner, ast.Module):
            name = fn.name
        elif isinstance(owner, ast.ClassDef) and isinstance(parent(owner), ast.Module) and is_method(fn):
            name, method = fn.name, True
        else:
            return SX
        from .calls import calls_by_name

        if method:
            sites = [(self.view, c) for c in self.view.sem.calls
                     if isinstance(c.func, ast.Attribute) and c.func.attr == name]
        else:
            sites = [(self.view, c) for c in calls_by_name(self.view).get(name, ())]
        if more_sites is not None:
            sites.extend(more_sites(self.view, fn))
        for cv, call in sites[:16]:
            target = self.hub.resolve_call(cv, call)
            if target is None or target[1] is not fn:
                continue
            other = self if cv is self.view else type(self).of(self.hub, cv)
            here = "" if cv is self.view else f" of `{cv.path}`"
            got = other.bind(fact, call, fn, 0, f"`{name}()` at line {call.lineno}{here}")
            if got.kind == "U" and got.deps and depth < 2:
                got = other._at_callers(got, call, more_sites if cv is self.view else None, depth + 1)
            if got.kind == "V" and got.src.cat == RANK:
                return got
        return SX


def items_of(sh: Sh) -> Sh:
    """``sh`` (symbolic in parameters' shapes) as the number of items those parameters yield:
    the length of a list grown once per item of a ``loader`` parameter. Bound like a shape at a
    call (``Shapes.bind``), but no shape sink (``sinks``): the tensor built from the items is
    judged where it is made, at its function's callers (``at_callers``)."""
    return Sh("U", deps=frozenset((f, p, "items" if m == "shape" else m) for f, p, m in sh.deps))


def _symmetric_rank_test(cond, comp) -> bool:
    """``r == rank`` / ``r != rank`` with ``r`` a target iterating ``range(...)``: every rank
    keeps the same number of items (one, or all but one)."""
    if not (isinstance(cond, ast.Compare) and len(cond.ops) == 1 and isinstance(cond.ops[0], (ast.Eq, ast.NotEq))):
        return False
    for side in (cond.left, cond.comparators[0]):
        if isinstance(side, ast.Name):
            for g in comp.generators:
                if isinstance(g.target, ast.Name) and g.target.id == side.id and isinstance(g.iter, ast.Call) \
                        and _terminal(g.iter.func) == "range":
                    return True
    return False

def _dep_function(at, fid):
    """The function whose ``id`` is ``fid``: the function around ``at``, or, for a method, the
    ``__init__`` of its class (where ``self`` attributes are bound from parameters)."""
    fn = at
    while fn is not None and not isinstance(fn, FUNC_TYPES):
        fn = parent(fn)
    if fn is None:
        return None
    if id(fn) == fid:
        return fn
    cls = parent(fn)
    if isinstance(cls, ast.ClassDef):
        for st in cls.body:
            if isinstance(st, FUNC_TYPES) and st.name == "__init__" and id(st) == fid:
                return st
    return None
