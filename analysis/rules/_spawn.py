"""``torch.multiprocessing.spawn`` helpers for the DDP2xx/DDP4xx rules: the spawn calls, their target
functions, what runs inside the spawned ranks, and ``if __name__ == "__main__":`` guards."""
from __future__ import annotations

import ast

from types import SimpleNamespace

from ..flow.calls import reference_call
from ..semantic import FUNC_TYPES, get_arg, parent
from ..torch_api import RANK_STARTERS, SPAWNS, rank_entry


def spawn_calls(ctx) -> list[ast.Call]:
    return ctx.sem.calls_to(*SPAWNS)


def rank_starts(ctx) -> list[ast.Call]:
    """The calls of this file that start ranks which each run a function (``torch_api.rank_entry``:
    ``mp.spawn``, ``start_processes``, ``elastic_launch(config, entrypoint)``)."""
    return ctx.sem.calls_to(*RANK_STARTERS)


def target_def(ctx, call: ast.Call) -> ast.AST | None:
    """The one function of this file that ``mp.spawn(fn, ...)`` starts, or None."""
    fn = get_arg(call, 0, "fn")
    if not isinstance(fn, ast.Name):
        return None
    defs = ctx.sem.functions.get(fn.id)
    if not defs or len(defs) != 1:
        return None
    d = defs[0]
    if isinstance(parent(d), ast.ClassDef):
        return None
    return d


def project_target(ctx, call: ast.Call):
    """(view, function) for ``mp.spawn(fn, ...)`` whose ``fn`` is a function imported from another
    file of the project (``from engine.worker import run`` / ``worker.run``); None otherwise."""
    fn = get_arg(call, 0, "fn")
    if not isinstance(fn, (ast.Name, ast.Attribute)) or target_def(ctx, call) is not None:
        return None
    if isinstance(fn, ast.Attribute) and not isinstance(fn.value, ast.Name):
        return None
    from ..flow import for_context  # lazy: only spawns of imported targets load the project

    ana = for_context(ctx)

    def make_probe():
        return reference_call(fn, call)  # resolve the reference as a call of it
    # kept for the whole check: the analysis memoises resolutions by the call's identity
    probe = ctx.memo(("spawn.target_probe", id(call)), make_probe)
    got = ana.resolve_call(ana.main, probe)
    if got is None or got[0] is ana.main:
        return None
    view, d = got
    if d.name == "__init__" or isinstance(parent(d), ast.ClassDef):
        return None  # a class: mp.spawn would construct it
    return view, d


_UNKNOWN: set[int] = set()  # identity-compared sentinel: the file spawns something we cannot follow


def rank_functions(ctx) -> set[int] | None:
    return ctx.memo("spawn.rank_functions", lambda: _rank_functions(ctx))


def _rank_functions(ctx) -> set[int] | None:
    """ids of the functions that run inside spawned ranks (spawn targets and the functions of this
    file they call, transitively); None when the file does not spawn; ``_UNKNOWN`` when it spawns a
    target that this file does not define as a plain function."""
    calls = rank_starts(ctx)
    if not calls:
        return None
    seen: set[int] = set()
    work = []
    for c in calls:
        fn = rank_entry(ctx.sem, c)
        if isinstance(fn, ast.Name):
            work.extend(ctx.sem.functions.get(fn.id, ()))
        elif fn is not None:
            return _UNKNOWN  # a partial or a method: we cannot tell what runs in the ranks
    # callees by enclosing function (one pass over the calls); a method call (``Prep().fetch()``,
    # ``self.step()``) by the method of this file the project hub resolves it to
    callees: dict[int, list] = {}
    an = None
    for c in ctx.sem.calls:
        fn = ctx.sem.enclosing_function(c)
        if fn is None:
            continue
        if isinstance(c.func, ast.Name):
            callees.setdefault(id(fn), []).append(c.func.id)
        elif isinstance(c.func, ast.Attribute) and ctx.qn(c) is None:
            if an is None:
                from ..flow import for_context  # lazy: only a file that starts ranks and calls methods

                an = for_context(ctx)
            got = an.resolve_call(an.main, c) if an.main.sem is ctx.sem else None
            if got is not None and got[0] is an.main:
                callees.setdefault(id(fn), []).append(got[1])
    while work:
        d = work.pop()
        if id(d) in seen:
            continue
        seen.add(id(d))
        for name in callees.get(id(d), ()):
            work.extend(ctx.sem.functions.get(name, ()) if isinstance(name, str) else (name,))
    # nested functions run where their parent runs
    return seen


def runs_in_ranks(ctx, node: ast.AST) -> bool | None:
    """For a file that spawns its ranks: does ``node`` run inside them (True), only in the launching
    process (False)? None when the file does not spawn (every process runs every path)."""
    reach = rank_functions(ctx)
    if reach is None:
        return None
    if reach is _UNKNOWN:
        in_function = any(isinstance(a, FUNC_TYPES) for a in ctx.sem.ancestors(node))
        return None if in_function else False
    for a in ctx.sem.ancestors(node):
        if isinstance(a, FUNC_TYPES) and id(a) in reach:
            return True
    return False


def is_main_guard(test: ast.AST) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    a, b = test.left, test.comparators[0]
    for x, y in ((a, b), (b, a)):
        if isinstance(x, ast.Name) and x.id == "__name__" and isinstance(y, ast.Constant) and y.value == "__main__":
            return True
    return False


def under_main_guard(node: ast.AST) -> bool:
    child = node
    p = parent(node)
    while p is not None:
        if isinstance(p, ast.If) and child in p.body and is_main_guard(p.test):
            return True
        child = p
        p = parent(p)
    return False


def in_launcher(ctx, node: ast.AST) -> bool:
    """``node`` is in a function of this file that spawns the ranks (``mp.spawn``, ``elastic_launch``), or that starts
    them as processes of their own, each given its index as its rank
    (``node_launch.rank_launch_loops``: ``subprocess.Popen([..., f"--rank={i}"])`` in a loop): it
    runs in the launching process only."""
    fn = ctx.sem.enclosing_function(node)
    if fn is None:
        return False
    if any(ctx.sem.enclosing_function(s) is fn for s in rank_starts(ctx)):
        return True
    if not ctx.sem.calls_to("subprocess.Popen", "subprocess.run", "subprocess.call", "subprocess.check_call"):
        return False
    from ..flow import for_context
    from ..flow.node_launch import rank_launch_loops

    an = for_context(ctx)
    view = an.main
    launchers = {id(f) for f, _loop, _start in rank_launch_loops(view) if f is not None} if view.sem is ctx.sem else ()
    if not launchers or id(fn) in launchers:
        return bool(launchers)
    # a helper of this file that only the launching functions call (and no other module)
    sites = an.call_sites(view, fn)
    if not sites or not all(id(ctx.sem.enclosing_function(c)) in launchers for c in sites):
        return False
    from ._common import project_callers

    return not isinstance(parent(fn), ast.Module) or not project_callers(ctx, {fn.name})


ACCELERATOR = "accelerate.Accelerator"
ACCELERATORS = frozenset({ACCELERATOR, "accelerate.accelerator.Accelerator"})


def distributed_program(an, ctx) -> bool:
    """The file of ``ctx`` is a program that runs as several processes: it launches itself
    (``models.is_distributed_script``: ``init_process_group``, a DDP/FSDP wrap, a spawn), builds an
    Accelerate ``Accelerator`` (``accelerate launch`` runs it once per process), starts the process
    group through the project's functions (``models.distributed_program``: ``main()`` ->
    ``dist_utils.setup()`` -> ``init_process_group``), or one of its module-level functions builds an
    ``Accelerator`` in a project helper (``accelerator = prepare_accelerator(args)``), without
    spawning (a file that spawns runs its own code once, in the launching process)."""
    from ..flow.call_sites import sites
    from ..flow.models import distributed_program as launched, is_distributed_script

    if is_distributed_script(ctx) or ctx.sem.calls_to(ACCELERATOR):
        return True
    if rank_starts(ctx):
        return False
    if launched(ctx, an):
        return True
    view = an.main if ctx.filename == an.main.path or ctx.sem is an.main.sem else an.view_of(ctx.filename)
    if view is None:
        return False
    return any(isinstance(parent(fn), ast.Module) and sites(an, view, fn, ACCELERATORS)
               for fns in view.sem.functions.values() for fn in fns)


NOTEBOOK_LAUNCHERS = ("accelerate.notebook_launcher", "accelerate.debug_launcher",
                      "accelerate.launchers.notebook_launcher", "accelerate.launchers.debug_launcher")


def outside_launched(ctx, node: ast.AST) -> bool:
    """The file starts its processes with Accelerate's ``notebook_launcher(fn, ...)`` and ``node``
    is module-level code: it runs once, in the notebook's own process, not in the launched ones."""
    if not ctx.sem.calls_to(*NOTEBOOK_LAUNCHERS):
        return False
    return ctx.sem.enclosing_function(node) is None


RAY_ACTOR_DECORATORS = frozenset({"ray.remote"})


def ray_actor_class(ctx, cls: ast.ClassDef) -> bool:
    """``@ray.remote`` (or ``@ray.remote(num_gpus=1)``) on the class: every instance is an actor
    that Ray starts in a worker process of its own (the class cannot be built directly), and Ray,
    not the code that names the class, ends that process."""
    for dec in cls.decorator_list:
        f = dec.func if isinstance(dec, ast.Call) else dec
        if ctx.qn(f) in RAY_ACTOR_DECORATORS:
            return True
    return False


def ray_actor_only(ctx, cls: ast.ClassDef, busy: frozenset = frozenset()) -> bool:
    """``ray_actor_class``, or the functional form: the project hands the class to ``ray.remote(Cls)``
    and uses its name nowhere else but in imports, type tests and annotations (never ``Cls(...)``,
    never as a value that something else may build): every instance is an actor, a process of
    its own. Through the class hierarchy: a class whose name is otherwise only a base of project
    subclasses (``class Worker(WorkerImpl)``, in any module) that are each Ray-actor-only in turn
    (``@ray.remote``, or only ever ``ray.remote(Sub)``) is built only inside actors too. False
    whenever in doubt (a project too big to search, a file that cannot be read, a class never
    handed to Ray)."""
    if ray_actor_class(ctx, cls):
        return True
    if len(busy) > 6 or id(cls) in busy:
        return False
    from ._common import project_files_naming

    files = project_files_naming(ctx, {cls.name})
    if not files:
        return False
    made, subs = False, []
    for fctx, view in files:
        sem = view.sem
        # a function that defines a class of that name of its own (a test's stub): there the name is
        # that class (an attribute read still counts: ``mod.Cls`` may be the project's)
        local = {id(f) for f in (sem.enclosing_function(d) for d in ast.walk(sem.tree)
                                 if d.__class__ is ast.ClassDef and d.name == cls.name and d is not cls)
                 if f is not None}
        for n in ast.walk(sem.tree):
            if local and (n.__class__ is ast.Name or n.__class__ is ast.Attribute and n.ctx.__class__ is ast.Store) \
                    and id(sem.enclosing_function(n)) in local:
                continue  # the stub, or a module attribute the function sets to it
            if local and n.__class__ is ast.ClassDef and n.name == cls.name and id(sem.enclosing_function(n)) in local:
                continue
            if n.__class__ is ast.Name and n.id == cls.name or n.__class__ is ast.Attribute and n.attr == cls.name:
                p = parent(n)
                if n.__class__ is ast.Name and (_actor_binding(fctx, p) if n.ctx.__class__ is ast.Store
                                                else _actor_name(view, fctx, n)):
                    continue  # ``Cls = ray.remote(...)(Cls)``: the name holds the actor class from there on
                if _ray_made(fctx, n, p):
                    made = True
                elif p.__class__ is ast.ClassDef and n in p.bases:
                    subs.append((fctx, p))  # a subclass: its instances are the base's
                elif _returned(n, p) and _returned_to_ray(ctx, cls, fctx, _returned(n, p)):
                    made = True  # ``return Cls`` of a factory whose callers hand the class to Ray
                elif not _type_use(n, p) and not _unbound_method(ctx, cls, n, p):
                    return False
            elif n.__class__ is ast.ClassDef and n.name == cls.name and n is not cls:
                return False  # another class of that name: its uses cannot be told apart
    inner = busy | {id(cls)}
    return (made or bool(subs)) and all(ray_actor_only(fctx, sub, inner) for fctx, sub in subs)


def _actor_binding(ctx, st: ast.AST) -> bool:
    """``st`` binds a name to an actor class: ``Cls = ray.remote(...)(Cls)``."""
    v = getattr(st, "value", None) if st.__class__ is ast.Assign else None
    return v.__class__ is ast.Call and len(v.args) == 1 and _ray_made(ctx, v.args[0], v)


def _actor_name(view, ctx, n: ast.Name) -> bool:
    """Every binding of ``n`` that reaches it makes an actor class (``_actor_binding``)."""
    from ..flow.bindings import reaching

    kind, binds = reaching(view, n.id, n)
    return kind in ("events", "global") and bool(binds) and all(_actor_binding(ctx, b) for b in binds)


def _ray_made(ctx, n: ast.AST, p: ast.AST) -> bool:
    """``n`` is the class handed to Ray: ``ray.remote(n)`` or ``ray.remote(**options)(n)``."""
    if p.__class__ is not ast.Call or n not in p.args:
        return False
    f = p.func.func if p.func.__class__ is ast.Call else p.func
    return ctx.qn(f) in RAY_ACTOR_DECORATORS


def _returned(n: ast.AST, p: ast.AST):
    """The ``return`` statement that returns ``n`` (``return Cls``, or an arm of ``return A if c
    else B``), else None."""
    while p.__class__ is ast.IfExp and n is not p.test:
        n, p = p, parent(p)
    return p if p.__class__ is ast.Return else None


def _returned_to_ray(ctx, cls: ast.ClassDef, fctx, ret: ast.Return) -> bool:
    """``return Cls`` in a module-level function of the project (a factory that picks the class:
    ``def worker_cls(cfg): ... return LMDeployWorker``) every call of which binds the class to a
    name that its function only hands to Ray (``_ray_made``), to a project function whose
    parameter it only hands to Ray there (``def remote_cls(c): return ray.remote(...)(c)``), or
    reads a method of the class from (``_unbound_method``): the factory's class is built only as
    an actor. False when a call is used otherwise, or none is found."""
    from ..flow import for_context
    from ._common import project_files_naming

    fn = fctx.sem.enclosing_function(ret)
    if fn.__class__ is not ast.FunctionDef or not isinstance(parent(fn), ast.Module) or fn.decorator_list:
        return False
    files = project_files_naming(ctx, {fn.name})
    if not files:
        return False
    an = for_context(ctx)
    found = False
    for cctx, view in files:
        for c in view.sem.calls:
            f = c.func
            if (f.id if f.__class__ is ast.Name else getattr(f, "attr", None)) != fn.name:
                continue
            got = an.resolve_call(view, c)
            if got is None:
                return False  # (a call by that name that may be it)
            if got[1] is not fn:
                continue  # another function of that name
            st = parent(c)
            if st.__class__ is not ast.Assign or len(st.targets) != 1 or st.targets[0].__class__ is not ast.Name:
                return False
            g = view.sem.enclosing_function(c)
            name = st.targets[0].id
            for u in ast.walk(g if g is not None else view.sem.tree):
                if u.__class__ is not ast.Name or u.id != name or u.ctx.__class__ is not ast.Load \
                        or view.sem.enclosing_function(u) is not g:
                    continue
                q = parent(u)
                if _ray_made(cctx, u, q) or _unbound_method(ctx, cls, u, q) or _hands_to_ray(an, cctx, view, u, q):
                    continue
                return False
            found = True
    return found


def _hands_to_ray(an, ctx, view, u: ast.AST, call: ast.AST) -> bool:
    """``u`` is an argument of a call of a project function whose parameter it binds is only
    handed to Ray in that function (``_ray_made``)."""
    from ..flow.calls import call_args

    if call.__class__ is not ast.Call or u not in call.args and not any(k.value is u for k in call.keywords):
        return False
    got = an.resolve_call(view, call)
    if got is None or got[1].__class__ is not ast.FunctionDef:
        return False
    tv, h = got
    pname = next((p for p, a in call_args(call, h) if a is u), None)
    if pname is None:
        return False
    tctx = SimpleNamespace(qn=tv.sem.qualname)
    uses = [x for x in ast.walk(h) if x.__class__ is ast.Name and x.id == pname and x.ctx.__class__ is ast.Load]
    return bool(uses) and all(_ray_made(tctx, x, parent(x)) for x in uses)


def _unbound_method(ctx, cls: ast.ClassDef, n: ast.AST, p: ast.AST) -> bool:
    """``Cls.method``: a method that ``cls`` defines or inherits from a project base
    (``flow.records.method_of``) read from the class (``Cls.method(obj)``, an unbound call), which
    builds no instance through the class it gets: not a class method that calls or hands on its
    ``cls`` (``cls(...)``; reading ``cls.attr`` builds nothing). A construction spelled with the
    class's name inside the method is a use of the name of its own, read like any other."""
    if p.__class__ is not ast.Attribute or p.value is not n or p.attr.startswith("__"):
        return False
    from ..flow import for_context
    from ..flow.records import method_of

    an = for_context(ctx)
    got = method_of(an, an.main, cls, p.attr)
    if got is None or got[1].__class__ is not ast.FunctionDef:
        return False
    fn = got[1]
    if not any(d.__class__ is ast.Name and d.id == "classmethod" for d in fn.decorator_list):
        return True
    if not fn.args.args:
        return False
    own = fn.args.args[0].arg
    for x in ast.walk(fn):
        if x.__class__ is ast.Name and x.id == own:
            q = parent(x)
            if q.__class__ is not ast.Attribute or parent(q).__class__ is ast.Call and parent(q).func is q:
                return False  # ``cls(...)``, ``cls.build(...)``, ``f(cls)``: it may build one
    return True


def _type_use(n: ast.AST, p: ast.AST) -> bool:
    """A use of a class name that runs no constructor: an import, a test of a value's type, an
    annotation, an ``except`` clause, ``object.__new__(Cls)`` / ``Cls.__new__(Cls)`` (an instance
    whose ``__init__`` never runs)."""
    if p.__class__ in (ast.alias, ast.Import, ast.ImportFrom):
        return True
    if p.__class__ is ast.Call and p.args[:1] == [n] and p.func.__class__ is ast.Attribute \
            and p.func.attr == "__new__":
        return True  # ``object.__new__(Cls)``, ``Cls.__new__(Cls)``
    if p.__class__ is ast.Attribute and p.value is n and p.attr == "__new__":
        q = parent(p)
        return q.__class__ is ast.Call and q.func is p
    if p.__class__ is ast.Subscript and p.slice is n or p.__class__ is ast.Tuple and parent(p).__class__ is ast.Subscript \
            and parent(p).slice is p:
        return True  # a parameter of a generic: ``ActorClass[Cls]``, ``dict[str, Cls]`` builds no instance
    while p is not None and p.__class__ in (ast.Tuple, ast.Subscript, ast.BinOp, ast.Attribute):
        n, p = p, parent(p)
    if p.__class__ is ast.Call and p.func.__class__ is ast.Name and p.func.id in ("isinstance", "issubclass") \
            and n in p.args[1:]:
        return True
    if p.__class__ in (ast.arg, ast.AnnAssign, ast.FunctionDef, ast.AsyncFunctionDef) and (
            getattr(p, "annotation", None) is n or getattr(p, "returns", None) is n):
        return True
    return p.__class__ is ast.ExceptHandler and p.type is n


def in_ray_actor(ctx, node: ast.AST) -> bool:
    """``node`` is code of a Ray actor class (``ray_actor_class``): it runs in the actor's worker
    process, not in the process of the script that defines or starts the actor."""
    return any(isinstance(a, ast.ClassDef) and ray_actor_class(ctx, a) for a in ctx.sem.ancestors(node))
