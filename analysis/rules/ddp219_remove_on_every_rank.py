from __future__ import annotations

from ..model import Severity
from ..registry import Rule
from ..flow.fs_effects import PRODUCES, effects_at, rank_specific
from ..flow.rank import rank0_guarded, rank_guard
from ._flow import scopes

_WORDS = {"download": "downloads", "extract": "extracts", "write": "writes", "mkdir": "creates"}


class RemoveOnEveryRank(Rule):
    """
    ## What it does
    Checks for a file or folder that only the main rank makes and that every rank then removes:

    - the making: a write, a download, an extraction or a folder made (the vocabulary of
      `flow.fs_effects`, also inside a project helper the path is passed to) under a main-rank
      test (`if rank == 0:`, `if is_main_process():`...);
    - then, past a synchronising call (`dist.barrier()`, a collective, a project function that
      makes one: the other ranks waited for it, so they all run on from there), a removal of the
      same path that no rank test keeps to one rank: `os.remove`, `os.unlink`, `os.rmdir`,
      `shutil.rmtree` without `ignore_errors=True`, `Path(p).unlink()` without `missing_ok=True`.

    The making may also sit inside a project function that every rank calls with the path (a
    dataset's constructor that fetches its file in a method of a base class, through
    `super().__init__(...)`, in another module): only the main rank makes it in there, and the
    others wait for it before the call returns (a synchronising call after the main-rank block, or
    composer's `local_rank_zero_download_and_wait(path)` / `run_local_rank_zero_first()` around it;
    `flow.fs_returns.main_only_made`). Composer's `get_file(uri, destination)` counts as a download.

    It also checks for a removal under a test that the path exists (`if os.path.exists(p):
    os.remove(p)`, `if p.is_file(): p.unlink()`, `if os.path.isdir(d): shutil.rmtree(d)`) that
    every rank runs: the test does not protect it, the ranks pass it at once and all but the first
    raise. Every rank runs it when the file is a distributed program (`rules._spawn.distributed_program`:
    it launches, or builds an Accelerate `Accelerator`, also in a project helper) and no main-rank
    test keeps the other ranks out, there or at the calls of its function in the file (a function
    passed to a project function that calls it, `keep_last(args, save_func, remove_old_func)`, runs
    where that call runs, unless the callee calls it only behind a main-rank test:
    `rank.rank0_guarded` is False), not in the launching process of an `mp.spawn` script; or
    when a distributed script of the project runs its function (a class's `__init__` through its
    construction) on every rank (`rules._rank_callers.every_rank_entry`); or when a function that
    itself tears the default group down later (`dist.destroy_process_group()`, also under `if
    dist.is_initialized():`, behind no rank test and not in an `except` handler) runs it, directly
    or through the project's calls, a few modules deep: every rank tears its group down, so every
    rank ran that function, even when a library started the group out of sight (the transformers
    `TrainingArguments`). Such a helper module need not spell `torch`.

    A removal inside a `try` that catches `FileNotFoundError` (or `OSError`), under a test that the
    job is one process (`if dist.get_world_size() == 1:`), or on a path that
    depends on the rank or the process (`f"tmp_{rank}"`, `uuid.uuid4()`, `tempfile`; of
    `unique() if world_size == 1 else shared`, the branch that several ranks take) is not reported,
    nor is the existence-tested removal in an `except` handler (the cleanup of a failure that the
    run reports anyway). The same path is decided by value flow (`flow.fs_races.race_key`), in one function (an
    attribute such as `self.log_path` tested and removed in the same `if`, for the exists test).

    ## Why is this bad?
    There is one file and N removals. The first rank to get there deletes it; every other rank's
    `os.remove` raises
    ```
    FileNotFoundError: [Errno 2] No such file or directory: 'data/eval.jsonl'
    ```
    and a rank that is still reading the file (a slower loader, a lazily read dataset) loses it
    under its feet.

    ## Example
    ```python
    if dist.get_rank() == 0:
        download(url, "data/eval.jsonl")
    dist.barrier()
    rows = load_rows("data/eval.jsonl")
    os.remove("data/eval.jsonl")
    ```
    ```python
    dist.init_process_group("nccl")
    if os.path.exists("runs/progress.txt"):
        os.remove("runs/progress.txt")  # rank 1 raises: rank 0 removed it after rank 1's test
    ```

    ## Use instead
    ```python
    if dist.get_rank() == 0:
        download(url, "data/eval.jsonl")
    dist.barrier()
    rows = load_rows("data/eval.jsonl")
    dist.barrier()  # every rank is done with it
    if dist.get_rank() == 0:
        os.remove("data/eval.jsonl")
    ```

    ```python
    if dist.get_rank() == 0 and os.path.exists("runs/progress.txt"):
        os.remove("runs/progress.txt")
    dist.barrier()
    ```

    ## Fix safety
    There is no fix: where the last reader is done with the file depends on the program.
    """

    code = "DDP219"
    name = "remove-on-every-rank"
    severity = Severity.WARNING
    requires_text = ("remove", "unlink", "rmtree", "rmdir")  # a removal is spelled in the file
    # a helper module of the project that removes a file every rank runs it on may never spell
    # "torch" (a logging handler's constructor, run by a distributed trainer: ``every_rank_entry``)
    base_text = ("torch", *requires_text)

    @classmethod
    def reach(cls, text, filename):
        if "torch" in text or "Accelerator" in text:
            return True, {}
        from ..flow.reach import reaches  # lazy: both read the project's other files
        from ._common import callers_may_exist

        got, deps = callers_may_exist(text, filename, ())
        if got:
            return got, deps
        # a script that never spells torch whose project helper builds the Accelerator or starts
        # the group (``_spawn.distributed_program``): every rank runs its removals
        got, more = reaches(filename, text, ("Accelerator", "init_process_group"))
        return (True, {}) if got else (False, {**deps, **more})

    def finish(self, ctx) -> None:
        from ..flow import for_context
        from ..flow.fs_races import exists_tested_around, race_key, strict_removal
        from ..flow.sync import synchronised_between

        sem = ctx.sem
        an = None
        tested = []  # removals under a test that the path exists: every rank may pass the test at once
        done = set()  # removals reported as what only the main rank made
        for scope in scopes(ctx):
            calls = sem.scope_calls(scope)
            removals = []
            for c in calls:
                path = strict_removal(ctx, c)
                if path is None or rank_guard(ctx, c) is not None or rank0_guarded(ctx, c, callers=False) is True \
                        or _main_only_by_callers(ctx, c):
                    continue
                key = race_key(ctx, path)
                if key is None:
                    if _attribute_tested(ctx, c, path) and not rank_specific(ctx, path, c):
                        tested.append((c, path))
                    continue
                if rank_specific(ctx, path, c):
                    continue
                if exists_tested_around(ctx, c, key):
                    tested.append((c, path))
                    continue
                if exists_tested_around(ctx, c, key, files=True):
                    tested.append((c, path))  # unless the first form reports it (``done``)
                removals.append((c, path, key))
            if not removals:
                continue
            if an is None:
                an = for_context(ctx)
            for r, path, key in removals:
                made = self._made_by_main(ctx, an, calls, r, key)
                if made is None:
                    continue
                p, e, synced = made
                if not synced and synchronised_between(an, an.main, scope, p, r) is None:
                    continue
                what = _WORDS.get(e.kind, "makes")
                done.add(id(r))
                if e.via and e.home is not None:
                    self._report_via(ctx, r, p, e, what)
                    continue
                ctx.report(
                    r,
                    f"every rank runs `{ctx.text(r)}` on what only the main rank "
                    f"{what} at line {p.lineno}: the first rank to get there removes it, the others raise "
                    f"FileNotFoundError (or lose it while still reading it); remove it on the main rank "
                    f"only, after a barrier",
                    related=[(p, f"the main rank {what} it here")],
                )

        for r, path in tested:
            if id(r) not in done:
                self._tested_on_every_rank(ctx, r, path)

    @staticmethod
    def _tested_on_every_rank(ctx, r, path) -> None:
        """``if os.path.exists(p): os.remove(p)`` that every rank of a distributed program runs: the
        test does not make the removal safe, the ranks pass it at once and all but the first raise.
        Every rank runs it when the file is a distributed program and no main-rank test keeps the
        other ranks out (``rank0_guarded`` is False: its callers in the file are unguarded too), not
        in the launching process of a spawn, not on a path of the program that makes no group; or
        when a distributed script of the project runs its function on every rank
        (``_rank_callers.every_rank_entry``)."""
        import os

        from ..flow import for_context
        from ..flow.group_free import without_group
        from ..flow.findings import node_span
        from ._rank_callers import every_rank_entry, tears_down_group_after
        from ._spawn import distributed_program, in_launcher, runs_in_ranks

        if _in_handler(ctx, r):
            return  # the cleanup of a failure: the run already fails, whichever error it reports
        guarded = rank0_guarded(ctx, r)
        if guarded is True or runs_in_ranks(ctx, r) is False or in_launcher(ctx, r):
            return
        what = f"every rank runs `{ctx.text(r)}` under a test that `{ctx.text(path)}` exists"
        tail = ("several ranks pass the test before the first removes it, and the others raise "
                "FileNotFoundError; remove it on one rank (`if rank == 0:`), or catch FileNotFoundError")
        if guarded is False and distributed_program(for_context(ctx), ctx):
            if without_group(ctx, r):
                return
            ctx.report(r, f"{what}: {tail}")
            return
        if guarded is False and tears_down_group_after(ctx, r):
            ctx.report(r, f"{what} (the function tears the process group down after it, so every rank "
                          f"runs it): {tail}")
            return
        if guarded is not None:
            return
        entry = every_rank_entry(ctx, r)
        if entry is None:
            return
        caller, site, _callee = entry
        where = os.path.basename(caller.filename or "")
        ctx.report(r, f"{what} ({where} line {site.lineno} runs it on every rank): {tail}",
                   related=[("file", caller.filename, node_span(ctx, caller.filename, site),
                             "the call every rank makes")])

    @staticmethod
    def _report_via(ctx, r, p, e, what) -> None:
        import os

        from ..flow.findings import node_span

        home = e.home.path or ""
        rng = node_span(ctx, home, e.node) if home else None
        chain = " -> ".join(e.via)
        ctx.report(
            r,
            f"every rank runs `{ctx.text(r)}` on what only the main rank {what} inside `{ctx.text(p.func)}()` "
            f"(line {p.lineno}; through `{chain}`, `{e.api}` at {os.path.basename(home)} line {e.node.lineno}), "
            f"which every rank has waited for: the first rank to get there removes it, the others raise "
            f"FileNotFoundError (or lose it while still reading it); remove it on the main rank only, after a "
            f"barrier",
            related=[("file", home, rng, f"the main rank {what} it here")] if home and rng else [(p, "made here")],
        )

    @staticmethod
    def _made_by_main(ctx, an, calls, r, key):
        """(call, effect, synced) of a call before ``r`` that makes the path of ``key`` on the main
        rank only: a call that only the main rank runs (``synced`` False: the caller must wait), or
        a call of a project function that every rank runs and inside which only the main rank makes
        it (``flow.fs_returns.main_only_made``; ``synced``: the others wait for it in there)."""
        from ..flow.fs_effects import call_site_effects, may_resolve_any, resolve
        from ..flow.fs_races import effect_key
        from ..flow.fs_returns import main_only_made

        helpers = []
        for p in calls:
            if (p.lineno, p.col_offset) >= (r.lineno, r.col_offset):
                continue
            if rank0_guarded(ctx, p, callers=False) is not True:
                helpers.append(p)
                continue
            for e in effects_at(ctx, an, p):
                if e.kind in PRODUCES and effect_key(ctx, an, e) == key:
                    return p, e, False
        for p in helpers:
            if not may_resolve_any(an.main, p):
                continue
            target = resolve(an, an.main, p)
            if target is None or target[1] is ctx.sem.enclosing_function(p):
                continue
            for e, synced in main_only_made(an, *target):
                for b in call_site_effects(an, an.main, p, target, 1, effs=[e]):
                    if b.kind in PRODUCES and _made_key(ctx, an, b) == key:
                        return p, b, synced
        return None


def _in_handler(ctx, node) -> bool:
    """``node`` runs in an ``except`` handler of its function."""
    import ast

    from ..semantic import FUNC_TYPES, parent

    p = parent(node)
    while p is not None and not isinstance(p, FUNC_TYPES):
        if isinstance(p, ast.ExceptHandler):
            return True
        p = parent(p)
    return False


def _attribute_tested(ctx, node, path) -> bool:
    """``path`` is an attribute of a name (``self.log_file``) that no path key describes, and
    ``node`` sits under an ``if`` that tests that the same attribute exists (or is a file), in the
    same function with no assignment of the attribute in the ``if``."""
    import ast

    from ..flow.fs_races import exists_tested
    from ..semantic import FUNC_TYPES, parent

    base = path
    while isinstance(base, ast.Attribute):
        base = base.value
    if not isinstance(path, ast.Attribute) or not isinstance(base, ast.Name):
        return False
    want = ast.dump(path)
    child, p = node, parent(node)
    while p is not None and not isinstance(p, FUNC_TYPES):
        if isinstance(p, ast.If) and child is not p.test:
            if any(isinstance(t, ast.Attribute) and ast.dump(t) == want and isinstance(t.ctx, ast.Store)
                   for t in ast.walk(p)):
                return False
            for e in ast.walk(p.test):
                got = exists_tested(ctx, e, True)
                if got is not None and ast.dump(got) == want:
                    return True
        child, p = p, parent(p)
    return False


def _made_key(ctx, an, e) -> str | None:
    """``effect_key``, or the variable itself when the path is exactly an argument of the call
    that is a name (``build(dest=tmp)``: the helper makes what ``tmp`` holds)."""
    import ast

    from ..flow.fs_races import effect_key

    k = effect_key(ctx, an, e)
    if k is None and e.view is an.main and isinstance(e.path, ast.Name):
        return "local:" + e.path.id
    return k


def _main_only_by_callers(ctx, node) -> bool:
    """``node`` sits behind ``if <param> is not None:`` (or the ``else`` of ``is None``) of its
    module-level function, and every call of that function in the project's other files passes a
    name that only the main rank sets to something other than None
    (``flow.rank_tests.main_only_value``: ``writer = SummaryWriter() if rank == 0 else None``)."""
    import ast

    from ..flow.helper_calls import bind_args
    from ..flow.rank_tests import main_only_value
    from ..flow.wrapped import guards
    from ..semantic import param_names, parent
    from ._common import project_callers  # lazy: reads the project's other files

    fn = ctx.sem.enclosing_function(node)
    if fn is None or not isinstance(parent(fn), ast.Module):
        return False
    names = set()
    for test, branch in guards(node):
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.left, ast.Name) \
                and isinstance(test.ops[0], (ast.Is, ast.IsNot)) and isinstance(test.comparators[0], ast.Constant) \
                and test.comparators[0].value is None and branch == isinstance(test.ops[0], ast.IsNot) \
                and test.left.id in param_names(fn) and not ctx.sem.assignments(fn).get(test.left.id):
            names.add(test.left.id)
    if not names:
        return False
    calls = [(caller, call) for caller, call, d in project_callers(ctx, {fn.name}) if d is fn]
    if not calls:
        return False
    for name in names:
        ok = True
        for caller, call in calls:
            a = bind_args(call, fn).get(name)
            if not isinstance(a, ast.Name) or not main_only_value(caller, a.id, caller.sem.scope_of(call)):
                ok = False
                break
        if ok:
            return True
    return False

