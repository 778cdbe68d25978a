"""Shapes and lengths: is the shape of a tensor (the length of a sequence, the number of items an
iterable yields) the same on every rank?

Two questions, answered per expression with a ``Sh`` fact:
- ``size(e)``: the integer value of ``e`` used as a size (``torch.zeros(n)``, ``x[:, :n]``);
- ``shape(e)``: the shape of the tensor ``e`` (for a sequence or an iterable: how many items it
  has; for a loop: its trip count).

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
  ``unique()``, ``masked_select``, one-argument ``torch.where``;
- sequences built on a rank-varying path: a list appended to under a rank-varying test or in a
  loop with a rank-varying trip count, a comprehension with a rank-varying filter;
- per-rank sources: a slice with rank-varying bounds (``files[rank::world]``), this rank's piece
  of an uneven split (``np.array_split(x, world)[rank]``), the contents of a file whose name
  depends on the rank (``open(f"shard_{rank}.txt")``, ``torch.load``, ``glob``), a project
  Dataset/iterable built from those (``__len__``/``__iter__``), a DataLoader over such a dataset
  without a ``DistributedSampler``, a generator that loops over such a source.

Made uniform: sizes a collective made equal (``all_reduce(n, op=MAX)``), constants and config,
a sampler that pads (``DistributedSampler``). Padding is unknown, never varying: ``F.pad``, a
``torch.cat`` with a piece of unknown shape, a size computed as ``agreed - local``
(``max_len - x.size(0)``), a slice to an agreed bound. Paths merge pessimistically: when one
binding that reaches a use is unknown, the use is unknown (``if short: x = pad(x)``).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, param_names, parent
from .bindings import LOOPS, reaching, target_path
from .uniformity import RANK, Src, X as VX

_MAX_DEPTH = 24


class Sh:
    __slots__ = ("kind", "src", "dims", "deps")

    def __init__(self, kind, src=None, dims=None, deps=frozenset()):
        self.kind, self.src, self.dims, self.deps = kind, src, dims, deps

    @property
    def varying(self) -> bool:
        return self.kind == "V"

    def __repr__(self) -> str:  # pragma: no cover - debugging
        return f"Sh({self.kind}, {self.src.desc if self.src else ''}, dims={self.dims}, deps={set(self.deps)})"


SU = Sh("U")
SX = Sh("X")


def _dims_union(a, b):
    if a is None or b is None:
        return None
    return a | b


def join_any(items) -> Sh:
    """Combination within one expression: a varying part makes the whole vary."""
    v = None
    unknown = False
    deps = frozenset()
    for s in items:
        if s.kind == "V":
            v = s if v is None else Sh("V", v.src, _dims_union(v.dims, s.dims))
        elif s.kind == "X":
            unknown = True
        else:
            deps |= s.deps
    if v is not None:
        return v
    if unknown:
        return SX
    return Sh("U", deps=deps) if deps else SU


def join_paths(items) -> Sh:
    """Bindings that reach one use: an unknown path (padding, a conversion) makes it unknown."""
    items = list(items)
    if any(s.kind == "X" for s in items):
        return SX
    return join_any(items)


def _from_value(v) -> Sh:
    if v.kind == "V":
        return Sh("V", v.src)
    return SU if v.kind == "U" else SX


def _V(view, cat, desc, node, dims=None) -> Sh:
    return Sh("V", Src(cat, desc, getattr(node, "lineno", 0), view.path), dims)


def _dep(fn, name, mode) -> Sh:
    return Sh("U", deps=frozenset({(id(fn), name, mode)}))


def _terminal(f):
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def _text(e) -> str:
    try:
        t = ast.unparse(e)
    except Exception:  # pragma: no cover
        return "?"
    t = " ".join(t.split())
    return t if len(t) <= 50 else t[:47] + "..."


def _int_const(e):
    if isinstance(e, ast.Constant) and type(e.value) is int:
        return e.value
    if isinstance(e, ast.UnaryOp) and isinstance(e.op, ast.USub) and isinstance(e.operand, ast.Constant) \
            and type(e.operand.value) is int:
        return -e.operand.value
    return None


_SIZED = frozenset({"torch.zeros", "torch.ones", "torch.empty", "torch.rand", "torch.randn", "torch.full",
                    "numpy.zeros", "numpy.ones", "numpy.empty", "numpy.full"})
_LIKE = frozenset({"torch.zeros_like", "torch.ones_like", "torch.empty_like", "torch.rand_like", "torch.randn_like",
                   "torch.full_like", "numpy.zeros_like", "numpy.ones_like", "numpy.empty_like"})
_FROM_DATA = frozenset({"torch.tensor", "torch.as_tensor", "torch.Tensor", "torch.FloatTensor", "torch.LongTensor",
                        "torch.IntTensor", "torch.DoubleTensor", "torch.BoolTensor", "torch.from_numpy",
                        "numpy.array", "numpy.asarray", "torch.stack_DUMMY"})
_DATA_SHAPED = frozenset({"nonzero", "argwhere", "unique", "unique_consecutive", "masked_select"})
_CAT = frozenset({"torch.cat", "torch.concat", "torch.concatenate", "torch.vstack", "torch.hstack", "torch.stack",
                  "numpy.concatenate", "numpy.stack", "numpy.vstack", "numpy.hstack"})
_KEEP = frozenset({"to", "cuda", "cpu", "contiguous", "float", "half", "double", "long", "int", "bool", "clone",
                   "detach", "type_as", "bfloat16", "requires_grad_", "abs", "exp", "log", "sqrt", "sigmoid",
                   "relu", "neg", "pow", "mul", "add", "div", "sub", "mul_", "add_", "div_", "sub_", "clamp",
                   "clamp_", "fill_", "zero_", "detach_", "pin_memory", "squeeze_DUMMY", "numpy", "softmax",
                   "log_softmax", "normalize", "round", "floor", "ceil", "sign", "tanh", "copy_", "cumsum",
                   "flip", "roll", "sort_DUMMY"})
_TORCH_KEEP = frozenset({"torch.abs", "torch.exp", "torch.log", "torch.sqrt", "torch.sigmoid", "torch.relu",
                         "torch.clone", "torch.softmax", "torch.log_softmax", "torch.nn.functional.normalize",
                         "torch.nn.functional.softmax", "torch.nn.functional.log_softmax", "torch.flip",
                         "torch.cumsum", "torch.round", "torch.clamp", "torch.tanh"})
_REARRANGE = frozenset({"squeeze", "unsqueeze", "flatten", "t", "transpose", "permute", "squeeze_", "unsqueeze_",
                        "ravel", "movedim", "swapaxes"})
_RESHAPE = frozenset({"view", "reshape", "expand", "new_zeros", "new_ones", "new_empty", "new_full", "new_tensor_DUMMY"})
_PAD = frozenset({"torch.nn.functional.pad", "torch.nn.utils.rnn.pad_sequence", "numpy.pad"})
_FILE_READERS = frozenset({"torch.load", "numpy.load", "numpy.loadtxt", "numpy.genfromtxt", "numpy.fromfile",
                           "json.load", "pickle.load", "pandas.read_csv", "pandas.read_parquet", "pandas.read_json",
                           "h5py.File", "numpy.memmap", "datasets.load_from_disk"})
_LISTERS = frozenset({"glob.glob", "glob.iglob", "os.listdir", "os.scandir"})
_SPLITTERS = frozenset({"numpy.array_split", "torch.tensor_split", "torch.chunk"})
_SEQ_SAME = frozenset({"list", "tuple", "sorted", "reversed", "iter", "enumerate", "tqdm"})
_LOADER = "torch.utils.data.DataLoader"
_SUBSET = "torch.utils.data.Subset"
_DIST_SAMPLER = "torch.utils.data.DistributedSampler"
_SIZE_FUNCS = frozenset({"int", "float", "round", "abs", "max", "min", "math.ceil", "math.floor"})
_SIZE_METHODS = frozenset({"item", "int", "long", "float", "tolist", "max", "min", "sum", "amax", "amin",
                           "__int__", "numel_DUMMY"})
_MUTATORS = frozenset({"append", "extend", "insert", "pop", "remove", "clear", "add", "update", "discard",
                       "popleft", "appendleft"})


class Shapes:
    """Shape facts for the expressions of one module view (memoised per node)."""

    def __init__(self, hub, view):
        self.hub, self.view, self.sem = hub, view, view.sem
        self.ev = hub.evaluator(view)
        self.memo = view.memo.setdefault("shapes", {})
        self.active: set = set()

    # -- plumbing --------------------------------------------------------------------------
    def _cached(self, kind, e, d, fn):
        if e is None:
            return SU if kind == "size" else SX
        key = (kind, id(e))
        got = self.memo.get(key)
        if got is not None:
            return got
        if d > _MAX_DEPTH or key in self.active:
            return SX
        top = not self.active
        self.active.add(key)
        if top:
            self.hub._view_stack.append(self.view)
        try:
            got = fn(e, d + 1)
        except RecursionError:  # pragma: no cover
            got = SX
        finally:
            self.active.discard(key)
            if top:
                self.hub._view_stack.pop()
        self.memo[key] = got
        return got

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
        target = _resolved(self.hub, self.view, e)
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
                return grow
        return res

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
        return SX

    def _self_attr(self, e, d, fn) -> Sh:
        vals = self.hub.self_attr_bindings(self.view, e)
        if not vals or len(vals) > 8:
            return SX
        return join_paths(SX if isinstance(v, ast.stmt) else fn(v, d) for v in vals)

    def _enclosing_loop_extent(self, node, d) -> Sh | None:
        """A counter bumped in a loop whose trip count varies (``n += 1`` per line of this rank's
        shard) is rank-varying."""
        p = parent(node)
        while p is not None and not isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)):
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
            from .summaries import scope_calls

            per = idx[id(scope)] = {}
            for n in scope_calls(self.view, scope):
                f = n.func
                if f.__class__ is ast.Attribute and f.attr in _MUTATORS and f.value.__class__ is ast.Name:
                    per.setdefault(f.value.id, []).append(n)
        for c in per.get(e.id, ()):
            if (c.lineno, c.col_offset) > (e.lineno, e.col_offset) and not self._in_loop_with(c, e):
                continue
            if c.func.attr in ("pop", "remove", "clear", "discard", "popleft"):
                continue
            why = self._growth(c, d)
            if why is not None:
                return why
        return None

    def _in_loop_with(self, c, e) -> bool:
        p = parent(c)
        while p is not None and not isinstance(p, (*FUNC_TYPES, ast.Module)):
            if isinstance(p, LOOPS):
                n = parent(e)
                while n is not None:
                    if n is p:
                        return True
                    n = parent(n)
            p = parent(p)
        return False

    def _growth(self, c, d) -> Sh | None:
        if c.func.attr == "extend" and c.args:
            sh = self.shape(c.args[0], d)
            if sh.kind == "V":
                return Sh("V", sh.src, frozenset({0}))
        child, p = c, parent(c)
        while p is not None and not isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)):
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
            child, p = p, parent(p)
        return None

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
        from .uniformity import join

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
                bounds = [x for x in (p.lower, p.upper, p.step) if x is not None]
                s = join_any(self.size(b, d) for b in bounds) if bounds else SU
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
        name = _terminal(f)
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
            if qn in ("torch.split", "torch.chunk", "numpy.array_split", "torch.tensor_split", "numpy.split"):
                if qn == "torch.split":
                    return self._dim_of(self.shape(e.args[0], d), ast.Constant(0)) if e.args else SX
                return self.size(e.args[1], d) if len(e.args) > 1 else SX
            if qn in _FILE_READERS or qn in _LISTERS or qn == "pathlib.Path.glob":
                return self._per_rank_file(e, d)
            if qn == _LOADER:
                return self.loader(e, d)
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
                return join_any(self.shape(a, d) for a in e.args)
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
            if a in ("readlines", "read", "splitlines", "split", "strip", "rstrip", "lstrip", "decode",
                     "tolist", "glob", "rglob", "iterdir", "itertuples", "iterrows", "keys_DUMMY"):
                if a == "split" and self._maybe_tensor_split(e):
                    return self._dim_of(self.shape(recv, d), ast.Constant(0))
                return self.shape(recv, d) if a not in ("glob", "rglob", "iterdir") else self._per_rank_file(e, d)
            if a == "chunk":
                return self.size(e.args[0], d) if e.args else SX
        target = _resolved(self.hub, self.view, e)
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
            sz = self.size(a, d) if isinstance(a, ast.Name) else SX
            if sz.kind == "U" and sz.deps:
                return Sh("U", deps=frozenset((f, p, "file") for f, p, _m in sz.deps))
        return SX

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
            if elems is None:
                return SX if count.kind != "V" else Sh("V", count.src, frozenset({k}) if k is not None else None)
        if count.kind == "V" and not isinstance(seq, (ast.List, ast.Tuple)):
            return Sh("V", count.src, frozenset({k}) if k is not None and k >= 0 else None)
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

    def _elements(self, seq, d):
        """Shapes of the items appended to the list ``seq`` (a name), or None."""
        if not isinstance(seq, ast.Name):
            return None
        scope = self.sem.scope_of(seq)
        self._mutations(seq, d)  # builds the index
        calls = self.view.memo.get("shapes.mutations", {}).get(id(scope), {}).get(seq.id, [])
        out = [self.shape(c.args[0], d) for c in calls if c.func.attr == "append" and c.args]
        return out or None

    # -- loaders, datasets, helpers --------------------------------------------------------
    def loader(self, e, d) -> Sh:
        for kw, pos in (("sampler", 2), ("batch_sampler", 3)):
            s = get_arg(e, None, kw)
            if s is not None and not (isinstance(s, ast.Constant) and s.value is None):
                return SU if self._dist_sampler(s) else SX
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
        from .sinks import bind_args

        args = bind_args(call, fn)
        params = set(param_names(fn))
        facts = []
        for fid, p, m in summary.deps:
            if fid != id(fn):
                return SX
            a = args.get(p)
            if a is None:
                if p in params and not _has_default(fn, p):
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

    def returns(self, fn, mode) -> Sh:
        memo = self.view.memo.setdefault("shapes.returns", {})
        key = (id(fn), mode)
        got = memo.get(key)
        if got is None:
            memo[key] = SX  # recursion guard
            self.hub._view_stack.append(self.view)
            try:
                got = memo[key] = self._returns(fn, mode)
            finally:
                self.hub._view_stack.pop()
        return got

    def _returns(self, fn, mode) -> Sh:
        if isinstance(fn, ast.Lambda):
            return SX
        rets, yields = [], []
        for n in iter_scope_nodes(fn):
            if n.__class__ is ast.Return:
                rets.append(n.value)
            elif n.__class__ in (ast.Yield, ast.YieldFrom):
                yields.append(n)
        if yields:
            return self._generator_extent(fn, yields) if mode == "shape" else SX
        if not rets or len(rets) > 12:
            return SX
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

    def object_extent(self, init) -> Sh:
        """The number of items of an instance of ``init``'s class (a Dataset or an iterable):
        from ``__len__`` and ``__iter__``, with ``self.`` attributes bound to ``__init__``'s
        parameters."""
        memo = self.view.memo.setdefault("shapes.objects", {})
        got = memo.get(id(init))
        if got is None:
            memo[id(init)] = SX
            cls = parent(init)
            facts = []
            for m in getattr(cls, "body", ()):
                if isinstance(m, FUNC_TYPES) and m.name in ("__len__", "__iter__"):
                    facts.append(self.returns(m, "size" if m.name == "__len__" else "shape"))
            vary = [s for s in facts if s.kind == "V"]
            if vary:
                got = vary[0]
            else:
                known = [s for s in facts if s.kind == "U" and s.deps and all(fid == id(init) for fid, _p, _m in s.deps)]
                got = join_any(known) if known else SX
            memo[id(init)] = got
        return got

    # -- queries for the rules -----------------------------------------------------------------
    def trip_count(self, it) -> Sh:
        """The trip count of ``for x in it`` from the rank's own shard (rank-varying, category
        RANK) or unknown: values computed from this rank's batches do not count here."""
        sh = self.shape(it)
        if sh.kind == "V" and sh.src.cat == RANK:
            return sh
        return SX


def _resolved(hub, view, call):
    from .sinks import resolved

    return resolved(hub, view, call)


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


def _has_default(fn, p) -> bool:
    a = fn.args
    pos = [x.arg for x in (*a.posonlyargs, *a.args)]
    if p in pos:
        return pos.index(p) >= len(pos) - len(a.defaults)
    for x, dflt in zip(a.kwonlyargs, a.kw_defaults):
        if x.arg == p:
            return dflt is not None
    return False


def shapes_of(hub, view) -> Shapes:
    """The shape analyser of ``view`` for this analysis (facts are memoised on the view)."""
    cache = hub.__dict__.setdefault("_shapes", {})
    got = cache.get(id(view))
    if got is None:
        got = cache[id(view)] = Shapes(hub, view)
    return got


__all__ = ["Sh", "SU", "SX", "Shapes", "shapes_of", "join_any", "join_paths", "VX"]


# collective -> (position, keyword) of the tensor whose shape must match across ranks
SHAPED = {
    "all_gather": (1, "tensor"), "all_gather_into_tensor": (1, "input_tensor"),
    "_all_gather_base": (1, "input_tensor"), "all_reduce": (0, "tensor"),
    "reduce_scatter": (0, "output"), "reduce_scatter_tensor": (1, "input"),
}


class ShapeSink:
    """Parameter ``param`` of a function decides (``mode``: its value as a size, or its shape)
    the shape of the tensor that ``effect``'s collective gets."""

    __slots__ = ("param", "mode", "effect")

    def __init__(self, param, mode, effect):
        self.param, self.mode, self.effect = param, mode, effect


def shaped_calls(view, scope):
    """(call, op, tensor argument) for the shaped collectives directly in ``scope``."""
    from ..torch_api import D
    from .summaries import on_subgroup, scope_calls

    out = []
    for c in scope_calls(view, scope):
        qn = view.sem.call_qualname(c) or ""
        if not qn.startswith(D):
            continue
        op = qn[len(D):]
        spec = SHAPED.get(op)
        if spec is None or on_subgroup(c, op):
            continue
        t = get_arg(c, *spec)
        if t is not None:
            out.append((c, op, t))
    return out


def arg_fact(sh: Shapes, arg, mode) -> Sh:
    return sh.size(arg) if mode == "val" else sh.shape(arg)


def shape_sinks(hub, view, fn, depth: int = 0) -> tuple:
    """The parameters of ``fn`` whose value or shape decides the shape of a tensor that ``fn``
    (or a helper it calls, in this file or another) hands to a shaped collective."""
    memo = view.memo.setdefault("shapes.sinks", {})
    got = memo.get(id(fn))
    if got is not None:
        return got
    if depth > 4 or not isinstance(fn, FUNC_TYPES):
        return ()
    effs = hub.summary(view, fn).collectives  # what it may run, through helpers too (capped)
    if len(effs) < 6 and not any(e.op in SHAPED for e in effs):
        memo[id(fn)] = ()
        return ()
    memo[id(fn)] = ()  # recursion guard
    hub._view_stack.append(view)
    try:
        out = _shape_sinks(hub, view, fn, depth)
    finally:
        hub._view_stack.pop()
    memo[id(fn)] = out
    return out


def _shape_sinks(hub, view, fn, depth):
    from .sinks import bind_args, callee_name, resolved
    from .summaries import Effect, scope_calls

    sh = shapes_of(hub, view)
    out = []
    seen = set()

    def add(fact, eff):
        if fact.kind != "U" or not fact.deps:
            return
        for fid, p, m in fact.deps:
            if fid == id(fn) and m in ("val", "shape") and (p, m) not in seen and len(out) < 6:
                seen.add((p, m))
                out.append(ShapeSink(p, m, eff))

    for c, op, t in shaped_calls(view, fn):
        add(sh.shape(t), Effect(op, c, view.path))
    for c in scope_calls(view, fn):
        f = c.func
        if not (isinstance(f, ast.Name) or (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name))):
            continue
        if not (c.args or c.keywords):
            continue
        target = resolved(hub, view, c)
        if target is None or target[1] is fn:
            continue
        inner = shape_sinks(hub, target[0], target[1], depth + 1)
        if not inner:
            continue
        args = bind_args(c, target[1])
        name = callee_name(target)
        for s in inner:
            a = args.get(s.param)
            if a is not None:
                add(arg_fact(sh, a, s.mode), s.effect.through(name))
    return tuple(out)
