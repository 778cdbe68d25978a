"""The DDP model of a file: is it a distributed script, where is the DDP wrapper built, and which
name (or ``self.`` attribute) holds it at a given point.

Local dataflow in one scope (plus module level), over the semantic indexes.
"""
from __future__ import annotations

import ast

from ..semantic import param_names, parent
from ..torch_api import DDP_CLASS, SPAWNS
from .assignments import reaching_assignment, reaching_value
from .calls import call_sites_here
from .helper_calls import bind_args

_LAUNCH = ("torch.distributed.init_process_group", DDP_CLASS, *SPAWNS,
           "torch.distributed.fsdp.FullyShardedDataParallel", "torch.distributed.fsdp.fully_shard",
           "torch.distributed._composable.fsdp.fully_shard", "torch.distributed.device_mesh.init_device_mesh")
# what a file must spell for is_distributed_script to hold (the last component of each launch call)
LAUNCH_TEXT = tuple(dict.fromkeys(q.rsplit(".", 1)[1] for q in _LAUNCH))


def is_distributed_script(ctx) -> bool:
    """The file starts or joins a process group (of more than one process: not a group of
    ``world_size=1``, ``world.one_process_init``), wraps in DDP/FSDP or spawns ranks itself, in code
    that may run: a launch call in a branch that never runs (``params.dead_branch``: ``if
    is_dist:`` with ``is_dist, world = (False, 1)``), or in a branch that no call of its function
    takes (``if distributed: model = DDP(model)`` in a notebook whose every ``train(...)`` passes ``distributed=False``,
    ``params.dead_for_callers``) does not count."""
    return ctx.memo("models.distributed_script", lambda: _launches(ctx))


def _launches(ctx) -> bool:
    from .world import one_process_init

    # a group of one process (``init_process_group(..., world_size=1)``) starts no other rank
    calls = [c for c in ctx.sem.calls_to(*_LAUNCH)
             if not (ctx.qn(c) == _LAUNCH[0] and one_process_init(ctx.sem, c))]
    if not calls:
        return False
    return any(_live(ctx, c) for c in calls)


def distributed_program(ctx, an=None) -> bool:
    """``is_distributed_script``, or the file starts the default group through a function of
    another module of the project (``lifecycle.events``: ``ext_dist.init_distributed(...)`` with
    ``import extend_distributed as ext_dist``, ``from .utils.dist import setup``; also only on some
    paths of it, ``if int(os.environ["WORLD_SIZE"]) > 1: init_process_group(...)``) from module
    level or a module-level function, in code that may run (``_live``), and at least one
    ``init_process_group`` it reaches is not a world of one process (``world.one_process_init``):
    the program runs once per process of that group. ``an``: the check's analysis when ``ctx`` is
    another file of the project (a caller), whose modules it reads (and depends on)."""
    if is_distributed_script(ctx):
        return True
    if an is None:
        from . import for_context  # lazy: only a file with no launch call of its own asks

        an = for_context(ctx)
    return ctx.memo(("models.project_group", id(an)), lambda: _project_init(ctx, an))


def _project_init(ctx, an) -> bool:
    from .lifecycle import events, init_sites
    from .world import one_process_init

    view = an.main if ctx.filename == an.main.path or ctx.sem is an.main.sem else an.view_of(ctx.filename)
    if view is None:
        return False
    scopes = [ctx.sem.tree, *(fn for fns in ctx.sem.functions.values() for fn in fns
                              if isinstance(parent(fn), ast.Module))]
    for scope in scopes:
        for ev in events(an, view, scope):
            if ev.kind != "init" or ev.where is None or ev.where[0] is view:
                continue  # a call of this file's own init is a launch call (``_launches``)
            if not any(not one_process_init(v.sem, c) for v, c in init_sites(an, *ev.where)):
                continue
            if _live(ctx, ev.call, an, view):
                return True
    return False


def _live(ctx, c: ast.Call, an=None, view=None) -> bool:
    """``c`` may run: it sits under no test, or under one whose branch is taken (``params.dead_branch``,
    ``params.dead_for_callers``)."""
    if not any(isinstance(a, (ast.If, ast.IfExp, ast.While)) for a in ctx.sem.ancestors(c)):
        return True
    from . import for_context  # lazy: only a file with a launch call under a test asks
    from .params import dead_branch

    # ``if is_dist:`` with ``is_dist, world = (False, 1)``; a flag no call of the function sets
    return not dead_branch(ctx.sem, c, an or for_context(ctx), view)


def ddp_calls(ctx) -> list[ast.Call]:
    return ctx.sem.calls_to(DDP_CLASS)


def is_ddp_wrapper(ctx, expr: ast.AST, at: ast.AST, depth: int = 0, may: bool = False):
    """The ``X = DDP(...)`` assignment when ``expr`` (a name or ``self.attr``) holds the DDP wrapper
    at ``at``; else None. A parameter holds it when every call of its function in the file passes
    the wrapper (``train_one_epoch(ddp_model, ...)``, two calls deep at most); a ``self.<attr>``
    that ``__init__`` copies from its parameter holds it when every construction of the class in
    the file passes the wrapper (``Trainer(ddp_model, ...)``).

    ``may=True`` also answers for a ``self.<attr>`` that holds the wrapper on some path only: the
    class (or a project base class) binds it to the plain model and then, maybe under a condition,
    to ``DDP(self.<attr>)`` in ``__init__`` or a method ``__init__`` calls, with no binding that
    unwraps (``wrapped.wrap_origins``); the wrap of this file is the answer."""
    if isinstance(expr, ast.Name):
        st = reaching_assignment(ctx, expr.id, at)
        if st is not None and isinstance(st.value, ast.Call) and ctx.qn(st.value) == DDP_CLASS:
            return st
        if st is not None and isinstance(st.value, ast.Call) and returns_ddp(ctx, st.value):
            return st  # ``model = wrap(model, gpu)``: a project helper that returns the wrapper
        if st is None:
            v = reaching_value(ctx, expr.id, at)  # ``model, teacher = DDP(net), Teacher()``
            if isinstance(v, ast.Call) and ctx.qn(v) == DDP_CLASS:
                return ctx.sem.statement_of(v)
        if st is None and depth < 2:
            got = _param_wrapper(ctx, expr.id, at, depth, may)
            if got is not None and _excluded_by_flag(ctx, at, depth):
                return None
            return got
        return None
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        cls = next((a for a in ctx.sem.ancestors(expr) if isinstance(a, ast.ClassDef)), None)
        if cls is None:
            return None
        from .wrap_sites import wrap_sites  # ``self.model = wrap(model)`` of a project helper too

        found = []
        for c in (w.call for w in wrap_sites(ctx)):
            st = parent(c)
            if isinstance(st, ast.Assign) and st.lineno >= cls.lineno and st.end_lineno <= cls.end_lineno:
                for t in st.targets:
                    if isinstance(t, ast.Attribute) and t.attr == expr.attr and isinstance(t.value, ast.Name) \
                            and t.value.id == "self":
                        found.append(st)
        if len(found) == 1 and not _other_self_assigns(ctx, cls, expr.attr, found[0]):
            return found[0]
        if not found and depth < 2:
            got = _ctor_param_wrapper(ctx, cls, expr.attr, depth, may)
            if got is not None:
                return got
        if may:
            return _may_self_wrap(ctx, expr, at)
    return None


def _ctor_param_wrapper(ctx, cls: ast.ClassDef, attr: str, depth: int, may: bool):
    """The caller's ``X = DDP(...)`` when the class's only binding of ``self.<attr>`` is
    ``self.<attr> = <param>`` at the top of ``__init__`` (the parameter never rebound there) and
    every construction of the module-level class in this file (``Trainer(model, ...)``, its only
    uses: no subclass, no other reference) passes the DDP wrapper for that parameter."""
    if not isinstance(parent(cls), ast.Module):
        return None
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None:
        return None
    binds = [st for st in _class_assign_stmts(cls)
             if any(isinstance(x, ast.Attribute) and x.attr == attr and isinstance(x.value, ast.Name)
                    and x.value.id == "self" for t in (st.targets if isinstance(st, ast.Assign) else [st.target])
                    for x in ast.walk(t))]
    if len(binds) != 1 or not isinstance(binds[0], ast.Assign) or binds[0] not in init.body:
        return None
    st = binds[0]
    if not (len(st.targets) == 1 and isinstance(st.targets[0], ast.Attribute) and isinstance(st.value, ast.Name)):
        return None
    name = st.value.id
    if name == "self" or name not in param_names(init) or ctx.sem.assignments(init).get(name):
        return None
    sites = _constructions(ctx, cls)
    if not sites:
        return None
    found = None
    for c in sites:
        if any(isinstance(x, ast.Starred) for x in c.args) or any(k.arg is None for k in c.keywords):
            return None
        arg = bind_args(c, init).get(name)
        if not isinstance(arg, (ast.Name, ast.Attribute)):
            return None
        got = is_ddp_wrapper(ctx, arg, c, depth + 1, may)
        if got is None:
            return None
        found = found or got
    return found


def _constructions(ctx, cls: ast.ClassDef) -> list:
    """The ``Cls(...)`` calls of a module-level class in this file when they are its only uses (no
    subclass, factory or export); else empty."""
    from .mentions import word_counts

    if not isinstance(parent(cls), ast.Module):
        return []
    sites = [c for c in ctx.sem.calls if isinstance(c.func, ast.Name) and c.func.id == cls.name]
    if not sites or word_counts(ctx.sem).get(cls.name, 0) != len(sites) + 1:
        return []
    return sites


def _may_self_wrap(ctx, expr: ast.Attribute, at: ast.AST):
    """The ``self.<attr> = DDP(...)`` of this file that ``self.<attr>`` may hold at ``at``, by its
    origins across the methods that run first and the project base classes (``wrapped``)."""
    memo = ctx.memo("models.may_self_wrap", dict)
    key = (id(expr), id(at))
    if key not in memo:
        from .modern import hub  # lazy: the flow package imports this module
        from .wrapped import wrap_origins

        an, view = hub(ctx)
        wraps, _always = wrap_origins(an, view, expr, at)
        here = [_statement_of(c) for v, c in wraps if v is view and isinstance(c, ast.Call)]
        memo[key] = next((st for st in here if isinstance(st, ast.Assign)), None)
    return memo[key]


def _statement_of(node: ast.AST):
    """The statement holding ``node`` (``self.m, self.g = DDP(m), g``: the tuple assignment)."""
    while node is not None and not isinstance(node, ast.stmt):
        node = parent(node)
    return node


def returns_ddp(ctx, call: ast.Call) -> bool:
    """``call`` runs a function of the project (this file or another module) every ``return`` of
    which gives a new DDP wrapper: ``return DDP(model, ...)``, or a name bound once to one."""
    qn = ctx.qn(call) or ""
    if qn.startswith("torch."):
        return False
    memo = ctx.memo("models.returns_ddp", dict)
    if id(call) in memo:
        return memo[id(call)]
    memo[id(call)] = False
    from . import for_context  # lazy: the package imports this module

    ana = for_context(ctx)
    got = ana.resolve_call(ana.main, call)
    ok = False
    if got is not None:
        view, fn = got
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            rets = [n for n in _own_nodes(fn) if isinstance(n, ast.Return)]
            ok = bool(rets) and all(_is_ddp_value(view, fn, r.value) for r in rets)
    memo[id(call)] = ok
    return ok


def _own_nodes(fn):
    from ..semantic import iter_scope_nodes
    return iter_scope_nodes(fn)


def _is_ddp_value(view, fn, e) -> bool:
    if isinstance(e, ast.Name):
        e = view.sem.single_value(e.id, fn)
    return isinstance(e, ast.Call) and (view.sem.call_qualname(e) or "") == DDP_CLASS


def _param_wrapper(ctx, name: str, at: ast.AST, depth: int, may: bool = False):
    """The caller's ``X = DDP(...)`` when ``name`` is a parameter of the function holding ``at``,
    never rebound there, and every call of that function in the file passes the DDP wrapper for it
    (a module-level function called by name, or a method called as ``self.method(...)``). A
    function also referenced other than by a call (a callback, a spawn target) is not followed."""
    sem = ctx.sem
    fn = sem.enclosing_function(at)
    if fn is None or name not in param_names(fn) or sem.assignments(fn).get(name):
        return None
    memo = ctx.memo("models.param_wrapper", dict)
    key = (id(fn), name, may, depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    if key in memo:
        return memo[key]
    memo[key] = None  # recursion guard
    owner = parent(fn)
    a = fn.args
    pos = [x.arg for x in (*a.posonlyargs, *a.args)]
    if isinstance(owner, ast.ClassDef):
        if not pos or pos[0] != "self" or any(isinstance(d, ast.Name) and d.id in ("staticmethod", "classmethod")
                                             for d in fn.decorator_list):
            return None
        pos = pos[1:]
    elif not isinstance(owner, ast.Module):
        return None
    idx = pos.index(name) if name in pos else None
    # ``__init__``: the constructions of its class (``Learner(ddp_model, opt)``)
    sites = _constructions(ctx, owner) if fn.name == "__init__" and isinstance(owner, ast.ClassDef) \
        else call_sites_here(ctx, fn, strict=True)
    if not sites:
        return None
    found = None
    for c in sites:
        arg = None
        if idx is not None and idx < len(c.args):
            arg = c.args[idx]
        else:
            arg = next((k.value for k in c.keywords if k.arg == name), None)
        if arg is None or any(isinstance(x, ast.Starred) for x in c.args[: (idx or 0) + 1]) \
                or any(k.arg is None for k in c.keywords):
            return None
        st = is_ddp_wrapper(ctx, arg, c, depth + 1, may) if isinstance(arg, (ast.Name, ast.Attribute)) else None
        if st is None:
            return None
        found = found or st
    memo[key] = found
    return found


def _excluded_by_flag(ctx, at: ast.AST, depth: int) -> bool:
    """``at`` runs under a test of a bare parameter of its function (``elif not ddp:``) that, read
    at every call as the caller's argument (``train(model, ddp)``), contradicts the test the
    caller's wrap sits under (``if ddp: model = DDP(model)``): the wrapper never reaches ``at``."""
    from .wrapped import guards  # lazy: wrapped imports the flow package

    fn = ctx.sem.enclosing_function(at)
    flags = [(t.operand if isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not) else t,
              br != (isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not)))
             for t, br in guards(at)]
    flags = [(t.id, br) for t, br in flags if isinstance(t, ast.Name) and t.id in param_names(fn)
             and not ctx.sem.assignments(fn).get(t.id)]
    if not flags:
        return False
    sites = call_sites_here(ctx, fn, strict=True)
    if not sites:
        return False
    for c in sites:
        bound = bind_args(c, fn)
        translated = [(bound[p], br) for p, br in flags if isinstance(bound.get(p), ast.Name)]
        if not translated:
            return False
        excluded = False
        for arg in (*c.args, *(k.value for k in c.keywords)):
            if not isinstance(arg, (ast.Name, ast.Attribute)):
                continue
            st = is_ddp_wrapper(ctx, arg, c, depth + 1)
            if st is not None and ctx.sem.enclosing_function(st) is ctx.sem.enclosing_function(c) \
                    and _contradicts_flags(guards(st), translated):
                excluded = True
        if not excluded:
            return False
    return True


def _contradicts_flags(wrap_guards: list, flags: list) -> bool:
    """A test of ``wrap_guards`` is one of the flag names on the other branch."""
    for t, br in wrap_guards:
        neg = isinstance(t, ast.UnaryOp) and isinstance(t.op, ast.Not)
        name = t.operand if neg else t
        if isinstance(name, ast.Name):
            for arg, fbr in flags:
                if arg.id == name.id and (br != neg) != fbr:
                    return True
    return False


def _other_self_assigns(ctx, cls: ast.ClassDef, attr: str, keep: ast.stmt) -> bool:
    # assignments() only indexes plain names; look at the class's statements directly (bounded)
    for st in _class_assign_stmts(cls):
        if st is keep:
            continue
        targets = st.targets if isinstance(st, ast.Assign) else [st.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and t.attr == attr:
                return True
    return False


def _class_assign_stmts(cls: ast.ClassDef):
    stack = list(cls.body)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            yield n
        for f in ("body", "orelse", "finalbody", "handlers"):
            v = getattr(n, f, None)
            if isinstance(v, list):
                stack.extend(x for x in v if isinstance(x, ast.AST))
