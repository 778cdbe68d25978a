"""Indexes of a module's calls that the flow analysis shares: calls by scope and by name, the
names that may hold a DDP-wrapped module, instances of project classes, and small helpers about
calls (subgroups, roots of rooted collectives). No analysis here: ``summaries``, ``context`` and
``roots`` build on it.
"""
from __future__ import annotations

import ast
import re

from ..semantic import FUNC_TYPES, get_arg, param_names, parent
from .mentions import word_counts
from .wrappers import _by_callee

GROUP_POS = {"all_reduce": 2, "broadcast": 2, "reduce": 3, "all_gather": 2, "all_gather_into_tensor": 2,
             "gather": 3, "scatter": 3, "reduce_scatter": 3, "reduce_scatter_tensor": 3, "all_to_all": 2,
             "all_to_all_single": 4, "barrier": 0, "monitored_barrier": 0, "all_gather_object": 2,
             "gather_object": 3, "broadcast_object_list": 2, "scatter_object_list": 3}
# rooted collective -> (position, keyword) of its root rank
ROOTS = {
    "broadcast": (1, "src"), "reduce": (1, "dst"), "gather": (2, "dst"), "scatter": (2, "src"),
    "broadcast_object_list": (1, "src"), "gather_object": (2, "dst"), "scatter_object_list": (2, "src"),
}
_GROUP_ROOTS = ("group_src", "group_dst")
WRAPPERS = ("torch.nn.parallel.DistributedDataParallel", "torch.distributed.fsdp.FullyShardedDataParallel")
_NOT_PROJECT_MODS = frozenset({"torch", "torchvision", "transformers", "numpy", "timm", "lightning",
                               "pytorch_lightning", "accelerate", "deepspeed", "apex", "datasets"})


def is_main_guard(st: ast.stmt) -> bool:
    """``if __name__ == "__main__":``"""
    if not isinstance(st, ast.If) or not isinstance(st.test, ast.Compare):
        return False
    parts = [st.test.left, *st.test.comparators]
    return any(isinstance(p, ast.Name) and p.id == "__name__" for p in parts) and any(
        isinstance(p, ast.Constant) and p.value == "__main__" for p in parts)


def self_offset(fn: ast.AST) -> int:
    """1 when ``fn`` is a method called on an instance (its first parameter is ``self``/``cls``)."""
    if not isinstance(parent(fn), ast.ClassDef):
        return 0
    for d in getattr(fn, "decorator_list", ()):
        if isinstance(d, ast.Name) and d.id == "staticmethod":
            return 0
    return 1


def call_sites_here(ctx, fn: ast.AST, *, strict: bool = False) -> list[ast.Call]:
    """The calls of ``fn`` in this module when they are all its uses: ``f(...)`` of a module-level
    function, ``self.f(...)`` of a method. Empty when the name is also used otherwise
    (``mp.spawn(f)``, a callback, ``getattr``): callers not seen here.

    Every whole-word occurrence of the name in the text (a superset of the code's identifiers:
    comments and strings only add) being a call site or a definition settles it without a walk of
    the tree. Else the code decides: by default (a method of a module-level class, not
    ``__init__``), another read of the name (``f``; ``x.f`` for a method) is another use;
    ``strict`` (a method of any class, called inside its class), any other mention of the name in
    the code (a store, an import, an attribute, a class of that name) is."""
    owner = parent(fn)
    method = isinstance(owner, ast.ClassDef)
    if not (method or isinstance(owner, ast.Module)):
        return []
    name = fn.name
    if not strict and (name == "__init__" or method and not isinstance(parent(owner), ast.Module)):
        return []
    sites = []
    for c in _by_callee(ctx).get(name, ()):  # the per-check index of ``f(...)`` / ``self.f(...)`` calls
        f = c.func
        if not method:
            if isinstance(f, ast.Name):
                sites.append(c)
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self" \
                and (not strict or owner.lineno <= c.lineno <= owner.end_lineno):
            sites.append(c)
    if not sites:
        return sites
    expected = len(sites) + len(ctx.sem.functions.get(name, ()))
    # (a rule's context has the file's text; a project module's context, its view's)
    src = getattr(ctx, "src", None)
    text = src.text if src is not None else getattr(getattr(ctx, "view", None), "text", None)
    if isinstance(text, str):
        seen = len(re.findall(r"(?<!\w)" + re.escape(name) + r"(?!\w)", text)) if text.isascii() \
            else text.count(name)
        if seen == expected:
            return sites
    if strict:
        return sites if word_counts(ctx.sem).get(name, 0) == expected else []
    uses = ctx.memo("calls.name_loads", lambda: _name_loads(ctx.sem.of_types(ast.Name, ast.Attribute)))
    return sites if uses.get(("a" if method else "n", name), 0) == len(sites) else []


def _name_loads(nodes) -> dict:
    """How many times each name (``("n", id)``) and attribute (``("a", attr)``) is read."""
    names: dict = {}
    for n in nodes:
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            k = ("n", n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Load):
            k = ("a", n.attr)
        else:
            continue
        names[k] = names.get(k, 0) + 1
    return names


def on_subgroup(call: ast.Call, op: str) -> bool:
    grp = get_arg(call, GROUP_POS.get(op), "group")
    if grp is None or (isinstance(grp, ast.Constant) and grp.value is None):
        return False
    if isinstance(grp, ast.Attribute) and grp.attr == "WORLD":
        return False
    return True


def scope_calls(view, scope: ast.AST) -> list[ast.Call]:
    """Calls directly in ``scope`` (not in nested functions or lambdas; a class body counts as its
    enclosing scope), in source order. One pass over the file's calls, grouped once."""
    return view.sem.scope_calls(scope)  # grouped by the one traversal (semantic.Semantic._walk)


def wrapped_names(view) -> frozenset:
    """Names that may hold a DDP/FSDP-wrapped module (a fast filter; ``wrapper_ctor`` decides):
    targets of ``x = DDP(...)`` / ``self.x = DDP(...)``, names and attributes assigned from those,
    and the parameters of this file's functions, methods and constructors that receive one."""
    got = view.memo.get("wrapped_names")
    if got is None:
        sem = view.sem
        names = set()
        ctors = sem.calls_to(*WRAPPERS)
        for c in ctors:
            st = parent(c)
            if isinstance(st, ast.Assign):
                for t in st.targets:
                    if isinstance(t, ast.Name):
                        names.add(t.id)
                    elif isinstance(t, ast.Attribute):
                        names.add(t.attr)
        # ``net = wrap(net)`` / ``net = parallel.wrap(net)`` of a project module: the helper may return
        # the wrapper (``wrapper_ctor`` follows the return into that module)
        imports = view.imports
        for st in sem.by_type.get(ast.Assign, ()):
            v = st.value
            if v.__class__ is not ast.Call:
                continue
            f = v.func
            base = f.id if f.__class__ is ast.Name else (
                f.value.id if f.__class__ is ast.Attribute and f.value.__class__ is ast.Name else None)
            imp = imports.get(base) if base is not None else None
            if imp is None or (not imp[1] and (imp[0] or "").split(".", 1)[0] in _NOT_PROJECT_MODS):
                continue
            for t in st.targets:
                if isinstance(t, ast.Name):
                    names.add(t.id)
                elif isinstance(t, ast.Attribute):
                    names.add(t.attr)
        if ctors or names:
            # ``net = build(...)`` where ``build``, a function of this file, returns the wrapper
            # (``return DDP(...)``, or a name bound to it there): ``wrapper_ctor`` follows the return
            returning = set()
            for c in ctors:
                fn = sem.enclosing_function(c)
                if fn is None or getattr(fn, "name", None) not in view.defs or view.defs[fn.name] is not fn:
                    continue
                st = parent(c)
                held = {t.id for t in st.targets if isinstance(t, ast.Name)} if isinstance(st, ast.Assign) else set()
                if isinstance(st, ast.Return) or any(
                        isinstance(n, ast.Return) and isinstance(n.value, ast.Name) and n.value.id in held
                        for n in ast.walk(fn)):
                    returning.add(fn.name)
            if returning:
                by_name, _, _, _ = sem.callee_index()
                for k in returning:
                    for j in by_name.get(k, ()):
                        st = parent(sem.calls[j])
                        if isinstance(st, ast.Assign) and st.value is sem.calls[j]:
                            for t in st.targets:
                                if isinstance(t, ast.Name):
                                    names.add(t.id)
                                elif isinstance(t, ast.Attribute):
                                    names.add(t.attr)
            methods: dict[str, list] = {}
            for cls in view.classes.values():
                for st in cls.body:
                    if isinstance(st, FUNC_TYPES):
                        methods.setdefault(st.name if st.name != "__init__" else cls.name, []).append(st)
            # the calls that pass something to a function, method or class of this file: those of
            # their names and those on ``self``, from the file's index, in the file's order
            edges = []
            defs, classes = view.defs, view.classes
            by_name, _, _, by_base = sem.callee_index()
            pos = [i for k in (defs.keys() | classes.keys()) for i in by_name.get(k, ())]
            pos += by_base.get("self", ())
            pos.sort()
            calls = sem.calls
            Name = ast.Name
            for j in pos:
                c = calls[j]
                if not c.args and not c.keywords:
                    continue
                f = c.func
                if f.__class__ is Name:
                    fid = f.id
                    fns = (defs[fid],) if fid in defs else methods.get(fid, ())
                else:  # ``self.m(...)``
                    fns = methods.get(f.attr, ())
                if not fns:
                    continue
                pairs = [(i, None, a) for i, a in enumerate(c.args)] + [(None, k.arg, k.value) for k in c.keywords if k.arg]
                pairs = [(i, kw, _name_of(a) or (True if _is_ctor(sem, a) else None)) for i, kw, a in pairs]
                pairs = [x for x in pairs if x[2] is not None]
                if not pairs:
                    continue
                for fn in fns:
                    params = param_names(fn)[self_offset(fn):]
                    for i, kw, a in pairs:
                        if kw is not None:
                            edges.append((a, kw))
                        elif i < len(params):
                            edges.append((a, params[i]))
            # ``self.model = net`` / ``m = net``: the alias of a name that may hold one
            for st in sem.by_type.get(ast.Assign, ()):
                if st.value.__class__ is Name:
                    for t in st.targets:
                        if t.__class__ is Name or t.__class__ is ast.Attribute:
                            edges.append((st.value.id, t.id if t.__class__ is Name else t.attr))
            for _ in range(3):
                before = len(names)
                for a, p in edges:
                    if a is True or a in names:
                        names.add(p)
                if len(names) == before:
                    break
        got = view.memo["wrapped_names"] = frozenset(names)
    return got


def on_fresh_instance(f: ast.Attribute, view) -> bool:
    """``f`` is ``Cls(...).m``, ``Cls`` a class of this file or an import (maybe of the project)."""
    b = f.value
    return b.__class__ is ast.Call and b.func.__class__ is ast.Name and (b.func.id in view.classes
                                                                          or b.func.id in view.imports)


def may_resolve(view, call: ast.Call) -> bool:
    """``call`` names something that may be a project function (``f(...)`` with ``f`` a function,
    class or import of the file, ``self.m(...)``, ``mod.f(...)``): otherwise ``resolved`` is None
    without asking."""
    f = call.func
    if f.__class__ is ast.Name:
        return f.id in view.defs or f.id in view.classes or f.id in view.imports
    if f.__class__ is ast.Attribute and f.value.__class__ is ast.Name:
        return f.value.id == "self" or f.value.id in view.imports
    if f.__class__ is ast.Attribute and f.value.__class__ is ast.Call and f.value.func.__class__ is ast.Name:
        return f.value.func.id in view.classes or f.value.func.id in view.imports  # ``Cls(...).m(...)``
    return False


def _is_ctor(sem, e: ast.AST) -> bool:
    return isinstance(e, ast.Call) and (sem.call_qualname(e) or "") in WRAPPERS


def _name_of_any(e: ast.AST) -> str | None:
    if e.__class__ is ast.Name:
        return e.id
    if e.__class__ is ast.Attribute:
        return e.attr
    return None


def _name_of(e: ast.AST) -> str | None:
    if isinstance(e, ast.Name):
        return e.id
    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
        return e.attr
    return None


def _init_self_copies(view, init: ast.AST) -> list:
    """(attribute, parameter) of the ``self.attr = param`` statements of an ``__init__``."""
    memo = view.memo.setdefault("init_self_copies", {})
    got = memo.get(id(init))
    if got is None:
        params = set(param_names(init))
        got = memo[id(init)] = []
        for st in init.body:
            if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.value, ast.Name) \
                    and st.value.id in params:
                t = st.targets[0]
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    got.append((t.attr, st.value.id))
    return got


_DISPLAYS = frozenset({ast.List, ast.Tuple, ast.Set})


def instance_names(view) -> frozenset:
    """Names assigned an instance of a class that may belong to the project (``t = Trainer(...)``,
    the class defined in this file or imported from outside torch and the usual libraries)."""
    got = view.memo.get("instance_names")
    if got is None:
        names = set()
        displays = False
        builders: set[int] = set()  # functions of this file that return an instance
        for cname, calls in calls_by_name(view).items():
            if cname in view.classes:
                pass
            elif cname[:1].isupper() and cname in view.imports:
                imp = view.imports[cname]
                if imp[0].split(".", 1)[0] in _NOT_PROJECT_MODS:
                    continue
            else:
                continue
            for c in calls:
                st = parent(c)
                if st.__class__ is ast.Assign and len(st.targets) == 1 and st.targets[0].__class__ is ast.Name:
                    names.add(st.targets[0].id)
                elif st.__class__ in _DISPLAYS:
                    displays = True
                    a = parent(st)
                    if a.__class__ is ast.Assign and len(a.targets) == 1 and a.value is st:
                        # a parallel tuple assignment: ``saver, n = Saver(...), 0``
                        t = a.targets[0]
                        if t.__class__ is ast.Tuple and len(t.elts) == len(st.elts):
                            names.update(te.id for te, ve in zip(t.elts, st.elts)
                                         if ve is c and te.__class__ is ast.Name)
                    if parent(st).__class__ is ast.Return:
                        builders.add(id(view.sem.enclosing_function(st)))
                elif st.__class__ is ast.Return:
                    builders.add(id(view.sem.enclosing_function(st)))
        # an alternate constructor of such a class (``mgr = Manager.create(cfg)``): whether it
        # builds one is ``instances.ctor_class``'s question
        sem = view.sem
        for cname, pos in sem.callee_index()[3].items():
            if not (cname in view.classes or cname[:1].isupper() and cname in view.imports
                    and view.imports[cname][0].split(".", 1)[0] not in _NOT_PROJECT_MODS):
                continue
            for i in pos:
                c = sem.calls[i]
                st = parent(c)
                if st.__class__ is ast.Assign and len(st.targets) == 1 and st.targets[0].__class__ is ast.Name:
                    names.add(st.targets[0].id)
                elif st.__class__ is ast.Tuple and parent(st).__class__ is ast.Assign:
                    t = parent(st).targets[0]  # ``mgr, n = Manager.create(cfg), 0``
                    if t.__class__ is ast.Tuple and len(t.elts) == len(st.elts):
                        names.update(te.id for te, ve in zip(t.elts, st.elts) if ve is c and te.__class__ is ast.Name)
        # what a builder of this file returns (``a, b = build(cfg)`` where ``build`` returns
        # ``Cls(x), Cls(y)``): ``instances.instance_class`` reads it through ``origins``
        for cname, calls in calls_by_name(view).items():
            fns = view.sem.functions.get(cname) if cname in view.defs else None
            if not fns or not any(id(f) in builders for f in fns):
                continue
            for c in calls:
                st = parent(c)
                if st.__class__ is ast.Assign and len(st.targets) == 1:
                    t = st.targets[0]
                    names.update(x.id for x in (t.elts if t.__class__ is ast.Tuple else (t,)) if x.__class__ is ast.Name)
        # a container of instances (``hooks=[EvalHook(...)]``, or ``self.callbacks`` that the
        # project's callers fill): a loop over one may bind them
        for t in (ast.For, ast.AsyncFor):
            for loop in view.sem.by_type.get(t, ()):
                it = loop.iter
                if loop.target.__class__ is ast.Name and (displays or it.__class__ is ast.Attribute and (
                        it.value.__class__ is ast.Name and it.value.id == "self")):
                    names.add(loop.target.id)
        got = view.memo["instance_names"] = frozenset(names)
    return got


def method_names(view) -> frozenset:
    """Names of the methods defined in the module's classes (``self.x(...)`` can only resolve to
    one of these: a call of any other attribute of ``self`` is a layer or a stored callable)."""
    got = view.memo.get("method_names")
    if got is None:
        ClassDef = ast.ClassDef
        got = view.memo["method_names"] = frozenset(
            f.name for fns in view.sem.functions.values() for f in fns if f._p.__class__ is ClassDef)
    return got


def calls_by_name(view) -> dict:
    """Callee name -> the calls of that plain name (``f(...)``), in ``view.sem.calls`` order."""
    got = view.memo.get("calls_by_name")
    if got is None:
        calls = view.sem.calls
        got = view.memo["calls_by_name"] = {
            k: [calls[i] for i in pos] for k, pos in view.sem.callee_index()[0].items()}
    return got


def _memo(view, ctx, name: str) -> dict:
    m = ctx.memo if ctx is not None else view.memo
    got = m.get(name)
    if got is None:
        got = m[name] = {}
    return got


def _wrapped(view, ctx) -> frozenset:
    if ctx is None or not (ctx.wraps or ctx.self_wraps):
        return wrapped_names(view)
    w = ctx.memo.get("wrapped")
    if w is None:
        w = ctx.memo["wrapped"] = wrapped_names(view) | frozenset(ctx.wraps) | frozenset(ctx.self_wraps)
    return w


def scope_calls_in_class(view, cls: ast.ClassDef) -> list:
    out = []
    for st in cls.body:
        if isinstance(st, FUNC_TYPES):
            out.extend(scope_calls(view, st))
    return out


def root_arg(call: ast.Call, op: str):
    pos, kw = ROOTS[op]
    root = get_arg(call, pos, kw)
    for gk in _GROUP_ROOTS:
        root = root if root is not None else get_arg(call, None, gk)
    return root


def call_args(call: ast.Call, fn: ast.AST):
    """(parameter name, argument expression) pairs of ``call`` to ``fn`` (defaults excluded)."""
    if not isinstance(fn, FUNC_TYPES):
        return []
    a = fn.args
    pos = [x.arg for x in (*a.posonlyargs, *a.args)][self_offset(fn):]
    out = []
    star = False
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            star = True
            break
        if i < len(pos):
            out.append((pos[i], arg))
    names = set(param_names(fn))
    for k in call.keywords:
        if k.arg is None:
            continue
        if k.arg in names and not (star and k.arg in pos):
            out.append((k.arg, k.value))
    return out


def instance_method_calls(hub, view, fn, cls) -> list:
    """``obj.m(...)`` / ``self.<attr>.m(...)`` where ``obj`` (every binding of ``self.<attr>`` in
    the calling class) holds an instance of ``cls`` (the module's calls of method ``fn`` from
    outside its class; ``Cls(...).m(...)`` is found beside, in ``Summaries.call_sites``)."""
    sem = view.sem
    out = []
    for i in sem.callee_index()[1].get(fn.name, ()):
        c = sem.calls[i]
        recv = c.func.value
        if cls.lineno <= c.lineno <= cls.end_lineno:
            continue
        if isinstance(recv, ast.Name) and recv.id in instance_names(view):
            got = hub._instance_class(view, recv, c)
            if got is not None and got[1] is cls:
                out.append(c)
        elif isinstance(recv, ast.Attribute) and isinstance(recv.value, ast.Name) and recv.value.id == "self":
            # ``self.ckpt.load(...)`` in another class whose ``self.ckpt`` is always built as ``cls``
            got = hub.resolve_call(view, c)
            if got is not None and got[1] is fn:
                out.append(c)
    return out


def _on_self_attr(f: ast.AST) -> bool:
    """``f`` is ``self.<attr>.<m>``: a method of the project class ``self.<attr>`` may hold
    (``resolve_call`` asks ``instances.self_attr_class``)."""
    if f.__class__ is not ast.Attribute:
        return False
    b = f.value
    return b.__class__ is ast.Attribute and b.value.__class__ is ast.Name and b.value.id == "self"


def reference_call(ref: ast.expr, at: ast.AST) -> ast.Call:
    """A synthetic call ``ref()`` of the function reference ``ref``, to resolve the reference as
    such a call would be: located where ``ref`` is (every query may compare positions) and hung
    under ``at`` (its parent for the scope and position queries)."""
    probe = ast.copy_location(ast.Call(func=ref, args=[], keywords=[]), ref)
    probe._p = at
    return probe
