"""Which calls a function makes along the calls of project functions, and which run first.

- ``project_target(hub, view, c)``: (view, function) of the project function a call runs
  (``fs_effects.resolve``, a static or class method called through its class, with ``instances``
  a method of an instance of a project class);
- ``reference_target(hub, view, at, ref)``: (view, function) of the project function that the
  reference ``ref`` (a name, ``mod.fn``, ``self.close``) names, resolved as a call of it would be;
- ``sites(hub, view, fn, qns)``: the calls (view, call) of ``qns`` that ``fn`` makes, directly or
  through the project functions it calls (with ``at_exit``, also those it registers to run when
  the process exits: ``atexit.register(f)``), any path, up to 3 calls deep; ``lifecycle``'s
  ``init_sites`` / ``destroys_anywhere`` / ``library_init_sites`` ask it;
- ``wrappers(hub, view, fn)``: what a call of a decorated project function runs around its body:
  (view, wrapper) of each project decorator that returns a function it defines (``def
  tears_down(method): def run(self, *a, **k): try: return method(self, *a, **k) finally:
  dist.destroy_process_group(); return run``), named (``@deco``, ``@mod.deco``, imported absolutely
  or relatively) or made by a factory (``@deco(...)``: the function the factory returns is the
  decorator). ``sites`` and ``lifecycle.lifecycle_of`` add the wrappers' calls to the decorated
  function's own (the wrapper runs the body where it calls its parameter); a library decorator,
  or one that returns its argument, adds nothing;
- ``runs_before(hub, view, at, qns)``: the call of ``at``'s function, before ``at``, that makes a
  call of ``qns`` (there, or in the project functions it calls: ``apply_tp(model, mesh)`` that
  calls ``parallelize_module`` inside, across modules); DDP521.
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, get_arg, parent
from .fs_effects import may_resolve_any, resolve
from .records import own_method


def project_target(hub, view, c: ast.Call, instances: bool = False):
    """(view, function) of a call of a project function (``fs_effects.resolve``), or of a static or
    class method called through its class (``Utils.initialize_distributed()``); else None."""
    if may_resolve_any(view, c):
        got = resolve(hub, view, c)
        if got is not None:
            return got
    f = c.func
    if f.__class__ is ast.Attribute and f.value.__class__ is ast.Name and hub is not None:
        base = f.value.id
        cview, cls = view, view.classes.get(base)
        if cls is None and base in view.imports and base not in view.sem.assignments(view.sem.scope_of(c)):
            mod, level, attr = view.imports[base]
            v2 = hub.module_view(view, mod, level) if attr else None
            if v2 is not None:
                cview, cls = v2, v2.classes.get(attr)
        got = own_method(cview, cls, f.attr) if cls is not None else None
        if got is not None:
            return got
    if hub is None or f.__class__ is not ast.Attribute or not instances:
        return None
    # (``instances``: where a teardown is looked for) a method of an instance of a project class
    # (``accelerator.end_training()``), of a fresh one (``PartialState().destroy_process_group()``),
    # of ``self``
    got = hub.resolve_call(view, c)
    if got is not None:
        return got
    # ``self.state.destroy_process_group()``, ``accelerator.end_training()``: every origin of the
    # receiver (through names, tuple unpacking, ``self`` attributes, helpers' returns) is a
    # constructor of one project class (as ``resolve`` follows the constructor)
    from .origins import origins

    leaves = origins(hub, view, f.value, c)
    found = None
    for lv, e in leaves[:8]:
        if isinstance(e, ast.Name):
            # an object that another module of the project builds at its top level and this one
            # imports by name (``from .context import ctx``)
            lv, e = _module_global(hub, lv, e.id) or (lv, e)
        if not isinstance(e, ast.Call):
            return None
        ctor = hub.resolve_call(lv, e) or resolve(hub, lv, e)
        cls = parent(ctor[1]) if ctor is not None and getattr(ctor[1], "name", "") == "__init__" else None
        if not isinstance(cls, ast.ClassDef) or (found is not None and found[1] is not cls):
            return None
        found = (ctor[0], cls)
    return own_method(*found, f.attr) if found is not None else None


def _module_global(hub, view, name: str):
    """(view, value) of the one top-level assignment of the name ``name`` that ``view`` imports
    from another module of the project (``from .context import ctx``); None otherwise."""
    imp = view.imports.get(name)
    if imp is None or not imp[2]:
        return None
    v2 = hub.module_view(view, imp[0], imp[1])
    if v2 is None or v2 is view:
        return None
    found = [st for st in v2.sem.tree.body if isinstance(st, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == imp[2] for t in st.targets)]
    if len(found) != 1 or len(found[0].targets) != 1:
        return None
    return v2, found[0].value


# calls that register a function for the process to run later, in itself: (position, keyword) of it
_REGISTRARS = {"atexit.register": (0, "func")}


def reference_target(hub, view, at: ast.AST, ref: ast.AST, instances: bool = False):
    """(view, function) of the project function that the expression ``ref`` names (a name, an
    imported module's function, a method of ``self`` or of an instance of a project class), as a
    call ``ref()`` at ``at`` would run it (``project_target``); None otherwise."""
    if not isinstance(ref, (ast.Name, ast.Attribute)):
        return None
    memo = view.memo.setdefault("call_sites.probes", {})
    probe = memo.get(id(ref))
    if probe is None:
        probe = memo[id(ref)] = ast.Call(func=ref, args=[], keywords=[], lineno=at.lineno,
                                         col_offset=at.col_offset)
        probe._p = at  # (the probe sits where ``ref`` is read: its scope is the reader's)
    try:
        got = project_target(hub, view, probe, instances=instances)
    except Exception:  # noqa: BLE001 - unresolvable: not followed
        return None
    return got if got is not None and isinstance(got[1], FUNC_TYPES) else None


def sites(hub, view, fn, qns, depth: int = 0, instances: bool = False, prefixes: tuple = (),
          at_exit: bool = False) -> list:
    """The calls (view, call) of ``qns`` (a qualified name or a frozenset of them), or of a name
    under one of the modules ``prefixes`` (``("lightning.",)``), that ``fn`` makes, directly or
    through the project functions it calls (``project_target``, with ``instances``), up to 3
    calls deep. With ``at_exit``, also through the project functions it registers to run when the
    process exits (``atexit.register(close_group)``, ``atexit.register(self.close)``): they run
    in this process, though after everything else."""
    # a function of ``fn`` and ``depth`` alone (no set of functions seen elsewhere in the walk, which
    # would make the memoised answer depend on which walk came first); ``depth`` ends cycles
    if depth > 3 or not isinstance(fn, (*FUNC_TYPES, ast.Module)):
        return []
    wanted = qns if isinstance(qns, frozenset) else frozenset((qns,))
    memo = view.memo.setdefault(("call_sites", instances, at_exit, *sorted(wanted), *prefixes), {})
    key = (id(fn), depth)
    if key in memo:
        return memo[key]
    sem = view.sem
    out = []
    if depth < 3:  # a call of a decorated function runs its decorators' wrappers around it
        for wv, w in wrappers(hub, view, fn):
            out.extend(s for s in sites(hub, wv, w, wanted, depth + 1, instances, prefixes, at_exit) if s not in out)
    for c in sem.scope_calls(fn) or ():
        qn = sem.call_qualname(c) or ""
        if qn in wanted or (prefixes and qn.startswith(prefixes)):
            out.append((view, c))
        elif not qn.startswith("torch.") and depth < 3:
            reg = _REGISTRARS.get(qn) if at_exit else None
            ref = get_arg(c, *reg) if reg else None
            if ref is not None and (sem.qualname(ref) or "") in wanted:
                out.append((view, c))  # ``atexit.register(dist.destroy_process_group)``
                continue
            target = reference_target(hub, view, c, ref, instances) if reg \
                else project_target(hub, view, c, instances=instances)
            if target is not None and target[1] is not fn:
                out.extend(s for s in sites(hub, *target, wanted, depth + 1, instances, prefixes, at_exit)
                           if s not in out)
    memo[key] = out
    return out


def returned_inner(fn: ast.AST):
    """The function ``fn`` defines in its own body and returns by name on every ``return`` (``def
    run(...): ...`` then ``return run``); else None."""
    inner = {st.name: st for st in getattr(fn, "body", ()) if isinstance(st, FUNC_TYPES)}
    found = None
    stack = list(fn.body) if inner else []
    while stack:
        st = stack.pop()
        if isinstance(st, (*FUNC_TYPES, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(st, ast.Return):
            got = inner.get(st.value.id) if isinstance(st.value, ast.Name) else None
            if got is None or (found is not None and found is not got):
                return None
            found = got
            continue
        stack.extend(ast.iter_child_nodes(st))
    return found


def wrappers(hub, view, fn) -> list:
    """(view, wrapper) of each project decorator of ``fn`` that returns a function it defines."""
    decos = getattr(fn, "decorator_list", None)
    if not decos or hub is None:
        return []
    memo = view.memo.setdefault("call_sites.wrappers", {})
    got = memo.get(id(fn))
    if got is not None:
        return got
    memo[id(fn)] = []  # recursion guard
    out = []
    for d in decos:
        if isinstance(d, ast.Call):  # a factory: the function it returns is the decorator
            try:
                fac = project_target(hub, view, d)
            except Exception:  # noqa: BLE001 - unresolvable: not followed
                fac = None
            inner = returned_inner(fac[1]) if fac is not None and isinstance(fac[1], FUNC_TYPES) else None
            deco = (fac[0], inner) if inner is not None else None
        else:
            deco = reference_target(hub, view, d, d)
        w = returned_inner(deco[1]) if deco is not None and deco[1] is not fn else None
        if w is not None and w is not fn:
            out.append((deco[0], w))
    memo[id(fn)] = out
    return out


def runs_before(hub, view, at: ast.AST, qns) -> ast.Call | None:
    """The first call of ``at``'s function (the module outside functions), in source order before
    ``at``, that is a call of ``qns`` or makes one (``sites``)."""
    sem = view.sem
    fn = sem.enclosing_function(at) or sem.tree
    wanted = frozenset(qns)
    limit = (at.lineno, at.col_offset)
    for c in sorted(sem.scope_calls(fn) or (), key=lambda c: (c.lineno, c.col_offset)):
        if (c.lineno, c.col_offset) >= limit:
            break
        qn = sem.call_qualname(c) or ""
        if qn in wanted:
            return c
        if not qn.startswith("torch."):
            target = project_target(hub, view, c)
            if target is not None and sites(hub, *target, wanted, 1):
                return c
    return None
