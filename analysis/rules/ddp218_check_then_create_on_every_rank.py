from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import FUNC_TYPES, parent
from ..flow.rank import rank0_guarded
from ._spawn import distributed_program, in_launcher, outside_launched, runs_in_ranks


class CheckThenCreateOnEveryRank(Rule):
    """
    ## What it does
    Checks code that every rank runs for a test of whether a path exists followed by a creation
    of the same path that relies on the answer (`flow.fs_races`):

    - `if not os.path.exists(d): os.makedirs(d)` (also `os.mkdir`, `Path(d).mkdir()`, `isdir`,
      `Path.exists()`, the creation in a helper of the project) where the creation raises on an
      existing folder: no `exist_ok=True`, no `try` that catches `FileExistsError`/`OSError`;
    - `if os.path.exists(d): raise ...` (or `assert not os.path.exists(d)`) and then a creation of
      `d` later in the same function with no synchronising call (`barrier()`,
      `wait_for_everyone()`, a collective) between the test and the creation;
    - a library call that makes the same test and creation inside itself: tensorboardX's
      `SummaryWriter(logdir)` / `FileWriter(logdir)` (its `record_writer.directory_check` runs
      `if not os.path.exists(logdir): os.makedirs(logdir)`), on a folder whose name does not
      depend on the rank and that the function has not created before the call
      (`torch.utils.tensorboard`'s writer creates its folder with `exist_ok=True` and is not
      flagged);
    - `if os.path.exists(p): x = np.load(p) else: x = build(); np.save(p, x)` (or `if not
      os.path.exists(p):` with the write, and a read of `p` after it): a file written where the
      test finds it missing and read where it finds it present, the cache that every rank builds
      when it finds none (`torch.save`, `np.save`, `open(p, "w")`, a helper of the project that
      writes it; a move into place, `os.replace(tmp, p)`, is not such a write);
    - `if os.path.isdir(d): return d` and then `with FileLock(...):` that removes, extracts,
      writes or creates `d` without testing `d` again under the lock (the missing second check of
      double-checked locking). The file lock (a `filelock` class, or a project class derived
      from one) is what says that several processes run this code, so this form needs no
      distributed program.

    Every rank runs it when the file is a distributed program (it calls `init_process_group`,
    wraps in DDP/FSDP, spawns, builds an Accelerate `Accelerator`, itself or in a project helper
    (`accelerator = prepare_accelerator(args)`), or starts the process group
    through the project's functions: `rules._spawn.distributed_program`) and no main-rank test
    keeps the other ranks out
    (`rank.rank0_guarded`); for a function this file never calls, when the function (or another
    method of its class) makes a collective itself (code written to run on every rank), or when a
    file of the project that is a distributed program (it launches, or starts the process group
    through the project's functions) calls it, or builds its class, on every rank, or when a
    function of the project written to run on every rank (it or its class makes a collective)
    calls it or builds its class with no main-rank test around the call (`self.log =
    RunLogger(root)` in the `__init__` of a trainer whose `step` all-reduces), also through a
    method that such code calls on `self`: a mixin's `configure_checkpoint(self)`, defined in
    another module, that a trainer class built on the mixin calls from its every-rank setup
    (`self.m()` follows the class's method resolution order). A function that starts the ranks
    itself runs once, in the launching process, and is left alone: `mp.spawn`, or a loop that
    starts a process a round and gives it the round's index as its rank on its command line
    (`"--rank={}".format(i)`) or in its environment (`flow.node_launch.rank_launch_loops`). The
    same path is decided by value flow (`fs_effects.path_key`), not by the names used.

    ## Why is this bad?
    The ranks run the test at about the same time. With `if not exists: makedirs`, several ranks
    see the folder missing, the first creates it and the others crash with
    `FileExistsError: [Errno 17] File exists`. With `if exists: raise`, a fast rank creates the
    folder before a slow rank has tested it, and the slow rank raises about a folder that this very
    job has just made. With a cache written where it is missing, every rank that finds it missing
    writes the same file at once, and a rank that tests after the first write began finds the file
    and loads what is there so far (`ValueError`/`EOFError`/`UnpicklingError` on a truncated
    file, or silently short data). All fail only sometimes, and more often with more ranks.

    ## Example
    ```python
    dist.init_process_group("nccl")
    if not os.path.exists(args.checkpoint_dir):
        os.makedirs(args.checkpoint_dir)
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl")
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    ```
    before a tensorboardX writer that every rank builds:
    ```python
    os.makedirs(log_dir, exist_ok=True)
    writer = tensorboardX.SummaryWriter(log_dir)
    ```
    under a file lock, test again once it is held:
    ```python
    if os.path.isdir(out):
        return out
    with FileLock(out + ".lock"):
        if os.path.isdir(out):
            return out
        extract(archive, out)
    ```
    and for a test that must fail on an existing folder, test on every rank, then synchronise,
    then create:
    ```python
    if os.path.exists(out):
        raise ValueError(f"{out} already exists")
    dist.barrier()
    os.makedirs(out, exist_ok=True)
    ```

    ## Fix safety
    There is no fix: `exist_ok=True` is the usual answer for the first form but changes nothing
    for a path that exists as a file, and where the barrier belongs in the second depends on the
    program.
    """

    code = "DDP218"
    name = "check-then-create-on-every-rank"
    severity = Severity.WARNING
    # an existence test is spelled in the file, or a library call that makes one
    requires_text = ("exists", "isdir", "is_dir", "SummaryWriter", "FileWriter")

    def finish(self, ctx) -> None:
        from ..flow import for_context
        from ..flow.fs_races import check_then_create, library_check_then_create
        from ..flow.sync import main_rank_first, synchronised_between

        sem = ctx.sem
        an = None
        distributed = None
        scopes = list({id(f): f for f in (sem.tree, *(f for fs in sem.functions.values() for f in fs))}.values())
        for scope in scopes:
            if an is None:
                an = for_context(ctx)
            for race in (*check_then_create(ctx, an, scope), *library_check_then_create(ctx, an, scope)):
                if distributed is None:
                    distributed = distributed_program(an, ctx)
                if race.kind == "checked-outside-lock":
                    self._report(ctx, race)  # the lock says that several processes run it
                    continue
                if not _every_rank(ctx, an, race.call, distributed) or main_rank_first(ctx, an, race.call):
                    continue
                if race.kind == "fail-if-present" and \
                        synchronised_between(an, an.main, scope, race.test, race.call) is not None:
                    continue
                self._report(ctx, race)

    def _report(self, ctx, race) -> None:
        e = race.effect
        if race.kind == "checked-outside-lock":
            ctx.report(
                race.call,
                f"`{ctx.text(race.check)}` (line {race.check.lineno}) is tested before this lock is "
                f"taken and not again under it: two processes both miss it, and the second to get the "
                f"lock redoes the first one's work over the same path (removing or overwriting what "
                f"the first may already be reading); test again once the lock is held",
            )
            return
        what = f"`{ctx.text(race.call.func)}(...)`"
        if e is not None and e.via:
            what += f" (through `{' -> '.join(e.via)}`: `{e.api}`)"
        if race.kind == "library-check-then-create":
            ctx.report(
                race.call,
                f"every rank runs {what}, which tests whether its folder exists and then creates it "
                f"without `exist_ok` (tensorboardX: `if not os.path.exists(logdir): os.makedirs(logdir)`): "
                f"the ranks that lose the race crash with FileExistsError; create the folder first "
                f"with `os.makedirs(..., exist_ok=True)`",
            )
            return
        check = ctx.text(race.check)
        if race.kind == "create-if-missing":
            ctx.report(
                race.call,
                f"every rank tests `{check}` (line {race.check.lineno}) and then {what} creates the "
                f"folder without `exist_ok=True`: the ranks that lose the race crash with "
                f"FileExistsError; use `os.makedirs(..., exist_ok=True)`",
            )
            return
        if race.kind == "write-if-missing":
            ctx.report(
                race.call,
                f"every rank tests `{check}` (line {race.check.lineno}) and then {what} writes that file "
                f"when it is missing, and it is read where it exists: the ranks that find it missing "
                f"write it at once, and a rank that tests after another began writing reads a partial "
                f"file; build it on one rank (`if rank == 0:`) and synchronise (`barrier()`) before "
                f"the others test, or write to a temporary name and `os.replace` it into place",
            )
            return
        ctx.report(
            race.call,
            f"every rank fails when `{check}` (line {race.check.lineno}) holds, and {what} creates "
            f"that path with no synchronisation in between: a faster rank creates it before a slower "
            f"one tests it, which then fails on the job's own folder; synchronise (`barrier()`) "
            f"after the test, before creating",
        )


def _every_rank(ctx, an, node, distributed: bool) -> bool:
    """Every rank runs ``node``: a distributed file where no main-rank test keeps the others out;
    for a function never called here, one that makes rank decisions or synchronises the ranks
    itself (``_rank_aware``), one that a distributed file of the project calls on every rank
    (``_called_on_every_rank``), or a method that such code calls through ``self``, also from a
    subclass in another module (``_run_by_rank_aware_method``)."""
    if runs_in_ranks(ctx, node) is False or in_launcher(ctx, node) or outside_launched(ctx, node):
        return False
    g = rank0_guarded(ctx, node)
    if g is True:
        return False
    if g is False:
        return distributed
    fn = ctx.sem.enclosing_function(node)
    return fn is not None and not _called_on_main_only(ctx, fn) and (
        _rank_aware(ctx, an, fn) or _called_on_every_rank(ctx, an, fn) or _run_by_rank_aware_method(ctx, fn))


def _called_on_main_only(ctx, fn) -> bool:
    """Every call of the module-level function ``fn`` (or construction of the class whose
    ``__init__`` it is) in the project's other files runs on the main rank only, and there is one:
    what ``fn`` does runs on one rank, whatever collectives it makes (a barrier in a callee it
    reaches on a fallback path says how it was written, not where it runs)."""
    from ._common import project_callers

    owner = parent(fn)
    if fn.name == "__init__" and isinstance(owner, ast.ClassDef) and isinstance(parent(owner), ast.Module):
        name = owner.name
    elif isinstance(owner, ast.Module):
        name = fn.name
    else:
        return False
    sites = [(caller, call) for caller, call, node in project_callers(ctx, (name,))
             if node is fn or node is owner]
    return bool(sites) and all(rank0_guarded(caller, call) is True for caller, call in sites)


def _rank_aware(ctx, an, fn) -> bool:
    """``fn``, or another method of its class, makes a collective (``sync.collective_points``, by
    value flow, also in a helper): it is written to run on every rank. (A test that reads like a
    rank test, ``if is_main_process:``, is not enough: ``rank_tests.polarity`` reads names, and a
    name may only silence a finding.)"""
    from ..flow.sync import collective_points

    cls = parent(fn)
    fns = [st for st in cls.body if isinstance(st, FUNC_TYPES)] if isinstance(cls, ast.ClassDef) else [fn]

    def build():
        return any(collective_points(an, an.main, f) for f in fns)

    return ctx.memo(("ddp218.rank_aware", id(cls if isinstance(cls, ast.ClassDef) else fn)), build)


def _called_on_every_rank(ctx, an, fn) -> bool:
    """A module-level function of this file (or one of this file's functions that call it, two
    calls up), or the constructor of a module-level class, is called from a distributed file of
    the project, not under a main-rank test there; or by a function of the project written to run
    on every rank (``_built_by_rank_aware_code``)."""
    from ._common import project_callers

    owner = parent(fn)
    if fn.name == "__init__" and isinstance(owner, ast.ClassDef) and isinstance(parent(owner), ast.Module):
        names, frontier = {owner.name}, set()  # the class's constructor calls
    elif isinstance(owner, ast.ClassDef) or not isinstance(owner, ast.Module):
        return False
    else:
        names = {fn.name}
        frontier = {fn.name}
    for _ in range(2 if frontier else 0):
        more = set()
        for c in ctx.sem.calls:
            if isinstance(c.func, ast.Name) and c.func.id in frontier:
                outer = ctx.sem.enclosing_function(c)
                if outer is not None and isinstance(parent(outer), ast.Module) and outer.name not in names \
                        and rank0_guarded(ctx, c, callers=False) is not True:
                    more.add(outer.name)
        names |= more
        frontier = more
    for caller, call, _node in project_callers(ctx, names):
        if rank0_guarded(caller, call) is False and runs_in_ranks(caller, call) is not False \
                and distributed_program(an, caller):
            return True
    return _built_by_rank_aware_code(ctx, names)


def _built_by_rank_aware_code(ctx, names) -> bool:
    """A function or class of this file named in ``names`` is called, behind no main-rank test of
    the calling function, by a function of another module of the project that is itself written
    to run on every rank (``_rank_aware``: it, or another method of its class, makes a
    collective): ``self.writer = Writer(log_dir)`` in the ``__init__`` of a trainer whose methods
    all-reduce."""
    from ..flow import for_context
    from ._common import project_callers

    for caller, call, _node in project_callers(ctx, names):
        outer = caller.sem.enclosing_function(call)
        if outer is None or rank0_guarded(caller, call, callers=False) is True \
                or runs_in_ranks(caller, call) is False:
            continue
        if _rank_aware(caller, for_context(caller), outer) or _run_by_rank_aware_method(caller, outer):
            return True
    return False


def _run_by_rank_aware_method(ctx, fn, depth: int = 0) -> bool:
    """The method ``fn`` is called through ``self.<fn>(...)``, behind no main-rank test, by a
    method written to run on every rank (``_rank_aware``), a call or two up: a mixin's
    ``configure_checkpoint(self)`` that a trainer class, built on the mixin in another module,
    calls from its every-rank setup (``hub.resolve_call`` follows ``self.m()`` through the
    class's method resolution order)."""
    from ..flow import for_context
    from ._common import project_callers

    if depth > 1 or not isinstance(parent(fn), ast.ClassDef) or fn.name.startswith("__"):
        return False
    an = for_context(ctx)
    sites = [(ctx, c) for c in ctx.sem.calls
             if isinstance(c.func, ast.Attribute) and c.func.attr == fn.name
             and isinstance(c.func.value, ast.Name) and c.func.value.id == "self"
             and (an.resolve_call(an.main, c) or (None, None))[1] is fn]
    sites += [(caller, call) for caller, call, node in project_callers(ctx, (fn.name,)) if node is fn
              and isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
              and call.func.value.id == "self"]
    for caller, call in sites:
        outer = caller.sem.enclosing_function(call)
        if outer is None or outer is fn or rank0_guarded(caller, call, callers=False) is True \
                or runs_in_ranks(caller, call) is False:
            continue
        if _rank_aware(caller, for_context(caller), outer) or _run_by_rank_aware_method(caller, outer, depth + 1):
            return True
    return False


