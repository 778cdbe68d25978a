"""Shape facts (``Sh``): uniform, rank-varying (with the source and, when known, the dimensions
that vary) or unknown, possibly depending on a function's parameters; how facts combine within an
expression (``join_any``) and across the bindings that reach a use (``join_paths``: an unknown path
wins); and the tables of torch / numpy / file calls the shape analysis (``shapes``, ``extents``)
reads."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, parent
from ..semantic import terminal_name as _terminal  # noqa: F401 (the shape modules' name for it)
from .bindings import reaching
from .uniformity import Src

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


def bincount_length(shapes, e, src_e, minlength_pos: int, d) -> Sh:
    """The length of ``torch.bincount(x)`` (``Shapes``' answer): ``max(x) + 1`` entries, as many as
    the largest value this rank counts, so rank-varying where ``x``'s values are; ``minlength=n``
    (at least ``n`` entries, exactly ``n`` for values below it: class counts) is not known to vary,
    nor are arguments hidden behind ``*args`` / ``**opts``."""
    if get_arg(e, minlength_pos, "minlength") is not None or any(k.arg is None for k in e.keywords) or any(
            isinstance(a, ast.Starred) for a in e.args):
        return SX
    return shapes._data_shaped(src_e, "bincount", d)


def pinned_by_assert(shapes, use: ast.Name, sh: Sh, d) -> Sh:
    """``sh``, the rank-varying shape of ``use``, made uniform when an ``assert`` that runs before
    the use on every path, after every binding of the name that reaches it, fixes each varying
    dimension to a uniform size (``assert local.shape[0] == S // world``, ``local.size(0) == n``,
    ``len(local) == n``): a rank whose shape differed would stop there."""
    if not sh.varying or not sh.dims:
        return sh
    kind, evs = reaching(shapes.view, use.id, use)
    if kind != "events" or not evs:
        return sh
    last = max(getattr(ev, "end_lineno", ev.lineno) for ev in evs)
    pinned = set()
    for st in _preceding(use):
        if st.__class__ is ast.Assert and st.lineno > last:
            for k, size in _asserted_sizes(st.test, use.id):
                if shapes.size(size, d + 1).kind == "U":
                    pinned.add(k)
    return SU if sh.dims <= pinned else sh


def _preceding(node):
    """The statements that run before ``node`` on every path in its function: the earlier ones of
    each statement list that holds it (or an ancestor), up to the function."""
    child, p = node, parent(node)
    while p is not None and not isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef, ast.Module)):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(p, field, None)
            if isinstance(block, list) and child in block:
                yield from block[:block.index(child)]
        child, p = p, parent(p)
    if p is not None:
        body = getattr(p, "body", [])
        if child in body:
            yield from body[:body.index(child)]


def _asserted_sizes(test, name: str):
    """(dimension, size expression) of each ``<name>.shape[k] == size`` (``.size(k)``, ``len()``
    for 0; either side; an operand of an ``and``) that ``test`` asserts."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        for v in test.values:
            yield from _asserted_sizes(v, name)
        return
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return
    for a, b in ((test.left, test.comparators[0]), (test.comparators[0], test.left)):
        k = _dim_read(a, name)
        if k is not None:
            yield k, b


def _dim_read(e, name: str):
    if isinstance(e, ast.Subscript) and isinstance(e.value, ast.Attribute) and e.value.attr == "shape" \
            and isinstance(e.value.value, ast.Name) and e.value.value.id == name:
        return _int_const(e.slice)
    if isinstance(e, ast.Call) and len(e.args) == 1 and not e.keywords:
        f = e.func
        if isinstance(f, ast.Attribute) and f.attr == "size" and isinstance(f.value, ast.Name) and f.value.id == name:
            return _int_const(e.args[0])
        if isinstance(f, ast.Name) and f.id == "len" and isinstance(e.args[0], ast.Name) and e.args[0].id == name:
            return 0
    return None
