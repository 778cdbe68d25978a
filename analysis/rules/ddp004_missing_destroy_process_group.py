from __future__ import annotations

import ast
import re

from ..model import Applicability, Severity
from ..registry import Rule
from ..flow.assignments import has_ancestor
from ..flow.wrappers import callee_name
from ..flow.mentions import code_words, mentions
from ..flow.params import dead_branch
from ._common import D, gloo_only
from ..torch_api import backend_parts
from ._spawn import in_ray_actor
from ..semantic import get_arg, parent
from ..torch_api import constant_of

# a helper that only brings the group up: its caller owns the group's lifetime
_SETUP_NAME = re.compile(r"(^|_)(setup|init|initialize|initialise|bootstrap|prepare)(_|$)", re.I)
_TEARDOWN_IDENT = re.compile(r"\b\w*(?:destroy|cleanup|clean_up|teardown|tear_down|shutdown|finalize)\w*\b", re.I)


class MissingDestroyProcessGroup(Rule):
    """
    ## What it does
    Checks for a script (a file with an `if __name__ == "__main__":` block, an `mp.spawn` call, or
    a module-level `init_process_group`) that creates the default process group and never calls
    `dist.destroy_process_group()` (nor a `cleanup()`-style helper from elsewhere). Library helpers
    that only initialise (a `utils.init_distributed_mode(args)`) are left alone: tearing down is their
    caller's job. A group whose backend is the literal `"gloo"` (or `dist.Backend.GLOO`), or any
    literal with no NCCL part (`"xccl"`, `"mpi"`, `"fake"`, also through a constant, an argparse
    default or a config dict; or a parameter of the function that inits, when every call passes
    such a literal or leaves a default that is one: `def connect(rank, backend="gloo")` called as
    `connect(rank)`, the calls in the project's other files counted, such as its tests calling
    `init_local_pg(backend="gloo")`), is not flagged: the exit warning (printed from `ProcessGroupNCCL.cpp`)
    and the exit hang below are ProcessGroupNCCL's. A teardown named only in a comment or a string
    does not count: the code must call it. An init in a Ray actor class (`@ray.remote class
    Worker:`) runs in the actor's worker process, not in the script's: Ray ends that process
    (`ray.kill`, the job's end) without running its exit path, so neither the exit warning nor the
    exit hang happens there, and the script has no exit of the actor's to put a teardown in.

    An init in a branch that never runs is not reported: the test is made of literals and names
    bound once to one (`is_dist, world, rank = (False, 1, 0)` then `if is_dist:`; an option read
    from the command line is not a literal), or of a flag parameter that every call leaves at a
    constant default or sets to a constant of the same truth (`def load(path,
    init_distributed=False)` that no call passes `True`), where every call is in the project: an
    undecorated module-level function of a script (its program's own calls) or one private to its
    module (`_load`), its calls in the project's other files counted. A decorated function (a CLI
    command) gets its flags from elsewhere, and is reported. A test method of a class built on torch's
    `MultiProcessTestCase` (or `DistributedTestBase`, `FSDPTest`, `DTensorTestBase`, also through
    project base classes in other modules) that creates the group, directly or through a helper,
    leaks nothing: the harness destroys the default group after each test (unless the class turns
    `destroy_pg_upon_exit` off). Nor does a call made where a test's mock patch replaces the helper
    that inits, in the namespace of the module that calls it (`with mock.patch("pkg.main.init_group",
    return_value=...): predict(...)`, `@mock.patch(...)`, `mock.patch.object(main, "init_group")`):
    the mock runs, not the helper. A patch of the helper where it is defined (`pkg.dist.init_group`)
    leaves the name `pkg.main` imported untouched, and is still reported.

    In a script, an init inside a module-level function that nothing runs is not reported: the
    function has no decorator, the file never names it outside its own `def` (no call, no use as
    a value, no string such as an `__all__` entry) but in calls in a branch that never runs, and
    no other file of the project calls it (a leftover helper; a library module, without `__main__`, is never asked this: its functions
    are its users' to call).

    A script that creates the group through a project helper in another module
    (`init_distributed(cfg)` whose body calls `init_process_group`, a static method
    `Dist.setup()`, the constructor of a project class that calls one: `pipe = Pipeline(cfg)`, also
    in a script that never names torch itself; up to three calls deep: `flow.lifecycle`) is checked
    the same way: the
    finding is at the helper's call, unless the program destroys the group on some path (here, or
    in a project function it calls or registers as an exit handler: `atexit.register(close_group)`,
    `atexit.register(self.close)` or `atexit.register(dist.destroy_process_group)` in the helper,
    the handler in any module of the project; a call of a function or method that carries a
    project decorator runs the decorator's wrapper too, so a `finally: dist.destroy_process_group()`
    around the wrapped call, or an init in the wrapper, counts: `flow.call_sites.wrappers`) or the helper's backend is a literal without NCCL (or its
    backend parameter, as this call passes it or leaves its default), or the init sits in a
    branch of the helper that this call does not take (`apply_patch("ring")` to a helper whose
    `elif mode == "sharded":` branch creates the group: `flow.params.dead_at_call`), or the helper
    initialises only when no group exists and the function built a library's group first
    (`accelerator = Accelerator()` before `setup_sequence_parallel()`: the group is Accelerate's).
    Nor is a script that does nothing distributed itself (no call of `torch.distributed`, no DDP
    wrap, no spawn) reusing a class or function of another script whose init sits behind an `if`
    (`if settings["multi_gpu"]:`): a single-process entry point (inference) on the training
    script's setup; the init is reported in that script. The same holds for a launcher that runs
    the `main` of another script (a module with its own `__main__` block: `trainer.main(args)` of a
    submitit wrapper): the program's group is that script's, reported there. The
    name of a teardown helper from a library (`cleanup()`, `shutdown()`) is only consulted after
    that value-flow answer, for calls that cannot be followed.

    ## Why is this bad?
    Since PyTorch 2.4 every rank prints at exit:

    ```
    WARNING: destroy_process_group() was not called before program exit, which can leak resources.
    For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown
    ```

    and with several process groups (or pending NCCL work) the exit itself can hang, because the
    communicators are torn down in an arbitrary order by the garbage collector.

    ## Example
    ```python
    def main():
        dist.init_process_group("nccl")
        train()

    if __name__ == "__main__":
        main()
    ```

    ## Use instead
    ```python
    def main():
        dist.init_process_group("nccl")
        train()
        dist.destroy_process_group()

    if __name__ == "__main__":
        main()
    ```

    ## Fix safety
    The fix appends `dist.destroy_process_group()` at the end of the function that owns the process
    group (the function that calls `init_process_group`, or the caller of a `setup()` helper that
    does), or at the end of the `__main__` block. It is **safe**: it only runs once the work is done.
    No fix is offered when there is no obvious end (several callers, or a function that ends with
    `return <expression>` or `raise`).
    """

    code = "DDP004"
    name = "missing-destroy-process-group"
    severity = Severity.WARNING
    fix_availability = "sometimes"
    # the file initialises itself, or is a script (``__main__``) whose helpers may: then the file
    # or a project module it imports spells "distributed" (every init's qualified name does)
    requires_text = ("init_process_group", "__main__")
    # a script that never spells torch itself (``pipeline = Pipeline(cfg)`` of a project class whose
    # constructor creates the group) is reported at that call: its ``__main__`` opens the gate, the
    # reach gate still asks for "distributed" in a module it imports
    base_text = ("torch", "__main__")
    requires_reach = True

    def finish(self, ctx) -> None:
        if mentions(ctx.sem, "destroy_process_group", text=ctx.src.text):  # the code names it (a comment does not count)
            return
        sem = ctx.sem
        # PyTorch's exit warning and the exit hang belong to ProcessGroupNCCL: a group that is Gloo
        # alone (a literal "gloo" backend) is left alone
        direct = ctx.calls_to(D + "init_process_group")
        inits = [i for i in direct if not gloo_only(ctx, i) and not _other_backend(ctx, i)
                 and not _backend_from_callers(ctx, i) and not in_ray_actor(ctx, i)
                 and not _in_harness(ctx, i) and not _dead(ctx, i)]
        if not direct:
            _through_helpers(ctx)
            return
        if not inits:
            return
        main_block = _main_block(sem.tree)
        if main_block is not None:
            inits = [i for i in inits if not _never_runs(ctx, i)]
            if not inits:
                return
        spawns = ctx.calls_to("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes")
        module_level = any(sem.enclosing_function(i) is None for i in inits)
        if main_block is None and not spawns and not module_level:
            return  # a library helper: the caller tears down
        for word in (code_words(sem) if _TEARDOWN_IDENT.search(ctx.src.text) else ()):
            if _TEARDOWN_IDENT.fullmatch(word) and word not in sem.functions:
                return  # a teardown helper from another module (called, or registered with atexit)
        for init in inits:
            fix = _make_fix(ctx, init, main_block)
            ctx.report(
                init,
                "`init_process_group` without `destroy_process_group()`: resources leak at exit "
                "(PyTorch warns), and exit can hang with several groups",
                fix=fix,
            )


def _dead(ctx, init: ast.Call) -> bool:
    """``init`` sits in a branch that never runs (``flow.params.dead_branch``: a literal test, or a
    flag parameter no call in the project sets)."""
    from ..flow import for_context

    return dead_branch(ctx.sem, init, for_context(ctx), scripts=True)


def _in_harness(ctx, init: ast.Call) -> bool:
    """The init sits in a method of a class whose test harness (torch's ``MultiProcessTestCase``
    and its kin, through project base classes too: ``flow.testing.harness_class``) destroys the
    default group after each test."""
    from ..flow import for_context
    from ..flow.testing import harness_class

    an = for_context(ctx)
    return harness_class(an, an.main, init) is not None


def _never_runs(ctx, init: ast.Call) -> bool:
    """In a script (the caller checked its ``__main__`` block), ``init`` sits in a module-level
    function that nothing runs: no decorator registers it, the file never names it outside its own
    ``def`` (no call, no use as a value, no string such as an ``__all__`` entry), and no other file
    of the project calls it (``project_callers``). A library module (no ``__main__`` block) is
    never asked: its functions are its users' to call."""
    from ._common import project_callers  # lazy: reads the project's other files

    sem = ctx.sem
    fn = sem.enclosing_function(init)
    if fn is None or fn.decorator_list or not isinstance(parent(fn), ast.Module):
        return False
    name = fn.name
    for n in ast.walk(sem.tree):
        if (isinstance(n, ast.Name) and n.id == name) or (isinstance(n, ast.Attribute) and n.attr == name) \
                or (isinstance(n, ast.Constant) and n.value == name):
            call = parent(n)
            if isinstance(n, ast.Name) and isinstance(call, ast.Call) and call.func is n and dead_branch(sem, call):
                continue  # called only in a branch that never runs (``if is_dist:`` with ``is_dist = False``)
            return False
    return not project_callers(ctx, (name,))


def _through_helpers(ctx) -> None:
    """A script (``if __name__ == "__main__":``) whose functions create the group through a project
    helper (``init_distributed(cfg)`` in another module that calls ``init_process_group("nccl")``)
    and whose program never destroys it: no ``destroy_process_group`` in this file (checked
    before), none in the project functions it calls (``flow.lifecycle.destroys_anywhere``).
    Reported at the helper's call, with the fix at the end of the function that owns the group."""
    from ..flow import for_context
    from ..flow.lifecycle import destroys_anywhere, events, init_sites_at
    from ..flow.testing import harness_class
    from ._flow import scopes

    sem = ctx.sem
    main_block = _main_block(sem.tree)
    if main_block is None:
        return
    an = for_context(ctx)
    view = an.main
    found = []
    for scope in scopes(ctx):
        for e in events(an, view, scope):
            if e.where is not None and e.kind == "destroy":
                return
            if e.where is not None and e.kind == "init" and e.where[0] is not view \
                    and not dead_branch(sem, e.call, an, view, scripts=True) \
                    and not in_ray_actor(ctx, e.call) and harness_class(an, view, e.call) is None \
                    and not _library_group_first(an, view, scope, e):  # (an actor's process is Ray's to end)
                found.append(e)  # (a function of this file that calls it is reported at that call)
    if found and not _own_distributed_use(ctx):
        # a class or function of another script that inits only on some path (``if cfg.use_ddp:``),
        # reused by a script that does nothing distributed itself (single-process inference): the
        # group is the other script's, reported there
        found = [e for e in found if not _other_scripts_conditional_init(an, e)
                 and _main_block(e.where[0].sem.tree) is None]  # another script's function: reported there
    if not found:
        return
    for scope in scopes(ctx):
        for c in sem.scope_calls(scope) or ():
            if not (ctx.qn(c) or "").startswith("torch."):
                target = _target(an, view, c)
                if target is not None and destroys_anywhere(an, *target, at_exit=True):
                    return  # a teardown in the project, on some path (or at exit)
    for word in (code_words(sem) if _TEARDOWN_IDENT.search(ctx.src.text) else ()):
        if _TEARDOWN_IDENT.fullmatch(word) and word not in sem.functions:
            return  # a teardown helper of a library (called, or registered with atexit)
    done = set()
    for e in found:
        sites = init_sites_at(an, view, e.call, *e.where)
        if not sites or all(_gloo_or_other(v, i, (view, e.call, *e.where)) for v, i in sites) \
                or id(e.call) in done:
            continue
        done.add(id(e.call))
        name = getattr(e.where[1], "name", "?")
        ctx.report(
            e.call,
            f"`{ctx.text(e.call.func)}(...)` creates the default process group (`{name}` calls "
            "`init_process_group`) and the program never calls `destroy_process_group()`: resources "
            "leak at exit (PyTorch warns), and exit can hang with several groups",
            related=[(sites[0][1], "the init")] if sites[0][0].sem is sem else [],
            fix=_make_fix(ctx, e.call, main_block, e.sure != "must"),
        )


def _other_scripts_conditional_init(an, e) -> bool:
    """Every init the helper call ``e`` reaches sits in a module with a ``__main__`` block (a
    script of its own, checked on its own) behind an ``if`` of its function."""
    from ..flow.lifecycle import init_sites_at

    sites = init_sites_at(an, an.main, e.call, *e.where)
    if not sites:
        return False
    for v, init in sites:
        if _main_block(v.sem.tree) is None:
            return False
        fn = v.sem.enclosing_function(init)
        p = parent(init)
        while p is not None and p is not fn and not isinstance(p, ast.If):
            p = parent(p)
        if not isinstance(p, ast.If):
            return False
    return True


def _own_distributed_use(ctx) -> bool:
    """The file's own code uses torch.distributed: a call of it, a DDP wrap, a spawn of ranks."""
    for c in ctx.sem.calls:
        qn = ctx.qn(c) or ""
        if qn.startswith(("torch.distributed.", "torch.nn.parallel.", "torch.multiprocessing.")):
            return True
    return False


def _library_group_first(an, view, scope, e) -> bool:
    """Before the helper's call, on every path of the same function, a library created the group
    (``Accelerator(...)``, ``deepspeed.initialize``, ``init_device_mesh``: ``LIBRARY_INITS``), and
    the helper initialises only where no group exists (``flow.lifecycle.init_when_present``: each
    of its inits sits behind a ``dist.is_initialized()`` test): the helper's init does not run,
    and the group and its teardown are the library's."""
    from ..flow.lifecycle import LIBRARY_INITS, init_when_present, straight

    sem = view.sem
    at = (e.call.lineno, e.call.col_offset)
    if not any((c.lineno, c.col_offset) < at and (sem.call_qualname(c) or "") in LIBRARY_INITS
               and straight(c, scope) for c in sem.scope_calls(scope) or ()):
        return False
    return init_when_present(an, *e.where) is None


def _target(an, view, c):
    from ..flow.lifecycle import project_target

    return project_target(an, view, c, instances=True)  # a teardown through an instance's method


def _gloo_or_other(view, init: ast.Call, at=None) -> bool:
    """The init's backend is a literal with no NCCL part (in the helper's own module), or, when it
    is a parameter of the helper that ``at`` (call view, call, helper view, helper) calls, the
    literal that call passes or the parameter's default it leaves (``flow.params.constant_at_call``:
    ``def start(rank, backend="gloo")`` called as ``start(rank)``)."""
    from ..flow.params import constant_at_call

    expr = get_arg(init, 0, "backend")
    c = constant_of(view.sem, expr)
    if c is None and at is not None and isinstance(expr, ast.Name) and view is at[2] \
            and view.sem.enclosing_function(init) is at[3]:
        c = constant_at_call(at[0], at[1], at[2], at[3], expr.id)
    if c is None or not isinstance(c.value, str):
        return False
    return "nccl" not in backend_parts(c.value)


def _backend_from_callers(ctx, init: ast.Call) -> bool:
    """The backend is a parameter of the function that inits (never rebound there), and every call
    of that function in this file and the project's other files passes, or leaves as the default, a
    backend with no NCCL part (``def setup(rank, backend="gloo")`` called as ``setup(rank)``;
    ``init_local_pg(backend="gloo")`` in every test that uses it): ``flow.params.constant_at_call``
    at each call. A function spawned or used as a value has callers not seen here."""
    from ..flow import for_context
    from ..flow.params import constants_at_calls

    expr = get_arg(init, 0, "backend")
    fn = ctx.sem.enclosing_function(init)
    if not isinstance(expr, ast.Name) or fn is None:
        return False
    an = for_context(ctx)
    vals = constants_at_calls(an.main, an, fn, expr.id, others=True)
    return bool(vals) and all(isinstance(v.value, str) and "nccl" not in
                              backend_parts(v.value) for v in vals)


def _other_backend(ctx, init: ast.Call) -> bool:
    """The backend is a literal (or a value that resolves to one) naming no NCCL part: ``"xccl"``,
    ``"mpi"``, ``"fake"``, ``"cpu:gloo"``; the exit warning and hang are NCCL's."""
    c = constant_of(ctx.sem, get_arg(init, 0, "backend"))
    if c is None or not isinstance(c.value, str):
        return False
    return "nccl" not in backend_parts(c.value)


def _main_block(tree: ast.Module) -> ast.If | None:
    for st in tree.body:
        if isinstance(st, ast.If) and isinstance(st.test, ast.Compare) and len(st.test.ops) == 1:
            sides = [st.test.left, *st.test.comparators]
            if any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
                    isinstance(s, ast.Constant) and s.value == "__main__" for s in sides):
                return st
    return None


def _callers(ctx, name: str) -> list[ast.Call]:
    return [c for c in ctx.sem.calls if callee_name(c) == name]


def _owner(ctx, init: ast.Call, main_block):
    """(block, conditional): the block whose end is the end of the process group's life (a function
    body, the ``__main__`` block's body, or the module body), and whether the init may not have run
    by then (it sits under an ``if``/loop/``try`` on the way). (None, _) when there is no obvious end."""
    sem = ctx.sem
    spawned = set()
    for c in ctx.calls_to("torch.multiprocessing.spawn", "torch.multiprocessing.start_processes"):
        for a in [*c.args[:1], *(k.value for k in c.keywords if k.arg == "fn")]:
            if isinstance(a, ast.Call) and ctx.qn(a) == "functools.partial" and a.args:
                a = a.args[0]  # spawn(functools.partial(worker, ...))
            if isinstance(a, ast.Name):
                spawned.add(a.id)
    conditional = False
    node = init
    for _ in range(4):
        fn = sem.enclosing_function(node)
        if fn is None:
            if main_block is not None and has_ancestor(node, main_block):
                return main_block.body, conditional or _conditional(node, main_block)
            if node is init:
                return sem.tree.body, conditional or _conditional(node, sem.tree)
            return None, conditional
        conditional = conditional or _conditional(node, fn)
        if not _SETUP_NAME.search(fn.name) or fn.name in spawned:
            return fn.body, conditional
        if len(sem.functions.get(fn.name, ())) != 1:
            return None, conditional
        callers = _callers(ctx, fn.name)
        if len(callers) != 1:
            return None, conditional
        node = callers[0]
    return None, conditional


_COND = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.BoolOp, ast.ExceptHandler, ast.match_case)


def _conditional(node, top) -> bool:
    p = parent(node)
    while p is not None and p is not top:
        if isinstance(p, _COND):
            return True
        p = parent(p)
    return False


def _make_fix(ctx, init: ast.Call, main_block, maybe: bool = False):
    body, conditional = _owner(ctx, init, main_block)
    conditional = conditional or maybe
    if not body:
        return None
    destroy, imp = ctx.ref(D + "destroy_process_group")
    code = f"{destroy}()"
    last = body[-1]
    if conditional:
        # the init may not have run (``if args.distributed: init_process_group(...)``)
        is_init, imp2 = ctx.ref(D + "is_initialized")
        imp = imp + [e for e in imp2 if e not in imp]
        indent = ctx.src.indent_of(last.lineno - 1)
        unit = "\t" if "\t" in indent else "    "
        shown = f"if {is_init}(): {code}"
        code = f"if {is_init}():{ctx.src.newline}{indent}{unit}{code}"
    else:
        shown = code
    if isinstance(last, ast.Raise):
        return None
    if isinstance(last, ast.Return):
        if last.value is not None and not isinstance(last.value, (ast.Name, ast.Constant)):
            return None
        edit = ctx.insert_before(last, code)
    else:
        if body is ctx.sem.tree.body and isinstance(last, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return None
        edit = ctx.insert_after(last, code)
    if edit is None:
        return None
    return ctx.fix(Applicability.SAFE, f"Append `{shown}`", [edit, *imp])
