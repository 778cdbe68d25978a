"""Where a value comes from: the expressions (each with its module view) that a use may hold,
followed through names and their reaching bindings, tuple unpacking, ``self`` attributes, the
parameters of a function (its calls in the module) and the returns of project functions (in this
file or another). The DDP5xx rules ask it "is this an optimizer / a DTensor / a DeviceMesh / a
future of ``async_save``", so that moving the construction into a helper or a method, or returning
it in a tuple, changes nothing.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, iter_scope_nodes, param_defaults, parent, subtree
from ..torch_api import constant_of
from .records import class_chain, field_argument, fields, is_record, property_of, self_field
from .bindings import reaching, target_path
from .testing import parametrized_cases

MAX_DEPTH = 6


def origins(hub, view, expr, at, depth: int = 0, path=(), keep_path: bool = False, frames=None,
            limit: int = MAX_DEPTH, callers=None) -> list:
    """(view, expression) pairs the value of ``expr`` at ``at`` may come from (leaves: calls,
    constants, anything not followed further). ``path`` is the index path into a tuple the value
    is an element of (tuple unpacking on the way). ``keep_path``: (view, expression, path) triples,
    the path into what a leaf call returns (``model, opt = accelerator.prepare(model, opt)``: the
    call, element 0; ``keep_path="entries"``: also a call whose result holds the entry a string
    path asks for, ``torch.load(f)`` of ``torch.load(f)["model"]``). ``frames`` (a tuple, ``()`` to start): follow a helper's parameter to the
    argument of the very call whose return led there (context-sensitive), and give each leaf the
    frames it was reached through as a last element (pass them back in to ask about another
    value of that leaf's function in the same context). ``limit``: how many steps to follow.
    ``callers``: ``callers(view, fn)`` gives (view, call) pairs of calls of ``fn`` in other modules
    of the project (the caller's choice: reading other files costs), asked for a parameter of a
    function that its own module never calls (a class built by a script: ``Trainer(loader)``)."""
    if expr is None or depth > limit:
        return []
    if isinstance(expr, (ast.Tuple, ast.List)) and path:
        # a tuple or list display unpacked by position: ``a, b = loaders`` of ``[train, val]``
        i = path[0]
        if isinstance(i, int) and i < len(expr.elts) and not any(isinstance(e, ast.Starred) for e in expr.elts):
            return origins(hub, view, expr.elts[i], at, depth + 1, path[1:], keep_path, frames, limit=limit, callers=callers)
        return []
    if path and isinstance(path[0], str):
        # an entry of a dict: ``{"train": loader}["train"]``, ``dict(train=loader)["train"]``
        item = dict_item(view.sem, expr, path[0])
        if item is not None:
            return origins(hub, view, item, at, depth + 1, path[1:], keep_path, frames, limit=limit, callers=callers)
        if isinstance(expr, (ast.Dict, ast.Tuple, ast.List)) or (isinstance(expr, ast.Call) and _is_dict_call(view.sem, expr)):
            return []  # a display without that key (or with ``**rest``): not followed
    if isinstance(expr, ast.Name):
        kind, evs = reaching(view, expr.id, at)
        if kind in ("global", "none") and view.sem.enclosing_function(at) is not None:
            # a module-level name read in a function: also what the functions that declare it
            # ``global`` store there (``def init(): global _STATE; _STATE = State(...)``)
            more = view.sem.global_stores(expr.id)
            if more:
                kind, evs = "global", [*(evs or ()), *more]
        if kind in ("events", "global"):
            out = []
            if path and isinstance(path[0], str) and evs:
                # ``d = {...}`` then ``d["k"] = v``: the stores into the entry since the binding
                out.extend(_entry_stores(hub, view, expr, evs, path, keep_path, frames, depth, limit, callers))
            for e in evs or ():
                if isinstance(e, ast.Assign):
                    for t in e.targets:
                        p = target_path(t, expr.id)
                        if p is not None:
                            out.extend(origins(hub, view, e.value, e, depth + 1, (*p, *path), keep_path, frames, limit=limit, callers=callers))
                            break
                elif isinstance(e, (ast.AnnAssign, ast.NamedExpr)) and e.value is not None:
                    out.extend(origins(hub, view, e.value, e, depth + 1, path, keep_path, frames, limit=limit, callers=callers))
                elif isinstance(e, (ast.With, ast.AsyncWith)):
                    for it in e.items:
                        if it.optional_vars is not None and target_path(it.optional_vars, expr.id) is not None:
                            out.append(_leaf(view, it.context_expr, path, keep_path, frames))
            return out
        if kind == "param" and isinstance(evs, FUNC_TYPES):
            out = []
            if frames and frames[-1][0] is evs:  # the call whose return we are in
                _, c, cv = frames[-1]
                a = _argument(c, evs, expr.id)
                if a is None:  # the default: a value of the callee's module
                    d = _default_of(evs, expr.id)
                    return [] if d is None else origins(hub, view, d, evs, depth + 1, path, keep_path, frames[:-1], limit=limit, callers=callers)
                return origins(hub, cv, a, c, depth + 1, path, keep_path, frames[:-1], limit=limit, callers=callers)
            sites = [(view, c) for c in hub.call_sites(view, evs)[:8]]
            if not sites and callers is not None:
                sites = callers(view, evs)[:8]
            if not sites:  # a test function pytest calls once per case of its parametrize
                for a in parametrized_cases(view.sem, evs, expr.id) or ():
                    a, p = _def_name(view, a, path)
                    out.extend([_leaf(view, a, p, keep_path, frames)] if p is None else origins(
                        hub, view, a, a, depth + 1, p, keep_path, frames, limit=limit, callers=callers))
            for cv, c in sites:
                if cv is view and _inside(c, evs):
                    continue  # a recursive call passes a value made from the parameter: the outer calls give its origins
                a = _argument(c, evs, expr.id)
                if a is not None:
                    out.extend(origins(hub, cv, a, c, depth + 1, path, keep_path, () if frames is not None else None,
                                       limit=limit, callers=callers))
                elif (d := _default_of(evs, expr.id)) is not None:
                    # a call that leaves the parameter out: its default, a value of the callee's module
                    out.extend(origins(hub, view, d, evs, depth + 1, path, keep_path,
                                       () if frames is not None else None, limit=limit, callers=callers))
            return out
        if kind == "none" and not path and expr.id in view.sem.aliases:
            return [_leaf(view, expr, path, keep_path, frames)]  # an imported name (a class, a function): a leaf
        return []
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        out = []
        for v in hub.self_attr_bindings(view, expr)[:8]:
            if isinstance(v, ast.expr):
                out.extend(origins(hub, view, v, v, depth + 1, path, keep_path, frames, limit=limit, callers=callers))
            elif isinstance(v, ast.Assign):  # ``self.model, _ = wrap(model)``
                if path and isinstance(path[0], str) and any(_subscript_of(t) is not None for t in v.targets):
                    # ``self.samplers["train"] = make(...)``: the entry this store sets
                    out.extend(_stored_entry(hub, view, v, v.targets, depth, path, keep_path, frames, limit,
                                             callers))
                    continue
                for t in v.targets:
                    p = _attr_path(t, expr.attr)
                    if p is not None:
                        out.extend(origins(hub, view, v.value, v, depth + 1, (*p, *path), keep_path, frames, limit=limit, callers=callers))
                        break
        if not out and isinstance(expr.ctx, ast.Load):
            out = _self_record(hub, view, expr, depth, path, keep_path, frames, limit, callers)
        return out
    if isinstance(expr, ast.Await):
        return origins(hub, view, expr.value, at, depth + 1, path, keep_path, frames, limit=limit, callers=callers)
    if isinstance(expr, (ast.Attribute, ast.Subscript)) and not path:
        # ``args.x`` (argparse default or its one store), ``cfg["x"]`` of a config dict literal
        c = constant_of(view.sem, expr)
        if c is not None:
            return [_leaf(view, c, (), keep_path, frames)]
    if isinstance(expr, ast.Attribute) and isinstance(expr.ctx, ast.Load) and (
            _instance_ref(view, expr.value) or isinstance(expr.value, ast.Call)
            or isinstance(expr.value, ast.Attribute) and _instance_ref(view, expr.value.value)):
        # ``env.device`` / ``env.rank`` of ``env = Env(rank=r)``: a property's returns, a record's
        # field (also of what a call returns: ``get_state().group``; of a record held in a
        # record's field: ``state.train.sampler`` of ``State(train=Split(sampler=s))``)
        got = _instance_attr(hub, view, expr, at, depth, path, keep_path, frames, limit, callers)
        if got is not None:
            return got
    if isinstance(expr, ast.Subscript) and isinstance(expr.ctx, ast.Load):
        # ``loaders["train"]``, ``pair[0]``: the entry of the container the value comes from. The
        # step is syntactic (the subscripted expression is smaller; the key joins the path), so it
        # costs no depth: ``cfg["data"]["train"]["shuffle"]`` is as near as ``cfg``
        k = const_key(expr.slice)
        if k is not None:
            got = origins(hub, view, expr.value, at, depth, (k, *path), keep_path, frames, limit=limit, callers=callers)
            if got:
                return got
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr == "get" \
            and 1 <= len(expr.args) <= 2 and not expr.keywords and (k := const_key(expr.args[0])) is not None:
        # ``sd.get("model", {})``: the entry of the dict ``sd`` holds, or the default where it lacks it
        got = origins(hub, view, expr.func.value, at, depth + 1, (k, *path), keep_path, frames, limit=limit,
                      callers=callers)
        if got:
            d = expr.args[1] if len(expr.args) == 2 else None
            return got + (origins(hub, view, d, at, depth + 1, path, keep_path, frames, limit=limit, callers=callers)
                          if d is not None else [])
    if isinstance(expr, ast.Call):
        target = hub.resolve_call(view, expr)
        if target is not None and isinstance(target[1], FUNC_TYPES) and target[1].name != "__init__":
            tv, fn = target
            cls = parent(fn)
            if isinstance(cls, ast.ClassDef) and isinstance(expr.func, ast.Attribute) \
                    and property_of(tv, cls, fn.name) is fn:
                # ``self.bare(x)`` of a ``@property bare``: it calls what the property returns (a
                # module's forward), whose result is none of the property's returns
                return [_leaf(view, expr, path, keep_path, frames)]
            if frames is None and callers is None:  # out of context: the function's alone, once per check
                memo, key = hub.__dict__.setdefault("_origins_returns", {}), (id(fn), id(tv), depth, path, keep_path, limit)
                got = memo.get(key)
                if got is None:
                    got = memo[key] = _returns(hub, tv, fn, depth, path, keep_path, None, limit, None)
                return list(got)
            inner = None if frames is None else (*frames, (fn, expr, view))
            return _returns(hub, tv, fn, depth, path, keep_path, inner, limit, callers)
    if path and isinstance(expr, ast.IfExp):  # an entry of ``blob if rank == 0 else {}``: of either arm
        return [o for arm in (expr.body, expr.orelse)
                for o in origins(hub, view, arm, at, depth + 1, path, keep_path, frames, limit=limit, callers=callers)]
    if path and keep_path == "entries" and isinstance(expr, ast.Call):
        return [_leaf(view, expr, path, keep_path, frames)]  # an entry of what the call returns, asked for
    if path and (not isinstance(expr, ast.Call) or any(isinstance(p, str) for p in path)):
        return []  # an entry of something not followed (a call's result, a loop variable)
    return [_leaf(view, expr, path, keep_path, frames)]  # a call under a path: one element of what it returns


def branch_origins(hub, view, expr, at, frames=(), limit: int = MAX_DEPTH, depth: int = 0, callers=None) -> list:
    """``origins`` in context (``frames``: (view, expression, frames) triples), with a conditional
    expression leaf (``DistributedSampler(ds) if distributed else None``) split into the origins of
    its two branches, as an if/else statement assigning each would be."""
    out = []
    for v, e, fr in origins(hub, view, expr, at, frames=frames, limit=limit, callers=callers):
        if isinstance(e, ast.IfExp) and depth < 4:
            for b in (e.body, e.orelse):
                out.extend(branch_origins(hub, v, b, e, fr, limit, depth + 1, callers))
        else:
            out.append((v, e, fr))
    return out


def const_key(node) -> str | int | None:
    """The key of a subscript: a string literal, or a non-negative integer literal."""
    if isinstance(node, ast.Constant) and (isinstance(node.value, str) or (
            isinstance(node.value, int) and not isinstance(node.value, bool) and node.value >= 0)):
        return node.value
    return None


def _is_dict_call(sem, call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id == "dict" and sem.qualname(call.func) in (None, "dict")


def dict_item(sem, expr, key: str):
    """The value ``expr`` (a dict display or a ``dict(k=v)`` call) holds under ``key``, or None
    (no such entry, or a ``**rest`` / positional argument after which it may be another)."""
    if isinstance(expr, ast.Dict):
        for k, v in zip(reversed(expr.keys), reversed(expr.values)):
            if k is None:
                return None  # ``{**rest}``: may set it last
            if isinstance(k, ast.Constant) and k.value == key:
                return v
        return None
    if isinstance(expr, ast.Call) and _is_dict_call(sem, expr) and not expr.args:
        got = None
        for kw in expr.keywords:
            if kw.arg is None:
                return None
            if kw.arg == key:
                got = kw.value
        return got
    return None


_UNKNOWN_KEY = object()


def _stored_entry(hub, view, st, targets, depth, path, keep_path, frames, limit, callers) -> list:
    """What the store ``st`` (``d["k"] = v``) puts under the entry ``path[0]`` through ``targets``:
    the value's origins for that key, an unknown origin for a key that cannot be read."""
    out = []
    for t in targets:
        k = _subscript_of(t)
        if k is _UNKNOWN_KEY:
            out.append(_leaf(view, st.value, (), keep_path, frames))
        elif k == path[0]:
            out.extend(origins(hub, view, st.value, st, depth + 1, path[1:], keep_path, frames, limit=limit,
                               callers=callers))
    return out


def _subscript_of(target):
    """The key a store ``x[k] = v`` / ``self.x[k] = v`` writes (``_UNKNOWN_KEY`` when not a
    literal), or None when ``target`` is no one-level subscript."""
    if not isinstance(target, ast.Subscript) or isinstance(target.value, ast.Subscript):
        return None
    k = const_key(target.slice)
    return _UNKNOWN_KEY if k is None else k


def _entry_stores(hub, view, name: ast.Name, evs, path, keep_path, frames, depth, limit, callers) -> list:
    """Origins of entry ``path[0]`` of ``name`` stored after its bindings ``evs`` reach ``name``
    (``mutations``): ``d[key] = v`` gives ``v``; a store under another literal key, nothing; a store
    under an unknown key or a call that may fill ``d`` (``d.update(x)``), its value or the call as
    a leaf (an unknown origin, not a missing one)."""
    from .mutations import mutations

    out = []
    for node, values in mutations(view, name.id, name, evs):
        if isinstance(node, ast.Assign):
            mine = [t for t in node.targets
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name.id]
            out.extend(_stored_entry(hub, view, node, mine, depth, path, keep_path, frames, limit, callers))
        elif isinstance(node, ast.Call):
            out.append(_leaf(view, node, (), keep_path, frames))
    return out


def record_attr(hub, view, expr, at) -> bool:
    """``x.<attr>`` is read as a property or a record field of the project class every origin of
    ``x`` constructs (``env.rank`` of ``env = Env(rank=r)``)."""
    return isinstance(expr, ast.Attribute) and _instance_ref(view, expr.value) \
        and _instance_attr(hub, view, expr, at, 0, (), False, None, MAX_DEPTH, None) is not None


def compared_constant(hub, view, v, callers):
    """``x == "full"`` / ``x != "full"`` where every origin of ``x`` is a constant: the answer, as a
    constant; else None."""
    if not (isinstance(v, ast.Compare) and len(v.ops) == 1 and isinstance(v.ops[0], (ast.Eq, ast.NotEq))):
        return None
    a, b = v.left, v.comparators[0]
    if isinstance(a, ast.Constant):
        a, b = b, a
    if not isinstance(b, ast.Constant) or isinstance(a, ast.Constant):
        return None
    got = origins(hub, view, a, v, callers=callers)
    if not got or any(not isinstance(e, ast.Constant) for _v, e in got):
        return None
    same = {e.value == b.value for _v, e in got}
    if len(same) != 1:
        return None
    return ast.Constant(same.pop() == isinstance(v.ops[0], ast.Eq))


def field_origins(hub, view, expr) -> list | None:
    """``x.<attr>`` / ``self.<attr>`` read as a property or a record field of a project class of
    this module (``args.should_save`` of ``args = Args(rank=r)``, whose property returns
    ``self.rank == 0``): the origins of the property's returns or of the field's argument at each
    construction; None when ``attr`` is no such name here or an origin is not followed."""
    names = view.memo.get("origins.field_names")
    if names is None:
        names = set()
        for cls in view.classes.values():  # the module's top-level classes
            names.update(st.name for st in cls.body if isinstance(st, FUNC_TYPES) and property_of(view, cls, st.name))
            if is_record(view, cls):
                names.update(f.target.id for f in fields(cls))
        names = view.memo["origins.field_names"] = frozenset(names)
    if not (isinstance(expr, ast.Attribute) and expr.attr in names and isinstance(expr.ctx, ast.Load)
            and _instance_ref(view, expr.value)):
        return None
    if isinstance(expr.value, ast.Name) and expr.value.id == "self":
        if hub.self_attr_bindings(view, expr):
            return None
        return _self_record(hub, view, expr, 0, (), False, None, MAX_DEPTH, None) or None
    return _instance_attr(hub, view, expr, expr, 0, (), False, None, MAX_DEPTH, getattr(hub, "other_callers", None))


def _instance_ref(view, e) -> bool:
    """A name (not an imported module) or ``self.<attr>``: what may hold an instance."""
    if isinstance(e, ast.Name):
        return e.id not in view.imports
    return isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self"


def _returns(hub, view, fn, depth, path, keep_path, frames, limit, callers) -> list:
    return [o for n in iter_scope_nodes(fn) if isinstance(n, ast.Return) and n.value is not None
            for o in origins(hub, view, n.value, n, depth + 1, path, keep_path, frames, limit=limit, callers=callers)]


def _self_record(hub, view, expr, depth, path, keep_path, frames, limit, callers) -> list:
    """``self.<attr>`` with no binding in the class's methods: a property of the class (its
    returns), or a field of a record class (what each construction of the module binds to it)."""
    fn = view.sem.enclosing_function(expr)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef):
        return []
    prop = property_of(view, cls, expr.attr)
    if prop is not None and prop is not fn:
        return _returns(hub, view, prop, depth, path, keep_path, frames, limit, callers)
    if not _defines(hub, cls, expr.attr):
        # a property of a project base class (``self.global_rank`` of a plugin whose base, in
        # another module, defines it), when no class before it in the chain binds or defines it
        got = _base_property(hub, view, cls, expr.attr)
        if got is not None:
            return _returns(hub, got[0], got[1], depth, path, keep_path, frames, limit, callers)
    sites = self_field(view, cls, expr.attr)
    out = []
    for c, a in sites or ():
        out.extend(origins(hub, view, a, c, depth + 1, path, keep_path, frames, limit=limit, callers=callers))
    return out


def _defines(hub, cls: ast.ClassDef, name: str) -> bool:
    """``cls`` defines ``name`` in its body (a method, a class attribute) or binds ``self.<name>``
    in a method."""
    memo = hub.__dict__.setdefault("_class_defines", {})  # per check: id(class) -> (class, names)
    got = memo.get(id(cls))
    if got is None or got[0] is not cls:
        names = set()
        for st in cls.body:
            if isinstance(st, (*FUNC_TYPES, ast.ClassDef)):
                names.add(st.name)
            elif isinstance(st, (ast.Assign, ast.AnnAssign)):
                names.update(t.id for t in (st.targets if isinstance(st, ast.Assign) else [st.target])
                             if isinstance(t, ast.Name))
        for n in subtree(cls):
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name) \
                    and n.value.id == "self":
                names.add(n.attr)
        got = memo[id(cls)] = (cls, frozenset(names))
    return name in got[1]


def _base_property(hub, view, cls: ast.ClassDef, name: str):
    """(view, property) of the first project base class of ``cls`` (depth first) that defines
    ``name``, when that definition is a ``@property``; None when it is anything else, or when no
    project base defines it."""
    for v, c in class_chain(hub, view, cls)[1:]:
        if _defines(hub, c, name):
            prop = property_of(v, c, name)
            return (v, prop) if prop is not None else None
    return None


def _instance_attr(hub, view, expr, at, depth, path, keep_path, frames, limit, callers) -> list | None:
    """``x.<attr>`` where every origin of ``x`` constructs a project class with a property or a
    record field ``attr``: the property's returns, the field's argument at that construction;
    None (not followed) when one origin is anything else."""
    if depth + 1 > limit:
        return None
    base = origins(hub, view, expr.value, at, depth + 1, limit=limit, callers=callers)
    # an attribute is never read on None (``_STATE = None`` until an init function builds it)
    base = [(bv, b) for bv, b in base if not (isinstance(b, ast.Constant) and b.value is None)]
    if not base or len(base) > 8:
        return None
    out = []
    for bv, b in base:
        if not isinstance(b, ast.Call):
            return None
        got = hub.resolve_class(bv, b.func)
        if got is None:
            return None
        cv, cls = got
        prop = property_of(cv, cls, expr.attr)
        if prop is not None:
            out.extend(_returns(hub, cv, prop, depth, path, keep_path, frames, limit, callers))
            continue
        a = field_argument(cv, cls, b, expr.attr)
        if a is None:
            got = _constructed_attr(hub, cv, cls, b, bv, expr, at, depth, path, keep_path, frames, limit, callers)
            if got is None:
                return None
            out.extend(got)
            continue
        out.extend(origins(hub, bv if a in b.args or any(k.value is a for k in b.keywords) else cv, a, b,
                           depth + 1, path, keep_path, frames, limit=limit, callers=callers))
    return out


def _constructed_attr(hub, cv, cls, call, bv, expr, at, depth, path, keep_path, frames, limit, callers) -> list | None:
    """``x.<attr>`` of ``x = Cls(...)`` (``call``), a plain project class whose own methods bind
    ``self.<attr>`` (``self.loader = DataLoader(...)`` in ``__init__``): the origins of every value
    they bind, read in ``__init__`` with the parameters of that construction. None (not followed)
    when a project base class binds or defines it too, a binding is not a plain one, or the scope
    that reads ``x.<attr>`` stores into it."""
    name = expr.attr
    bindings = hub.class_attr_bindings(cv, cls, name)
    if not bindings or len(bindings) > 8 or any(_defines(hub, c, name) for _, c in class_chain(hub, cv, cls)[1:]):
        return None
    if isinstance(expr.value, ast.Name) and _stores_attr(bv, expr.value.id, name, at):
        return None  # ``x.loader = other`` beside the construction: not only what the class binds
    init = next((m for m in cls.body if isinstance(m, FUNC_TYPES) and m.name == "__init__"), None)
    out = []
    for v in bindings:
        if isinstance(v, ast.expr):
            p, value = (), v
        elif isinstance(v, ast.Assign):  # ``self.loader, self.sampler = build(...)``
            p = next((q for q in (_attr_path(t, name) for t in v.targets) if q is not None), None)
            if p is None:
                return None
            value = v.value
        else:
            return None
        fr = frames
        if frames is not None and init is not None and cv.sem.enclosing_function(value) is init:
            fr = (*frames, (init, call, bv))  # ``__init__``'s parameters are this construction's arguments
        out.extend(origins(hub, cv, value, value, depth + 1, (*p, *path), keep_path, fr, limit=limit,
                           callers=callers))
    return out


def _stores_attr(view, base: str, name: str, at) -> bool:
    """The scope of ``at`` assigns ``<base>.<name>`` somewhere."""
    fn = view.sem.enclosing_function(at)
    scope = fn if fn is not None else view.tree
    got = scope.__dict__.get("_as")  # every ``(base, name)`` stored in the scope, found once
    if got is None:
        got = scope._as = frozenset(
            (n.value.id, n.attr) for n in iter_scope_nodes(scope)
            if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name))
    return (base, name) in got


def _argument(call: ast.Call, fn, name: str):
    """The argument ``call`` passes to ``fn``'s parameter ``name`` (``call_args``), None for none:
    the pairs are found once per (call, function) and kept on the call node, since every walk
    through a parameter asks the same calls again."""
    memo = call.__dict__.get("_ca")
    if memo is None:
        memo = call._ca = {}
    got = memo.get(fn)
    if got is None:
        from .context import call_args

        got = memo[fn] = {}
        for p, a in call_args(call, fn):
            got.setdefault(p, a)  # (the first pair of a name, as a scan of the pairs finds it)
    return got.get(name)


def _default_of(fn, name: str):
    return param_defaults(fn).get(name)


def _def_name(view, expr, path):
    """(expression, path) left after taking ``path``'s items of the displays ``expr`` is; (name, None)
    when that names a function of the module, as a value: the function itself is the origin."""
    while path and isinstance(path[0], int) and isinstance(expr, (ast.Tuple, ast.List)) and path[0] < len(expr.elts):
        expr, path = expr.elts[path[0]], path[1:]
    if not path and isinstance(expr, ast.Name) and isinstance(view.defs.get(expr.id), FUNC_TYPES):
        return expr, None
    return expr, path


def _leaf(view, expr, path, keep_path: bool, frames):
    out = (view, expr, tuple(path)) if keep_path else (view, expr)
    return out if frames is None else (*out, frames)


def _attr_path(target, attr: str, base: str = "self"):
    """Index path of ``<base>.<attr>`` (``self.<attr>`` unless told) inside a (nested) tuple target."""
    if isinstance(target, ast.Attribute):
        return [] if target.attr == attr and isinstance(target.value, ast.Name) and target.value.id == base \
            else None
    if isinstance(target, (ast.Tuple, ast.List)):
        for i, e in enumerate(target.elts):
            got = _attr_path(e, attr, base)
            if got is not None:
                return [i, *got]
    return None


def is_optimizer_ctor(view, call) -> bool:
    """``call`` builds a ``torch.optim`` optimizer (``torch.optim.AdamW(...)``; not a scheduler)."""
    qn = view.sem.call_qualname(call) or ""
    if not qn.startswith("torch.optim.") or ".lr_scheduler." in qn or ".swa_utils." in qn:
        return False
    last = qn.rsplit(".", 1)[-1]
    return last[:1].isupper() and last not in ("Optimizer",)


ZERO = "torch.distributed.optim.ZeroRedundancyOptimizer"
# its methods that run collectives (every rank must call them): what each one runs
ZERO_METHODS = {"step": "ZeroRedundancyOptimizer's parameter broadcast",
                "consolidate_state_dict": "ZeroRedundancyOptimizer's state consolidation (a broadcast from every rank)"}


def zero_call(hub, view, f: ast.Attribute, at) -> bool:
    """``f.value`` (the receiver of ``opt.step`` / ``opt.consolidate_state_dict``) holds a
    ``ZeroRedundancyOptimizer``: a name bound only to its construction; for the consolidation, also
    every value it may come from (a helper's return, in another module too, tuple unpacking, a
    parameter that every call binds to one, in any module of the project, a ``self`` attribute)."""
    expr = f.value
    if isinstance(expr, ast.Name):
        kind, evs = reaching(view, expr.id, at)
        if kind == "events" and evs and all(isinstance(e, ast.Assign) and isinstance(e.value, ast.Call)
                                            and view.sem.call_qualname(e.value) == ZERO for e in evs):
            return True
    if f.attr == "step":
        return False
    got = origins(hub, view, expr, at, callers=getattr(hub, "module_callers", None))
    return bool(got) and all(isinstance(e, ast.Call) and v.sem.call_qualname(e) == ZERO for v, e in got)


def holds_call(hub, view, expr, at, pred, callers=None) -> tuple | None:
    """The first (view, call) origin of ``expr`` for which ``pred(view, call)`` is true, or None
    (``callers``: as ``origins`` takes it)."""
    for v, e in origins(hub, view, expr, at, callers=callers):
        if isinstance(e, ast.Call) and pred(v, e):
            return v, e
    return None


def helper_results(hub, view, pred) -> list:
    """(call, (view, inner call)) for the calls of project functions (this module or another) whose
    every returned value is the result of a call for which ``pred(view, call)`` is true: ``h = save(s)``
    where ``def save(s): return dcp.async_save(s, ...)``. The inner call's own ``return`` is the
    helper's business; what the caller does with the result is the question."""
    from .calls import may_resolve

    out = []
    for c in view.sem.calls:
        if not may_resolve(view, c) or pred(view, c):
            continue
        target = hub.resolve_call(view, c)
        if target is None or not isinstance(target[1], FUNC_TYPES) or target[1].name == "__init__":
            continue
        # every value it may return must be such a result (a helper that saves synchronously on
        # another path, ``return None`` or a plain value, is not one)
        got = origins(hub, view, c, c)
        if got and all(isinstance(e, ast.Call) and pred(v, e) for v, e in got):
            out.append((c, got[0]))
    return out


def sharded_loader(hub, view, name: ast.Name) -> bool:
    """``name`` holds a DataLoader over a ``DistributedSampler`` that a project function built and
    returned (``train_dl, val_dl, sampler = make_loaders(cfg)``): this rank's shard, whatever the
    name. Only for a name bound to a project call's result, and only when every origin is such a
    loader (a sampler chosen by a condition, or none, is not known to shard)."""
    from .uniformity import _LOADER_QNS  # lazy: uniformity asks this module

    kind, evs = reaching(view, name.id, name)
    if kind not in ("events", "global") or not evs or not all(
            isinstance(e, ast.Assign) and isinstance(e.value, ast.Call) for e in evs):
        return False
    if not any(hub.resolve_call(view, e.value) is not None for e in evs):
        return False
    got = origins(hub, view, name, name, keep_path=True)
    return bool(got) and all(
        isinstance(e, ast.Call) and not rest and v.sem.call_qualname(e) in _LOADER_QNS
        and hub.evaluator(v)._is_dist_sampler(get_arg(e, None, "sampler")) for v, e, rest in got)


def qn_pred(*qns: str):
    s = frozenset(qns)
    return lambda v, c: (v.sem.call_qualname(c) or "") in s


def qn_suffix_pred(*suffixes: str):
    return lambda v, c: (v.sem.call_qualname(c) or "").endswith(suffixes)


def key_of(expr) -> str | None:
    """``model`` / ``self.model``: the spelling a module or value is tracked by."""
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        return "self." + expr.attr
    return None


def same_scope_before(sem, a: ast.AST, b: ast.AST) -> bool:
    """``a`` is in the same function as ``b`` and starts before it."""
    return sem.enclosing_function(a) is sem.enclosing_function(b) and (a.lineno, a.col_offset) < (
        b.lineno, b.col_offset)


def statement_of(node: ast.AST) -> ast.AST:
    p = node
    while p is not None and not isinstance(p, ast.stmt):
        p = parent(p)
    return p


def _inside(node, fn) -> bool:
    """``node`` lies in the body of ``fn`` (a recursive call of it; following those multiplied the
    work by the call sites at every level: torch's recursive ``default_collate`` never finished)."""
    return fn.lineno <= getattr(node, "lineno", 0) <= getattr(fn, "end_lineno", fn.lineno)


# calls whose result is a plain number, string or path: a setting stored from them holds no tensor
_PLAIN_BUILTINS = frozenset({"int", "float", "str", "bool", "len", "round", "min", "max", "abs", "sorted",
                             "list", "tuple", "dict", "set"})


def settings_only(hub, view, expr, at) -> bool:
    """Every value ``expr`` may hold at ``at`` (``origins``) is a command line's parsed settings
    (``parser.parse_args()`` of an ``argparse.ArgumentParser``, an ``argparse.Namespace(...)``) or
    a literal, and the modules on the way never store a computed value into an attribute of a name
    that holds it (``args.mean = torch.tensor(...)``; a literal, a name, ``int(...)``... may be):
    what it holds is settings, no tensor. False when unsure."""
    if not isinstance(expr, ast.Name):
        return False
    leaves = origins(hub, view, expr, at)
    if not leaves or len(leaves) > 8:
        return False
    names = {expr.id}
    for lv, e, *_ in leaves:
        st = parent(e)
        if isinstance(st, ast.Assign):
            names.update(t.id for t in st.targets if isinstance(t, ast.Name))
    for lv, e, *_ in leaves:
        if isinstance(e, ast.Constant):
            continue
        if not isinstance(e, ast.Call):
            return False
        if (lv.sem.call_qualname(e) or "") != "argparse.Namespace":
            f = e.func
            if not (isinstance(f, ast.Attribute) and f.attr in ("parse_args", "parse_known_args")):
                return False
            recv = origins(hub, lv, f.value, e)
            if not recv or not all(isinstance(r, ast.Call) and (rv.sem.call_qualname(r) or "") == "argparse.ArgumentParser"
                                   for rv, r, *_ in recv):
                return False
    for v in {id(view): view, **{id(lv): lv for lv, *_ in leaves}}.values():
        for n in ast.walk(v.tree):
            if isinstance(n, (ast.Assign, ast.AugAssign)) and not _plain_setting(n.value, v.sem) and any(
                    isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in names
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])):
                return False  # ``args.mean = torch.tensor(...)``: a computed value among the settings
    return True


def _plain_setting(v, sem) -> bool:
    """A value a settings attribute may be given and stay tensor-free: a literal, a name, an
    attribute, arithmetic or a format of those, a plain builtin's result, a path or an
    environment variable (``os.path.join(...)``, ``os.environ.get(...)``)."""
    for n in ast.walk(v):
        if isinstance(n, ast.Call):
            f = n.func
            qn = sem.call_qualname(n) or ""
            if not (isinstance(f, ast.Name) and f.id in _PLAIN_BUILTINS) and not qn.startswith(("os.path.", "os.environ.",
                                                                                                  "os.getenv")):
                return False
        elif isinstance(n, (ast.Lambda, ast.ListComp, ast.DictComp, ast.GeneratorExp, ast.SetComp)):
            return False
    return True
