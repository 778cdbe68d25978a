from __future__ import annotations

import ast
import os

from types import SimpleNamespace

from ..model import Applicability, Range, Severity
from ..registry import NoCase, Rule
from ..semantic import FUNC_TYPES, get_arg, parent
from ..flow.helper_calls import bind_args, calls_named
from ..flow.params import dead_at_call, dead_in_frame
from ._common import other_call_sites
from ._loader import (DIST_SAMPLER, dataloaders, project_sampler, is_loader_call, in_eval_function, is_eval_name, is_true, loader_sampler,
                      may_be_none, target_name)

_LOOPS = (ast.For, ast.AsyncFor, ast.While)


class SamplerWithoutSetEpoch(Rule):
    """
    ## What it does
    Checks for a `DistributedSampler` (shuffling, the default) that feeds a `DataLoader` iterated
    inside an epoch loop, in a file that never calls `set_epoch(...)` (on the sampler or on
    `loader.sampler`).

    The sampler and the loader must be bound to names in the same scope as the loop, either by
    constructing them there or by unpacking what a builder function of the project returns
    (`loader, sampler = build_train_loader(cfg)`, in this file or another one) when that function
    returns a `DataLoader` over a shuffling `DistributedSampler` and its module never calls
    `set_epoch` either. The batch loop may also live elsewhere: the flow layer's `passes` finds
    every DataLoader one round of a loop walks again, in its body or in the project functions it
    calls (up to three calls deep, in any module: `train(epoch)` walking a module-level loader,
    `run_one_epoch(data_loader=train_loader)`), and `origins` follows that loader back to its
    `DataLoader(...)` through builders, tuples, helpers' returns and the attributes of an object
    that holds it (`data.train_loader` of `data = Holder(ds)`, whose `__init__` binds
    `self.train_loader`), reading a builder's parameters in the context of the call that built it
    (`shuffle=training` with `training=True`). A loader that arrives as a parameter is followed to
    the calls that pass it, in the project's other files too, also for a method of a class
    (a library `Trainer.train(self, train_loader)` whose epoch loop walks it, called by a script as
    `trainer.train(train_loader=loader)` on an instance of the class imported from the package). The sampler's class may be chosen at run time
    (`cls = DistributedSampler if distributed else RandomSampler`, then `sampler=cls(ds)`; also
    through an if/else statement, a parameter, a dict of classes or a helper's return: the flow
    layer's `call_classes`); no fix is offered then, as the other class has no `set_epoch`. A loader
    the code does not build (a framework's trainer walking the user's loader) counts when the
    module walking it insists that its `sampler` is a DistributedSampler in some mode
    (`flow.type_guards`: `assert isinstance(...)`, or `if ... not isinstance(...)` that raises
    or warns); no fix is offered then. Then no module on the way may call `set_epoch`. Once the value flow has found the shuffling sampler, a
    name heuristic skips evaluation: loaders named like evaluation loaders (`val_loader`,
    `test_sampler`...) and loops in functions whose name starts with an evaluation word
    (`evaluate`, `test_...`). A sampler built anew in each round of the loop with a seed that
    reads the round's loop variable (`seed=base + epoch`, also through a parameter of the helper
    the loop calls to build it) draws another order each round and is left alone too, as are
    loops that hand the loader and the epoch to a function from another module, which may call
    `set_epoch` itself.

    A `set_epoch` that never runs does not count: a helper that cycles its loader forever
    (`def forever(loader, sampler=None): while True: if sampler is not None:
    sampler.set_epoch(...)`, then `for batch in loader` or `yield from loader`) and a call of it
    (in this file or another module) that hands it a loader over a shuffling DistributedSampler
    but leaves `sampler` at None (`params.dead_at_call`) walks epoch 0's order on every pass; the
    finding is on the helper's loop. The caller's function, and those that build the loader and
    the sampler, must not call `set_epoch` either (the whole module, for another module's). The
    sampler may be a project subclass of DistributedSampler that keeps the base's order (its
    `__iter__` walks `super().__iter__()`, its `__init__` keeps `shuffle=True` by default), held
    in a record's field (`state.train.sampler` of `State(train=Split(sampler=...))`, the state
    passed in by a function of another module).

    A loop counted in steps rather than epochs loses the same way when its rounds restart the
    loader's iterator: `except StopIteration: it = iter(loader)` in its body, or an endless-loader
    wrapper whose method the loop calls (`batch = feeder.next()`, the wrapper built in the loop's
    function or returned by a builder, alone or in a tuple) and which re-creates `iter(self.loader)`
    when a pass ends. The finding is then on that `iter(...)` when it is in this file (no fix: the
    pass count to hand the sampler is the author's), else on the loop.

    The same loss one level up, in an epoch iterator: a class method that advances the class's own
    epoch counter by one (`self.epoch += 1`) and builds a new `DataLoader(self.dataset, ...)` for
    that epoch (there, or in a method it hands the counter to), while the project's datasets take
    the epoch (a dataset class whose `set_epoch(self, epoch)` stores it in an attribute that
    `__getitem__` or another method reads: masking, cropping or resampling seeded by the epoch) and
    no file of the project calls `set_epoch` except inside other `set_epoch` methods that pass it
    on. Nothing ever tells those datasets the epoch, so they replay epoch 0's randomness every epoch.
    The finding is on the counter's step; no fix is offered (the iterator's author decides where
    the dataset hears the epoch).

    ## Why is this bad?
    `DistributedSampler` shuffles with a generator seeded by `seed + epoch`. Without
    `set_epoch(epoch)` the epoch stays 0, so every epoch visits the data in exactly the same order
    on every rank. PyTorch's documentation warns: "calling the `set_epoch()` method at the
    beginning of each epoch **before** creating the `DataLoader` iterator is necessary to make
    shuffling work properly across multiple epochs. Otherwise, the same ordering will be always
    used." The symptom is silently worse convergence than the single-GPU run.

    ## Example
    ```python
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, sampler=sampler)
    for epoch in range(epochs):
        for batch in loader:
            ...
    ```

    ## Use instead
    ```python
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in loader:
            ...
    ```

    ## Fix safety
    For a `for` loop with a plain loop variable, the fix inserts `sampler.set_epoch(epoch)` (or
    `loader.sampler.set_epoch(epoch)` for an inline sampler) as the loop's first statement, under
    `if sampler is not None:` when the sampler exists only in distributed runs (no fix is offered
    when no name at the loop is known to hold the sampler, or when only `loader.sampler` could
    name a sampler that may be absent). It is
    **safe**: it only changes the order of the samples between epochs, which is what the sampler
    is for.
    """

    code = "DDP301"
    name = "sampler-without-set-epoch"
    severity = Severity.WARNING
    fix_availability = "sometimes"
    # a loader built by a project function arrives under a name: the script names a loader or sampler
    requires_text = ("DistributedSampler", NoCase("loader"), NoCase("sampler"))
    node_types = (ast.For, ast.AsyncFor, ast.While)

    @classmethod
    def reach(cls, text, filename):
        # every shape but the epoch iterator needs only this file; the epoch iterator's finding
        # depends on the project's files that spell ``set_epoch`` (``_epoch_gate``)
        may, deps = _epoch_gate(text, filename)
        return True, deps if may else {}

    def finish(self, ctx) -> None:
        # ``_calls_set_epoch(ctx.sem, ctx.src.text)``, from the check's calls-by-name index
        if "set_epoch" in ctx.src.text:
            sets = [c for c in calls_named(ctx, "set_epoch") if c.func.__class__ is ast.Attribute]
            if sets:
                self._dead_set_epoch(ctx, sets)
                return
        fors = [*ctx.sem.by_type.get(ast.For, ()), *ctx.sem.by_type.get(ast.AsyncFor, ())]
        reported: set[int] = set()
        if fors:
            self._from_builders(ctx, fors, reported)
        samplers = ctx.calls_to(DIST_SAMPLER)
        loaders = dataloaders(ctx)
        if fors and loaders:
            self._through_values(ctx, loaders, fors, reported)
        self._through_passes(ctx, reported)
        self._epoch_iterators(ctx)
        if not samplers:
            return
        for s in samplers:
            shuffle = get_arg(s, 3, "shuffle")
            if shuffle is not None and not is_true(shuffle, ctx.sem):
                continue
            s_name = _sampler_name(s)
            for ld in loaders:
                arg = loader_sampler(ctx, ld)
                inline = arg is s
                if not inline and not (s_name and isinstance(arg, ast.Name) and arg.id == s_name):
                    continue
                if not inline and ctx.sem.scope_of(ld) is not ctx.sem.scope_of(s):
                    continue
                l_name = _loader_name(ld)
                if l_name is None:
                    continue
                ds = get_arg(ld, 0, "dataset")
                if is_eval_name(s_name, l_name, ds.id if isinstance(ds, ast.Name) else None) \
                        or in_eval_function(ctx.sem, ld):
                    continue
                scope = ctx.sem.scope_of(ld)
                for loop, use in _epoch_loops(ctx, l_name, scope, ld, fors):
                    if id(loop) in reported or _handed_off(ctx, use, loop) or _reseeded(s, loop):
                        continue
                    reported.add(id(loop))
                    ref = s_name if s_name else f"{l_name}.sampler"
                    maybe_none = s_name is not None and may_be_none(ctx, ast.Name(id=s_name), s)
                    self._report(ctx, loop, s, ref, maybe_none)

    def _epoch_iterators(self, ctx) -> None:
        """A class that advances its epoch counter and walks ``self.<dataset>`` in a new DataLoader
        for the new epoch, while the project's datasets take the epoch through ``set_epoch`` and
        no file of the project ever calls it (``flow.passes``, ``_unfed_epoch_datasets``): every epoch replays epoch 0's
        randomness (masking, cropping, resampling) of those datasets."""
        if ctx.filename is None or "+=" not in ctx.src.text:
            return
        from ..flow.passes import epoch_advances

        found = epoch_advances(ctx)
        if not found:
            return
        takers = _unfed_epoch_datasets(ctx)
        if not takers:
            return
        from ..flow.findings import node_related

        tv, tc = takers[0]
        st = next(f for f in tc.body if isinstance(f, FUNC_TYPES) and f.name == "set_epoch")
        names = ", ".join(f"`{c.name}`" for _, c in takers[:3]) + (", ..." if len(takers) > 3 else "")
        for cls, m, step, ds in found:
            epoch = ast.unparse(step.target)
            where = node_related(ctx, tv.path, st, f"`{tc.name}.set_epoch`, never called")
            ctx.report(
                step,
                f"`{cls.name}.{m.name}` advances `{epoch}` and walks `self.{ds}` again without "
                f"`self.{ds}.set_epoch({epoch})`, and nothing in this project calls `set_epoch`: the "
                f"datasets that take the epoch ({names}) replay epoch 0 every epoch",
                related=[where],
            )

    def _through_values(self, ctx, loaders, fors, reported: set[int]) -> None:
        """A DataLoader whose ``sampler=`` is not the sampler call itself nor a name bound to it in
        the same scope, but a value that comes from a shuffling DistributedSampler: through a
        helper's return (of this module or another), tuple unpacking, a parameter (the flow
        layer's ``origins``)."""
        from ..flow import for_context  # lazy: only files whose loaders take a sampler from elsewhere
        from ..flow.findings import node_span
        from ..flow.origins import origins

        ana = None
        for ld in loaders:
            arg = loader_sampler(ctx, ld)
            if arg is None or (isinstance(arg, ast.Call) and ctx.qn(arg) == DIST_SAMPLER):
                continue
            if isinstance(arg, ast.Name):
                v = ctx.sem.single_value(arg.id, ctx.sem.scope_of(ld))
                if isinstance(v, ast.Call) and ctx.qn(v) == DIST_SAMPLER:
                    continue  # the direct case (``finish``)
            l_name = _loader_name(ld)
            if l_name is None:
                continue
            if ana is None:
                ana = for_context(ctx)
            found = [(v, e) for v, e in origins(ana, ana.main, arg, ld)]
            samp = [(v, e) for v, e in found if isinstance(e, ast.Call) and (v.sem.call_qualname(e) or "") in (
                DIST_SAMPLER, "torch.utils.data.distributed.DistributedSampler")]
            if not samp or any(not _shuffles(e, v.sem) for v, e in samp):
                continue
            maybe_none = any(isinstance(e, ast.Constant) and e.value is None for _, e in found)
            if len(samp) + maybe_none != len(found):
                continue  # some value of another kind
            s_name = arg.id if isinstance(arg, ast.Name) else None
            ds = get_arg(ld, 0, "dataset")
            if is_eval_name(s_name, l_name, ds.id if isinstance(ds, ast.Name) else None) \
                    or in_eval_function(ctx.sem, ld):
                continue
            sv, sc = samp[0]
            where = ("file", sv.path, node_span(ctx, sv.path, sc), "the shuffling DistributedSampler") \
                if sv.path and sv is not ana.main else (sc, "the DistributedSampler")
            for loop, use in _epoch_loops(ctx, l_name, ctx.sem.scope_of(ld), ld, fors):
                if id(loop) in reported or _handed_off(ctx, use, loop):
                    continue
                reported.add(id(loop))
                self._report(ctx, loop, where, s_name or f"{l_name}.sampler", maybe_none and s_name is not None)

    def _through_passes(self, ctx, reported: set[int]) -> None:
        """An epoch loop whose rounds walk a DataLoader again wherever that happens (the flow
        layer's ``passes``: its body, or a project function it calls, with the loader as an
        argument, a global or a ``self`` attribute), when the loader's sampler is a shuffling
        DistributedSampler (``origins``: built here, in a builder of another module, returned in a
        tuple) and no module on the way calls ``set_epoch``."""
        loops = [*ctx.sem.by_type.get(ast.For, ()), *ctx.sem.by_type.get(ast.AsyncFor, ()),
                 *ctx.sem.by_type.get(ast.While, ())]
        if not loops or not ctx.sem.calls:
            return
        from ..flow import for_context  # lazy: only files with loops
        from ..flow.findings import node_span
        from ..flow.passes import iterated_leaves, loop_passes

        ana = for_context(ctx)
        main = ana.main
        for loop in sorted(loops, key=lambda n: (n.lineno, n.col_offset)):
            if id(loop) in reported or in_eval_function(ctx.sem, loop):
                continue
            passes = loop_passes(ana, main, loop)
            if not passes:
                continue
            if isinstance(loop, (ast.For, ast.AsyncFor)) and any(
                    _distributed_loader(ana, main, e, loop) for e in iterated_leaves(loop.iter)):
                continue  # a batch loop that walks another loader per batch is no epoch loop
            seen: set[int] = set()
            refilled = False
            for p in passes:
                if id(p.expr) in seen:
                    continue
                seen.add(id(p.expr))
                if is_eval_name(*_pass_names(p.expr)):
                    continue
                got = _distributed_loader(ana, p.view, p.expr, p.at, other_call_sites(ctx, ana, methods=True))
                if got is None:
                    got = _required_distributed(ana, p)
                    if got is None:
                        continue
                lv, ld, sv, sc, s_arg, maybe_none = got
                if sv is main and isinstance(sc, ast.Call) and _reseeded(sc, loop):
                    continue
                if any(_calls_set_epoch(v.sem, v.text) for v in {id(v): v for v in (*p.chain, lv, sv)}.values()):
                    continue
                reported.add(id(loop))
                ref, guard = _pass_ref(ana, main, loop, p, lv, ld, s_arg, maybe_none) if ld is not None else (None, False)
                what = "the shuffling DistributedSampler" if ld is not None else \
                    "this loader's sampler, which distributed runs require to be a DistributedSampler"
                where = ("file", sv.path, node_span(ctx, sv.path, sc), what) \
                    if sv.path and sv is not main else (sc, what)
                refill = _refill(main, loop, p)
                if refill is not None:  # each loader whose iterator the loop re-creates
                    self._report_refill(ctx, loop, refill, p, where)
                    refilled = True
                    continue
                if refilled:
                    continue
                self._report(ctx, loop, where, ref or f"{ast.unparse(p.expr)}.sampler", guard, fixable=ref is not None)
                break

    def _dead_set_epoch(self, ctx, sets) -> None:
        """A function whose ``set_epoch`` calls all sit on a branch that a call of the function never
        takes (``if sampler is not None: sampler.set_epoch(...)`` where the call leaves ``sampler``
        at its default None: ``params.dead_at_call``), while a loop of the function walks a loader
        that the same call hands it as a parameter, over a shuffling DistributedSampler
        (``endless(DataLoader(ds, sampler=DistributedSampler(ds)))`` of a generator that cycles its
        loader): that call's passes all share epoch 0's order. The caller's function, and the
        functions that build the loader and the sampler, must not call ``set_epoch`` either (the
        whole module, for those of another module)."""
        from ..flow import for_context  # lazy: only files that call set_epoch
        from ..flow.findings import node_span
        from ..flow.params import dead_at_call
        from ..flow.passes import loop_passes

        sem = ctx.sem
        groups: dict = {}
        for c in sets:
            groups.setdefault(sem.enclosing_function(c), []).append(c)
        ana = main = callers = None
        for fn, dead in groups.items():
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or in_eval_function(sem, fn):
                continue
            params = {a.arg for a in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)}
            loops = [n for n in ast.walk(fn) if isinstance(n, _LOOPS) and sem.enclosing_function(n) is fn]
            if not loops or not params:
                continue
            if ana is None:
                ana = for_context(ctx)
                main = ana.main
                callers = other_call_sites(ctx, ana, methods=True, modules=True)
            sites = [(main, c) for c in ana.call_sites(main, fn)] + list(callers(main, fn))
            sites = [(cv, c) for cv, c in sites if all(dead_at_call(cv, c, main, fn, x) for x in dead)
                     and not (cv is main and sem.enclosing_function(c) in groups)]
            if sites:
                self._dead_loops(ctx, ana, callers, fn, loops, params, sites, groups, dead, node_span, loop_passes)

    def _dead_loops(self, ctx, ana, callers, fn, loops, params, sites, groups, dead, node_span, loop_passes):
        main = ana.main
        sem = ctx.sem
        for loop in sorted(loops, key=lambda n: (n.lineno, n.col_offset)):
            for p in loop_passes(ana, main, loop):
                if p.view is not main or not isinstance(p.expr, ast.Name) or p.expr.id not in params \
                        or len(p.chain) > 1:
                    continue
                for cv, c in sites:
                    a = bind_args(c, fn).get(p.expr.id)
                    if a is None or is_eval_name(*_pass_names(a)):
                        continue
                    got = _distributed_loader(ana, cv, a, c, callers)
                    if got is None:
                        continue
                    lv, ld, sv, sc, _s_arg, _maybe = got
                    if any(_calls_set_epoch(v.sem, v.text) for v in {id(v): v for v in (cv, lv, sv)}.values()
                           if v is not main):
                        continue
                    if any(sem.enclosing_function(x) in groups for v, x in ((lv, ld), (sv, sc)) if v is main):
                        continue
                    what = "the shuffling DistributedSampler"
                    where = ("file", sv.path, node_span(ctx, sv.path, sc), what) \
                        if sv.path and sv is not main else (sc, what)
                    line = f"{_rel(ctx, cv.path)}:{c.lineno}" if cv is not main and cv.path else f"line {c.lineno}"
                    here = ("file", cv.path, node_span(ctx, cv.path, c),
                            "this call hands the loader and leaves the `set_epoch` branch out") \
                        if cv.path and cv is not main else (c, "this call leaves the `set_epoch` branch out")
                    self._report_dead(ctx, loop, p, where, here, dead[0], line)
                    return

    def _report_dead(self, ctx, loop, p, sampler, call, dead, line: str) -> None:
        head_end = loop.iter if isinstance(loop, (ast.For, ast.AsyncFor)) else loop.test
        rng = Range(ctx.src.node_start(loop), ctx.src.node_end(head_end))
        ctx.report(
            rng,
            f"loop over `{p.expr.id}` without a live `set_epoch(...)`: the call at {line} hands it a loader over "
            f"a shuffling DistributedSampler and never takes the branch with "
            f"`{ast.unparse(dead.func)}(...)`, so every pass shuffles in the same order",
            related=[sampler, call, (dead, "never runs on that call")],
        )

    def _from_builders(self, ctx, fors, reported: set[int]) -> None:
        """``loader, sampler = build(...)`` where ``build`` is a project function that returns a
        DataLoader over a shuffling DistributedSampler (and maybe that sampler)."""
        from ..flow import for_context  # lazy: only files that build loaders elsewhere need the project
        from ..flow.findings import node_span

        iterated = {n.id for f in fors for n in ast.walk(f.iter) if isinstance(n, ast.Name)}
        ana = None
        for call in ctx.sem.calls:
            st = parent(call)
            if not isinstance(st, ast.Assign) or st.value is not call or len(st.targets) != 1:
                continue
            t = st.targets[0]
            names = [t] if isinstance(t, ast.Name) else list(t.elts) if isinstance(t, ast.Tuple) else None
            if not names or not all(isinstance(n, ast.Name) for n in names):
                continue
            if not any(n.id in iterated for n in names):
                continue  # nothing it returns is looped over
            if ana is None:
                ana = for_context(ctx)
            got = ana.resolve_call(ana.main, call)
            if got is None or got[1].name == "__init__":
                continue
            built = _built_loader(ana, *got)
            if built is None:
                continue
            positions, helper_sampler, view = built
            if dead_at_call(ana.main, call, view, got[1], helper_sampler):
                continue  # ``DistributedSampler(...) if distributed else None``, called with the flag off
            single = isinstance(t, ast.Name)
            l_name = s_name = None
            for pos, kind in positions.items():
                if single and pos is None:
                    name = t.id
                elif not single and pos is not None and pos < len(names):
                    name = names[pos].id
                else:
                    continue
                if kind == "loader":
                    l_name = name
                else:
                    s_name = name
            if l_name is None or is_eval_name(s_name, l_name, got[1].name):
                continue
            scope = ctx.sem.scope_of(st)
            for loop, use in _epoch_loops(ctx, l_name, scope, st, fors):
                if id(loop) in reported or _handed_off(ctx, use, loop) or _reseeded(helper_sampler, loop):
                    continue
                reported.add(id(loop))
                ref = s_name if s_name else f"{l_name}.sampler"
                where = ("file", view.path, node_span(ctx, view.path, helper_sampler),
                         f"the shuffling DistributedSampler that `{got[1].name}()` builds") \
                    if view.path and view is not ana.main else (helper_sampler, "the DistributedSampler")
                self._report(ctx, loop, where, ref, False)

    def _report_refill(self, ctx, loop, refill, p, sampler) -> None:
        """A step-driven loop whose rounds re-create the iterator over the loader (``_refill``):
        the finding is on that ``iter(...)``; no fix (the epoch to pass is the author's count)."""
        line = ctx.src.node_range(loop).start.line + 1
        ctx.report(
            refill,
            f"`iter({ast.unparse(p.expr)})` starts a new pass over a DataLoader (for the loop at line {line}) "
            "without `sampler.set_epoch(...)`: the DistributedSampler shuffles every pass in the same order",
            related=[sampler if isinstance(sampler, tuple) else (sampler, "the DistributedSampler"),
                     (loop, "the loop whose rounds re-create the iterator")],
        )

    def _report(self, ctx, loop, sampler, ref: str, maybe_none: bool, fixable: bool = True) -> None:
        fix = None
        if fixable and isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.target, ast.Name) and loop.body:
            code = f"{ref}.set_epoch({loop.target.id})"
            if maybe_none:  # `sampler = DistributedSampler(ds) if distributed else None`
                first = loop.body[0]
                indent = ctx.src.indent_of(first.lineno - 1)
                step = indent[len(ctx.src.indent_of(loop.lineno - 1)):] or "    "
                code = f"if {ref} is not None:{ctx.src.newline}{indent}{step}{code}"
            edit = ctx.insert_before(loop.body[0], code)
            if edit is not None and loop.body[0].lineno > loop.lineno:
                fix = ctx.fix(Applicability.SAFE, f"Insert `{ref}.set_epoch({loop.target.id})`", [edit])
        head_end = loop.iter if isinstance(loop, (ast.For, ast.AsyncFor)) else loop.test
        rng = Range(ctx.src.node_start(loop), ctx.src.node_end(head_end))
        ctx.report(
            rng,
            f"epoch loop without `{ref}.set_epoch(epoch)`: the DistributedSampler shuffles every epoch in "
            "the same order",
            related=[sampler if isinstance(sampler, tuple) else (sampler, "the DistributedSampler")],
            fix=fix,
        )


def _rel(ctx, path: str) -> str:
    """``path`` relative to the checked file's folder."""
    if not ctx.filename or ctx.filename.startswith("<"):
        return path
    return os.path.relpath(path, os.path.dirname(os.path.abspath(ctx.filename)))


def _refill(main, loop, p):
    """The ``iter(loader)`` call of this file that starts the pass ``p`` when it re-creates an
    iterator away from the loop's own statements: in a function the loop calls (an endless-loader
    wrapper's ``next()``) or in an ``except`` handler (``except StopIteration: it = iter(loader)``),
    the shape of a loop driven by steps rather than by epochs; None otherwise."""
    at = p.at
    if p.view is not main or not (isinstance(at, ast.Call) and isinstance(at.func, ast.Name) and at.func.id == "iter"):
        return None
    if len(p.chain) > 1:
        return at
    node = parent(at)
    while node is not None and node is not loop:
        if isinstance(node, ast.ExceptHandler):
            return at
        node = parent(node)
    return None


def _pass_names(e) -> tuple:
    """The names a pass's value is known by: ``loader``, ``self.loader`` (``loader``),
    ``loaders["val"]`` (``loaders`` and the key ``val``)."""
    if isinstance(e, ast.Subscript):
        k = e.slice.value if isinstance(e.slice, ast.Constant) and isinstance(e.slice.value, str) else None
        return (*_pass_names(e.value), k)
    return (e.id if isinstance(e, ast.Name) else e.attr if isinstance(e, ast.Attribute) else None,)


def _loader_name(ld: ast.Call) -> str | None:
    """``loader`` for ``loader = DataLoader(...)`` and ``loader, x = DataLoader(...), y``."""
    st = parent(ld)
    if isinstance(st, ast.Tuple):
        tup, st = st, parent(st)
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Tuple) \
                and len(st.targets[0].elts) == len(tup.elts) and st.value is tup:
            t = st.targets[0].elts[tup.elts.index(ld)]
            return t.id if isinstance(t, ast.Name) else None
        return None
    if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
        return target_name(ld)
    return None


def _epoch_loops(ctx, name: str, scope, after: ast.AST, fors):
    """(loop, use) for each use of ``name`` inside the body of a loop of ``scope``."""
    uses: list[ast.AST] = []
    for f in fors:
        it = f.iter
        if isinstance(it, ast.Name) and it.id == name:
            uses.append(it)
    for c in ctx.sem.calls:
        if isinstance(c.func, ast.Name) and c.func.id in _NOT_ITERATING:
            continue  # `len(loader)` inside the batch loop is no new pass over the data
        for a in (*c.args, *(k.value for k in c.keywords)):
            if isinstance(a, ast.Name) and a.id == name:
                uses.append(a)
    for u in uses:
        if u.lineno < after.lineno:
            continue
        child, p = u, parent(u)
        while p is not None:
            if isinstance(p, (*FUNC_TYPES, ast.Lambda, ast.ClassDef)):
                break
            if isinstance(p, _LOOPS) and (child in p.body):
                if not _iterates(p, name):  # the batch loop itself is not the epoch loop
                    if ctx.sem.scope_of(p) is scope:
                        yield p, u
                    break
            child, p = p, parent(p)


_NOT_ITERATING = frozenset({"len", "print", "str", "repr", "isinstance", "getattr", "hasattr", "id", "type"})


def _iterates(loop, name: str) -> bool:
    """``for ... in loader`` / ``in enumerate(loader)`` / ``in tqdm(loader, ...)``."""
    it = getattr(loop, "iter", None)
    if it is None:
        return False
    return any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(it))


def _handed_off(ctx, use: ast.AST, loop) -> bool:
    """The loader goes to a function of another module together with the epoch variable."""
    call = parent(use)
    if isinstance(call, ast.keyword):
        call = parent(call)
    if not isinstance(call, ast.Call):
        return False
    f = call.func
    if isinstance(f, ast.Name) and f.id in ctx.sem.functions:
        return False  # defined here, and the file never calls set_epoch
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call) and isinstance(f.value.func, ast.Name) \
            and any(isinstance(parent(fn), ast.ClassDef) and parent(fn).name == f.value.func.id
                    for fn in ctx.sem.functions.get(f.attr, ())):
        return False  # ``Cls(...).m(...)``, a method of a class defined here
    if isinstance(f, ast.Name) and f.id in ("enumerate", "iter", "zip", "tqdm", "len", "list"):
        return False
    if isinstance(loop, (ast.For, ast.AsyncFor)) and isinstance(loop.target, ast.Name):
        ep = loop.target.id
        return any(isinstance(a, ast.Name) and a.id == ep for a in (*call.args, *(k.value for k in call.keywords)))
    return True


def _reseeded(sampler: ast.Call, loop) -> bool:
    """The sampler is built anew in each round of ``loop`` with a seed that reads a name the loop
    (or a loop inside it around the sampler) binds as its target (``seed=base + epoch``), there or
    through a parameter of the function that builds it, called in the loop with such an argument
    (``self._fresh(epoch)``): each round's sampler draws another order, and ``set_epoch`` has
    nothing to add."""
    seed = get_arg(sampler, 4, "seed")
    return seed is not None and _reads_round(seed, sampler, loop, 0)


def _reads_round(expr, at, loop, depth: int) -> bool:
    reads = {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}
    n = parent(at)
    while n is not None:
        if isinstance(n, (ast.For, ast.AsyncFor)) and reads & {t.id for t in ast.walk(n.target)
                                                               if isinstance(t, ast.Name)}:
            return True
        if n is loop:
            return False
        if isinstance(n, FUNC_TYPES):
            params = reads & {a.arg for a in (*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs)}
            calls = [c for c in ast.walk(loop) if isinstance(c, ast.Call) and (
                c.func.id if isinstance(c.func, ast.Name) else getattr(c.func, "attr", None)) == n.name]
            if depth or not params or not calls:
                return False
            return all(any(_reads_round(a, c, loop, 1) for k, a in bind_args(c, n).items() if k in params)
                       for c in calls)
        n = parent(n)
    return False


def _sampler_name(call: ast.Call) -> str | None:
    """``s`` for ``s = DistributedSampler(...)`` and ``s = DistributedSampler(...) if dist else None``."""
    p = parent(call)
    if isinstance(p, ast.IfExp):
        p = parent(p)
    if isinstance(p, ast.Assign) and len(p.targets) == 1 and isinstance(p.targets[0], ast.Name):
        return p.targets[0].id
    return None


def _built_loader(ana, view, fn):
    """What ``fn`` (a project function) returns, when that is a DataLoader over a shuffling
    DistributedSampler built in ``fn``: ({position or None: "loader" | "sampler"}, the sampler call,
    view). Every ``return`` must agree; its module must never call ``set_epoch``."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or _calls_set_epoch(view.sem, view.text):
        return None
    memo = view.memo.setdefault("ddp301.built", {})
    if id(fn) in memo:
        return memo[id(fn)]
    memo[id(fn)] = None
    sem = view.sem
    fake = SimpleNamespace(sem=sem)
    returns = [n for n in ast.walk(fn) if isinstance(n, ast.Return)
               and sem.enclosing_function(n) is fn]
    if not returns or any(r.value is None for r in returns):
        return None
    if len(returns) == 1 and isinstance(returns[0].value, ast.Call):
        # ``return make_loader(32)``: what the project function it returns the result of builds
        got = ana.resolve_call(view, returns[0].value)
        if got is not None and got[1] is not fn and getattr(got[1], "name", "") != "__init__":
            inner = _built_loader(ana, *got)
            if inner is not None:
                memo[id(fn)] = inner
                return inner
    shapes = set()
    found = None
    for r in returns:
        elts = list(r.value.elts) if isinstance(r.value, ast.Tuple) else [r.value]
        single = not isinstance(r.value, ast.Tuple)
        kinds: dict = {}
        for i, e in enumerate(elts):
            kind, sampler = _kind(fake, sem, e, fn, ana, view)
            if kind is not None:
                kinds[None if single else i] = kind
                found = sampler if kind == "loader" or found is None else found
        shapes.add(tuple(sorted(kinds.items(), key=lambda kv: -1 if kv[0] is None else kv[0])))
    if len(shapes) != 1 or found is None:
        return None
    positions = dict(next(iter(shapes)))
    if "loader" not in positions.values():
        return None
    memo[id(fn)] = (positions, found, view)
    return memo[id(fn)]


def _kind(fake, sem, e: ast.AST, fn, ana=None, view=None) -> tuple[str | None, ast.AST | None]:
    """("loader", sampler call) for a DataLoader fed by a shuffling DistributedSampler made in
    ``fn``; ("sampler", call) for that sampler; (None, None) otherwise."""
    val = sem.single_value(e.id, fn) if isinstance(e, ast.Name) else e
    if not isinstance(val, ast.Call):
        return None, None
    qn = sem.call_qualname(val) or ""
    if qn in (DIST_SAMPLER, "torch.utils.data.distributed.DistributedSampler"):
        return ("sampler", val) if _shuffles(val, sem) else (None, None)
    if not is_loader_call(sem, val):
        return None, None
    arg = loader_sampler(fake, val)
    s = sem.single_value(arg.id, fn) if isinstance(arg, ast.Name) else arg
    if isinstance(s, ast.Call) and (sem.call_qualname(s) or "") in (
            DIST_SAMPLER, "torch.utils.data.distributed.DistributedSampler") and _shuffles(s, sem):
        return "loader", s
    if ana is not None and arg is not None and not (isinstance(s, ast.Call) and (sem.call_qualname(s) or "") in (
            DIST_SAMPLER, "torch.utils.data.distributed.DistributedSampler")):
        # the sampler from a helper's return (``sampler=make_sampler(ds)``), a tuple, a parameter
        from ..flow.origins import origins
        found = origins(ana, view, arg, val)
        if found and all(v is view and isinstance(x, ast.Call) and (v.sem.call_qualname(x) or "") in (
                DIST_SAMPLER, "torch.utils.data.distributed.DistributedSampler") and _shuffles(x, v.sem)
                for v, x in found):
            return "loader", found[0][1]
    return None, None


def _shuffles(call: ast.Call, sem=None) -> bool:
    shuffle = get_arg(call, 3, "shuffle")
    return shuffle is None or is_true(shuffle, sem)


def _calls_set_epoch(sem, text: str | None) -> bool:
    """The module calls ``<something>.set_epoch(...)`` (a comment or a string saying so does not
    count; a module whose text is unknown is assumed to)."""
    if text is not None and "set_epoch" not in text:
        return False
    return text is None or any(isinstance(c.func, ast.Attribute) and c.func.attr == "set_epoch" for c in sem.calls)


# builders nest: a loop's loader through a builder, a data-manager and a dataset factory is ~8 steps
_LOADER_STEPS = 10
_SAMPLER_QNS = (DIST_SAMPLER, "torch.utils.data.distributed.DistributedSampler")


def _distributed_loader(ana, view, expr, at, callers=None):
    """(loader view, DataLoader call, sampler view, sampler call, the loader's ``sampler=``
    argument, may the sampler be None: True, or "class" when its class is chosen at run time) when ``expr`` at ``at`` may hold a DataLoader whose sampler
    is a DistributedSampler that shuffles on that path (or None on some path, nothing else); else
    None. Helpers' parameters are read in the context of the calls that lead there (``origins``'
    frames): ``shuffle=training`` shuffles when the builder was called with ``training=True``."""
    from ..flow.origins import branch_origins

    for lv, ld, fr in branch_origins(ana, view, expr, at, frames=(), limit=_LOADER_STEPS, callers=callers):
        if not is_loader_call(lv.sem, ld):
            continue
        s_arg = loader_sampler(SimpleNamespace(sem=lv.sem), ld)
        if s_arg is None:
            continue
        found = branch_origins(ana, lv, s_arg, ld, frames=fr, callers=callers) if not isinstance(s_arg, ast.Call) or \
            (lv.sem.call_qualname(s_arg) or "") not in _SAMPLER_QNS else [(lv, s_arg, fr)]
        # a sampler of a helper's branch that the call leading there never takes is not built
        found = [(sv, sc, sf) for sv, sc, sf in found if not dead_in_frame(sv, sc, sf)]
        built = [(sv, sc, sf, _builds_sampler(ana, sv, sc, sf, callers)) for sv, sc, sf in found
                 if isinstance(sc, ast.Call)]
        samp = [(sv, sc, sf) for sv, sc, sf, k in built if k]
        nones = [sc for _, sc, _ in found if isinstance(sc, ast.Constant) and sc.value is None]
        if not samp or len(samp) + len(nones) != len(found) \
                or not all(_shuffles_here(ana, sv, sc, sf) for sv, sc, sf in samp):
            continue
        s_name = s_arg.id if isinstance(s_arg, ast.Name) else None
        if is_eval_name(s_name, target_name(ld)):
            continue
        sv, sc, _ = samp[0]
        # a sampler class chosen at run time (``RandomSampler`` off the distributed path) has no
        # ``set_epoch`` on every path, and no None test tells: "class" (no fix)
        return lv, ld, sv, sc, s_arg, "class" if any(k == "some" for *_, k in built) else bool(nones)
    return None


def _builds_sampler(ana, view, call, frames=(), callers=None):
    """"all" when ``call`` builds a DistributedSampler, "some" when its class is chosen at run
    time among a DistributedSampler and other samplers of ``torch.utils.data`` (``cls =
    DistributedSampler if distributed else RandomSampler``, then ``cls(ds)``: ``call_classes``,
    through a parameter, a dict of classes or a helper's return), else None."""
    if (view.sem.call_qualname(call) or "") in _SAMPLER_QNS:
        return "all"
    from ..flow.instances import call_classes

    if project_sampler(ana, view, call, _SAMPLER_QNS):
        return "all"

    qns = call_classes(ana, view, call, frames, callers)
    dist = [q for q in qns if q in _SAMPLER_QNS]
    if not dist:
        return None
    if len(dist) == len(qns):
        return "all"
    return "some" if all(q is not None and q.startswith("torch.utils.data.") for q in qns) else None


def _required_distributed(ana, p):
    """The loader comes from outside (a user's ``model.train_dataloader``), but the module that
    walks it refuses, in distributed runs, a loader whose ``sampler`` is not a DistributedSampler
    (``if use_ddp and not isinstance(self.loader.sampler, DistributedSampler): raise ...``,
    ``flow.type_guards``). Its shuffle is the sampler's default. The same result shape as
    ``_distributed_loader``, with no DataLoader call: (view, None, view, the guarded expression,
    None, True)."""
    from ..flow.type_guards import requires

    if not requires(p.view, p.expr, _SAMPLER_QNS, "sampler"):
        return None
    return p.view, None, p.view, p.expr, None, True


def _shuffles_here(ana, view, call, frames) -> bool:
    """The sampler shuffles on some path of this context: no ``shuffle=``, or one whose value may
    be ``True`` (a literal, or through the frames' arguments, argparse defaults, config items)."""
    from ..flow.origins import branch_origins

    shuffle = get_arg(call, 3, "shuffle")
    if shuffle is None or is_true(shuffle, view.sem):
        return True
    return any(isinstance(e, ast.Constant) and e.value is True
               for _, e, _ in branch_origins(ana, view, shuffle, call, frames=frames))


def _pass_ref(ana, main, loop, p, lv, ld, s_arg, maybe_none):
    """(spelling of the sampler at the top of ``loop``'s body, needs a None guard) for the fix, or
    (None, False) when no name there is known to hold it: the loader's ``sampler=`` name, or the
    iterated loader's name, with the same bindings reaching the loop's first statement."""
    if not isinstance(loop, (ast.For, ast.AsyncFor)) or not loop.body or maybe_none == "class":
        return None, False
    first = loop.body[0]
    if isinstance(s_arg, ast.Name) and lv is main and _same_binding(main, s_arg.id, ld, first):
        return s_arg.id, maybe_none
    if maybe_none or p.view is not main or not isinstance(p.expr, ast.Name):
        return None, False
    if _same_binding(main, p.expr.id, p.at, first):
        return f"{p.expr.id}.sampler", False
    return None, False


def _same_binding(view, name: str, a: ast.AST, b: ast.AST) -> bool:
    from ..flow.bindings import reaching

    ka, ea = reaching(view, name, a)
    kb, eb = reaching(view, name, b)
    if ka not in ("events", "global") or ka != kb or not ea:
        return False
    return [id(x) for x in ea] == [id(x) for x in eb or ()]


# -- the epoch iterator's project-wide facts ---------------------------------------------------
_EPOCH_NEEDS = (("set_epoch",),)


def _project_root(filename: str | None) -> str | None:
    from ..flow import project

    if not filename or filename.startswith("<") or not project.is_file(os.path.abspath(filename)):
        return None
    roots = project.roots_for(os.path.abspath(filename))
    return roots[1] if len(roots) > 1 else roots[0]


def _epoch_gate(text: str, filename: str | None):
    """(may fire, deps): the project's files that spell ``set_epoch``, when this file may hold an
    epoch iterator (an augmented assignment and a DataLoader)."""
    from ._common import _admitting_files
    from ..flow import project

    if "+=" not in text or "DataLoader" not in text:
        return False, {}
    top = _project_root(filename)
    if top is None:
        return False, {}
    files, _index, deps = _admitting_files(top, _EPOCH_NEEDS, project.disk_allowed())
    here = os.path.abspath(filename)
    deps = {p: h for p, h in deps.items() if p != here}
    return bool(files), deps


def _unfed_epoch_datasets(ctx) -> list:
    """[(view, class)] of the project's dataset classes that take the epoch, when no file of the
    project calls ``set_epoch`` outside a ``set_epoch`` forwarder; [] otherwise."""
    def build():
        from ._common import _admitting_files
        from ..flow import for_context, project
        from ..flow.passes import calls_set_epoch_outside_forwarders, classes_of, takes_epoch

        top = _project_root(ctx.filename)
        if top is None:
            return []
        files, _index, _deps = _admitting_files(top, _EPOCH_NEEDS, project.disk_allowed())
        if len(files) > 64:
            return []  # a large package: too many files to read for one check
        an = for_context(ctx)
        found = []
        for path, _text in files:
            view = an.main if os.path.abspath(path) == os.path.abspath(ctx.filename) else an.view_of(path)
            if view is None:
                return []  # unreadable: it may call set_epoch
            if calls_set_epoch_outside_forwarders(view.sem):
                return []
            for cls in classes_of(view.sem):
                if takes_epoch(cls):
                    found.append((view, cls))
        return found

    return ctx.memo("ddp301.unfed_epoch_datasets", build)
