from __future__ import annotations

import ast
import re

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import parent
from ._common import D
from ._flow import scopes
from ._spawn import _type_use, ray_actor_class, ray_actor_only

IS_INIT = D + "is_initialized"


class InitWhenAlreadyInitialized(Rule):
    """
    ## What it does
    Checks for `init_process_group` on a path where the default process group already exists:
    the code tested `dist.is_initialized()`, took the branch for an existing group (`if
    dist.is_initialized(): ...` that falls through, without a `return`), and then reaches an
    `init_process_group` that no `if not dist.is_initialized():` guards. The init may sit in a
    project function, in this file or another module, that initialises unconditionally
    (`setup_distributed()` called after the test); the test may be a project helper that returns
    `dist.is_initialized()` (`is_distributed()`). Paths are read from the program model
    (`flow.lifecycle.group_state_path`): a `destroy_process_group()` on the way, an `else:
    return`, or a test that excludes the init's branch ends the path. Only a test of the group's
    state opens such a branch: `dist.is_available()` (torch was built with distributed support)
    holds with a group and without one, so `if dist.is_available(): init_process_group(...)`
    after `if dist.is_initialized(): return` is left alone. The function itself must
    call `init_process_group`, or test `dist.is_initialized()` before the helper that initialises.

    The same holds for the constructor of a public class of a library module (a file without an
    `if __name__ == "__main__":` block) that creates the default group on every call, directly or
    through its methods and project helpers, with no test on the group on the way
    (`Runner.__init__` -> `self.setup_env()` -> `init_dist(...)`), when the project's own code
    shows two instances in one process: a construction (of the class or a project subclass) in a
    loop or comprehension, two constructions in one function that are not the two arms of one
    `if`, two in test modules (pytest runs a whole session in one process), or a function that
    builds one per call (`build_runner(cfg)`, a table of classes indexed and called) called that
    way. Only calls that resolve to this class count: another class of the same name, or a name
    the project cannot resolve, is no evidence. A class the project never builds (a library's
    public API, which its users may or may not build twice) or builds once in each of several
    scripts shows none and is left alone. Even with such evidence, a private class (`_Engine`), a
    Ray actor class (`@ray.remote`, or a class the project uses only as `ray.remote(Cls)` or
    `ray.remote(**options)(Cls)`, or only as the base of such classes, in any module: each
    instance is a process of its own; `object.__new__(Cls)`, `Cls.method(obj)` and a generic's
    parameter (`ActorHandle[Cls]`) build none; a factory's `return Cls` counts when each call of
    the factory binds a name that is only handed to `ray.remote`, directly or through a project
    helper's parameter it only hands to `ray.remote`, or read for a method; `Cls =
    ray.remote(...)(Cls)` makes the name an actor class from there on, and a function's own class
    of that name, a test's stub, is not the project's), a class that owns the group's
    lifecycle (a method of its own, such as `shutdown()`, destroys the group, directly or through
    project helpers: instances are meant to run one after another) and methods other than
    `__init__` are left alone, and so is a class the project builds (itself or a subclass) at
    exactly one call that runs at most once per process: on a script's top level, or in an
    undecorated function whose only call is there and that no other module imports (`if __name__
    == "__main__": main()` -> `Trainer(cfg)`), where no decorator, string, factory or other use
    of the class names may build another instance. A value that holds the class is followed to
    the call that builds it: a conditional alias (`Kind = A if c else B; Kind(cfg)`), a dict of
    classes indexed and called (`TABLE[name](cfg)`, the table's other uses only listing keys), a
    function that returns the class (or a subclass it makes with `type(...)`), and a function
    that builds it once per call (its calls stand for it). The same holds for a class built only
    in worker processes: each construction (or each call handing the class to a project factory
    that builds it once, `make(worker_class=Learner)` -> `worker_class(...)`) is the only one in a
    function the project names only as the `target=` of a `Process(...)`, outside its loops, and
    so is every construction of its project base classes' families (strings that are statements,
    such as docstrings, or f-string pieces with spaces name nothing).

    ## Why is this bad?
    The default group can be created once per process. The second call raises:

    ```
    RuntimeError: trying to initialize the default process group twice!
    ```

    This is what happens when a launcher, a framework (DeepSpeed, Accelerate) or an earlier part
    of the program already initialised the group: the code noticed (it logs "already
    initialized") but goes on to initialise again.

    ## Example
    ```python
    def initialize(args):
        if dist.is_initialized():
            print("torch.distributed is already initialized")
            args.rank = dist.get_rank()
        else:
            torch.cuda.set_device(args.local_rank)
        dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)
    ```

    ## Use instead
    ```python
    def initialize(args):
        if dist.is_initialized():
            print("torch.distributed is already initialized")
            args.rank = dist.get_rank()
        else:
            torch.cuda.set_device(args.local_rank)
        if not dist.is_initialized():
            dist.init_process_group("nccl", rank=args.rank, world_size=args.world_size)
    ```

    ## Fix safety
    The fix wraps a direct `init_process_group(...)` statement in `if not dist.is_initialized():`.
    It is **unsafe**: where the group exists the program now goes on with that group, whose
    backend, timeout or world may differ from the arguments of the skipped call.
    """

    code = "DDP008"
    name = "init-when-already-initialized"
    severity = Severity.ERROR
    fix_availability = "sometimes"
    # the file calls one of them itself (checked in ``finish``; the other may come through a
    # helper), or defines a constructor; the file or a project module it imports spells
    # "distributed" (every init's and every test's qualified name does)
    requires_text = ("init_process_group", "is_initialized", "__init__")
    requires_reach = True

    def finish(self, ctx) -> None:
        from ..flow import for_context
        from ..flow.lifecycle import INIT, group_state_path, init_when_present, project_target

        sem = ctx.sem
        if not sem.calls_to(INIT, IS_INIT):
            if _library(sem):
                _constructors(self, ctx)
            return
        an = None
        for scope in scopes(ctx):
            calls = sem.scope_calls(scope) or ()
            qns = [ctx.qn(c) or "" for c in calls]
            if INIT not in qns and IS_INIT not in qns:
                continue  # the function tests the group or initialises it itself
            # a helper's init counts after a test on the group spelled here (the paths start there)
            first_test = next((c for c, q in zip(calls, qns) if q == IS_INIT), None)
            if an is None:
                an = for_context(ctx)
            view = an.main
            for c, qn in zip(calls, qns):
                via = None
                if qn != INIT:
                    if qn.startswith("torch.") or first_test is None or c.lineno < first_test.lineno:
                        continue
                    target = project_target(an, view, c)
                    if target is None or target[1] is scope:
                        continue
                    via = init_when_present(an, *target)
                    if via is None:
                        continue
                est = group_state_path(an, view, c, scope, present=True)
                if est is None or est == "entry":
                    continue
                self._report(ctx, c, est, via)
        if _library(sem):
            _constructors(self, ctx)

    def _report_ctor(self, ctx, call, cls, via) -> None:
        if not ctx.memo(("ddp008.meets_twice", id(cls)), lambda: _meets_twice(ctx, cls)):
            return  # no construction of the project shows two instances in one process
        if ctx.memo(("ddp008.built_once", id(cls)),
                    lambda: _built_once(ctx, cls) or ray_actor_only(ctx, cls)):
            return  # the project's only construction runs once per process (or each is an actor): no second instance
        what = "`init_process_group(...)`" if via is None else f"`{ctx.text(call.func)}(...)`, which calls `init_process_group`,"
        ctx.report(
            call,
            f"{what} runs each time `{cls.name}(...)` is built, with no `dist.is_initialized()` test on "
            f"the way: a second `{cls.name}` in one process raises RuntimeError: trying to initialize the "
            "default process group twice; guard it with `if not dist.is_initialized():`",
            related=[(cls, "the class whose constructor creates the group")],
            fix=None if via is not None else _fix(ctx, call),
        )

    def _report(self, ctx, call, est, via) -> None:
        test = ctx.text(est.test)
        if len(test) > 60:
            test = test[:57] + "..."
        what = "`init_process_group(...)`" if via is None else f"`{ctx.text(call.func)}(...)`, which calls `init_process_group`,"
        related = [(est, "the branch taken when the group already exists")]
        if via is not None:
            vview, vcall = via
            if vview.sem is ctx.sem:
                related.append((vcall, "the unguarded init"))
        ctx.report(
            call,
            f"{what} runs where the default process group already exists: the branch of `{test}` "
            f"(line {est.lineno}) for an existing group goes on to it: RuntimeError: trying to "
            "initialize the default process group twice; guard it with `if not dist.is_initialized():`",
            related=related,
            fix=None if via is not None else _fix(ctx, call),
        )


def _fix(ctx, call):
    st = parent(call)
    if not isinstance(st, ast.Expr) or not ctx.stmt_starts_line(st):
        return None
    is_init, imp = ctx.ref(D + "is_initialized")
    indent = ctx.src.indent_of(st.lineno - 1)
    unit = "\t" if "\t" in indent else "    "
    body = ctx.text(st).replace(ctx.src.newline, ctx.src.newline + unit)
    code = f"if not {is_init}():{ctx.src.newline}{indent}{unit}{body}"
    return ctx.fix(Applicability.UNSAFE, f"Guard with `if not {is_init}():`", [ctx.replace(st, code), *imp])


def _library(sem) -> bool:
    """A module of a library: no ``if __name__ == "__main__":`` block."""
    from ..flow.imports import is_main_guard

    return not any(is_main_guard(st) for st in sem.tree.body)


def _constructors(rule, ctx) -> None:
    """A public class of a library module whose constructor creates the default group on every
    call, with no test on the group on the way (``Runner.__init__`` -> ``self.setup_env()`` ->
    ``init_dist(...)``): the second instance in one process raises."""
    from ..flow import for_context
    from ..flow.lifecycle import (INIT, class_destroys, group_state_path, init_sites, init_when_present,
                                  project_target)

    sem = ctx.sem
    an = None
    for cls in sem.tree.body:
        if cls.__class__ is not ast.ClassDef or cls.name.startswith("_"):
            continue
        if ray_actor_class(ctx, cls):
            continue  # each instance is an actor: a process of its own, built once there (also
            # ``ray.remote(Cls)``: ``ray_actor_only``, asked before a report, since it reads the project)
        init = next((st for st in cls.body if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and st.name == "__init__"), None)
        if init is None:
            continue
        if an is None:
            an = for_context(ctx)
        view = an.main
        if not init_sites(an, view, init):
            continue  # the constructor creates no group on any path
        if class_destroys(an, view, cls):
            continue  # the class owns the group (``shutdown()`` destroys it): one instance after another
        work, seen = [init], {id(init)}
        while work:
            fn = work.pop()
            for c in sem.scope_calls(fn) or ():
                qn = ctx.qn(c) or ""
                if qn.startswith("torch.") and qn != INIT:
                    continue
                if group_state_path(an, view, c, fn, present=True, at_entry=True) is None:
                    continue
                if qn == INIT:
                    rule._report_ctor(ctx, c, cls, None)
                    continue
                target = project_target(an, view, c)
                if target is None:
                    continue
                tview, tfn = target
                if tview is view and parent(tfn) is cls:
                    if id(tfn) not in seen:
                        seen.add(id(tfn))
                        work.append(tfn)  # a method of the class: follow it as the constructor runs it
                    continue  # (a method met again: its init is reported once, where it is)
                if _reported_at_its_class(tview, tfn):
                    continue  # another public class's constructor (a base's, through ``super()``):
                    # the defect is reported once, in that class
                via = init_when_present(an, tview, tfn)
                if via is not None:
                    rule._report_ctor(ctx, c, cls, via)


def _reported_at_its_class(view, fn) -> bool:
    """``fn`` is the constructor of a public top-level class of a library module: if it creates the
    group, ``_constructors`` reports it in that class, and a call of it from another constructor
    (``super().__init__()``, ``Base.__init__(self)``, ``Helper()``) is the same defect."""
    cls = parent(fn)
    return (fn.name == "__init__" and isinstance(cls, ast.ClassDef) and not cls.name.startswith("_")
            and cls in view.sem.tree.body and _library(view.sem))


def _built_once(ctx, cls: ast.ClassDef, busy: frozenset = frozenset()) -> bool:
    """The project builds ``cls`` (or a project subclass) at exactly one place, which runs at most
    once per process (``flow.imports.once_per_run``), and names those classes nowhere else but in
    imports, base-class lists, ``isinstance`` tests and annotations: no decorator (a registry), no
    string (a config's target), no use as a value (a factory) may build another instance.
    A value that holds the class is followed (``flow.class_flows``): a conditional alias
    (``Gen = A if c else B; Gen(...)``), a dict or list of classes indexed and called
    (``MAP[key](args)``, every use of ``MAP`` in the project seen), a function that returns the class
    (its calls hold it), a subclass made by ``type(...)``. A construction in a module-level function
    that runs it once per call, where that function is not itself run once per process, stands for
    the function's calls across the project (``make_backend(args)`` -> ``MAP[key](args)``, called once
    from ``main()``). False whenever in doubt, and for a class the project never builds (a library's)."""
    from ._common import project_files_naming

    names, holders, factories, builders = {cls.name}, set(), set(), set()
    while True:
        calls = _constructions(ctx, names, holders, factories, builders)
        if calls is None:
            return False
        if _once_each(ctx, cls, calls, names, busy):
            return True
        grown = False
        for fctx, call in calls:
            fn = _liftable(fctx, call)
            if fn is not None and fn.name not in builders | names | holders | factories:
                builders.add(fn.name)  # its calls build the instance
                grown = True
        if not grown or project_files_naming(ctx, builders) is None:
            return False


def _meets_twice(ctx, cls: ast.ClassDef) -> bool:
    """The project's own code shows two instances of ``cls`` (or of a project subclass, through the
    values ``_constructions`` follows) in one process: a construction in a loop or comprehension,
    two in one function that are not the two arms of one ``if``, two in test modules (pytest runs
    every test of a session in one process), or a function or method that builds one per call
    called that way. A class the project never builds (a library's public
    API) or builds once in each of several scripts or workers shows none: its users may or may not
    build two, which the code does not say."""
    from ..flow.testing import is_test_file

    names, holders, factories, builders, fns = {cls.name}, set(), set(), set(), {}
    while True:
        calls = _constructions(ctx, names, holders, factories, builders, partial=True, builder_fns=fns)
        in_tests, per_fn = 0, {}
        for fctx, call in calls:
            fn = _enclosing_or_loop(call)
            if fn is None:
                return True  # in a loop or a comprehension: one per iteration
            if is_test_file(fctx.filename):
                in_tests += 1
            for other in per_fn.get(id(fn), ()):
                if not _exclusive(other, call):
                    return True
            per_fn.setdefault(id(fn), []).append(call)
        if in_tests >= 2:
            return True
        grown = False
        for _fctx, call in calls:
            fn = _enclosing_or_loop(call)  # a function (any level, a method) builds one per call
            if fn.__class__ in (ast.FunctionDef, ast.AsyncFunctionDef) and fn.name != "__init__" \
                    and id(fn) not in fns and fn.name not in names | holders | factories:
                builders.add(fn.name)  # its calls build the instance
                fns[id(fn)] = fn
                grown = True
        if not grown:
            return False


_LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _enclosing_or_loop(node: ast.AST):
    """The function or module whose run reaches ``node``, or None when a loop or comprehension
    runs it again first."""
    p = parent(node)
    while p is not None:
        if p.__class__ in _LOOPS:
            return None
        if p.__class__ in (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.Module):
            return p
        p = parent(p)
    return None


def _exclusive(a: ast.AST, b: ast.AST) -> bool:
    """``a`` and ``b`` sit in the two arms of one ``if`` statement or conditional expression."""
    arms = {}
    p, child = parent(a), a
    while p is not None:
        if p.__class__ in (ast.If, ast.IfExp):
            arms[id(p)] = "body" if _within(child, p.body) else "orelse" if _within(child, p.orelse) else None
        child, p = p, parent(p)
    p, child = parent(b), b
    while p is not None:
        if id(p) in arms and p.__class__ in (ast.If, ast.IfExp):
            side = "body" if _within(child, p.body) else "orelse" if _within(child, p.orelse) else None
            if side is not None and arms[id(p)] is not None and side != arms[id(p)]:
                return True
        child, p = p, parent(p)
    return False


def _within(child: ast.AST, arm) -> bool:
    return child is arm if not isinstance(arm, list) else any(child is st for st in arm)


def _liftable(fctx, call):
    """The undecorated module-level function that runs ``call`` once per call of its own, when the
    call does not already run once per process (``once_per_run``)."""
    from ..flow.imports import _outside_loops, once_per_run

    fn = _outside_loops(call)
    if fn.__class__ is not ast.FunctionDef or fn.decorator_list or parent(fn).__class__ is not ast.Module:
        return None
    return fn if once_per_run(fctx, call) is None else None


def _constructions(ctx, names, holders, factories, builders, partial: bool = False, builder_fns=None) -> list | None:
    """The calls that build an instance of the classes ``names`` (see ``_built_once``), growing
    ``names`` (subclasses), ``holders`` (module names bound to a value holding a class) and
    ``factories`` (functions returning one) as they are found; None when a use may build one where
    the project cannot be read, or with ``partial`` the constructions that can be read (a use that
    cannot be read is left out: what it builds is not evidence; a call of a builder counts only
    when it resolves to one of ``builder_fns``)."""
    from ._common import project_files_naming

    while True:
        words = names | holders | factories | builders
        files = project_files_naming(ctx, words, partial=partial)
        if files is None:
            return [] if partial else None
        size = len(words)
        calls = []
        for fctx, view in files:
            for n in ast.walk(view.sem.tree):
                t = n.__class__
                if t is ast.ClassDef:
                    if n.name in names and n.decorator_list and not partial:
                        return None
                    continue
                if t is ast.Constant:
                    if isinstance(n.value, str) and any(w in words for w in re.findall(r"\w+", n.value)) \
                            and not _prose(n) and not partial:
                        return None  # a config or registry may name it: built where we cannot see
                    continue
                if t is ast.Name:
                    word = n.id
                elif t is ast.Attribute:
                    word = n.attr
                else:
                    continue
                if word not in words:
                    continue
                p = parent(n)
                if word not in names:
                    if t is ast.Name and not isinstance(n.ctx, ast.Load):
                        continue  # the binding of a holder (its value was followed to it)
                    if p.__class__ is ast.Call and p.func is n:
                        if word in builders:
                            if partial and not _resolves_to(fctx, view, p, builder_fns or {}):
                                continue  # another function of that name
                            calls.append((fctx, p))
                            continue
                        if word in factories:
                            if not _follow(fctx, p, calls, names, holders, factories) and not partial:
                                return None
                            continue
                    if word in holders and _follow(fctx, n, calls, names, holders, factories):
                        continue
                    if partial or _harmless_use(n, p) or _read_only_use(n, p):
                        continue
                    return None
                if p.__class__ is ast.Call and p.func is n:
                    if partial and not _builds(fctx, view, n, names):
                        continue  # another class of that name, or one the project cannot resolve
                    calls.append((fctx, p))
                elif (site := _factory_call(ctx, view, n, p)) is not None:
                    calls.append((fctx, site))  # handed to a factory that builds it once per call
                elif p.__class__ is ast.ClassDef and n in p.bases:
                    names.add(p.name)  # a subclass: its constructions and uses count too
                elif _follow(fctx, n, calls, names, holders, factories):
                    continue
                elif not partial and not _harmless_use(n, p):
                    return None
        seen: set = set()  # ``(A if c else B)(...)`` is one construction, whichever class it builds
        calls = [(f, c) for f, c in calls if not (id(c) in seen or seen.add(id(c)))]
        # a builder's one construction stands for its calls; one with two builds two per call
        inside: dict = {}
        for _f, c in calls:
            fn = _builder_of(c, builders)
            if fn is not None:
                inside[id(fn)] = inside.get(id(fn), 0) + 1
        calls = [(f, c) for f, c in calls if inside.get(id(_builder_of(c, builders)), 0) != 1]
        if len(names | holders | factories | builders) == size:
            return calls


def _resolves_to(fctx, view, call, builder_fns: dict) -> bool:
    """``call`` runs one of the functions ``builder_fns`` ({id: node}), not another of that name."""
    from ..flow import for_context

    target = for_context(fctx).resolve_call(view, call)
    return target is not None and id(target[1]) in builder_fns


def _builds(fctx, view, n, names) -> bool:
    """The name ``n`` resolves to a project class named in ``names`` (not a library's class, nor
    another project's class of the same name)."""
    from ..flow import for_context

    got = for_context(fctx).resolve_class(view, n)
    return got is not None and got[1].name in names


def _builder_of(call, builders):
    """The function counted as a builder that makes ``call`` once per call of its own, or None."""
    from ..flow.imports import _outside_loops

    fn = _outside_loops(call)
    ok = fn.__class__ is ast.FunctionDef and fn.name in builders and parent(fn).__class__ is ast.Module
    return fn if ok else None


def _follow(fctx, e, calls, names, holders, factories, depth: int = 0) -> bool:
    """Follow the class value ``e`` (``flow.class_flows.class_value_use``): a call builds one
    (``calls``), a module-level name or a returning function joins ``holders`` / ``factories`` (read
    by word across the project), a local name's reads are followed in turn. False when the value
    goes elsewhere."""
    from ..flow.class_flows import bound_name, class_value_use, name_loads

    got = class_value_use(e)
    if got is None or depth > 4:
        return False
    kind, at = got
    if kind == "call":
        calls.append((fctx, at))
        return True
    if kind == "return":
        if at.decorator_list or parent(at).__class__ is not ast.Module:
            return False
        factories.add(at.name)
        return True
    loads = name_loads(at)
    if loads is None:
        if parent(at).__class__ is not ast.Module:
            return False
        holders.add(bound_name(at))
        return True
    return all(_follow(fctx, n, calls, names, holders, factories, depth + 1) or _read_only_use(n, parent(n))
               for n in loads)


def _read_only_use(n, p) -> bool:
    """A read of a container of classes that builds nothing: ``MAP.keys()``, ``key in MAP``,
    ``len(MAP)``, an import."""
    if p.__class__ in (ast.alias, ast.Import, ast.ImportFrom):
        return True
    if p.__class__ is ast.Attribute and p.value is n and p.attr == "keys":
        q = parent(p)
        return q.__class__ is ast.Call and q.func is p
    if p.__class__ is ast.Compare and any(c is n for c in p.comparators):
        return all(op.__class__ in (ast.In, ast.NotIn) for op in p.ops)
    return p.__class__ is ast.Call and p.func.__class__ is ast.Name and p.func.id == "len" and p.args == [n]


def _once_each(ctx, cls, calls, names, busy) -> bool:
    """The constructions ``calls`` give one instance per process (see ``_built_once``)."""
    import os

    from ._common import project_files_naming
    from ..flow.imports import once_per_run

    if len(calls) != 1:
        return _one_per_process(ctx, cls, calls, names, busy | {id(cls)})
    fctx, call = calls[0]
    via = once_per_run(fctx, call)
    if via is None:
        return _one_per_process(ctx, cls, calls, names, busy | {id(cls)})
    if via:
        # another module that imports the one holding the function may call it again
        stem = os.path.splitext(os.path.basename(fctx.filename))[0]
        others = project_files_naming(ctx, set(via), also=(stem,))
        if others is None:
            return False
        for octx, oview in others:
            if octx.filename != fctx.filename and _names_any(oview, via) and _imports_module(oview, stem):
                return False
    return True


def _prose(n: ast.Constant) -> bool:
    """A string statement (a docstring, a literate script's text cell: its value is dropped, or
    kept only as ``__doc__``) or a piece of an f-string holding spaces (a sentence: a path a
    registry imports has none): text for people, which no registry or config reads."""
    p = parent(n)
    return p.__class__ is ast.Expr or p.__class__ is ast.JoinedStr and any(c.isspace() for c in n.value)


def _factory_call(ctx, view, n: ast.AST, p: ast.AST) -> ast.Call | None:
    """The call that hands the class ``n`` as an argument to a project function whose parameter
    is used once, as ``param(...)``, outside any loop of the function (``build(engine_class=C)``
    -> ``engine_class(*args)``): that call builds one instance each time it runs; else None."""
    from ..flow import for_context
    from ..flow.imports import _outside_loops

    kw = None
    if p.__class__ is ast.keyword:
        kw, p = p.arg, parent(p)
        if kw is None:
            return None
    if p.__class__ is not ast.Call or p.func is n or (kw is None and n not in p.args):
        return None
    an = for_context(ctx)
    target = an.resolve_call(view, p)
    if target is None and p.func.__class__ is ast.Attribute:
        cls = an.resolve_class(view, p.func.value)  # ``Runner.build(...)``: a static method
        fn = next((st for st in cls[1].body if st.__class__ is ast.FunctionDef and st.name == p.func.attr
                   and any(d.__class__ is ast.Name and d.id == "staticmethod" for d in st.decorator_list)),
                  None) if cls is not None else None
        target = None if fn is None else (cls[0], fn)
    if target is None or not isinstance(target[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    fn = target[1]
    params = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    if kw is not None:
        name = kw if kw in params or kw in [a.arg for a in fn.args.kwonlyargs] else None
    else:
        i = p.args.index(n)
        if any(a.__class__ is ast.Starred for a in p.args[:i + 1]):
            return None
        if params and params[0] in ("self", "cls") and not any(
                (d.id if d.__class__ is ast.Name else getattr(d, "attr", "")) == "staticmethod"
                for d in fn.decorator_list):
            i += 1  # a bound method: the first parameter is the receiver
        name = params[i] if i < len(params) else None
    if name is None:
        return None
    uses = [u for u in ast.walk(fn) if u.__class__ is ast.Name and u.id == name]
    if len(uses) != 1:
        return None
    u = uses[0]
    call = parent(u)
    if call.__class__ is not ast.Call or call.func is not u or _outside_loops(call) is not fn:
        return None
    return p


def _one_per_process(ctx, cls: ast.ClassDef, calls: list, names: set, busy: frozenset) -> bool:
    """Several constructions (or one), each the only one in a function that runs once per
    process: a function the project names only as the ``target=`` of a ``Process(...)`` (each
    process runs its target once), with the construction outside its loops. A project base class
    of ``cls`` (whose ``__init__`` it runs through ``super()``) must be built that way too, through
    all of its subclasses: no process holds an instance of the family before it builds this one,
    nor hands a group to a child it forks."""
    from ..flow import for_context
    from ..flow.imports import _outside_loops
    from ..flow.records import class_chain
    from ._common import project_files_naming

    if not calls:
        return False  # never built by the project: a library's public class
    entries = {}
    for _fctx, call in calls:
        fn = _outside_loops(call)
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name in entries:
            return False
        entries[fn.name] = fn
    files = project_files_naming(ctx, set(entries))
    if files is None:
        return False
    for _fctx, view in files:
        for n in ast.walk(view.sem.tree):
            if n.__class__ is ast.Constant and n.value in entries:
                return False  # ``getattr(runner, "work")()`` may run it in this process
            if n.__class__ is ast.Name and n.id in entries or n.__class__ is ast.Attribute and n.attr in entries:
                k = parent(n)
                c = parent(k)
                if not (k.__class__ is ast.keyword and k.arg == "target" and c.__class__ is ast.Call
                        and (c.func.id if c.func.__class__ is ast.Name else getattr(c.func, "attr", "")) == "Process"):
                    return False
    if len(busy) > 1:
        return True  # a base class asked about for the class first asked: that one reads the chain
    an = for_context(ctx)
    for _v, base in class_chain(an, an.main, cls)[1:]:  # every project base, depth first
        if not _built_once(ctx, base, busy):
            return False
    return True


def _names_any(view, words) -> bool:
    return any((n.__class__ is ast.Name and n.id in words) or (n.__class__ is ast.Attribute and n.attr in words)
               for n in ast.walk(view.sem.tree))


def _imports_module(view, stem: str) -> bool:
    for n in view.sem.imports:
        if n.__class__ is ast.ImportFrom:
            if stem in (n.module or "").split(".") or any(a.name == stem for a in n.names):
                return True
        elif any(stem in a.name.split(".") for a in n.names):
            return True
    return False


def _harmless_use(n: ast.AST, p: ast.AST) -> bool:
    """A use of a class name that builds nothing (``_spawn._type_use``)."""
    return _type_use(n, p)