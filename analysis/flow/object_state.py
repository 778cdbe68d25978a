"""The entries of a state dict handed to a checkpoint writer, and whether what one of them holds
differs between ranks, an object's state included.

``state_entries`` walks a state dict to its entries: the origins of the value (``origins``:
names, tuple unpacking, helpers' and methods' returns, ``self`` attributes, in other modules too),
dict displays (``{**base, "k": v}``), ``dict(k=v)``, the stores into a dict bound by a display
since its binding (``d["k"] = v``, ``d.update({...})``), a nested dict under its key, and an
object of a project class whose ``state_dict()`` the writer calls itself (DCP's ``Stateful``).
Each entry comes with its key expression, the dicts it is nested in and the instance
the method that built it runs on, when there is one.

``entry_value`` is the uniformity of an entry's value (``uniformity.Evaluator``), also where it is
read out of an object: ``aug.state_dict()`` of ``aug = Jitter(seed=base + rank)``, a method of a
project class asked as that construction runs it, so that ``self.gen`` of ``self.gen =
torch.Generator().manual_seed(seed)`` is read with the seed the call passes (the hub's
``self_attr_value`` under the construction's context). The object is followed to its construction
through ``self`` attributes and the arguments of a constructor's calls in other modules
(``callers``, as ``origins`` takes it).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, param_names, parent
from ..semantic import terminal_name as _terminal
from .bindings import binding_scope
from .cpu_saves import holds_class, scheduler_class
from .hidden import options_flag
from .instances import ctor_class
from .mutations import index
from .origins import origins
from .records import _NOT_PROJECT, inherited_method
from .values import Value
from .vocab import _RNG_PREFIXES, _SHAPE_METHODS

_MAX_DEPTH = 4


class Entry:
    """One entry of a state dict: ``key`` the key's expression (a keyword of ``dict(...)``: its
    name, as a constant), ``value`` the stored expression, both in ``view``; ``on`` the
    (view, construction call) of the instance whose method returned the dict, or None; ``outer``
    the entries of the dicts it is nested in, the outermost first."""

    __slots__ = ("view", "key", "value", "on", "outer")

    def __init__(self, view, key, value, on, outer=()):
        self.view, self.key, self.value, self.on, self.outer = view, key, value, on, outer


def state_entries(hub, view, expr, at, callers=None, depth: int = 0, on=None) -> list:
    """The entries (``Entry``) the state dict ``expr`` (at ``at``) may hold; see the docstring."""
    out: list = []
    if depth > _MAX_DEPTH:
        return out
    for v, e, eon in _leaves(hub, view, expr, at, callers, on):
        if isinstance(e, ast.Dict):
            for k, x in zip(e.keys, e.values):
                if k is None:
                    out.extend(state_entries(hub, v, x, x, callers, depth + 1, eon))
                else:
                    out.extend(_entry(hub, v, k, x, callers, depth, eon))
            out.extend(_stores(hub, v, e, callers, depth, eon))
        elif isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "dict" \
                and v.sem.qualname(e.func) is None:
            for kw in e.keywords:
                if kw.arg is None:
                    out.extend(state_entries(hub, v, kw.value, kw.value, callers, depth + 1, eon))
                else:
                    out.extend(_entry(hub, v, ast.Constant(kw.arg), kw.value, callers, depth, eon))
            out.extend(_stores(hub, v, e, callers, depth, eon))
        elif isinstance(e, ast.Call) and _method(hub, v, e, "state_dict") is not None:
            # DCP calls the ``state_dict()`` of a ``Stateful`` object it is given
            for r in _returns(_method(hub, v, e, "state_dict")):
                out.extend(state_entries(hub, r[0], r[1], r[1], None, depth + 1, (v, e)))
    return out


def _leaves(hub, view, expr, at, callers, on) -> list:
    """(view, origin, construction) of ``expr``: its origins, and for a ``state_dict()`` call on
    an object of a project class, the origins of what the method returns, with the object's
    construction."""
    out = []
    for v, e in origins(hub, view, expr, at, callers=callers):
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "state_dict":
            built = [(cv, c) for cv, c in constructions(hub, v, e.func.value, e, callers)
                     if _method(hub, cv, c, "state_dict") is not None]
            for cv, c in built:
                for mv, r in _returns(_method(hub, cv, c, "state_dict")):
                    out.extend((ov, oe, (cv, c)) for ov, oe in origins(hub, mv, r, r))
            if built:
                continue
        out.append((v, e, on))
    return out


def constructions(hub, view, recv, at, callers=None) -> list:
    """(view, call) of the constructions of project classes that ``recv`` may hold."""
    return [(v, e) for v, e in origins(hub, view, recv, at, callers=callers)
            if isinstance(e, ast.Call) and ctor_class(hub, v, e, _NOT_PROJECT) is not None]


def _method(hub, view, ctor, name: str):
    """(view, method) ``name`` of the project class ``ctor`` builds, or None."""
    cls = ctor_class(hub, view, ctor, _NOT_PROJECT)
    m = inherited_method(hub, cls[0], cls[1], name) if cls is not None else None
    return m if m is not None and isinstance(m[1], FUNC_TYPES) else None


def _returns(method) -> list:
    """(view, returned expression) of each ``return`` of ``method`` (view, function)."""
    mv, fn = method
    return [(mv, r.value) for r in iter_scope_nodes(fn) if isinstance(r, ast.Return) and r.value is not None]


def _entry(hub, view, key, value, callers, depth, on) -> list:
    """The entry ``key: value``, or the entries of ``value`` when it is itself a dict (nested in
    this one: ``outer``)."""
    me = Entry(view, key, value, on)
    inner = state_entries(hub, view, value, value, callers, depth + 1, on)
    for e in inner:
        e.outer = (me, *e.outer)
    return inner if inner else [me]


def _stores(hub, view, display, callers, depth, on) -> list:
    """The entries the stores into the name a display is bound to add: ``d["k"] = v`` and
    ``d.update({...})`` / ``d.update(other)`` in the display's scope."""
    st, at = parent(display), display
    if isinstance(st, ast.Tuple):  # ``pos, state = ..., {...}``: the name at the display's place
        at, st = st, parent(st)
    if not (isinstance(st, ast.Assign) and len(st.targets) == 1):
        return []
    tgt = st.targets[0]
    if at is not display and isinstance(tgt, ast.Tuple) and len(tgt.elts) == len(at.elts):
        tgt = tgt.elts[at.elts.index(display)]
    if not isinstance(tgt, ast.Name):
        return []
    name = tgt.id
    out = []
    for node, values in index(view).get((binding_scope(view.sem, st), name), ()):
        if node is st or values is None or (getattr(node, "lineno", 0), getattr(node, "col_offset", 0)) <= (
                st.lineno, st.col_offset):
            continue
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name:
                    out.extend(_entry(hub, view, t.slice, node.value, callers, depth, on))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update":
            for a in node.args:
                out.extend(state_entries(hub, view, a, node, callers, depth + 1, on))
            for kw in node.keywords:
                if kw.arg is not None:
                    out.extend(_entry(hub, view, ast.Constant(kw.arg), kw.value, callers, depth, on))
    return out


def entry_value(hub, entry: Entry, callers=None):
    """The uniformity of what ``entry`` holds: its value, read under the construction of the
    object whose method built it; a method's result on an object of a project class
    (``aug.get_state()``), what the method returns as the object's construction runs it."""
    view, value = entry.view, entry.value
    got = _read(hub, view, value, entry.on)
    if got.varying or not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return got
    recv = value.func.value
    for cv, ctor in constructions(hub, view, recv, value, callers):
        m = _method(hub, cv, ctor, value.func.attr)
        for mv, r in _returns(m) if m is not None else ():
            v = _read(hub, mv, r, (cv, ctor))
            if v.varying:
                return v
    if isinstance(recv, ast.Name) and not value.args and not value.keywords and value.func.attr not in _SHAPE_METHODS:
        # ``noise.get_state()`` of a helper's parameter: what its calls pass (``noise`` seeded per rank)
        # (an object of a project class answers through its method, above; one built with a
        # varying argument holds it in that field only, ``Src.fields``)
        for ov, oe in origins(hub, view, recv, value, callers=callers):
            if oe is recv or (isinstance(oe, ast.Call) and ctor_class(hub, ov, oe, _NOT_PROJECT) is not None):
                continue
            if (v := _read(hub, ov, oe, None)).varying and v.src.fields is None:
                return Value("V", v.src.step(f"read as `{ast.unparse(value)}`"))
    return got


def _read(hub, view, expr, on):
    """The evaluator's value of ``expr``; under the context of the construction ``on`` (its
    ``__init__`` given what the call passes) for a method of that object."""
    if on is not None:
        cv, ctor = on
        target = hub.resolve_call(cv, ctor)
        if target is not None:
            ctx = hub.call_context(cv, ctor, target, None, want_wraps=False)
            if ctx is not None:
                v = hub.evaluator(view, ctx).value(expr)
                if v.varying:
                    return v
    return hub.evaluator(view).value(expr)


def key_varies(hub, entry: Entry) -> bool:
    """The entry's key, or that of a dict it is nested in, differs between ranks (``f"rng_{rank}"``,
    ``{rank: state}``)."""
    return any(_read(hub, e.view, e.key, e.on).varying for e in (*entry.outer, entry))


def placed_object(hub, entry: Entry) -> bool:
    """Every origin of the entry's value builds an object of a library class (a capitalised callee
    that is no project class: ``ShardedObject(key, data, (world,), (rank,))``, ``ShardedTensor``):
    one built with the rank carries its own placement, which a sharded checkpoint writes per rank.
    Asked only of a value already known to differ between ranks."""
    got = origins(hub, entry.view, entry.value, entry.value)
    return bool(got) and all(
        isinstance(e, ast.Call) and (_terminal(e.func) or "")[:1].isupper() and hub.resolve_call(v, e) is None
        for v, e in got)


def rng_draw_per_rank(hub, view, src, callers=None) -> bool:
    """The random draw (or generator state) a rank-varying value ``src`` (``values.Src`` of the
    RNG category) comes from runs under a seed that differs between ranks: the module seeds that
    generator per rank (the evaluator's own answer), or the seed in force at the draw
    (``seeds.seed_in_force``, through the calls of its function, in other modules with
    ``callers``) is rank-varying. A module that seeds nothing may be seeded by its callers with
    one value everywhere: not known to differ."""
    from .seeds import FAMILY_SEEDERS, seed_in_force  # lazy: seeds reads the rule context's view

    v = hub.view_of(src.path) if src.path else None
    if v is None:
        return False
    if v.seeded:
        return True
    for c in v.sem.calls:
        qn = v.sem.call_qualname(c) or ""
        if c.lineno != src.line or not qn.startswith(_RNG_PREFIXES):
            continue
        fam = "random" if qn.startswith("random.") else "numpy"
        got = seed_in_force(hub, v, c, callers=callers, seeders=FAMILY_SEEDERS[fam])
        if got is not None and got.kind == "V":
            return True
    return False



# what a DCP load restores into the state dict alone: a fresh object no live state shares
_FRESH_CALLS = frozenset({
    "dataclasses.asdict", "dataclasses.astuple", "copy.deepcopy", "copy.copy", "random.getstate",
    "numpy.random.get_state", "torch.get_rng_state", "torch.random.get_rng_state", "torch.cuda.get_rng_state",
    "torch.cuda.get_rng_state_all", "torch.tensor"})
_SCALAR_BUILTINS = frozenset({"int", "float", "len", "round", "str", "bool"})


def restored_only_in_dict(hub, view, expr, at, callers=None, depth: int = 0) -> bool:
    """``dcp.load`` would restore what ``expr`` holds into the state dict alone, so the value is
    lost unless the code reads it back out of the dict: an immutable value (a number or a string
    constant, arithmetic, ``int(...)``, ``.item()``), a new object no live state shares (a dict
    display or ``dict(k=v)`` holding such a value, ``dataclasses.asdict(...)``,
    ``copy.deepcopy(...)``, a random generator's state: ``torch.get_rng_state()``,
    ``gen.get_state()`` of a library generator), a learning-rate scheduler's ``state_dict()`` (a
    copy of its counters), or what a method of a project class returns when every return is one.
    Names and attributes count only when every value they may hold is immutable (a dict or a
    tensor held by a name may be live state that the load fills in place). Anything else (a
    ``Stateful`` object, which DCP loads itself; a module's or an optimizer's state dict, whose
    tensors are loaded in place; a value not followed): False."""
    if depth > 3 or expr is None:
        return False
    if isinstance(expr, (ast.Name, ast.Attribute)):
        got = [(v, e) for v, e in origins(hub, view, expr, at, callers=callers) if not _accumulates(e)]
        return bool(got) and all(_immutable(v, e) or _full_copy(hub, v, e) for v, e in got)
    if isinstance(expr, ast.Dict):
        return any(k is not None and restored_only_in_dict(hub, view, x, at, callers, depth + 1)
                   for k, x in zip(expr.keys, expr.values))
    if _immutable(view, expr):
        return True
    if not isinstance(expr, ast.Call):
        return False
    if view.sem.call_qualname(expr) in _FRESH_CALLS or _full_copy(hub, view, expr):
        return True
    if isinstance(expr.func, ast.Name) and expr.func.id == "dict" and view.sem.qualname(expr.func) is None:
        return not expr.args and any(
            k.arg is not None and restored_only_in_dict(hub, view, k.value, at, callers, depth + 1) for k in expr.keywords)
    if not isinstance(expr.func, ast.Attribute) or expr.args or expr.keywords:
        return False
    built = constructions(hub, view, expr.func.value, expr, callers)
    if not built:
        if expr.func.attr == "get_state":  # a library generator's state: a new tensor
            return True
        if expr.func.attr == "state_dict":
            return holds_class(hub, view, expr.func.value, expr, scheduler_class)
        return False
    for cv, ctor in built:
        m = _method(hub, cv, ctor, expr.func.attr)
        rets = _returns(m) if m is not None else ()
        if not rets or not all(restored_only_in_dict(hub, mv, r, r, None, depth + 1) for mv, r in rets):
            return False
    return True


_STATE_GETTERS = tuple(f"torch.distributed.checkpoint.state_dict.{n}" for n in (
    "get_state_dict", "get_model_state_dict", "get_optimizer_state_dict"))


def _full_copy(hub, view, e) -> bool:
    """``get_state_dict(..., options=StateDictOptions(full_state_dict=True))`` (or
    ``cpu_offload=True``): gathered or offloaded copies, not the live shards, so a load fills the
    copies only."""
    if not (isinstance(e, ast.Call) and view.sem.call_qualname(e) in _STATE_GETTERS):
        return False
    opts = get_arg(e, None, "options")
    return opts is not None and any(
        options_flag(view, opts, e, f, hub=hub) is True for f in ("full_state_dict", "cpu_offload"))


def _accumulates(e) -> bool:
    """``e`` is the value of ``x = x + n`` / ``x += n``: a binding that keeps the kind of value
    ``x`` held (a counter stays a number), judged by the other bindings."""
    st = parent(e)
    if isinstance(st, ast.AugAssign):
        return st.value is e
    if not (isinstance(e, ast.BinOp) and isinstance(st, ast.Assign) and len(st.targets) == 1):
        return False
    target = ast.dump(st.targets[0], annotate_fields=False).replace("Store()", "Load()")
    return any(ast.dump(x, annotate_fields=False) == target for x in (e.left, e.right))


def _immutable(view, e) -> bool:
    """A number, a string or a boolean: a constant, arithmetic with one, ``len``/``int``/... of
    anything, ``.item()``."""
    if isinstance(e, ast.Constant):
        return isinstance(e.value, (int, float, str, bool))
    if isinstance(e, ast.UnaryOp):
        return _immutable(view, e.operand)
    if isinstance(e, ast.BinOp):
        return _immutable(view, e.left) or _immutable(view, e.right)
    if isinstance(e, ast.Call):
        if isinstance(e.func, ast.Name) and e.func.id in _SCALAR_BUILTINS and view.sem.qualname(e.func) is None:
            return True
        return isinstance(e.func, ast.Attribute) and e.func.attr == "item" and not e.args
    return False


def keys_read_back(view, state: str, load: ast.AST, param_ok: bool = False):
    """The constant keys that the function of ``load`` (a DCP load, a call that loads into the dict,
    or the function itself: all of it counts as after the load) reads out of the local dict named
    ``state`` after the load (``state["k"]``,
    ``state.get("k")``, ``state.pop("k")``; a read earlier in a loop around the load counts too),
    or None when the dict may be read some other way: it is a global, captured by a nested
    function, used as anything but a subscript with a constant key (passed on, returned,
    iterated, aliased), or a parameter (unless ``param_ok``: the callers read it then)."""
    fn = load if isinstance(load, FUNC_TYPES) else view.sem.enclosing_function(load)
    if fn is None or (state in param_names(fn) and not param_ok):
        return None
    for node in ast.walk(fn):
        if isinstance(node, (ast.Global, ast.Nonlocal)) and state in node.names:
            return None
        if node is not fn and isinstance(node, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)) and any(
                isinstance(n, ast.Name) and n.id == state for n in ast.walk(node)):
            return None
    loops = {id(a) for a in _ancestors(load, fn) if isinstance(a, (ast.For, ast.AsyncFor, ast.While))}
    end = (load.end_lineno, load.end_col_offset) if load is not fn else (0, 0)  # a method given the dict: all of it
    keys = set()
    for n in iter_scope_nodes(fn):
        if not (isinstance(n, ast.Name) and n.id == state and isinstance(n.ctx, ast.Load)):
            continue
        if load is not fn and any(a is load for a in _ancestors(n, fn)):
            continue  # the dict given to the load itself
        p = parent(n)
        later = (n.lineno, n.col_offset) > end or any(id(a) in loops for a in _ancestors(n, fn))
        if isinstance(p, ast.Subscript) and p.value is n:
            if not (isinstance(p.slice, ast.Constant) and isinstance(p.slice.value, str)):
                return None
            if later and isinstance(p.ctx, ast.Load):
                keys.add(p.slice.value)
            continue
        if isinstance(p, ast.Attribute) and isinstance(parent(p), ast.Call) and parent(p).func is p:
            call = parent(p)
            if p.attr in ("get", "pop") and call.args and isinstance(call.args[0], ast.Constant) \
                    and isinstance(call.args[0].value, str):
                if later:
                    keys.add(call.args[0].value)
                continue
            if p.attr in ("update", "setdefault") and not later:
                continue
        return None
    return keys


def _ancestors(node, stop):
    """The nodes above ``node`` up to (not including) ``stop``."""
    out, p = [], parent(node)
    while p is not None and p is not stop:
        out.append(p)
        p = parent(p)
    return out


def param_loads(view, fn, loads: tuple) -> list:
    """(parameter name, load call, keys read back) for each DCP load (``loads``: its qualified
    names) in ``fn`` whose state dict is a parameter of ``fn`` that ``fn`` reads only as
    ``state["k"]`` (a helper ``def restore(state, path): dcp.load(state, checkpoint_id=path)``:
    its callers' dicts are what the load fills)."""
    memo = view.memo.get("object_state.param_loads")
    if memo is None:
        memo = view.memo["object_state.param_loads"] = {}
        for c in view.sem.calls:
            if view.sem.call_qualname(c) not in loads:
                continue
            f = view.sem.enclosing_function(c)
            sd = c.args[0] if c.args else next((k.value for k in c.keywords if k.arg == "state_dict"), None)
            if f is None or not (isinstance(sd, ast.Name) and sd.id in param_names(f)):
                continue
            read = keys_read_back(view, sd.id, c, param_ok=True)
            if read is not None:
                memo.setdefault(f, []).append((sd.id, c, read))
    return memo.get(fn, [])


def unread_stateful_keys(hub, view, ctor, callers=None) -> tuple | None:
    """For ``ctor``, the construction of a project class DCP loads itself (``Stateful``: its own
    ``state_dict`` and ``load_state_dict``): (the ``load_state_dict`` method as (view, function),
    {key: Entry}) for the entries that ``state_dict()`` returns under a constant key, that the load
    would fill in the dict only (``restored_only_in_dict``), and that ``load_state_dict`` never
    reads out of the dict it is given; None when the class is no such one, or the method reads the
    dict some other way (passes it on, iterates it)."""
    sd, ld = _method(hub, view, ctor, "state_dict"), _method(hub, view, ctor, "load_state_dict")
    if sd is None or ld is None:
        return None
    lv, lfn = ld
    params = [a.arg for a in lfn.args.args]
    if len(params) != 2:
        return None
    read = keys_read_back(lv, params[1], lfn, param_ok=True)
    if read is None:
        return None
    dropped = {}
    for mv, r in _returns(sd):
        for e in state_entries(hub, mv, r, r, None):
            top = e.outer[0] if e.outer else e
            if isinstance(top.key, ast.Constant) and isinstance(top.key.value, str) and top.key.value not in read \
                    and top.key.value not in dropped and restored_only_in_dict(hub, top.view, top.value, top.value):
                dropped[top.key.value] = top
    return ld, dropped
