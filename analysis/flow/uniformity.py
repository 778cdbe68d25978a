"""Uniformity: is a value the same on every rank (uniform), different per rank (rank-varying), or unknown?

Rank-varying sources: the process rank (``get_rank()``, ``RANK``/``LOCAL_RANK``/``SLURM_PROCID``,
the index an ``mp.spawn`` target receives, the current device index, names and attributes that
are ranks by name), this rank's data (the batches a loader yields, also by ``next(iter(loader))``,
the elements a generator function of the project yields when they are rank-varying, and everything
computed from them: model outputs, losses, ``.item()``, metrics accumulated over local batches, the contents of files
opened with per-rank names), clocks, and random numbers when the file seeds nothing.

Uniform: constants, parsed arguments and config (``parse_args()``, parameters named ``args``,
``cfg``, ...), ``get_world_size()``, other environment variables, loop counters over uniform
ranges, and values a collective made equal (see ``bindings.EQUALISERS``), also when the value
before the collective still reaches a use only in a world of one process (``flag = ... if rank
== 0 else False; if world_size > 1: flag = <broadcast>``: ``world.world_size_side``) or is
overwritten in its block before the use.

Values propagate through expressions, assignments, augmented assignments, tuples, containers, ``self.``
attributes and function returns (``summaries``, a tuple's element by its place), and by control dependence:
a binding made only under a test on this rank's data or the clock is rank-varying (an early-stopping
``patience`` counter). Unknown is the answer whenever in doubt; rules report only rank-varying values.
"""
from __future__ import annotations

import ast
import re

from ..torch_api import D
from ..semantic import FUNC_TYPES, param_names, parent
from ..semantic import get_arg
from ..semantic import terminal_name as _terminal
from .bindings import comp_binder, reaching, searches_rank, target_path
from .selections import (comprehension_value, even_rank_piece, filtered, iterator_made, picks_element,
                         subscript_value, yielded)
from .params import compared_with_own_rank, constant_at_every_call
from .return_deps import reaching_args
from .optional_syncs import unsynced_trip  # a count a helper equalises only when given a parameter
from .vocab import (  # noqa: F401  (the tables, re-exported)
    _BUILTIN_JOIN, _CLOCKS, _CONFIG_PARAMS, _EXISTS_QNS, _PURE_METHODS, _PURE_PREFIXES, _REPLICATED,
    _RNG_PREFIXES, _RNG_STATES, _RNG_TORCH, _SEEDS, _SHAPE_ATTRS, _SHAPE_METHODS, _SYNC_WORDS, _UNIFORM_QNS,
)
from .returns_at import returns_at, arity_of as _arity
from .values import CLOCK, DATA, RANK, RNG, U, X, Src, Value, _V, _short, built, join, keep  # noqa: F401  (re-exported)

_SCOPES = (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)  # where ``_control_dependent`` stops
RANK_NAME = re.compile(
    r"^_?(?:(?:global|local|world|node|ddp|dist|process|proc|my|cur|current|this|gpu|device|machine)_?)?"
    r"rank(?:_?(?:id|idx|index|num))?$",
    re.I,
)
MAIN_NAMES = frozenset({
    "is_main", "is_main_process", "main_process", "is_master", "master_process", "is_master_process",
    "is_rank_zero", "is_rank0", "rank_zero", "rank0", "is_rank_0", "is_primary", "is_chief",
    "is_local_main_process", "is_local_master", "is_global_zero", "is_world_process_zero",
    "is_local_process_zero", "is_leader", "is_main_rank", "is_master_rank", "is_global_main_process",
    "is_dist_main", "is_logging_process", "is_first_rank", "is_master_node", "is_main_node", "is_local_rank_zero",
    "local_rank_zero", "is_local_main", "is_lead",
})
RANK_ENV = frozenset({"RANK", "LOCAL_RANK", "GLOBAL_RANK", "NODE_RANK", "SLURM_PROCID", "SLURM_LOCALID",
                      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "GROUP_RANK"})
# ``mpi4py``: a process launched by ``mpiexec`` has its rank in the MPI world (the same value as
# ``OMPI_COMM_WORLD_RANK``)
_RANK_QNS = frozenset({D + "get_rank", D + "get_node_local_rank", "torch.cuda.current_device",
                       D + "get_global_rank_DUMMY", "mpi4py.MPI.COMM_WORLD.Get_rank"})
_DATA_SRC_NAME = re.compile(r"(^|_)(data)?loader(s)?$|^(train|val|valid|eval|test|dev)_?(data)?(loader|dl|iter)$", re.I)
_LOADER_QNS = frozenset({"torch.utils.data.DataLoader", "torchdata.stateful_dataloader.StatefulDataLoader"})
_PARSE_METHODS = frozenset({"parse_args", "parse_known_args", "parse_args_into_dataclasses"})
_SAMPLER_QN = "torch.utils.data.DistributedSampler"
from .vocab import _FLIP, _int_vals, _placed, _progress_wrapper, _rank_compare_uniform, env_key  # noqa: E402,F401,E501


class Evaluator:
    """Uniformity of expressions in one module view (memoised per node)."""

    def __init__(self, hub, view, ctx=None):
        self.hub = hub
        self.view = view
        self.sem = view.sem
        self.ctx = ctx  # a call-site context (see ``context``), or None
        if ctx is None:
            self.memo: dict[int, Value] = view.memo.setdefault("values", {})
            self.bmemo: dict = view.memo.setdefault("binding_values", {})
            self.base = None
        else:
            self.memo = ctx.memo.setdefault("values", {})
            self.bmemo = ctx.memo.setdefault("binding_values", {})
            self.base = hub.evaluator(view)
        self.active: set = set()
        self.cs = hub.cut_state  # the check's cuts, shared with its other evaluators (``values.keep``)
        self.mid, self.bmid = id(self.memo), id(self.bmemo)
        self.tmemo: dict[int, Value] = {}  # trip counts asked at the top (``trip_count``)

    # -- entry points ----------------------------------------------------------------------
    def value(self, expr: ast.AST | None, depth: int = 0) -> Value:
        if expr is None:
            return U
        if (got := self.memo.get(key := id(expr))) is not None:
            return got
        if self.base is not None:
            got = self.base.memo.get(key)
            if got is not None and got.kind == "V":
                return got  # rank-varying whatever the parameters are
        cs, sk = self.cs, (self.mid, key)
        if not cs.busy and sk in cs.tops:
            return cs.tops[sk]
        if (got := cs.scratch.get(sk)) is not None or depth > 40 or key in self.active:
            cs.n += 1
            return X if got is None else got
        self.active.add(key)
        cs.busy += 1
        cuts = cs.n
        try:
            v = self._value(expr, depth + 1)
        except RecursionError:
            v = X
            cs.n += 1
        finally:
            self.active.discard(key)
            cs.busy -= 1
        return keep(cs, sk, key, v, cuts, self.memo)

    # -- expressions -----------------------------------------------------------------------
    def _value(self, e: ast.AST, d: int) -> Value:
        t = e.__class__
        if t is ast.Constant:
            return U
        if t is ast.Name:
            return self._name(e, d)
        if t is ast.Attribute:
            return self._attribute(e, d)
        if t is ast.Call:
            return self._call(e, d)
        if t is ast.Compare:
            return self._compare(e, d)
        if t is ast.BoolOp:
            return join(self.value(v, d) for v in e.values)
        if t is ast.BinOp:
            return join((self.value(e.left, d), self.value(e.right, d)))
        if t is ast.UnaryOp:
            if isinstance(e.op, ast.Not) and isinstance(e.operand, ast.Name):
                from .symbolic import padded_length  # lazy: symbolic follows helpers
                got = padded_length(self, e.operand, d)
                if got is not None:
                    return got  # ``not lst``: its length decides
            return self.value(e.operand, d)
        if t is ast.IfExp:
            return join((self.value(e.test, d), self.value(e.body, d), self.value(e.orelse, d)))
        if t in (ast.Tuple, ast.List, ast.Set):
            return join(self.value(x, d) for x in e.elts)
        if t is ast.Dict:
            return join([self.value(x, d) for x in e.keys if x is not None] + [self.value(x, d) for x in e.values])
        if t is ast.JoinedStr:
            return join(self.value(x, d) for x in e.values)
        if t is ast.FormattedValue:
            return self.value(e.value, d)
        if t is ast.Subscript:
            env = env_key(self.view, e)
            if env is not None:
                return self._env(env, e)
            return subscript_value(self, e, d)  # ``get_sizes()[2]``: that element of a returned tuple
        if t is ast.Slice:
            return join((self.value(e.lower, d), self.value(e.upper, d), self.value(e.step, d)))
        if t is ast.Starred:
            return self.value(e.value, d)
        if t is ast.NamedExpr:
            return self.value(e.value, d)
        if t is ast.Await:
            return self.value(e.value, d)
        if t in (ast.ListComp, ast.SetComp, ast.GeneratorExp):
            return comprehension_value(self, e, d)  # its elements, or the rank's test that keeps them
        if t is ast.DictComp:
            v = join((self.value(e.key, d), self.value(e.value, d)))
            return v if v.varying else X
        return X

    def _env(self, key: str, node: ast.AST) -> Value:
        if key in RANK_ENV:
            return _V(self.view, RANK, f"the process rank from `{key}`", node)
        return U if key else X

    def _compare(self, e: ast.Compare, d: int) -> Value:
        parts = [e.left, *e.comparators]
        if len(e.ops) == 1:
            op = e.ops[0]
            a, b = e.left, e.comparators[0]
            if isinstance(op, (ast.Is, ast.IsNot)) and (_is_none(b) or _is_none(a)):
                # ``x is None``: whether a value exists, not what it is; rank-varying only where a
                # rank-varying test chooses between None and a value that is never None
                from .nones import none_ness  # lazy: nones asks this evaluator back
                return none_ness(self, a if _is_none(b) else b, d)
            if isinstance(op, (ast.In, ast.NotIn)) and isinstance(a, ast.Constant) and isinstance(a.value, str):
                if self.hub.dict_has_key(self.view, b, a.value):
                    return U  # ``"loss" in out``: every dict ``out`` can be holds the key
            for x, y, o in ((a, b, op), (b, a, _FLIP.get(type(op), type(op))())):
                consts = _int_vals(y)
                if consts is not None:
                    vx = self.value(x, d)
                    if vx.varying and vx.src.cat == RANK and _rank_compare_uniform(o, consts):
                        return U
                    if vx.varying:
                        return vx
        return join(self.value(p, d) for p in parts)

    def _name(self, e: ast.Name, d: int) -> Value:
        g = comp_binder(e)
        if g is not None:  # a comprehension's own variable (its own scope): an element of its iterable
            from .mutations import iterated_keys  # lazy: mutations sits above bindings only
            got = iterated_keys(self, g.iter, target_path(g.target, e.id), d)  # or a dict's key
            return self.element(g.iter, d) if got is None else got
        kind, got = reaching(self.view, e.id, e)
        if kind == "param":
            return self.param_value(got, e.id, e)
        if kind == "none":
            if e.id in MAIN_NAMES:
                return _V(self.view, RANK, f"the process rank from `{e.id}`", e)
            return X
        vals = [self.binding_value(ev, e.id, d) for ev in got]
        if kind in ("events", "events+param") and any(v.varying for v in vals):
            # a binding that reaches the use only in a world of one process cannot differ between ranks
            # (``flag = ... if rank == 0 else False`` then ``if world_size > 1: flag = <broadcast>``),
            # nor one a later assignment of its own block overwrites before the use (``reaching``
            # keeps every binding after the last dominating one)
            from .world import alone_only, overwritten  # lazy: world asks this evaluator back
            vals = [U if v.varying and (overwritten(ev, e) or alone_only(self, ev, e)) else v
                    for ev, v in zip(got, vals)]
        if kind == "events+param":
            vals.append(X)
        if kind == "global" and not vals:
            return X
        if vals and not any(v.varying for v in vals):
            from .mutations import written_values  # lazy: mutations sits above bindings only
            vals.extend(written_values(self, e, got, d))
        # the last candidate (in source order) an equaliser: the value was made uniform
        return join(vals) if vals else X

    def param_value(self, fn: ast.AST, name: str, node: ast.AST) -> Value:
        ctx = self.ctx
        if ctx is not None and fn is ctx.fn and name in ctx.binds:
            v = ctx.binds[name]
            src = v.src
            return Value("V", src.step(ctx.passed(name), ctx.call, ctx.call_path))
        if (RANK_NAME.match(name) or name in MAIN_NAMES) and not constant_at_every_call(self.view, self.hub, fn, name) \
                and not compared_with_own_rank(self.view, fn, name, self.hub):
            # a name heuristic only where value flow has no answer: known callers that all pass a
            # constant (``load(..., rank0=False)``) make the parameter uniform, whatever its name,
            # and so does a comparison with the process's own rank (``if get_rank() == rank:``: the
            # parameter designates a rank)
            return _V(self.view, RANK, f"the process rank from parameter `{name}`", node)
        if name in _CONFIG_PARAMS:
            return U
        params = param_names(fn)
        if params and params[0] == name and self.hub.is_spawn_target(self.view, fn):
            return _V(self.view, RANK, f"the process index `mp.spawn` passes as `{name}`", node)
        if _DATA_SRC_NAME.search(name):
            return X
        return X

    def binding_value(self, ev: ast.AST, name: str, d: int) -> Value:
        key = (id(ev), name)
        if (got := self.bmemo.get(key)) is not None:
            return got
        cs, sk = self.cs, (self.bmid, key)
        if not cs.busy and sk in cs.tops:
            return cs.tops[sk]
        if (got := cs.scratch.get(sk)) is not None or key in self.active:
            cs.n += 1
            return X if got is None else got
        self.active.add(key)
        cs.busy += 1
        cuts = cs.n
        try:
            v = self._binding_value(ev, name, d)
            if not v.varying and ev.__class__ in (ast.Assign, ast.AugAssign, ast.AnnAssign):
                v = self._control_dependent(ev, d, name) or v
        finally:
            self.active.discard(key)
            cs.busy -= 1
        return keep(cs, sk, key, v, cuts, self.bmemo)

    def _control_dependent(self, ev: ast.stmt, d: int, name: str = "it") -> Value | None:
        """A binding made only where a test on this rank's data (or the clock) holds
        (``if val_loss > best: patience += 1``) gives a rank-varying value, whatever it assigns."""
        child = ev
        p = parent(ev)
        while p is not None and not isinstance(p, _SCOPES):
            if isinstance(p, (ast.If, ast.While)) and child is not p.test:
                v = self.value(p.test, d + 1)
                # data, clocks and random numbers only: a value set under a rank test is usually
                # shared by a broadcast the analysis may not see (a helper of another package)
                if v.varying and (v.src.cat != RANK or searches_rank(p, ev, name) or picks_element(p, ev)):
                    src = v.src
                    return Value("V", src.step(f"which decides whether line {ev.lineno} assigns `{name}`"))
            child = p
            p = parent(p)
        return None

    def _binding_value(self, ev: ast.AST, name: str, d: int) -> Value:
        t = ev.__class__
        if t is ast.Call:  # an equalising collective
            return U
        if t is ast.Assign:
            for tgt in ev.targets:
                path = target_path(tgt, name)
                if path is not None:
                    return self._unpack(ev.value, path, d, _arity(tgt))
            return X
        if t is ast.AnnAssign:
            return self.value(ev.value, d) if ev.value is not None else X
        if t is ast.AugAssign:
            prev_kind, prev = reaching(self.view, name, ev)
            pv = X
            if prev_kind in ("events", "global") and prev:
                pv = join(self.binding_value(p, name, d + 1) for p in prev if p is not ev)
            elif prev_kind == "none":
                pv = X
            return join((pv, self.value(ev.value, d)))
        if t is ast.NamedExpr:
            return self.value(ev.value, d)
        if t in (ast.For, ast.AsyncFor):
            path = target_path(ev.target, name)
            elem = self.element(ev.iter, d)
            if path and isinstance(ev.iter, ast.Call) and _terminal(ev.iter.func) == "zip" \
                    and self.sem.qualname(ev.iter.func) is None and not ev.iter.keywords:
                if path[0] < len(ev.iter.args) and not any(isinstance(a, ast.Starred) for a in ev.iter.args):
                    return self.element(ev.iter.args[path[0]], d)
                return X
            it = ev.iter
            while isinstance(it, ast.Call) and it.args and _progress_wrapper(self.sem, it):
                it = it.args[0]  # ``tqdm(enumerate(loader))``: the same items, in order
            from .mutations import iterated_keys  # lazy: mutations sits above bindings only
            if (got := iterated_keys(self, it, path, d)) is not None:
                return got  # ``for k, v in x.items()``: the keys, not the values
            if path and isinstance(it, ast.Call) and _terminal(it.func) == "enumerate" \
                    and self.sem.qualname(it.func) is None:
                if path[0] == 0:
                    return U  # the index of this iteration: the same on every rank that runs it
                inner = it.args[0] if it.args else None
                return self.element(inner, d) if inner is not None else X
            return elem
        if t in (ast.With, ast.AsyncWith):
            for item in ev.items:
                if item.optional_vars is not None and target_path(item.optional_vars, name) is not None:
                    return self.value(item.context_expr, d)
            return X
        return X

    def _unpack(self, value: ast.AST, path: list[int], d: int, arity: int | None = None) -> Value:
        while path and isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) > path[0] \
                and not any(isinstance(x, ast.Starred) for x in value.elts):
            value, path, arity = value.elts[path[0]], path[1:], None
        if path and isinstance(value, ast.Call):
            target = self.hub.resolve_call(self.view, value)
            if target is not None:
                elts = self._returns(value, target)[1]
                if elts is not None and path[0] < len(elts):
                    return elts[path[0]]
                got = None if elts is not None or len(path) != 1 else returns_at(self.hub, *target, path[0], arity)
                return got if got is not None else X if elts is not None else self.value(value, d)
        return self.value(value, d)

    def _rank_seed(self, qn: str):
        """The call that seeds the RNG ``qn`` draws from with a rank-varying seed
        (``torch.manual_seed(args.seed + rank)``), or None. Only when every seeding of that RNG in
        the file is per rank: a uniform seed elsewhere may be the one in force."""
        lib = "numpy" if qn.startswith(("numpy.", "np.")) else ("random" if qn.startswith("random.") else "torch")
        memo = self.view.memo.setdefault("rank_seeds", {})
        if lib not in memo:
            memo[lib] = None
            base = self.hub.evaluator(self.view)
            seeds = self.sem.calls_to(*_SEEDS[lib])
            vals = [base.value(c.args[0]) if c.args else X for c in seeds]
            if seeds and all(v.varying and v.src.cat == RANK for v in vals):
                memo[lib] = seeds[0]
        return memo[lib]

    def _returns(self, call: ast.Call, target):
        """What ``target`` returns, under the context of ``call`` when the plain summary cannot
        tell and the call passes a rank-varying value."""
        got = self.hub.returns_of(*target)
        if got[0].kind == "X" and (got[1] is None or all(x.kind == "X" for x in got[1])):
            ctx = self.hub.call_context(self.view, call, target, self.ctx, want_wraps=False)
            if ctx is not None:
                return self.hub.returns_of(*target, ctx=ctx)
        return got

    # -- iteration -------------------------------------------------------------------------
    def is_loader(self, it: ast.AST, d: int = 0) -> ast.AST | None:
        """The DataLoader-like expression ``it`` iterates (through enumerate/tqdm/iter), or None."""
        for _ in range(4):
            if isinstance(it, ast.Call) and it.args and _terminal(it.func) in ("enumerate", "tqdm", "iter", "zip"):
                it = it.args[0]
                continue
            break
        if isinstance(it, ast.Call) and self.sem.call_qualname(it) in _LOADER_QNS:
            return it
        if isinstance(it, ast.Name):
            kind, evs = reaching(self.view, it.id, it)
            if kind in ("events", "global") and evs and len(evs) == 1 and isinstance(evs[0], ast.Assign) \
                    and isinstance(evs[0].value, ast.Call) and self.sem.call_qualname(evs[0].value) in _LOADER_QNS:
                return evs[0].value
        n = _terminal(it) if isinstance(it, (ast.Name, ast.Attribute)) else None
        if n and _DATA_SRC_NAME.search(n):
            return it
        if isinstance(it, ast.Attribute) and (vals := self._self_bound(it)) and all(
                self.sem.call_qualname(v) in _LOADER_QNS for v in vals):
            return it  # ``self.feed``, every binding of which in the class is a DataLoader
        if isinstance(it, ast.Name) and self.hub.sharded_loader(self.view, it):  # ``flow.origins``
            return it
        if self.ctx is not None and isinstance(it, ast.Name) and it.id in self.ctx.loaders:
            kind, fn = reaching(self.view, it.id, it)
            if kind == "param" and fn is self.ctx.fn:
                return it  # the call passes this rank's data source
        return None

    def element(self, it: ast.AST, d: int) -> Value:
        """The value of each element ``for x in it`` yields."""
        if isinstance(it, ast.Call):
            n = _terminal(it.func)
            qn = self.sem.call_qualname(it)
            if qn is None and n == "range":
                return join(self.value(a, d) for a in it.args)
            if qn is None and n in ("zip", "enumerate", "tqdm", "sorted", "reversed", "list", "iter"):
                return join(self.element(a, d) for a in it.args[:1 if n != "zip" else None])
            got = yielded(self, it, d)  # ``selections.yielded``
            if got is not None:
                return got
        elif d < 12 and (made := iterator_made(self, it)) is not None:  # ``it = iter(loader)``, ``next(it)``
            return self.element(made, d + 1)
        if self.is_loader(it, d) is not None:
            v = _V(self.view, DATA, "computed from this rank's batch", it)
            ctx = self.ctx
            if ctx is not None and isinstance(it, ast.Name) and it.id in ctx.loaders:
                v = Value("V", v.src.step(f"from the data source {ctx.passed(it.id)}", ctx.call, ctx.call_path))
            return v
        v = self.value(it, d)
        return v

    def trip_count(self, it: ast.AST, d: int = 0) -> Value:
        """Uniformity of the number of iterations of ``for x in it``: rank-varying only for a
        range over a rank-varying bound, a slice of a sequence with rank-varying bounds (a per-rank
        shard), or a loader over a per-rank dataset without a DistributedSampler; names follow
        their bindings. Anything else is unknown (a module's parameters, a batch's rows)."""
        if d == 0:  # every site of a loop asks about the same loop: once per evaluator
            got = self.tmemo.get(id(it))
            if got is None:
                got = self.tmemo[id(it)] = unsynced_trip(self, it, self._trip_count(it, 0))
            return got
        return self._trip_count(it, d)

    def _trip_count(self, it: ast.AST, d: int) -> Value:
        if d > 12:
            return X
        if isinstance(it, ast.Call):
            n = _terminal(it.func)
            qn = self.sem.call_qualname(it)
            if qn is None and n == "range":
                v = join(self.value(a, d) for a in it.args)
                return v if not (v.varying and v.src.cat == DATA) else X
            if qn is None and n in ("enumerate", "tqdm", "iter", "sorted", "reversed", "list", "tuple") and it.args:
                return self.trip_count(it.args[0], d + 1)
            if qn is None and n == "zip" and it.args:
                return join(self.trip_count(a, d + 1) for a in it.args)
        loader = self.is_loader(it, d)
        if loader is not None:
            return self.loader_trip_count(loader, d)
        if isinstance(it, ast.Subscript) and isinstance(it.slice, ast.Slice):
            sl = it.slice
            from .symbolic import strided_even, width_atoms  # lazy: symbolic asks ``bindings`` only
            parts = width_atoms(sl)
            if parts is None and strided_even(self.view, it.value, sl, self.hub):
                parts = []  # ``pieces[rank::world]`` of a multiple of ``world`` pieces
            if parts is not None:
                v = join(self.value(x, d) for x in parts)
                return v if v.varying and v.src.cat != DATA else (U if v.kind == "U" else X)
            v = join(self.value(x, d) for x in (sl.lower, sl.upper, sl.step) if x is not None)
            if v.varying and v.src.cat != DATA:
                return v
            return X
        if isinstance(it, ast.Name):
            kind, evs = reaching(self.view, it.id, it)
            if kind in ("events", "global") and evs:
                vals = []
                for ev in evs:
                    if isinstance(ev, ast.Assign) and len(ev.targets) == 1 and isinstance(ev.targets[0], ast.Name):
                        vals.append(self.trip_count(ev.value, d + 1))
                    else:
                        vals.append(X)
                return join(vals)
        return X

    def loader_trip_count(self, loader: ast.AST, d: int) -> Value:
        if (vals := self._self_bound(loader)) and d < 12 and all(self.sem.call_qualname(v) in _LOADER_QNS for v in vals):
            return join(self.loader_trip_count(v, d + 1) for v in vals)
        if not isinstance(loader, ast.Call) or self.sem.call_qualname(loader) not in _LOADER_QNS:
            return X
        for kw in ("sampler", "batch_sampler"):
            s = get_arg(loader, None, kw)
            if s is not None and not (isinstance(s, ast.Constant) and s.value is None):
                return U if self._is_dist_sampler(s) else X
        ds = get_arg(loader, 0, "dataset")
        if ds is None:
            return X
        v = self.dataset_trip_count(ds, d)
        if v.varying and v.src.cat == RANK:
            return _V(self.view, RANK, f"the dataset is this rank's own shard ({v.src.desc}), "
                      "loaded without a DistributedSampler", loader)
        return X

    def dataset_trip_count(self, ds: ast.AST, d: int) -> Value:
        """A dataset built from a per-rank shard (``ShardDataset(files[rank::world])``)."""
        if isinstance(ds, ast.Name):
            kind, evs = reaching(self.view, ds.id, ds)
            if kind in ("events", "global") and evs and all(isinstance(e, ast.Assign) for e in evs):
                return join(self.dataset_trip_count(e.value, d + 1) for e in evs)
            return X
        if isinstance(ds, ast.Call) and d < 12:
            args = [*ds.args, *(k.value for k in ds.keywords)]
            for a in args:
                v = self.trip_count(a, d + 1)
                if v.varying:
                    return v
        return self.trip_count(ds, d + 1)

    def _is_dist_sampler(self, s: ast.AST) -> bool:
        if isinstance(s, ast.Call):
            qn = self.sem.call_qualname(s) or ""
            return qn == _SAMPLER_QN or "Distributed" in (_terminal(s.func) or "")
        if isinstance(s, ast.Name):
            kind, evs = reaching(self.view, s.id, s)
            if kind in ("events", "global") and evs:
                return all(isinstance(e, ast.Assign) and self._is_dist_sampler(e.value) for e in evs)
        return bool(vals := self._self_bound(s)) and all(self._is_dist_sampler(v) for v in vals)  # ``self.x``

    def _self_bound(self, e: ast.AST) -> list | None:
        """The calls the class binds ``self.<attr>`` to, when every binding is one; else None."""
        if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
            vals = self.hub.self_attr_bindings(self.view, e)
            return vals if vals and all(isinstance(v, ast.Call) for v in vals) else None
        return None

    # -- attributes and calls ----------------------------------------------------------------
    def _attribute(self, e: ast.Attribute, d: int) -> Value:
        qn = self.sem.qualname(e)
        if qn is not None:
            return U  # a module constant (torch.float32, math.pi)
        if RANK_NAME.match(e.attr) or e.attr in MAIN_NAMES:
            from .cli_options import configured_option, sub_config_field  # lazy: it reads the argparse options
            if isinstance(e.value, ast.Name) and configured_option(self.sem, e):
                return U  # ``--rank`` with ``default=4``: an option, by its value, not the rank
            if e.attr not in MAIN_NAMES and sub_config_field(self.sem, e):
                return X  # ``cfg.lora.rank``: a nested config's field no code here fills; not judged
            return _V(self.view, RANK, f"the process rank from `{_text(e)}`", e)
        if isinstance(e.value, ast.Name) and e.value.id == "self":
            v = self.hub.self_attr_value(self.view, e, d, self.ctx)
            return v if v.varying else (self.hub.field_value(self.view, e, d, self.ctx) or v)
        base = self.value(e.value, d)
        if (got := self.hub.field_value(self.view, e, d, self.ctx)) is not None:
            return got  # a field or property of an object built with the rank: what it reads
        if base.varying and base.src.fields is not None:  # an attribute of an object we do not see
            return Value("V", base.src.built(None)) if e.attr in base.src.fields else X
        if base.varying and base.src.cat in (DATA, RNG, CLOCK) and e.attr in _SHAPE_ATTRS:
            return X if base.src.cat == DATA else self.hub.drawn_shape(self.view, e.value)  # not what values are drawn
        if base.varying and base.src.cat == RANK and e.attr != "device":
            return X  # a field of an object built with the rank: not the rank itself
        return base

    def _call(self, e: ast.Call, d: int) -> Value:
        sem = self.sem
        qn = sem.call_qualname(e)
        args = [*e.args, *(k.value for k in e.keywords)]
        if qn is not None:
            if qn in _RANK_QNS:
                group = self.hub.rank_group(self.view, e) if qn == D + "get_rank" else None
                return _V(self.view, RANK, f"the process rank from `{_text(e.func)}()`", e, group)
            if qn in _UNIFORM_QNS or qn in _REPLICATED:
                return U
            if qn in _EXISTS_QNS:
                return X  # whether a (per-rank) file exists: every rank writes its own in lockstep
            env = env_key(self.view, e)
            if env is not None:
                return self._env(env, e)
            if qn in _CLOCKS:
                return _V(self.view, CLOCK, f"the wall clock from `{_text(e.func)}()`", e)
            if qn.startswith(_RNG_PREFIXES) or qn in _RNG_TORCH or qn in _RNG_STATES:  # a state: per-rank seeds only
                if not self.view.seeded and qn not in _RNG_STATES:
                    return _V(self.view, RNG, f"unseeded random numbers from `{_text(e.func)}()`", e)
                g = next((k.value for k in e.keywords if k.arg == "generator"), None)
                if g is not None:
                    gv = self.value(g, d)
                    if gv.varying:
                        return _V(self.view, RNG, f"random numbers from `{_text(e.func)}()` with a generator "
                                  f"seeded per rank ({gv.src.desc}, line {gv.src.line})", e)
                else:
                    seed = self._rank_seed(qn)
                    if seed is not None and seed.lineno > e.lineno and qn not in _RNG_STATES \
                            and self.sem.enclosing_function(seed) is self.sem.enclosing_function(e):
                        return _V(self.view, RNG, f"random numbers from `{_text(e.func)}()`, drawn before the "
                                  f"generator is seeded at line {seed.lineno}: each process draws its own", e)
                    if seed is not None:
                        return _V(self.view, RNG, f"random numbers from `{_text(e.func)}()` (the generator is "
                                  f"seeded per rank at line {seed.lineno})", e)
            if qn.startswith(D):
                return X
            if qn.startswith(_PURE_PREFIXES):  # where the result is placed is not what it holds:
                v = join(self.value(a, d) for a in _placed(e, qn, args))  # ``torch.load(f, map_location)``
                return v if v.varying else (U if v.uniform and qn.startswith(("math.", "operator.")) else v)
        f = e.func
        name = _terminal(f)
        target = self.hub.resolve_call(self.view, e)
        if target is not None:
            ret = yielded(self, e, d) or self._returns(e, target)[0]  # a generator: what it yields
            if ret.kind == "V":
                src = ret.src
                return Value("V", src.step(f"returned by `{name}()`"))
            if ret.kind == "U":
                return U
            if not self.hub.summary(*target).collectives:
                v = join(self.value(a, d) for a in reaching_args(e, target))
                if v.varying:
                    return v
        if name in MAIN_NAMES and not args:
            return _V(self.view, RANK, f"the process rank from `{_text(f)}()`", e)
        if name and name.startswith("get_") and RANK_NAME.match(name[4:]) and not args:
            return _V(self.view, RANK, f"the process rank from `{_text(f)}()`", e, self.hub.rank_group(self.view, e))
        if target is not None:
            return X
        if isinstance(f, ast.Name):
            if qn is None and f.id == "next" and e.args and (v := self.element(e.args[0], d)).kind != "X":
                return v  # the iterator's next element (``next(iter(loader))``)
            if qn is None and f.id in _BUILTIN_JOIN:
                return join(self.value(a, d) for a in args)
            if qn is None and f.id == "len" and e.args:
                if isinstance(e.args[0], ast.Name):
                    from .symbolic import padded_length  # lazy: symbolic follows helpers
                    from .mutations import container_length, grown_under_test  # writes into its elements only
                    got = padded_length(self, e.args[0], d)
                    if got is None:
                        got = container_length(self, e.args[0], d) or grown_under_test(self, e.args[0], d)
                    if got is not None:
                        return got
                # a loader's length is its batches; a DistributedSampler's, any rank's padded share
                got = self.loader_trip_count(self.is_loader(e.args[0], d) or e.args[0], d)  # or ``self.x``
                if got.kind != "X" or self._is_dist_sampler(e.args[0]):
                    return got if got.kind != "X" else U
                # the length of values that vary by contents (this rank's data, RNG, clocks): ``shapes``
                v = self.value(e.args[0], d)
                return X if v.varying and v.src.cat in (DATA, RNG, CLOCK) else \
                    U if v.varying and even_rank_piece(self, e.args[0]) else v  # ``t.split(len(t) // W)[rank]``
            if qn is None and f.id == "filter" and len(e.args) == 2 and isinstance(e.args[0], ast.Lambda):
                return filtered(self, e, d)  # ``filter(lambda p: rank in p, layout)``
            if qn is None and f.id in ("isinstance", "hasattr", "callable", "type", "id"):
                return X
            if qn is None and f.id == "open":
                return join(self.value(a, d) for a in args)
            low = f.id.lower()
            if any(w in low for w in _SYNC_WORDS):
                return X
            v = join(self.value(a, d) for a in args)
            return built(self, e, f.id, v, d) if v.varying else X
        if isinstance(f, ast.Attribute):
            low = f.attr.lower()
            if f.attr in _PARSE_METHODS:
                return U
            if f.attr in ("exists", "is_file", "is_dir") and not args:
                return X  # ``Path(...).exists()``: see ``_EXISTS_QNS``
            if any(w in low for w in _SYNC_WORDS):
                return X
            if f.attr == "compute" and not args and self.hub.synced_metric(self.view, f.value, e):
                return U  # a torchmetrics metric: its state is gathered across ranks
            recv = self.value(f.value, d)
            if recv.varying and recv.src.fields is None:  # a method of an object we do not see: its arguments
                if f.attr in _SHAPE_METHODS:  # a shape question (the rank's own shard, a random size)
                    return X if recv.src.cat == DATA else self.hub.drawn_shape(self.view, f.value)
                return recv
            if f.attr in _MOVES:
                # ``model.cuda(local_rank)``, ``t.to(device)``: the device differs between ranks, the
                # contents are the receiver's
                return recv
            av = join(self.value(a, d) for a in args)
            if av.varying:
                return built(self, e, f.attr, av, d) if not recv.varying else av
            if recv.uniform and av.uniform and f.attr in _PURE_METHODS:
                return U
            return X
        return X


def _is_none(e: ast.AST) -> bool:
    return isinstance(e, ast.Constant) and e.value is None

# methods that move a module or a tensor to a device (or a dtype) and keep its contents
_MOVES = frozenset({"cuda", "to", "cpu"})


def _text(e: ast.AST) -> str:
    try:
        return ast.unparse(e)
    except Exception:  # pragma: no cover
        return "?"

__all__ = ["Value", "Src", "U", "X", "join", "Evaluator", "RANK", "DATA", "CLOCK", "RNG", "parent"]
