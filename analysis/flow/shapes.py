"""Shapes and lengths: is the shape of a tensor (the length of a sequence, the number of items an
iterable yields) the same on every rank?

Two questions, answered per expression with a ``Sh`` fact:
- ``size(e)``: the integer value of ``e`` used as a size (``torch.zeros(n)``, ``x[:, :n]``);
- ``shape(e)``: the shape of the tensor ``e`` (of a sequence or an iterable: how many items).

A fact is uniform (``U``), rank-varying (``V``, with the source of the variance and, for a tensor,
the dimensions that vary when known) or unknown (``X``). Inside a function, parameters are
symbolic: a fact may *depend* on the value or the shape of a parameter, and a call binds those
dependencies to the caller's arguments. So a helper that builds a tensor from its argument sizes
(``make_buffer(n)`` returning ``torch.zeros(n, d)``), returns a rank's shard
(``load_shard(rank)``), yields from a rank-specific file, or hands its parameter to
``all_gather`` is followed in this file and in the other files of the project.

Sources of a varying size or shape:
- values that are rank-varying (``uniformity``): the rank, this rank's data, clocks, unseeded RNG
  (``lengths.max()``, ``(preds > 0.5).sum()``, ``lengths[rank]``);
- shapes that depend on data values: boolean masks (``x[x > 0]``), ``nonzero()``/``argwhere``,
  ``unique()``, ``masked_select``, one-argument ``torch.where``, ``bincount()`` without ``minlength``;
- sequences built on a rank-varying path: a list appended to under a rank-varying test or in a
  loop with a rank-varying trip count, a comprehension with a rank-varying filter;
- per-rank sources: a slice with rank-varying bounds (``files[rank::world]``), this rank's piece
  of an uneven split (``np.array_split(x, world)[rank]``), the contents of a file whose name
  depends on the rank (``open(f"shard_{rank}.txt")``, ``torch.load``, ``glob``), a project
  Dataset/iterable built from those (``__len__``/``__iter__``), a DataLoader over such a dataset
  without a ``DistributedSampler``, a DataLoader whose project sampler hands this rank its own
  indices with no padding (its ``__iter__``), a generator that loops over such a source;
- a list grown per batch of a ``loader`` parameter (and ``torch.cat`` of it): symbolic in how many
  items it yields (``items`` deps, no sink), judged at the callers (``at_callers``).

Made uniform: sizes a collective made equal (``all_reduce(n, op=MAX)``), constants and config,
a sampler that pads (``DistributedSampler``; a stride of a list grown in place first is unknown).
Padding is unknown, never varying: ``F.pad``, a
``torch.cat`` with a piece of unknown shape, a size computed as ``agreed - local``
(``max_len - x.size(0)``), a slice to an agreed bound. Paths merge pessimistically: when one
binding that reaches a use is unknown, the use is unknown (``if short: x = pad(x)``).
"""
from __future__ import annotations

import ast

from ..semantic import get_arg, param_defaults, param_names
from .bindings import reaching, target_path
from .extents import Extents, items_of
from .helper_calls import bind_args, resolved
from .symbolic import strided_even, width_atoms
from .uniformity import RANK, Src
from .values import keep
from .saved_fields import saved_field
from .shape_facts import (
    SU,
    SX,
    Sh,
    _CAT,
    _DATA_SHAPED,
    _FILE_READERS,
    _FROM_DATA,
    _KEEP,
    _LIKE,
    _LISTERS,
    _LOADER,
    _MAX_DEPTH,
    _PAD,
    _REARRANGE,
    _RESHAPE,
    _SEQ_SAME,
    _SIZED,
    _SIZE_FUNCS,
    _SIZE_METHODS,
    _SUBSET,
    _TORCH_KEEP,
    _dep,
    _from_value,
    _int_const,
    _terminal,
    bincount_length,
    join_any,
    join_paths,
    pinned_by_assert,
)


class Shapes(Extents):
    """Shape facts for the expressions of one module view (memoised per node)."""

    def __init__(self, hub, view):
        self.hub, self.view, self.sem = hub, view, view.sem
        self.ev = hub.evaluator(view)
        self.memo = view.memo.setdefault("shapes", {})
        self.active: set = set()
        self.cs = hub.cut_state  # the check's cuts (``values.keep``)

    # -- plumbing --------------------------------------------------------------------------
    def _cached(self, kind, e, d, fn):
        if e is None:
            return SU if kind == "size" else SX
        key = (kind, id(e))
        got = self.memo.get(key)
        if got is not None:
            return got
        top = not self.active
        cs, sk = self.cs, (id(self.memo), key)
        if not cs.busy and sk in cs.tops:
            return cs.tops[sk]
        if (got := cs.scratch.get(sk)) is not None or d > _MAX_DEPTH or key in self.active:
            cs.n += 1  # a cut, or an answer made of one: not memoised for good (``values.keep``)
            return SX if got is None else got
        self.active.add(key)
        cs.busy += 1
        cuts = cs.n
        if top:
            self.hub._view_stack.append(self.view)
        try:
            got = fn(e, d + 1)
        except RecursionError:  # pragma: no cover
            got = SX
            cs.n += 1
        finally:
            self.active.discard(key)
            cs.busy -= 1
            if top:
                self.hub._view_stack.pop()
        return keep(cs, sk, key, got, cuts, self.memo)

    def size(self, e, d: int = 0) -> Sh:
        return self._cached("size", e, d, self._size)

    def shape(self, e, d: int = 0) -> Sh:
        return self._cached("shape", e, d, self._shape)

    # -- sizes -----------------------------------------------------------------------------
    def _size(self, e, d) -> Sh:
        v = self.ev.value(e)
        if v.kind == "V":
            return Sh("V", v.src)
        t = e.__class__
        if v.kind == "U":
            # the general evaluator does not see a list grow (``len(hits)``) or a mask keep rows
            if t is ast.Call and self._is_shape_query(e):
                got = self._size_call(e, d)
                return got if got.kind == "V" else SU
            return SU
        if t is ast.Constant:
            return SU
        if t is ast.Name:
            return self._name(e, d, self.size, "val")
        if t is ast.BinOp:
            left, right = self.size(e.left, d), self.size(e.right, d)
            if isinstance(e.op, ast.Sub) and left.kind == "U" and not left.deps and right.kind == "V":
                return SX  # ``agreed - local``: a padding amount
            return join_any((left, right))
        if t is ast.UnaryOp:
            return self.size(e.operand, d)
        if t is ast.IfExp:
            return join_paths((self.size(e.body, d), self.size(e.orelse, d)))
        if t in (ast.Tuple, ast.List):
            return join_any(self.size(x, d) for x in e.elts)
        if t in (ast.ListComp, ast.GeneratorExp, ast.SetComp):
            # ``max(len(s) for s in batch)``: the items' own sizes (the general evaluator does not
            # see into comprehensions)
            cv = self._comp_value(e.elt, e)
            return Sh("V", cv.src) if cv.varying else SX
        if t is ast.Attribute:
            if e.attr in ("shape", "T", "mT"):
                return self.shape(e.value, d)
            if isinstance(e.value, ast.Name) and e.value.id == "self":
                return self._self_attr(e, d, self.size)
            return SX
        if t is ast.Subscript:
            base = e.value
            if isinstance(base, ast.Attribute) and base.attr == "shape":
                return self._dim_of(self.shape(base.value, d), e.slice)
            got = saved_field(self.ev, e, d)  # a field of a file the module writes: what the writers stored
            if got is not None:
                return Sh("V", got.src) if got.varying else (SU if got.uniform else SX)
            return join_any((self.size(base, d), self.size(e.slice, d)))
        if t is ast.Call:
            return self._size_call(e, d)
        return SX

    @staticmethod
    def _is_shape_query(e) -> bool:
        f = e.func
        if isinstance(f, ast.Name):
            return f.id == "len"
        return isinstance(f, ast.Attribute) and f.attr in ("size", "numel", "nelement", "__len__")

    def _dim_of(self, sh: Sh, idx) -> Sh:
        if sh.kind == "U" and sh.deps:
            # which dimension a parameter varies is not tracked: most sources vary the first
            return sh if _int_const(idx) == 0 else SX
        if sh.kind != "V":
            return sh
        k = _int_const(idx) if idx is not None else None
        if sh.dims is None:
            return sh if (k is None or k >= 0) else SX
        if k is None or k < 0:
            return SX
        return sh if k in sh.dims else SX

    def _size_call(self, e, d) -> Sh:
        f = e.func
        qn = self.sem.call_qualname(e)
        args = [*e.args, *(k.value for k in e.keywords)]
        if qn is None and isinstance(f, ast.Name):
            if f.id == "len" and e.args:
                return self._dim_of(self.shape(e.args[0], d), ast.Constant(0))
            if f.id in _SIZE_FUNCS:
                return join_any(self.size(a, d) for a in args)
        if qn in ("math.ceil", "math.floor", "math.prod"):
            return join_any(self.size(a, d) for a in args)
        if isinstance(f, ast.Attribute) and qn is None:
            if f.attr in ("size", "numel", "nelement", "__len__"):
                sh = self.shape(f.value, d)
                if f.attr == "size":
                    return self._dim_of(sh, e.args[0] if e.args else None)
                return sh
            if f.attr in _SIZE_METHODS:
                return self.size(f.value, d)
        target = resolved(self.hub, self.view, e)
        if target is not None:
            return self._call_result(e, target, d, "size")
        return SX

    # -- names and bindings ----------------------------------------------------------------
    def _name(self, e, d, fn, mode) -> Sh:
        kind, got = reaching(self.view, e.id, e)
        if kind == "param":
            if mode == "val" and self.ev.value(e).kind == "U":
                return SU
            return _dep(got, e.id, mode)
        if kind not in ("events", "global", "events+param") or not got:
            return SX
        if fn == self.shape:
            for ev in got:
                if ev.__class__ is ast.AugAssign:
                    # ``total += x`` makes this path unknown (``_binding``), and an unknown path
                    # makes the use unknown (``join_paths``): the other bindings need no work
                    return SX
        out = [self._binding(ev, e.id, d, fn) for ev in got if not (
            ev.__class__ is ast.Call and fn == self.shape)]  # an in-place collective keeps the shape
        if kind == "events+param":
            fnode = self.view.sem.enclosing_function(e)
            if fnode is not None:
                out.append(_dep(fnode, e.id, mode))
        if fn == self.shape and not out:
            return SX
        res = join_paths(out)
        if fn == self.shape and res.kind != "X" and kind != "global":
            grow = self._mutations(e, d)
            if grow is not None:
                return grow if grow.kind == "V" else join_any((res, grow))
        return pinned_by_assert(self, e, res, d) if fn == self.shape else res

    def _binding(self, ev, name, d, fn) -> Sh:
        t = ev.__class__
        if t is ast.Call:
            return SU  # an equalising collective (size) ...
        if t is ast.Assign:
            for tgt in ev.targets:
                path = target_path(tgt, name)
                if path is None:
                    continue
                if not path:
                    return fn(ev.value, d)
                return self._unpack(ev.value, path, d, fn)
            return SX
        if t is ast.AnnAssign:
            return fn(ev.value, d) if ev.value is not None else SX
        if t is ast.AugAssign:
            if fn == self.size:
                loop = self._enclosing_loop_extent(ev, d)
                if loop is not None:
                    return loop
                v = self.ev.binding_value(ev, name, d)
                return _from_value(v)
            return SX
        if t is ast.NamedExpr:
            return fn(ev.value, d)
        if t in (ast.With, ast.AsyncWith):
            for item in ev.items:
                if item.optional_vars is not None and target_path(item.optional_vars, name) == []:
                    return fn(item.context_expr, d)
            return SX
        if t in (ast.For, ast.AsyncFor) and fn == self.size:
            return _from_value(self.ev.binding_value(ev, name, d))
        return SX

    def _unpack(self, value, path, d, fn) -> Sh:
        if isinstance(value, (ast.Tuple, ast.List)) and not any(isinstance(x, ast.Starred) for x in value.elts) \
                and path[0] < len(value.elts):
            inner = value.elts[path[0]]
            return fn(inner, d) if len(path) == 1 else self._unpack(inner, path[1:], d, fn)
        if fn == self.size and len(path) == 1 and isinstance(value, ast.Attribute) and value.attr == "shape":
            return self._dim_of(self.shape(value.value, d), ast.Constant(path[0]))
        if fn == self.size and len(path) == 1 and isinstance(value, ast.Call) and _terminal(value.func) == "size" \
                and not value.args and isinstance(value.func, ast.Attribute):
            return self._dim_of(self.shape(value.func.value, d), ast.Constant(path[0]))
        if len(path) == 1 and isinstance(value, ast.Call):
            # ``embs, ids = encode(...)``: that element of what the project function returns
            target = resolved(self.hub, self.view, value)
            if target is not None and getattr(target[1], "name", "") != "__init__" \
                    and isinstance(target[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
                tv, tfn = target
                summary = shapes_of(self.hub, tv).returns(tfn, "size" if fn == self.size else "shape", path[0])
                return self.bind(summary, value, tfn, d, f"`{_terminal(value.func)}()`")
        return SX

    def _self_attr(self, e, d, fn) -> Sh:
        vals = self.hub.self_attr_bindings(self.view, e)
        if not vals or len(vals) > 8:
            return SX
        return join_paths(SX if isinstance(v, ast.stmt) else fn(v, d) for v in vals)


    # -- shapes ----------------------------------------------------------------------------
    def _shape(self, e, d) -> Sh:
        t = e.__class__
        if t is ast.Name:
            return self._name(e, d, self.shape, "shape")
        if t is ast.Attribute:
            if e.attr in ("data", "T", "mT"):
                sh = self.shape(e.value, d)
                return sh if e.attr == "data" or sh.kind != "V" else Sh("V", sh.src)
            if isinstance(e.value, ast.Name) and e.value.id == "self":
                return self._self_attr(e, d, self.shape)
            return SX
        if t is ast.Subscript:
            return self._subscript(e, d)
        if t is ast.Call:
            return self._shape_call(e, d)
        if t in (ast.List, ast.Tuple, ast.Set):
            star = [x.value for x in e.elts if isinstance(x, ast.Starred)]
            return join_any(self.shape(s, d) for s in star) if star else SU
        if t in (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp):
            return self._comprehension(e, d)
        if t is ast.BinOp:
            return join_any((self.shape(e.left, d), self.shape(e.right, d)))
        if t is ast.UnaryOp:
            return self.shape(e.operand, d)
        if t is ast.IfExp:
            return join_paths((self.shape(e.body, d), self.shape(e.orelse, d)))
        if t is ast.Await:
            return self.shape(e.value, d)
        return SX


    def _is_mask(self, idx) -> bool:
        if isinstance(idx, ast.Compare):
            return True
        if isinstance(idx, ast.UnaryOp) and isinstance(idx.op, ast.Invert):
            return True
        if isinstance(idx, ast.BinOp) and isinstance(idx.op, (ast.BitAnd, ast.BitOr)):
            return self._is_mask(idx.left) or self._is_mask(idx.right)
        if isinstance(idx, ast.Call):
            n = _terminal(idx.func)
            return n in ("isfinite", "isnan", "isinf", "bool", "logical_and", "logical_or", "logical_not", "eq",
                         "ne", "gt", "ge", "lt", "le", "isin")
        if isinstance(idx, ast.Name):
            kind, evs = reaching(self.view, idx.id, idx)
            if kind == "events" and evs and len(evs) == 1 and isinstance(evs[0], ast.Assign) \
                    and len(evs[0].targets) == 1 and isinstance(evs[0].targets[0], ast.Name):
                return self._is_mask(evs[0].value)
        return False

    def _subscript(self, e, d) -> Sh:
        sl = e.slice
        base = e.value
        parts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        base_sh = self.shape(base, d)
        if not any(isinstance(p, ast.Slice) for p in parts) and len(parts) == 1:
            idx = parts[0]
            if self._is_mask(idx):
                v = self.ev.value(idx)
                if v.varying:
                    return Sh("V", Src(v.src.cat, f"a boolean mask ({v.src.desc})", v.src.line, v.src.path),
                              frozenset({0}))
                deps = self._value_deps(idx) if v.kind == "X" else frozenset()
                return Sh("U", deps=deps) if deps else SX
            iv = self.ev.value(idx)
            if iv.varying and iv.src.cat == RANK and self._uneven_split(base, d):
                return Sh("V", Src(RANK, f"this rank's piece of an uneven split ({iv.src.desc})", iv.src.line,
                                   iv.src.path), frozenset({0}))
            ish = self.shape(idx, d)
            if ish.kind == "V":
                return Sh("V", ish.src, None)  # advanced indexing: the result has the index's shape
            if _int_const(idx) is not None or iv.kind == "U":
                if base_sh.kind == "V" and base_sh.dims is not None:
                    dims = frozenset(k - 1 for k in base_sh.dims if k > 0)
                    return Sh("V", base_sh.src, dims) if dims else SX
                return SX
            return SX
        out_dims = set()
        src = None
        pos_known = True
        k = 0
        keep = set()
        for p in parts:
            if isinstance(p, ast.Constant) and p.value is Ellipsis:
                pos_known = False
                continue
            if isinstance(p, ast.Slice):
                # ``x[rank * chunk:(rank + 1) * chunk]``: the width, not the bounds, is the length
                bounds = width_atoms(p)
                if bounds is None and strided_even(self.view, base, p, self.hub):
                    bounds = []  # ``pieces[rank::world]`` of a multiple of ``world`` pieces
                if bounds is None:
                    bounds = [x for x in (p.lower, p.upper, p.step) if x is not None]
                s = join_any(self.size(b, d) for b in bounds) if bounds else SU
                if s.kind == "V" and self._padded_first(base, e):
                    return SX  # ``ids += ids[:pad]`` then ``ids[rank::world]``: padded to a multiple, perhaps
                if s.kind == "V":
                    src = src or s.src
                    out_dims.add(k if pos_known else None)
                elif s.kind == "X" or (s.deps and p.upper is not None):
                    if s.kind == "X":
                        return SX
                    return Sh("U", deps=s.deps) if base_sh.kind == "U" else SX
                elif p.upper is None and p.lower is None:
                    keep.add(k)
                k += 1
            else:
                return SX  # mixed integer / slice indexing: dimensions shift
        if src is not None:
            dims = None if None in out_dims else frozenset(out_dims)
            return Sh("V", src, dims)
        if base_sh.kind == "V":
            if base_sh.dims is None:
                return base_sh if pos_known and len(keep) == k else SX
            dims = frozenset(x for x in base_sh.dims if x in keep or x >= k)
            return Sh("V", base_sh.src, dims) if dims and pos_known else SX
        return base_sh


    def _sizes_at(self, args, d) -> Sh:
        """Facts for the size arguments of a constructor: positional ints (``zeros(n, d)``), or one
        tuple/list/Size (``zeros((n, d))``, ``zeros(x.shape)``)."""
        if len(args) == 1 and not isinstance(args[0], ast.Starred):
            a = args[0]
            if isinstance(a, (ast.Tuple, ast.List)):
                return self._sizes_at(a.elts, d)
            if isinstance(a, ast.Attribute) and a.attr == "shape":
                return self.shape(a.value, d)
            if isinstance(a, ast.Call) and isinstance(a.func, ast.Attribute) and a.func.attr == "size" and not a.args:
                return self.shape(a.func.value, d)
        dims = set()
        src = None
        facts = []
        for k, a in enumerate(args):
            if isinstance(a, ast.Starred):
                return SX
            s = self.size(a, d)
            if s.kind == "V":
                dims.add(k)
                src = src or s.src
            facts.append(s)
        if src is not None:
            return Sh("V", src, frozenset(dims))
        return join_any(facts)

    def _shape_call(self, e, d) -> Sh:
        sem = self.sem
        qn = sem.call_qualname(e)
        f = e.func
        if qn is not None:
            if qn in _PAD:
                return SX
            if qn in _SIZED:
                size_kw = get_arg(e, None, "size")
                if size_kw is not None:
                    return self._sizes_at([size_kw], d)
                args = list(e.args)
                if qn in ("torch.full", "numpy.full"):
                    args = args[:1]
                return self._sizes_at(args, d)
            if qn in ("torch.arange", "numpy.arange"):
                s = join_any(self.size(a, d) for a in e.args if not isinstance(a, ast.Starred))
                return Sh("V", s.src, frozenset({0})) if s.kind == "V" else s
            if qn in ("torch.randperm", "torch.linspace", "torch.logspace", "numpy.linspace"):
                a = e.args[0] if qn == "torch.randperm" and e.args else get_arg(e, 2, "steps")
                s = self.size(a, d) if a is not None else SX
                return Sh("V", s.src, frozenset({0})) if s.kind == "V" else s
            if qn == "torch.randint":
                a = get_arg(e, None, "size") or (e.args[-1] if len(e.args) >= 2 else None)
                return self._sizes_at([a], d) if a is not None else SX
            if qn in _LIKE:
                return self.shape(e.args[0], d) if e.args else SX
            if qn in _FROM_DATA:
                a = get_arg(e, 0, "data")
                return self.shape(a, d) if a is not None else SX
            if qn in _CAT:
                return self._cat(e, d, stack=qn.endswith("stack"))
            if qn in _TORCH_KEEP:
                return self.shape(e.args[0], d) if e.args else SX
            if qn in ("torch.nonzero", "torch.argwhere", "torch.unique", "torch.unique_consecutive",
                      "torch.masked_select", "numpy.unique", "numpy.nonzero", "numpy.flatnonzero"):
                src_e = e.args[1] if qn == "torch.masked_select" and len(e.args) > 1 else (e.args[0] if e.args else None)
                return self._data_shaped(src_e, qn.rsplit(".", 1)[1], d)
            if qn == "torch.where" and len(e.args) == 1:
                return self._data_shaped(e.args[0], "where", d)
            if qn in ("torch.bincount", "numpy.bincount"):
                return bincount_length(self, e, get_arg(e, 0, "input" if qn[0] == "t" else "x"), 2, d)
            if qn in ("torch.split", "torch.chunk", "numpy.array_split", "torch.tensor_split", "numpy.split"):
                if qn == "torch.split":
                    return self._dim_of(self.shape(e.args[0], d), ast.Constant(0)) if e.args else SX
                return self.size(e.args[1], d) if len(e.args) > 1 else SX
            if qn in _FILE_READERS or qn in _LISTERS or qn == "pathlib.Path.glob":
                return self._per_rank_file(e, d)
            if qn == _LOADER:
                return self.loader(e, d)
            if qn == "itertools.islice" and len(e.args) >= 2:
                # ``islice(lines, rank, None, world)``: a strided shard, like ``lines[rank::world]``
                # (of a finite source: a shard of an endless stream is endless on every rank)
                if self._endless(e.args[0]):
                    return SX
                s = join_any(self.size(a, d) for a in e.args[1:])
                if s.kind == "V":
                    return Sh("V", s.src, frozenset({0}))
                return SX
            if qn == _SUBSET:
                a = get_arg(e, 1, "indices")
                return self.shape(a, d) if a is not None else SX
            if not qn.startswith(("torch.", "numpy.")) or not isinstance(f, ast.Attribute):
                pass
            else:
                return SX
        if qn is None and isinstance(f, ast.Name):
            if f.id == "open" and e.args:
                return self._per_rank_file(e, d)
            if f.id in _SEQ_SAME and e.args:
                return self.shape(e.args[0], d)
            if f.id == "zip" and e.args:
                parts = [self.shape(a, d) for a in e.args]
                if any(p.kind == "U" and not p.deps for p in parts):
                    return SX  # ``zip(loader, range(max_iter))``: the shortest may be the uniform one
                return join_any(parts)
            if f.id == "range" and e.args:
                return join_any(self.size(a, d) for a in e.args)
        if isinstance(f, ast.Attribute) and qn is None:
            recv = f.value
            a = f.attr
            if a in _KEEP:
                return self.shape(recv, d)
            if a in _REARRANGE:
                r = self.shape(recv, d)
                return Sh("V", r.src) if r.kind == "V" else r  # which dimension is no longer known
            if a == "bincount":
                return bincount_length(self, e, recv, 1, d)
            if a in _DATA_SHAPED:
                if a == "masked_select" and e.args:
                    return self._data_shaped(e.args[0], a, d)
                return self._data_shaped(recv, a, d)
            if a in _RESHAPE:
                args = list(e.args)
                if a == "new_full":
                    args = args[:1]
                if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
                    args = list(args[0].elts)
                s = self._sizes_at(args, d)
                if s.kind != "V" and a in ("view", "reshape") and any(_int_const(x) == -1 for x in args):
                    r = self.shape(recv, d)
                    return Sh("V", r.src) if r.kind == "V" else SX
                return s if s.kind == "V" else (SU if s.kind == "U" and not s.deps else (s if s.kind == "U" else SX))
            if a in ("read_text", "read_bytes", "open") and not e.args:
                return self._per_rank_file(e, d)
            if a in ("readlines", "read", "splitlines", "split", "strip", "rstrip", "lstrip", "decode",
                     "tolist", "glob", "rglob", "iterdir", "itertuples", "iterrows", "keys_DUMMY"):
                if a == "split" and self._maybe_tensor_split(e):
                    return self._dim_of(self.shape(recv, d), ast.Constant(0))
                return self.shape(recv, d) if a not in ("glob", "rglob", "iterdir") else self._per_rank_file(e, d)
            if a == "chunk":
                return self.size(e.args[0], d) if e.args else SX
        target = resolved(self.hub, self.view, e)
        if target is not None:
            return self._call_result(e, target, d, "shape")
        return SX

    def _maybe_tensor_split(self, e) -> bool:
        return bool(e.args) and isinstance(e.args[0], (ast.Constant, ast.Name)) and not (
            isinstance(e.args[0], ast.Constant) and isinstance(e.args[0].value, str))

    def _data_shaped(self, src_e, what, d) -> Sh:
        if src_e is None:
            return SX
        v = self.ev.value(src_e)
        if v.varying:
            return Sh("V", Src(v.src.cat, f"`{what}()` of a tensor {v.src.desc}" if v.src.desc.startswith("computed") else f"`{what}()` ({v.src.desc})", v.src.line, v.src.path), frozenset({0}))
        deps = self._value_deps(src_e) if v.kind == "X" else frozenset()
        return Sh("U", deps=deps) if deps else SX


    def _cat(self, e, d, stack=False) -> Sh:
        seq = get_arg(e, 0, "tensors")
        if seq is None:
            return SX
        dim = get_arg(e, 1, "dim")
        k = _int_const(dim) if dim is not None else 0
        count = self.shape(seq, d)
        if isinstance(seq, (ast.List, ast.Tuple)):
            elems = [self.shape(x, d) for x in seq.elts if not isinstance(x, ast.Starred)]
        elif isinstance(seq, (ast.ListComp, ast.GeneratorExp)):
            elems = [self.shape(seq.elt, d)]
        else:
            elems = self._elements(seq, d)
            # ``pieces = [torch.randn(n, 8) for _ in ...]`` bound once, then ``torch.cat(pieces)``
            val = self.sem.single_value(seq.id, self.sem.scope_of(seq)) if isinstance(seq, ast.Name) else None
            if isinstance(val, (ast.ListComp, ast.GeneratorExp)):
                elems = [self.shape(val.elt, d), *(elems or ())]
            elif isinstance(val, (ast.List, ast.Tuple)) and val.elts and not any(
                    isinstance(x, ast.Starred) for x in val.elts):
                elems = [*(self.shape(x, d) for x in val.elts), *(elems or ())]
            if elems is None:
                return SX if count.kind != "V" else Sh("V", count.src, frozenset({k}) if k is not None else None)
        if count.kind == "V" and not isinstance(seq, (ast.List, ast.Tuple)):
            return Sh("V", count.src, frozenset({k}) if k is not None and k >= 0 else None)
        if count.kind == "U" and count.deps and k == 0 and not isinstance(seq, (ast.List, ast.Tuple)):
            # ``for b in loader: outs.append(model(b))`` then ``torch.cat(outs)``: as many pieces as
            # the parameter yields items (rank-varying where a call passes this rank's own shard)
            return join_any([items_of(count), *(s for s in elems if s.kind != "X")])
        if any(s.kind == "X" for s in elems):
            return SX  # a piece of unknown shape: padding, perhaps
        if count.kind == "V":
            return Sh("V", count.src, frozenset({k}) if k is not None and k >= 0 else None)
        if count.kind == "X":
            return SX
        got = join_any(elems)
        if got.kind == "V" and stack:
            return Sh("V", got.src, None)
        return got


    # -- loaders, datasets, helpers --------------------------------------------------------


    def _call_result(self, call, target, d, mode) -> Sh:
        """The size (``mode == "size"``) or shape of what a project function returns (for a
        class: the length of the object), with its parameters bound to ``call``'s arguments."""
        view, fn = target
        other = shapes_of(self.hub, view)
        if getattr(fn, "name", "") == "__init__":
            if mode != "shape":
                return SX
            summary = other.object_extent(fn)
        else:
            summary = other.returns(fn, mode)
        return self.bind(summary, call, fn, d, f"`{_terminal(call.func)}()`")

    def bind(self, summary: Sh, call, fn, d, via: str) -> Sh:
        if summary.kind == "V":
            src = summary.src
            return Sh("V", Src(src.cat, f"{src.desc}, in {via}", src.line, src.path), summary.dims)
        if summary.kind == "X":
            return SX
        if not summary.deps:
            return SU
        args = bind_args(call, fn)
        params = set(param_names(fn))
        facts = []
        for fid, p, m in summary.deps:
            if fid != id(fn):
                return SX
            a = args.get(p)
            if a is None:
                if p in params and p not in param_defaults(fn):
                    return SX
                facts.append(SU)
                continue
            if m == "val":
                s = self.size(a, d)
            elif m == "file":
                v = self.ev.value(a)
                s = Sh("V", Src(RANK, f"the contents of a file named after the rank ({v.src.desc})", v.src.line,
                                v.src.path), frozenset({0})) if v.varying and v.src.cat == RANK else (
                    self._file_dep(a, d))
            else:
                s = self.shape(a, d)
            facts.append(s)
        got = join_any(facts)
        if got.kind == "V":
            src = got.src
            return Sh("V", Src(src.cat, f"{src.desc}, through {via}", src.line, src.path), got.dims)
        return got

    def _file_dep(self, a, d) -> Sh:
        s = self.size(a, d)
        if s.kind == "U" and s.deps:
            return Sh("U", deps=frozenset((f, p, "file") for f, p, _m in s.deps))
        return SX if s.kind != "U" else SU


def shapes_of(hub, view) -> Shapes:
    """The shape analyser of ``view`` for this analysis (facts are memoised on the view)."""
    return Shapes.of(hub, view)


__all__ = ["Sh", "SU", "SX", "Shapes", "shapes_of", "join_any", "join_paths"]


