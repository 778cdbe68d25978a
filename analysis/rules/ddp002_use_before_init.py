from __future__ import annotations

import ast
import os

from ..flow.bindings import contains
from ..model import Severity
from ..registry import Rule
from ..flow.testing import expects_error
from ..flow.wrappers import calls_or_wrappers
from ._common import ALL_COLLECTIVES, D, DDP_CLASS
from ._flow import effect_related, effect_words, text
from ..flow import for_context
from ..flow.imports import _NOT_PROJECT, import_use, imported_views, is_main_guard, use_through_call
from ..flow.summaries import scope_calls
from ..semantic import parent

# init_device_mesh only initialises when nothing did before it, so it does not count
_INITS = (D + "init_process_group",)
_USES = tuple(D + n for n in ("get_rank", "get_world_size", "new_group", "new_subgroups", *ALL_COLLECTIVES)) + (
    DDP_CLASS,
)
# nodes between a use and its block that make it conditional or deferred
_CONDITIONAL = (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.BoolOp, ast.ListComp,
                ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda, ast.match_case, ast.ExceptHandler,
                ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
try:  # Python 3.11+
    _CONDITIONAL += (ast.TryStar,)
except AttributeError:  # pragma: no cover
    pass


class UseBeforeInit(Rule):
    """
    ## What it does
    Checks for `dist.get_rank()`, `dist.get_world_size()`, a collective, `new_group`, or the
    `DistributedDataParallel` constructor that runs before `init_process_group` on the same
    straight-line path: earlier in the same function body (or at module level), unconditionally,
    with the init call later in that body. A `setup()` helper defined in the file that calls
    `init_process_group` counts as the init. An init that a `destroy_process_group()` (or a project
    function that destroys the group) precedes re-creates a group: a use before the destroy runs
    on the live one and is left alone.

    The use may also sit in a helper along the call graph: a function of this file or of another
    file of the project (`setup_logger()` that calls `dist.get_rank()`), or a class whose
    `__init__` does (a `Trainer` that builds a `DistributedSampler` without `num_replicas` and
    `rank`), when that use is on the helper's unconditional path (not behind an
    `is_initialized()` test or any other condition).

    A use also runs before any init on the path a test on the group keeps for a run without one
    (`flow.lifecycle.group_state_path`): inside `if not dist.is_initialized() or ...:`, in the
    `else` of `if dist.is_initialized():`, or after such a branch that falls through, when nothing
    on the way initialises the group (`init_process_group`, `deepspeed.init_distributed()`, a
    project helper that does, a method of an instance of a project class that does:
    `trainer = FinetuneRecipe(cfg)` then `trainer.setup()`, the class and its bases in other
    modules too) or leaves (`return`, `raise`, `sys.exit`, `pytest.skip`). The code
    says that a run without a process group is supported, and then needs one. The `else` of a
    mixed test (`if dist.is_initialized() and rank == 0:`), a use under a test on the
    distributed mode (`if world_size > 1:`), in a `try` with handlers, or in a function that uses
    the group unconditionally before the test (also in the test of an earlier `if`, `if
    dist.get_rank() == 0:`, which always runs) is left alone. The function must call
    `dist.is_initialized()` itself; its other tests may go through a project helper that returns
    it (`is_distributed()`), and the use may be a project function whose unconditional path needs
    the group. A test on a flag of the distributed mode read from any object
    (`if Manager().distributed:`) counts as a test on the mode; an operand or branch that a run
    without a group decides (`self.rank == 0 or dist.get_rank() == 0` with `self.rank =
    dist.get_rank() if self.in_group else 0`) short-circuits the use; and a function every caller of
    which holds the group (`flow.group_absence.held_by_callers`: the call sits under a test on the
    group or on the distributed mode, after a use or an init of the group on the caller's straight
    path, in a method of a class another method of which uses the group on its straight path, or
    in a function whose own callers are so, two calls up, across the project's modules) tests the
    group only defensively and is left alone. For a use in the function's own body, next to its
    own `if` (a slip its author can see), only a test on the group or the mode at each call
    counts; a need that comes from inside a project helper, or after a conditional expression that
    only picks a fallback value (`r = dist.get_rank() if dist.is_initialized() else 0`), is
    judged by any of them.

    A function of the file that a launcher of the project runs itself on its single-process
    branch (`flow.launch_branches`: `call_main(cfg, worker_main)` whose one branch creates the
    group, directly or through project functions, and whose other branch, or the code after a
    branch that creates the group and leaves, calls `main(cfg)` with nothing creating a group
    before) is reported at its first use of the group on its unconditional path (direct, or
    through a project function), when it makes a direct use on that path and creates no group
    itself before it. The launcher says a run without a process group exists, and the function
    then needs one.

    A setup helper that creates the group only on the distributed side of a test on the run's
    mode (`if is_using_distributed():` with the helper returning `WORLD_SIZE > 1`, `if world_size
    > 1:`, `if "RANK" not in os.environ: return`) and returns normally on the single-process side
    without one is reported, at the point where that side leaves the test (`flow/mode_inits.py`),
    when a caller of it (in this file or another file of the project) then needs the group on its
    straight path: the DDP constructor, a collective, a project function whose unconditional path
    needs it, with no init, `return` or test on the mode that leaves in between. A helper whose
    single-process side initialises a one-process group, exits or raises, and callers that use the
    group only under the same test (`if args.distributed: model = DDP(model)`), are left alone.

    Code that runs at import time counts too. A script (it has an `if __name__ == "__main__":`
    entry point, or initialises at its top level) whose top level imports a module of the project
    whose own top level needs the group (a `config.py` computing `LR = base * dist.get_world_size()`,
    a module-level logger set up through a helper that reads the rank), directly or through
    further imports, runs that code before `main()` initialises the group (so does an import
    in the `__main__` block above the `main()` call). Statements under a
    test (`if dist.is_initialized():`), in a `try`, or in functions are not import-time uses;
    imports made inside a function after the init are fine; library modules (no entry point) are
    not judged, since their importer may initialise first.

    ## Why is this bad?
    Nothing in `torch.distributed` works until the default process group exists. The call raises:

    ```
    ValueError: Default process group has not been initialized, please make sure to call
    init_process_group.
    ```

    ## Example
    ```python
    def main():
        rank = dist.get_rank()
        dist.init_process_group("nccl")
    ```

    ## Use instead
    ```python
    def main():
        dist.init_process_group("nccl")
        rank = dist.get_rank()
    ```

    On the path without a group, use the fallback value:

    ```python
    rank = dist.get_rank() if dist.is_initialized() else 0
    ```

    For an import-time use, compute the value after the init (in a function, or a lazy
    `get_world_size()` helper), or import the module inside `main()` after `init_process_group`.

    ## Fix safety
    There is no automatic fix: moving the init call may move code that computes its arguments.
    """

    code = "DDP002"
    name = "use-before-init"
    severity = Severity.ERROR
    fix_availability = "never"
    # the init or the test on the group; for a function a launcher runs without a group, a direct
    # use of the group on its unconditional path (``_launcher_single_process``)
    requires_text = ("init_process_group", "is_initialized", "get_rank", "get_world_size", "new_group",
                     "new_subgroups", *ALL_COLLECTIVES, "DistributedDataParallel")
    requires_text_all = (("distributed",),)  # every qualified name it resolves is torch.distributed.*

    def finish(self, ctx) -> None:
        reported = _no_group_path(ctx)
        _launcher_single_process(ctx, reported)
        _skipped_init(ctx)
        inits = calls_or_wrappers(ctx, _INITS, "init")
        if not inits:
            return
        sem = ctx.sem
        by_scope: dict[int, list[ast.Call]] = {}
        for i in inits:
            by_scope.setdefault(id(sem.scope_of(i)), []).append(i)
        direct = sem.calls_to(*_USES)
        helpers = _helper_uses(ctx, inits, set(map(id, direct)) | set(map(id, inits)))
        for use in [*direct, *(c for c, _ in helpers.values())]:
            scope_inits = by_scope.get(id(sem.scope_of(use)))
            if not scope_inits or expects_error(use) or id(use) in reported:
                continue
            if any(_before(i, use) or contains(i, use) for i in scope_inits):
                continue  # initialised earlier in this body (or an init call wraps the use)
            later = [i for i in scope_inits if _same_path_after(use, i)]
            if not later:
                continue
            init = later[0]
            if _destroyed_between(ctx, use, init):
                continue  # the init re-creates a group the function tears down first: one exists at the use
            qn = ctx.qn(use)
            related = [(init, "the process group is initialised here")]
            if qn is not None and qn.startswith(D) or qn == DDP_CLASS:
                what = "the DistributedDataParallel constructor" if qn == DDP_CLASS else f"`{qn[len(D):]}()`"
            else:
                eff = helpers[id(use)][1]
                what = f"`{text(ctx, use.func)}(...)` (it reaches {effect_words(ctx, _Site(eff))}, which needs it)"
                related += effect_related(ctx, _Site(eff))
            reported.add(id(use))
            ctx.report(
                use,
                f"{what} runs before the process group is initialised (line {init.lineno}): "
                "ValueError: Default process group has not been initialized",
                related=related,
            )
        _import_time(ctx, inits, reported)


def _no_group_path(ctx) -> set:
    """Uses on the path that a test on the group keeps for a run without one: inside
    ``if not dist.is_initialized() or ...:``, in the ``else`` of ``if dist.is_initialized():``, or
    after such a branch that falls through (``flow.lifecycle.group_state_path``). Direct uses, and
    calls of project functions whose unconditional path uses the group. {id(use)} reported."""
    from ..flow.group_absence import held_by_callers
    from ..flow.lifecycle import group_state_path, group_value
    from ._common import other_call_sites

    sem = ctx.sem
    reported: set = set()
    tests = sem.calls_to(D + "is_initialized")
    if not tests:
        return reported
    an = for_context(ctx)
    view = an.main
    scopes_ = {}
    found = []
    for t in tests:
        s = sem.scope_of(t)
        scopes_.setdefault(id(s), s)
    for scope in scopes_.values():
        held = {}  # ``held_by_callers`` of the scope, asked once it has a finding
        for use in scope_calls(view, scope):
            got_use = _use(ctx, an, view, use)
            if got_use is None:
                continue
            what, eff = got_use
            if expects_error(use):
                continue
            est = group_state_path(an, view, use, scope, present=False)
            if est is None or est == "entry":
                continue
            # every caller runs the function where the group exists: the test is defensive. A use
            # in the function's own body after an ``if`` on the group needs a test at each call; one
            # through a helper, or after a conditional expression that only picks a value when no
            # group exists (``r = get_rank() if is_initialized() else 0``), any hold
            tested = eff is None and est.__class__ is not ast.IfExp
            if tested not in held:
                held[tested] = held_by_callers(an, view, scope, other_call_sites(ctx, an, methods=True),
                                               tested=tested)
            if held[tested]:
                continue
            found.append((use, what, eff, est))
    # one finding per failure: the innermost use raises first (``new_group([get_rank()])``)
    for use, what, eff, est in found:
        if any(u is not use and contains(use, u) for u, *_ in found):
            continue
        branch = "the `else` branch of" if group_value(an, view, est.test, False) is False else "the branch of"
        related = [(est, "the branch taken when no process group exists")]
        if eff is not None:
            related += effect_related(ctx, _Site(eff))
        reported.add(id(use))
        ctx.report(
            use,
            f"{what} runs where no process group exists: {branch} `{text(ctx, est.test)}` "
            f"(line {est.lineno}) that a run without one takes "
            + ("leads here" if contains(est, use) else "falls through to it")
            + ": ValueError: Default process group has not been initialized",
            related=related,
        )
    return reported


def _launcher_single_process(ctx, reported: set) -> None:
    """A module-level function of this file that a launcher of the project runs on its
    single-process branch (``flow.launch_branches``), and that uses the group on its
    unconditional path before anything in it creates one (its first use, direct or through a
    project function whose unconditional path needs it; the function must make a direct use on
    that path too, which the text gate asks for)."""
    from ..flow.findings import node_related
    from ..flow.launch_branches import creates_group, single_process_call
    from ..flow.lifecycle import straight

    an = for_context(ctx)
    view = an.main
    for fn in ctx.sem.tree.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if not any((ctx.qn(u) or "") in _USES and straight(u, fn) for u in scope_calls(view, fn)):
            continue  # a direct use of the group on its unconditional path (what the text gate asks for)
        got = single_process_call(an, view, fn)
        if got is None:
            continue
        lv, call, branch = got
        for use in sorted(scope_calls(view, fn), key=lambda c: (c.lineno, c.col_offset)):
            if creates_group(an, view, use):
                break  # the function makes the group itself first
            got_use = _use(ctx, an, view, use)
            if got_use is None:
                continue
            what, eff = got_use
            if not straight(use, fn) or id(use) in reported or expects_error(use):
                break
            launcher = lv.sem.enclosing_function(call)
            related = [node_related(ctx, lv.path, call,
                                    f"`{launcher.name}` runs `{fn.name}` here, in the branch without a process group"),
                       node_related(ctx, lv.path, branch, "the other branch of this test creates the group")]
            if eff is not None:
                related += effect_related(ctx, _Site(eff))
            reported.add(id(use))
            ctx.report(
                use,
                f"{what} runs where no process group exists: `{launcher.name}` (line {call.lineno}"
                + ("" if lv is view else f" of `{_short(lv.path)}`")
                + f") runs `{fn.name}` itself on the branch of `{_text_of(branch.test)}` that does not "
                "create the group (the other branch does): ValueError: Default process group has not been initialized",
                related=related,
            )
            break


def _text_of(node) -> str:
    got = ast.unparse(node)
    return got if len(got) <= 60 else got[:57] + "..."


def _skipped_init(ctx) -> None:
    """A function of this file creates the group only on one side of a test on the distributed
    mode and returns without one on the other (``flow.mode_inits.skipped_init_exits``), and a
    caller of it (this file or another of the project) needs the group unconditionally after the
    call (``group_needed_after``): a single-process run fails there. Reported at the point where
    the helper leaves that test without a group (where the missing init belongs)."""
    from ..flow.mode_inits import group_needed_after, skipped_init_exits
    from ._common import project_callers

    sem = ctx.sem
    an = for_context(ctx)
    view = an.main
    # (a function that calls it needs such a call in the file: the walk only where there is one)
    funcs = [f for f in sem.walk_order() if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             and any(sem.call_qualname(c) == _INITS[0] for c in scope_calls(view, f))] if sem.calls_to(_INITS[0]) else []
    done = set()
    for fn in funcs:
        exits = skipped_init_exits(an, view, fn)
        if not exits:
            continue
        callers = [(ctx, view, c) for c in sem.calls if an.resolve_call(view, c) == (view, fn)]
        if isinstance(parent(fn), ast.Module):
            for cctx, call, _d in project_callers(ctx, {fn.name}):
                if _d is fn:
                    cview = an.view_of(cctx.filename)
                    if cview is not None:
                        callers.append((cctx, cview, call))
        for cctx, cview, call in callers:
            got = group_needed_after(an, cview, call, _USES)
            if got is None or expects_error(got[0]):
                continue
            use, what = got
            if isinstance(what, str):
                words = "the DistributedDataParallel constructor" if what == DDP_CLASS else f"`{what[len(D):]}()`"
            else:
                words = f"`{_src(cview, use.func)}(...)` (it reaches {effect_words(ctx, _Site(what))}, which needs it)"
            where = f"line {use.lineno}" if cctx is ctx else f"{_short(cctx.filename)}:{use.lineno}"
            for node, test in exits:
                if id(node) in done:
                    continue
                done.add(id(node))
                related = [(test, "the test on the distributed mode"),
                           _node_range(ctx, cctx, use, "needs the process group unconditionally")]
                ctx.report(
                    node,
                    f"`{fn.name}()` has not initialised the process group here when "
                    f"`{text(ctx, test.test)}` (line {test.lineno}) says the run is not distributed, yet its "
                    f"caller then runs {words} unconditionally ({where}): ValueError: Default process group has not been "
                    "initialized on a single-process run. Initialise a one-process group on this path "
                    "(`world_size=1, rank=0`) or guard the use with the same test",
                    related=related,
                )
            break


def _src(view, node) -> str:
    return ast.get_source_segment(view.text, node) or "?"


def _node_range(ctx, cctx, node, msg):
    from ..flow.findings import node_span

    if cctx is ctx:
        return (node, msg)
    return ("file", os.path.abspath(cctx.filename), node_span(ctx, os.path.abspath(cctx.filename), node), msg)


def _import_time(ctx, inits, reported) -> None:
    """A script's top-level imports of project modules run before the ``init_process_group``
    that its ``main()`` (or a later top-level statement) makes. (Top-level uses in the script
    itself are the same-scope case above: the call of ``main()`` counts as the init.)"""
    if not any(map(_may_name_project, ctx.sem.imports)):
        return  # no import of the file can run a project module (``imported_views`` finds none)
    tree = ctx.sem.tree
    an = for_context(ctx)
    view = an.main
    top_inits = [i for i in inits if ctx.sem.enclosing_function(i) is None]
    if not top_inits and not any(is_main_guard(st) for st in tree.body):
        return  # a library module: it may be imported after the group exists
    holders = set()  # the statements (at any level) that hold an init call
    for i in inits:
        chain = []
        p = parent(i)
        while p is not None and not isinstance(p, ast.Module):
            if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                chain = None  # defined, not run, at import
                break
            chain.append(id(p))
            p = parent(p)
        holders.update(chain or ())
    first_init = min(inits, key=lambda n: (n.lineno, n.col_offset))
    init_words = None  # spelled for a finding only
    Import, ImportFrom = ast.Import, ast.ImportFrom
    for st in _before_init(tree.body, holders):
        if st.__class__ is not Import and st.__class__ is not ImportFrom:
            continue
        for name, v2 in imported_views(an, view, st):
            got = import_use(an, v2)
            if got is None:
                continue
            if init_words is None:
                init_words = f"`{text(ctx, first_init.func)}()` at line {first_init.lineno}"
            eff = got.effect
            chain = " -> ".join(f"`{m}`" for m in (name, *got.modules))
            via = f" (through {' -> '.join(f'`{v}`' for v in eff.via)})" if eff.via else ""
            ctx.report(
                st,
                f"importing {chain} runs {eff.what}{via} at import time ({_where(ctx, eff)}), before the "
                f"process group is initialised ({init_words}): ValueError: Default process group has "
                "not been initialized. Compute it after `init_process_group` (in a function, or import "
                "the module later)",
                related=[_eff_range(ctx, eff, "needs the process group at import time"),
                         (first_init, "the process group is initialised here")],
            )
            break


def _may_name_project(st) -> bool:
    """The import statement ``st`` may name a module of the project: what ``imported_views``
    looks up at all (a relative import, or a top-level package that is no well-known library)."""
    if st.__class__ is ast.Import:
        return any(a.name.split(".", 1)[0] not in _NOT_PROJECT for a in st.names)
    mod = st.module or ""
    return bool(st.level) or (bool(mod) and mod.split(".", 1)[0] not in _NOT_PROJECT)


def _before_init(body, holders):
    """The top-level statements that run before the first one holding an init, entering the
    ``if __name__ == "__main__":`` block (its imports run before the ``main()`` call below them)."""
    If = ast.If
    for st in body:
        if st.__class__ is If and is_main_guard(st):
            for inner in st.body:
                if id(inner) in holders:
                    return
                yield inner
            return
        if id(st) in holders:
            return
        yield st


def _where(ctx, eff) -> str:
    return f"{_short(eff.path)}:{eff.line}" if eff.path else f"line {eff.line}"


def _short(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:])


def _eff_range(ctx, eff, msg):
    from ..flow.findings import span

    rng = span(ctx, eff.path, eff.line, eff.col, eff.end_line, eff.end_col)
    here = os.path.abspath(ctx.filename) if not ctx.filename.startswith("<") else None
    if eff.path in (None, here):
        return (rng, msg)
    return ("file", eff.path, rng, msg)


class _Site:
    def __init__(self, eff):
        self.effects = (eff,)


def _helper_uses(ctx, inits, skip) -> dict[int, tuple]:
    """id(call) -> (call, effect) for calls of project functions and constructors whose
    unconditional path uses the process group (``setup_logger()`` that calls ``dist.get_rank()``,
    ``Trainer()`` whose ``__init__`` builds a DistributedSampler), made before an init in the
    same scope."""
    an = for_context(ctx)
    sem = ctx.sem
    out = {}
    last: dict[int, tuple] = {}
    for i in inits:
        scope = sem.scope_of(i)
        end = (i.lineno, i.col_offset)
        if id(scope) not in last or last[id(scope)][1] < end:
            last[id(scope)] = (scope, end)
    for scope, end in last.values():
        for c in scope_calls(an.main, scope):
            if (c.lineno, c.col_offset) >= end:
                break
            if id(c) in skip:
                continue
            eff = use_through_call(an, an.main, c)
            if eff is not None:
                out[id(c)] = (c, eff)
    return out


def _destroyed_between(ctx, use: ast.Call, init: ast.Call) -> bool:
    """A call between ``use`` and ``init`` in their scope tears the default group down
    (``destroy_process_group()``, or a project function that does on some path:
    ``lifecycle.destroys_anywhere``): the init re-creates a group, and a destroy needs one to
    exist, so the use before it runs on the live group."""
    from ..flow.lifecycle import DESTROY, destroys_anywhere, project_target

    an = for_context(ctx)
    view = an.main
    sem = ctx.sem
    lo, hi = (use.end_lineno, use.end_col_offset), (init.lineno, init.col_offset)
    for c in scope_calls(view, sem.scope_of(use)) or ():
        at = (c.lineno, c.col_offset)
        if at < lo or at >= hi:
            continue
        qn = sem.call_qualname(c) or ""
        if qn == DESTROY:
            return True
        if qn.startswith("torch."):
            continue
        target = project_target(an, view, c)
        if target is not None and target[1] is not sem.scope_of(use) and destroys_anywhere(an, *target):
            return True
    return False


def _before(a: ast.AST, b: ast.AST) -> bool:
    return (a.end_lineno, a.end_col_offset) <= (b.lineno, b.col_offset)


def _chain(node: ast.AST) -> list[ast.AST]:
    out = [node]
    p = parent(node)
    while p is not None:
        out.append(p)
        if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Module)):
            break
        p = parent(p)
    return out


def _same_path_after(use: ast.Call, init: ast.Call) -> bool:
    """``use`` runs unconditionally, earlier in a statement block that (through its later
    statements) leads to ``init``; ``init`` is not behind an ``is_initialized()`` test."""
    uc = _chain(use)
    ic = _chain(init)
    ids = {id(n): k for k, n in enumerate(ic)}
    # lowest common ancestor
    for k, n in enumerate(uc):
        j = ids.get(id(n))
        if j is not None:
            break
    else:
        return False
    common = uc[k]
    if k == 0 or j == 0:
        return False
    u_child, i_child = uc[k - 1], ic[j - 1]
    block = None
    for field in ("body", "orelse", "finalbody"):
        b = getattr(common, field, None)
        if isinstance(b, list) and u_child in b and i_child in b:
            block = b
            break
    if block is None or block.index(u_child) >= block.index(i_child):
        return False
    # the use itself must be unconditional inside its statement
    for n in uc[1:k]:
        if isinstance(n, _CONDITIONAL):
            return False
    # ... and the path to the block must not be conditional either (it is: common is the block owner)
    for n in ic[1:j]:
        if isinstance(n, ast.If) and "is_initialized" in ast.dump(n.test):
            return False
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
    return True


def _use(ctx, an, view, use):
    """(words, effect) for a call that needs the default group: a direct use (effect None), or a
    project call that reaches one (``use_through_call``); None for any other call."""
    qn = ctx.qn(use) or ""
    if qn in _USES:
        return ("the DistributedDataParallel constructor" if qn == DDP_CLASS else f"`{qn[len(D):]}()`"), None
    if qn.startswith("torch.") or use.func.__class__ not in (ast.Name, ast.Attribute):
        return None
    eff = use_through_call(an, view, use)
    if eff is None:
        return None
    return f"`{text(ctx, use.func)}(...)` (it reaches {effect_words(ctx, _Site(eff))}, which needs it)", eff
