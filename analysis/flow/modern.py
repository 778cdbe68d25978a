"""What the DDP5xx rules (FSDP2, DTensor, DeviceMesh, DCP, compile) ask of a value: the API
names they share, the hub and its main view, and predicates on the origins of a value
(``origins.py``): is it an optimizer, which module's parameters, which calls a state dict holds,
where a name is read again."""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from .bindings import contains, stores_name
from .calls import call_args
from .gathers import kind_kept
from .hidden import FULLY_SHARD, is_fsdp2, options_flag, shard_calls  # noqa: F401  (re-exported)
from .origins import holds_call, is_optimizer_ctor, key_of, origins, qn_pred  # noqa: F401  (re-exported)

# the gate of the DDP5xx rules: a module of the modern stack is imported
MODERN_TEXT = ("fsdp", "tensor", "checkpoint", "device_mesh", "compile", "distributed")
DCP_SAVE = ("torch.distributed.checkpoint.save", "torch.distributed.checkpoint.state_dict_saver.save",
            "torch.distributed.checkpoint.async_save", "torch.distributed.checkpoint.state_dict_saver.async_save",
            "torch.distributed.checkpoint.save_state_dict")
DCP_LOAD = ("torch.distributed.checkpoint.load", "torch.distributed.checkpoint.state_dict_loader.load",
            "torch.distributed.checkpoint.load_state_dict")
# every call that reads a DCP checkpoint's folder (its ``.metadata`` first): the loads, and the
# conversion to one ``torch.save`` file
DCP_READ = (*DCP_LOAD, "torch.distributed.checkpoint.format_utils.dcp_to_torch_save")
ASYNC_SAVE = ("torch.distributed.checkpoint.async_save", "torch.distributed.checkpoint.state_dict_saver.async_save")
INIT_MESH = ("torch.distributed.device_mesh.init_device_mesh", "torch.distributed._tensor.device_mesh.init_device_mesh")
PARALLELIZE = ("torch.distributed.tensor.parallel.parallelize_module",)
DDP = "torch.nn.parallel.DistributedDataParallel"
FSDP1 = "torch.distributed.fsdp.FullyShardedDataParallel"
COMPILE = "torch.compile"


def hub(ctx):
    from . import for_context  # lazy: the package imports this module's neighbours
    an = for_context(ctx)
    return an, an.main


def is_optimizer(an, view, expr, at, callers=None) -> bool:
    """``expr`` may hold a ``torch.optim`` optimizer (``callers``: as ``origins`` takes it, for a
    parameter that only other modules pass: ``Checkpointer(model, optimizer)`` of a script)."""
    return holds_call(an, view, expr, at, is_optimizer_ctor, callers=callers) is not None


def params_root(expr):
    """``model`` of ``model.parameters()`` / ``model.layers.named_parameters()`` /
    ``list(model.parameters())`` / ``[p for p in model.parameters() if ...]``, as its key."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id in ("list", "filter") \
            and expr.args:
        return params_root(expr.args[-1])
    if isinstance(expr, (ast.ListComp, ast.GeneratorExp)) and expr.generators:
        return params_root(expr.generators[0].iter)
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in (
            "parameters", "named_parameters"):
        base = expr.func.value
        while isinstance(base, ast.Attribute) and key_of(base) is None:
            base = base.value
        return key_of(base)
    return None


def _init_dims(an, view, expr, at, callers=None) -> tuple[bool, int | None]:
    """Whether ``expr`` holds the mesh of an ``init_device_mesh`` call, and its dimensions when
    the call's shape is a literal tuple or list (``callers``: as ``origins`` takes it)."""
    got = holds_call(an, view, expr, at, qn_pred(*INIT_MESH), callers=callers)
    if got is None:
        return False, None
    shape = get_arg(got[1], 1, "mesh_shape")
    return True, (len(shape.elts) if isinstance(shape, (ast.Tuple, ast.List)) else None)


def mesh_dims(an, view, expr, at, callers=None) -> int | None:
    """The dimensions of the mesh ``expr`` holds: an ``init_device_mesh`` call of a literal shape,
    or a slice of several named dimensions of one (``mesh["dp_replicate", "dp_shard"]``)."""
    found, dims = _init_dims(an, view, expr, at, callers)
    if found:
        return dims
    for _v, e in origins(an, view, expr, at, callers=callers):
        if isinstance(e, ast.Subscript) and const_strs(e.slice) is not None and isinstance(e.slice, ast.Tuple) \
                and len(e.slice.elts) >= 2:
            return len(e.slice.elts)
    return None


def named_mesh_dims(an, view, expr, at, callers=None, taken: bool = False) -> int | None:
    """How many dimensions the mesh has of which ``expr`` holds one named dimension
    (``mesh["tp"]`` of ``mesh = init_device_mesh(..., (dp, tp), ...)``), followed through names,
    tuple unpacking (``tp_mesh, dp_mesh = mesh["tp"], mesh["dp"]``), helpers' parameters and
    returns; None when no origin is such a dimension of a mesh of literal shape. ``taken``: for a
    mesh whose shape is built at run time, the number of distinct dimensions the checked module
    takes from it by name, here or in the project functions it passes the mesh to
    (``whole_mesh_dims``' lower bound), when 2 or more."""
    for v, e in origins(an, view, expr, at, callers=callers):
        if isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Constant) and isinstance(e.slice.value, str):
            dims = _init_dims(an, v, e.value, e, callers)[1]
            if dims is not None:
                return dims
            got = holds_call(an, v, e.value, e, qn_pred(*INIT_MESH), callers=callers) if taken else None
            main = getattr(an, "main", None)
            if got is not None and main is not None:
                memo = main.memo.setdefault("modern.taken_dims", {})
                if id(got[1]) not in memo:
                    memo[id(got[1])] = (got[1], _taken_dims(an, main, got[1]))
                n = len(memo[id(got[1])][1] | {e.slice.value})
                if n >= 2:
                    return n
    return None


def taken_mesh_dims(an, view, expr, at, callers=None) -> int | None:
    """``named_mesh_dims`` with the names a run-time-shaped mesh is indexed by (``taken``)."""
    return named_mesh_dims(an, view, expr, at, callers, taken=True)


def helper_mesh_dims(an, view, call, sharders=FULLY_SHARD, mesh_arg=(None, "mesh"), measure=mesh_dims) -> int | None:
    """``measure`` (``mesh_dims``, ``named_mesh_dims``) of the mesh of the ``sharders`` calls
    (``fully_shard``, ``parallelize_module``; the mesh as ``mesh_arg`` gives its position and
    keyword) that the project function ``call`` runs (a sharding helper, in this module or
    another), with a mesh built there or reaching it through its parameters (read at ``call``:
    ``tp_mesh`` or ``world_mesh["tp"]`` of ``def apply_tp(model, tp_mesh)``); None unless every
    such call agrees."""
    target = an.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    tv, tfn = target
    args = dict(call_args(call, tfn))
    params = set(param_names(tfn))

    def here(_v, f):  # the helper's parameters as ``call`` binds them
        return [(view, call)] if f is tfn else []

    got = set()
    for c in tv.sem.calls_to(*sharders):
        if not contains(tfn, c):
            continue
        mesh = get_arg(c, *mesh_arg)
        if mesh is None:
            return None
        if isinstance(mesh, ast.Name) and mesh.id in params and not stores_name(tfn, mesh.id):
            if mesh.id not in args:
                return None
            got.add(measure(an, view, args[mesh.id], call))
        else:
            got.add(measure(an, tv, mesh, c, callers=here))
    return got.pop() if len(got) == 1 else None


def const_strs(node) -> tuple | None:
    if isinstance(node, (ast.Tuple, ast.List)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return tuple(e.value for e in node.elts)
    return None


def const_ints(node) -> tuple | None:
    if isinstance(node, (ast.Tuple, ast.List)) and all(
            isinstance(e, ast.Constant) and type(e.value) is int for e in node.elts):
        return tuple(e.value for e in node.elts)
    return None


def uses_after(sem, key: str, node, scope_node=None) -> list:
    """Uses (loads) of ``key`` (``name`` or ``self.attr``) after ``node``: in its function for a
    name, anywhere in the class for ``self.attr``."""
    out = []
    if key.startswith("self."):
        fn = sem.enclosing_function(node)
        cls = parent(fn) if fn is not None else None
        if not isinstance(cls, ast.ClassDef):
            return out
        attr = key[5:]
        for n in ast.walk(cls):
            if isinstance(n, ast.Attribute) and n.attr == attr and isinstance(n.value, ast.Name) and \
                    n.value.id == "self" and isinstance(n.ctx, ast.Load):
                out.append(n)
        return out
    fn = sem.enclosing_function(node) or sem.tree
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and n.id == key and isinstance(n.ctx, ast.Load):
            # later in the function, or anywhere in a function nested in it (a closure reads it
            # when it runs)
            if (sem.enclosing_function(n) or sem.tree) is not fn or (
                    n.lineno, n.col_offset) > (node.end_lineno, node.end_col_offset):
                out.append(n)
    return out


def content_calls(an, view, expr, at, depth: int = 0) -> list:
    """(view, call) of the calls whose results ``expr`` holds or contains: its origins, and the
    values of the dict literals (``{"model": model.state_dict(), ...}``, ``dict(model=...)``)
    among them."""
    out = []
    if depth > 3:
        return out
    for v, e in origins(an, view, expr, at):
        if isinstance(e, ast.Dict):
            for x in e.values:
                if x is not None:
                    out.extend(content_calls(an, v, x, x, depth + 1))
        elif isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "dict":
            for kw in e.keywords:
                out.extend(content_calls(an, v, kw.value, kw.value, depth + 1))
        elif isinstance(e, ast.Call):
            out.append((v, e))
    return out


def shard_reach(cls, text, filename):
    """A modern-stack rule's second gate (``Rule.reach``): the file, or a project module it imports
    (transitively, the text-level import graph of ``flow.reach``), spells a sharding call or a
    state-dict getter (``SHARD_TEXT``): ``self.model = apply_fsdp(model)`` with ``fully_shard``
    in ``parallelize.py``."""
    from .reach import SHARD_TEXT, reaches  # lazy: only files the text gate admits

    return reaches(filename, text, SHARD_TEXT)


# a state dict's entries as a loop or comprehension walks them
_ENTRY_WALKS = frozenset({"items", "values"})


def remapped_entries(comp):
    """(state dict expression, value expression, names the loop binds) of a dict or list
    comprehension that walks a state dict's entries: ``{k: v.to_local() for k, v in
    sd.items()}`` gives (``sd``, ``v.to_local()``, {k, v}); None for other comprehensions."""
    if not isinstance(comp, (ast.DictComp, ast.ListComp)) or len(comp.generators) != 1:
        return None
    g = comp.generators[0]
    it = g.iter
    if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _ENTRY_WALKS
            and not it.args):
        return None
    names = {n.id for n in ast.walk(g.target) if isinstance(n, ast.Name)}
    value = comp.value if isinstance(comp, ast.DictComp) else comp.elt
    return it.func.value, value, names


def local_shard_of(value, names) -> ast.Call | None:
    """The ``x.to_local()`` call in ``value`` whose receiver is one of ``names`` (the entry the
    loop binds), through ``.detach()`` / ``.cpu()`` chains and conditional expressions."""
    for n in ast.walk(value):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "to_local" \
                and not n.args and isinstance(n.func.value, ast.Name) and n.func.value.id in names:
            return n
    return None


def entry_kept(value, names) -> bool:
    """``value`` (a remapped or filled entry: ``remapped_entries``, ``filled_entries``) is the
    entry the loop binds, one of ``names``, as it is or through methods that keep its kind
    (``v.to(device)``, ``v.float().contiguous()``): a plain tensor stays a plain tensor."""
    value = kind_kept(value)
    return isinstance(value, ast.Name) and value.id in names


def filled_entries(view, leaf) -> list:
    """For an empty dict ``out = {}`` (``leaf``, bound to a name), the loops of its function that
    fill it from a state dict's entries: ``for k, v in sd.items(): out[k] = v.to_local()`` gives
    (``sd``, ``v.to_local()``, {k, v}) for each such store."""
    st = parent(leaf)
    if not (isinstance(leaf, ast.Dict) and not leaf.keys) and not (
            isinstance(leaf, ast.Call) and isinstance(leaf.func, ast.Name) and leaf.func.id == "dict"
            and not leaf.args and not leaf.keywords):
        return []
    if not (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)):
        return []
    name = st.targets[0].id
    scope = view.sem.enclosing_function(st) or view.sem.tree
    out = []
    for loop in ast.walk(scope):
        if not isinstance(loop, ast.For):
            continue
        it = loop.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and it.func.attr in _ENTRY_WALKS
                and not it.args):
            continue
        names = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
        for n in ast.walk(loop):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Subscript) \
                    and isinstance(n.targets[0].value, ast.Name) and n.targets[0].value.id == name:
                out.append((it.func.value, n.value, names))
    return out


def filled_only(view, leaf, fills, use=None) -> bool:
    """Every write into the dict ``leaf`` is bound to (``out = {}``) stores one of the values of
    ``fills`` (``filled_entries``): nothing else is put into it (``out.update(...)``, ``out["x"] =
    distribute_tensor(...)``, a call given it). With ``use`` in the same scope (where the dict is
    read), only the writes that may come before it count (``mutations``)."""
    from .bindings import binding_scope
    from .mutations import index, mutations

    st = parent(leaf)
    name = st.targets[0].id
    scope = binding_scope(view.sem, st)
    if use is not None and binding_scope(view.sem, use) is scope:
        writes = mutations(view, name, use, [st])
    else:
        writes = index(view).get((scope, name), ())
    vals = {id(value) for _sd, value, _names in fills}
    return all(values is not None and all(id(x) in vals for x in values) for _n, values in writes)


def fsdp1_flat(an, view, expr, at, callers=None):
    """(view, ``FullyShardedDataParallel(...)`` call) when every origin of ``expr`` is an FSDP1
    wrap that flattens its parameters: ``use_orig_params`` left at its default (False) or given
    as a constant False, no ``ignored_modules`` / ``ignored_states`` (those keep their own
    parameters) and no ``**kwargs``; None otherwise. Its ``named_parameters()`` then yields
    ``FlatParameter``s, named ``..._flat_param``, 1-D."""
    from ..torch_api import constant_of

    got = origins(an, view, expr, at, callers=callers)
    if not got:
        return None
    for v, e in got:
        if not (isinstance(e, ast.Call) and v.sem.call_qualname(e) == FSDP1):
            return None
        if any(k.arg is None or k.arg in ("ignored_modules", "ignored_states") for k in e.keywords):
            return None
        if len(e.args) > 1:
            return None  # positional options: not read
        flag = get_arg(e, None, "use_orig_params")
        if flag is not None:
            if not isinstance(flag, ast.Constant):
                flag = constant_of(v.sem, flag)
            if not (isinstance(flag, ast.Constant) and flag.value is False):
                return None
    return got[0]


# a state dict of a module's own (DTensor) entries, as the module's state-dict API returns it
_MODEL_SD = ("torch.distributed.checkpoint.state_dict.get_model_state_dict",)


def restores_dtensors(an, view, expr, at, files, callers=None) -> bool:
    """Some value ``expr`` may hold is what ``torch.load`` reads (or one entry of it, ``ckpt["model"]``)
    from a file the project writes only with DTensor state dicts: every ``torch.save`` to a file of
    that name (``saved_fields.file_saves``: in the loading module, this one, and the modules
    ``files(words)`` gives, None when unknown), at least one, saves there (under the same entry) the
    ``state_dict()`` of a ``fully_shard`` module, or its ``get_model_state_dict`` without
    ``full_state_dict=True``. Loaded back, whatever ``weights_only``, the file holds those DTensors
    again: a rank's own sharded checkpoint, written and read by the same trainer."""
    from .saved_fields import file_saves, file_shape, file_words

    for lv, load, path, *_ in origins(an, view, expr, at, keep_path="entries", callers=callers):
        if not (isinstance(load, ast.Call) and lv.sem.call_qualname(load) == "torch.load"):
            continue
        where = get_arg(load, 0, "f")
        name = file_shape(lv, where, load, 0)
        if name is None:
            continue
        views = {id(v): v for v in (lv, view)}
        words = file_words(lv, where, load)
        for v in (files(words) or ()) if words else ():
            views.setdefault(id(v), v)
        saves = file_saves(views.values(), name)
        if saves and all(_sharded_sd(an, sv, get_arg(sc, 0, "obj"), sc, path, callers) for sv, sc in saves):
            return True
    return False


def _sharded_sd(an, view, obj, at, path, callers) -> bool:
    """Every value ``obj`` (at ``path``, an entry path into it) may hold is a ``fully_shard`` module's
    DTensor state dict."""
    got = origins(an, view, obj, at, path=tuple(path), callers=callers)
    if not got:
        return False
    for v, e in got:
        if not isinstance(e, ast.Call):
            return False
        if isinstance(e.func, ast.Attribute) and e.func.attr == "state_dict" and not e.args and not e.keywords:
            module = e.func.value
        elif v.sem.call_qualname(e) in _MODEL_SD:
            opts = get_arg(e, 99, "options")
            if opts is not None and options_flag(v, opts, e, "full_state_dict", hub=an, missing=False,
                                                 callers=callers) is not False:
                return False  # full (plain) tensors, or cannot tell
            module = get_arg(e, 0, "model")
        else:
            return False
        if module is None or not is_fsdp2(an, v, module, e, callers):
            return False
    return True


def whole_mesh_dims(an, view, expr, at, callers=None) -> int | None:
    """The dimensions of the whole mesh ``expr`` holds (not one named dimension of it): ``mesh_dims``;
    for an ``init_device_mesh`` mesh whose shape and names are built at run time
    (``init_device_mesh(dev, dims, mesh_dim_names=names)`` of lists appended to), the number of
    distinct dimensions the module takes from that mesh by name, here or in the project functions
    it passes the mesh to (``world_mesh["dp"]`` here, ``world_mesh["tp"]`` in
    ``parallelize(model, world_mesh)``): a lower bound, given when it is 2 or more; else None."""
    leaves = origins(an, view, expr, at, callers=callers)
    if not leaves or not all(isinstance(e, ast.Call) or (isinstance(e, ast.Subscript) and isinstance(e.slice, ast.Tuple))
                             for _v, e in leaves):
        return None  # one origin is a dimension of a mesh, or unknown
    dims = mesh_dims(an, view, expr, at, callers)
    if dims is not None:
        return dims
    got = holds_call(an, view, expr, at, qn_pred(*INIT_MESH), callers=callers)
    if got is None:
        return None
    init = got[1]
    names = const_strs(get_arg(init, None, "mesh_dim_names"))
    if names is not None:
        return len(names)
    memo = view.memo.setdefault("modern.taken_dims", {})
    if id(init) not in memo:
        memo[id(init)] = (init, _taken_dims(an, view, init))
    taken = memo[id(init)][1]
    return len(taken) if len(taken) >= 2 else None


def _taken_dims(an, view, init) -> set:
    """The names of ``x["name"]`` subscripts of the mesh ``init`` builds, in ``view`` and in the
    project functions ``view`` passes the mesh to (one level)."""
    pred = qn_pred(*INIT_MESH)

    def same(v, e, at, callers=None):
        h = holds_call(an, v, e, at, pred, callers=callers)
        return h is not None and h[1] is init

    taken = set()
    for n in view.sem.of_types(ast.Subscript):
        if isinstance(n.ctx, ast.Load) and isinstance(n.value, (ast.Name, ast.Attribute)) \
                and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str) \
                and n.slice.value not in taken and same(view, n.value, n):
            taken.add(n.slice.value)
    for c in view.sem.calls:
        target = an.resolve_call(view, c) if c.args or c.keywords else None
        if target is None or not isinstance(target[1], FUNC_TYPES):
            continue
        tfn = target[1]
        passed = {p for p, a in call_args(c, tfn) if isinstance(a, (ast.Name, ast.Attribute)) and same(view, a, c)}
        for n in ast.walk(tfn):
            if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Name) and n.value.id in passed \
                    and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
                taken.add(n.slice.value)
    return taken
