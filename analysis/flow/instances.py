"""Which class of the project a value is an instance of: ``trainer = Trainer(model)``, and the
elements of a container of instances iterated by a loop (``for hook in self.hooks:
hook.after_epoch(self)`` where ``Runner(model, hooks=[EvalHook(loader)])`` filled ``self.hooks``).

A value gets a class only when every binding that reaches it, followed through plain assignments,
``self.`` attributes and the parameters of functions whose every call in the module passes one
(or, for a binding of another kind, every origin ``origins`` finds: a helper's return, an element
of a returned tuple), constructs the same class of the project; anything else is unknown (None).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, iter_scope_nodes, parent
from .bindings import reaching
from .context import call_args
from .records import class_named, own_method

_MAX_DEPTH = 5


def ctor_class(hub, view, e: ast.AST, not_project):
    """(view, class) when ``e`` is ``Cls(...)`` (or ``mod.Cls(...)``) for a class of this file or of a
    project module, or ``make(...)(...)`` for a project function ``make`` every ``return`` of which names that class."""
    if not isinstance(e, ast.Call):
        return None
    if isinstance(e.func, ast.Call):
        return _factory_class(hub, view, e.func, not_project)
    if isinstance(e.func, ast.Attribute) and isinstance(e.func.value, ast.Name):
        if e.func.value.id in view.imports and e.func.value.id not in view.classes:
            got = class_named(hub, view, e.func, not_project)  # ``mod.Cls(...)`` of a project module
            if got is not None:
                return got
        return _alternate_ctor_class(hub, view, e.func, not_project)
    if not isinstance(e.func, ast.Name):
        return None
    return class_named(hub, view, e.func, not_project)


def _alternate_ctor_class(hub, view, f: ast.Attribute, not_project):
    """(view, class) for ``Cls.make(...)``: ``make`` is a ``@classmethod`` of the project class
    ``Cls`` (its own body) every ``return`` of which builds ``cls(...)``, or a ``@classmethod`` /
    ``@staticmethod`` every ``return`` of which builds ``Cls(...)`` by name. None otherwise (a
    plain method, a return of anything else, a generator)."""
    owner = class_named(hub, view, f.value, not_project)
    if owner is None:
        return None
    ov, cls = owner
    m = next((m for m in cls.body if isinstance(m, FUNC_TYPES) and m.name == f.attr), None)
    kinds = {d.id for d in getattr(m, "decorator_list", ()) if isinstance(d, ast.Name)}
    if m is None or not kinds & {"classmethod", "staticmethod"}:
        return None
    first = m.args.args[0].arg if "classmethod" in kinds and m.args.args else None
    rets = []
    for n in iter_scope_nodes(m):
        if n.__class__ is ast.Yield or n.__class__ is ast.YieldFrom:
            return None
        if n.__class__ is ast.Return:
            rets.append(n.value)
    for r in rets:
        if not (isinstance(r, ast.Call) and isinstance(r.func, ast.Name)):
            return None
        if r.func.id == first:
            continue
        got = class_named(hub, ov, r.func, not_project)
        if got is None or got[1] is not cls:
            return None
    return owner if rets else None


def _factory_class(hub, view, call: ast.Call, not_project):
    """The one project class every ``return`` of the function ``call`` runs gives by name (a
    factory that picks a class: ``return ShardedRows``); None for any other return, or none."""
    target = hub.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    tv, fn = target
    found = None
    for n in iter_scope_nodes(fn):
        if n.__class__ is ast.Yield or n.__class__ is ast.YieldFrom:
            return None
        if n.__class__ is not ast.Return:
            continue
        got = class_named(hub, tv, n.value, not_project) if isinstance(n.value, ast.Name) else None
        if got is None or (found is not None and got[1] is not found[1]):
            return None
        found = got
    return found


def self_attr_class(hub, view, attr: ast.Attribute, not_project):
    """(view, class) when ``attr`` is ``self.<name>`` read in a method and every binding of
    ``self.<name>`` in the methods of its class and of its project base classes constructs the
    same project class (``self.ckpt = CheckPoint(model_dir)`` in ``__init__``); None when one
    binding is anything else (a parameter, a tuple target, an augmented assignment) or none is
    seen. A binding to None (``self.ev = None``, ``Ev(...) if is_main else None``) leaves the
    answer as it is: a method called on ``self.<name>`` never runs on None."""
    cls = method_class(view, attr)
    if cls is None:
        return None
    # once per check (the answer names views of this check: a shared view's memo must not keep it)
    memo = hub.__dict__.setdefault("_self_attr_classes", {})
    key = (id(cls), attr.attr)
    got = memo.get(key)
    if got is None or got[0] is not cls:
        got = memo[key] = (cls, _self_attr_class(hub, view, cls, attr.attr, not_project))
    return got[1]


def method_class(view, node: ast.AST):
    """The class of the method ``node`` is in (the parent of its innermost function), else None."""
    fn = view.sem.enclosing_function(node)
    cls = parent(fn) if fn is not None else None
    return cls if isinstance(cls, ast.ClassDef) else None


def param_attr_class(hub, view, attr: ast.Attribute):
    """(view, class) when ``attr`` is ``self.<name>`` read in a method whose class binds
    ``self.<name>`` once, to a plain name (``self.plan = plan``, a parameter of the method binding
    it) that holds an instance of one project class (``module_instance_class``: its arguments at
    the calls of its module, or its annotation); else None."""
    cls = method_class(view, attr)
    values = _self_bindings(cls).get(attr.attr, ()) if cls is not None else ()
    if len(values) != 1 or not isinstance(values[0], ast.Name):
        return None
    return module_instance_class(hub, view, values[0], values[0])


def _self_attr_class(hub, view, cls, name: str, not_project):
    found = None
    chain, seen = [(view, cls)], {id(cls)}
    i = 0
    while i < len(chain) and i < 8:
        v, c = chain[i]
        i += 1
        for b in c.bases:
            got = class_named(hub, v, b, not_project)
            if got is not None and id(got[1]) not in seen:
                seen.add(id(got[1]))
                chain.append(got)
        for value in _self_bindings(c).get(name, ()):
            if value is None:
                return None  # a tuple target, ``+=``, a loop or ``with`` target: unknown
            value = _not_none(value)
            if value is _NONE:
                continue  # ``self.x = None``: a method called on ``self.x`` never runs on it
            found = _same(found, ctor_class(hub, v, value, not_project))
            if found is None:
                return None
    return found


_NONE = object()


def _not_none(value: ast.AST):
    """What a binding gives a method called on it: ``_NONE`` for ``None``, the other branch of
    ``Cls(...) if cond else None`` (the call fails on None, so it runs only on the instance)."""
    if value.__class__ is ast.Constant and value.value is None:
        return _NONE
    if value.__class__ is ast.IfExp:
        body, orelse = _not_none(value.body), _not_none(value.orelse)
        if orelse is _NONE:
            return body
        if body is _NONE:
            return orelse
    return value


_bindings: dict[int, tuple] = {}  # id(class) -> (class, {attr: [value or None, ...]})


def _self_bindings(cls: ast.ClassDef) -> dict:
    """``self.<attr>`` bindings in the methods of ``cls``, read once per class: the assigned value
    of a plain ``self.<attr> = value`` or its element of ``self.a, self.b = x, y``, None for any
    other binding (a loop target, unpacking a value that is no display, ``+=``, a ``with``
    target). The class node is kept beside its id, so a reused id is never mistaken."""
    got = _bindings.get(id(cls))
    if got is not None and got[0] is cls:
        return got[1]
    idx: dict[str, list] = {}
    for m in cls.body:
        if not isinstance(m, FUNC_TYPES):
            continue
        for n in iter_scope_nodes(m):
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            elif isinstance(n, (ast.For, ast.AsyncFor)):
                targets = [n.target]
            elif isinstance(n, (ast.With, ast.AsyncWith)):
                targets = [it.optional_vars for it in n.items if it.optional_vars is not None]
            else:
                continue
            for t in targets:
                names = {x.attr for x in ast.walk(t) if isinstance(x, ast.Attribute) and isinstance(x.ctx, ast.Store)
                         and isinstance(x.value, ast.Name) and x.value.id == "self"}
                plain = isinstance(n, (ast.Assign, ast.AnnAssign)) and isinstance(t, ast.Attribute) \
                    and n.value is not None
                pairs = _display_pairs(t, n.value) if isinstance(n, ast.Assign) and not plain else {}
                for a in names:
                    idx.setdefault(a, []).append(n.value if plain else pairs.get(a))
    if len(_bindings) > 2048:
        _bindings.clear()
    _bindings[id(cls)] = (cls, idx)
    return idx


def _display_pairs(target, value) -> dict:
    """attr -> value of each plain ``self.<attr>`` of a tuple target unpacking a display of as many
    elements (``self.heads, self.width = heads, dim // heads``); empty for any other binding."""
    if not (isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List))
            and len(target.elts) == len(value.elts)
            and not any(isinstance(e, ast.Starred) for e in (*target.elts, *value.elts))):
        return {}
    return {t.attr: v for t, v in zip(target.elts, value.elts)
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}


def _same(found, got):
    """The running answer after one more binding: None ends the search (unknown or mixed)."""
    if got is None or (found is not None and found[1] is not got[1]):
        return None
    return got


def instance_class(hub, view, name: ast.Name, at: ast.AST, not_project, depth: int = 0):
    """(view, class) when every binding of ``name`` reaching ``at`` gives an instance of the same
    project class: ``x = Cls(...)``, or ``for x in xs`` over a container of such instances."""
    kind, evs = reaching(view, name.id, at)
    if kind not in ("events", "global") or not evs:
        return None
    found = None
    for e in evs:
        if isinstance(e, ast.Assign) and isinstance(e.value, ast.Call) and len(e.targets) == 1 \
                and isinstance(e.targets[0], ast.Name):
            got = ctor_class(hub, view, e.value, not_project)
        elif isinstance(e, (ast.For, ast.AsyncFor)) and isinstance(e.target, ast.Name) and e.target.id == name.id:
            got = element_class(hub, view, e.iter, e, not_project, depth + 1)
        else:
            got = None
        if got is None and isinstance(e, ast.Assign):
            # a helper's return, an element of a returned tuple (``a, b = build(cfg)`` where
            # ``build`` returns ``Cls(x), Cls(y)``): where the value comes from (``origins``)
            return _origin_class(hub, view, name, at, not_project)
        found = _same(found, got)
        if found is None:
            return None
    return found


def _origin_class(hub, view, name: ast.Name, at: ast.AST, not_project):
    """(view, class) when every origin of ``name`` at ``at`` (``origins``: tuple unpacking,
    helpers' returns) constructs the same project class; None when one does not or none is seen."""
    from .origins import origins

    active = hub.__dict__.setdefault("_instance_origins", set())
    key = (id(view), id(name), id(at))
    if key in active:
        return None  # asked again while answering: unknown
    active.add(key)
    try:
        found = None
        for v, e in origins(hub, view, name, at, limit=4):
            found = _same(found, ctor_class(hub, v, e, not_project))
            if found is None:
                return None
        return found
    finally:
        active.discard(key)


def element_class(hub, view, it: ast.AST, at: ast.AST, not_project, depth: int = 0):
    """(view, class) when every element of the iterable ``it`` is an instance of the same project
    class (``element_classes`` gives one class)."""
    got = element_classes(hub, view, it, at, not_project, depth)
    return got[0] if got is not None and len(got) == 1 else None


def _union(found: list, got) -> list | None:
    if got is None:
        return None
    for g in got:
        if not any(f[1] is g[1] for f in found):
            found.append(g)
    return found


_ADDS = {"append": 0, "insert": 1}


def _added(hub, view, scope, target, not_project, depth: int) -> list | None:
    """The classes of what ``scope`` adds to the container ``target`` (a name, or ``self.<attr>``
    in the methods of a class): ``xs.append(Cls())``, ``xs.insert(0, Cls())``, ``xs.extend([..])``,
    ``xs += [..]``; None when one addition is not a known project instance."""
    found: list = []
    for n in iter_scope_nodes(scope):
        if n.__class__ is ast.Call and n.func.__class__ is ast.Attribute and _same_ref(n.func.value, target):
            m = n.func.attr
            if m in _ADDS and len(n.args) == _ADDS[m] + 1:
                if _union(found, _one(hub, view, n.args[-1], not_project)) is None:
                    return None
            elif m == "extend" and len(n.args) == 1:
                if _union(found, element_classes(hub, view, n.args[0], n, not_project, depth + 1)) is None:
                    return None
        elif n.__class__ is ast.AugAssign and _same_ref(n.target, target):
            if _union(found, element_classes(hub, view, n.value, n, not_project, depth + 1)) is None:
                return None
    return found


def _same_ref(e, target) -> bool:
    if isinstance(target, ast.Name):
        return isinstance(e, ast.Name) and e.id == target.id
    return isinstance(e, ast.Attribute) and e.attr == target.attr and isinstance(e.value, ast.Name) \
        and e.value.id == "self"


def _one(hub, view, e, not_project) -> list | None:
    got = ctor_class(hub, view, e, not_project)
    return None if got is None else [got]


def element_classes(hub, view, it: ast.AST, at: ast.AST, not_project, depth: int = 0) -> list | None:
    """The (view, class) pairs whose instances the iterable ``it`` may hold: a list/tuple/set
    display of constructor calls, a list filled by ``.append(Cls(...))`` (``extend``, ``+=``),
    reached through names, ``self.`` attributes and parameters (what every call passes: of this
    module, and for the checked file's functions of the project's other modules through the hub's
    ``other_callers``), the union over the bindings and callers. None when any element is not an
    instance of a known project class."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(it, (ast.List, ast.Tuple, ast.Set)):
        found: list = []
        for e in it.elts:
            if _union(found, _one(hub, view, e, not_project)) is None:
                return None
        return found
    if isinstance(it, ast.Name):
        kind, evs = reaching(view, it.id, at)
        if kind == "param":
            return _param_elements(hub, view, evs, it.id, not_project, depth)
        if kind not in ("events", "global") or not evs:
            return None
        found = []
        for e in evs:
            if not (isinstance(e, ast.Assign) and len(e.targets) == 1 and isinstance(e.targets[0], ast.Name)):
                return None
            if _union(found, element_classes(hub, view, e.value, e, not_project, depth + 1)) is None:
                return None
            scope = view.sem.enclosing_function(e) or view.tree
            if _union(found, _added(hub, view, scope, it, not_project, depth)) is None:
                return None
        return found
    if isinstance(it, ast.Attribute) and isinstance(it.value, ast.Name) and it.value.id == "self":
        vals = hub.self_attr_bindings(view, it)
        if not vals:
            return None
        found = []
        for v in vals:
            if isinstance(v, ast.stmt):
                return None
            if _union(found, element_classes(hub, view, v, v, not_project, depth + 1)) is None:
                return None
        cls = method_class(view, it)
        for m in cls.body if cls is not None else ():
            if isinstance(m, FUNC_TYPES) and _union(found, _added(hub, view, m, it, not_project, depth)) is None:
                return None
        return found
    return None


def loop_classes(hub, view, name: ast.Name, at: ast.AST, not_project) -> list | None:
    """The project classes ``name`` may be an instance of at ``at`` when every binding reaching it
    is a loop over a container of instances (``for cb in self.callbacks``): ``element_classes``."""
    kind, evs = reaching(view, name.id, at)
    if kind != "events" or not evs:
        return None
    found: list = []
    for e in evs:
        if not (isinstance(e, (ast.For, ast.AsyncFor)) and isinstance(e.target, ast.Name) and e.target.id == name.id):
            return None
        if _union(found, element_classes(hub, view, e.iter, e, not_project)) is None:
            return None
    return found or None


def _param_elements(hub, view, fn, name: str, not_project, depth: int):
    """The element classes of parameter ``name`` of ``fn``: the union over what every call of
    ``fn`` passes (in its module, else in the project's other modules)."""
    if not isinstance(fn, FUNC_TYPES):
        return None
    sites = [(view, c) for c in hub.call_sites(view, fn)]
    if not sites and fn.name == "__init__":  # a constructor's container, filled by another module
        more = getattr(hub, "other_callers", None)
        sites = more(view, fn)[:8] if more is not None else []
    if not sites:
        return None
    found: list = []
    for cv, c in sites:
        a = next((a for p, a in call_args(c, fn) if p == name), None)
        if a is None:
            return None
        if _union(found, element_classes(hub, cv, a, c, not_project, depth + 1)) is None:
            return None
    return found


# ``nn.Module`` methods that return the module itself (``Model(cfg).cuda()`` is still a ``Model``)
_SELF_RETURNING = frozenset({"cuda", "to", "cpu", "float", "half", "bfloat16", "double", "train", "eval",
                             "to_empty", "requires_grad_", "xpu"})


def module_instance_class(hub, view, name: ast.Name, at: ast.AST, not_project=None, callers=None, depth: int = 0,
                          frames=None):
    """(view, class) of the project class ``name`` holds at ``at``: every origin (``origins``:
    names, tuple unpacking, helpers' returns, a parameter's arguments in its module, or with
    ``callers`` in the project's other modules) constructs it, possibly through a module method
    that returns the module (``Model(cfg).cuda()``, ``model.to(device)`` of a parameter: the
    receiver's origins); or, for a parameter no call of its module gives, the project class its
    annotation names (``def shard(model: Model)``). None when unknown or mixed. ``frames=()``:
    context-sensitive (``origins``): a helper that returns its parameter (``shard(Model(cfg))``)
    gives the argument of the very call."""
    from .imports import _NOT_PROJECT
    from .origins import origins

    not_project = _NOT_PROJECT if not_project is None else not_project
    kind, evs = reaching(view, name.id, at) if isinstance(name, ast.Name) else (None, None)  # or ``self.model``
    found = None
    got_any = False
    for v, e, *_ in origins(hub, view, name, at, frames=frames, callers=callers):
        got_any = True
        while isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _SELF_RETURNING \
                and isinstance(e.func.value, ast.Call):
            e = e.func.value
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in _SELF_RETURNING \
                and isinstance(e.func.value, (ast.Name, ast.Attribute)) and depth < 3:
            got = module_instance_class(hub, v, e.func.value, e, not_project, callers, depth + 1, frames)
        else:
            got = ctor_class(hub, v, e, not_project)
        found = _same(found, got)
        if found is None:
            return None
    if got_any:
        return found
    if kind == "param" and isinstance(evs, FUNC_TYPES):
        a = evs.args
        for p in (*a.posonlyargs, *a.args, *a.kwonlyargs):
            if p.arg == name.id and p.annotation is not None:
                return class_named(hub, view, p.annotation, not_project)
    return None


def is_super(e: ast.Call) -> bool:
    """``super()`` (no arguments)."""
    return isinstance(e.func, ast.Name) and e.func.id == "super" and not e.args and not e.keywords


def super_method(hub, view, call: ast.Call, name: str):
    """(view, method) that ``super().name(...)`` in a method of a project class runs: the first
    project base class (depth first, as the method resolution order of single inheritance) that
    defines it; None when a base on the way is not the project's (its method is unknown)."""
    cls = method_class(view, call)
    if cls is None or "super" in view.defs or "super" in view.imports:
        return None
    cview = view
    for _ in range(4):
        bases = [b for b in cls.bases if not (isinstance(b, ast.Name) and b.id == "object")]
        if not bases:
            return None
        got = hub.resolve_class(cview, bases[0])
        if got is None:
            return None
        cview, cls = got
        found = own_method(cview, cls, name)
        if found is not None:
            return found
    return None


def call_classes(hub, view, call: ast.Call, frames=(), callers=None) -> list:
    """The qualified names of what ``call`` may construct or run: its callee's own name
    (``DistributedSampler(ds)``), else, for a callee held in a value, the imported name each of the
    callee's origins reaches (``branch_origins``: ``cls(ds)`` where ``cls = DistributedSampler if
    distributed else RandomSampler``, an if/else statement, a parameter, an entry of a dict of
    classes, a helper's return). None stands for an origin of any other kind (unknown), and is
    the whole answer for a call of a project function or class."""
    from .origins import branch_origins, origins

    qn = view.sem.call_qualname(call)
    if qn is not None or hub.resolve_call(view, call) is not None:
        return [qn]
    out = []
    for v, e, fr in branch_origins(hub, view, call.func, call, frames=frames, callers=callers):
        if isinstance(e, ast.Subscript) and isinstance(e.ctx, ast.Load):
            # ``SAMPLERS[mode]`` of a dict display: any of its values
            got = origins(hub, v, e.value, e, limit=4, callers=callers)
            if got and all(isinstance(d, ast.Dict) and all(k is not None for k in d.keys) for _, d in got):
                out.extend(dv.sem.qualname(x) for dv, d in got for x in d.values)
                continue
        out.append(v.sem.qualname(e) if isinstance(e, (ast.Name, ast.Attribute)) else None)
    return out or [None]
