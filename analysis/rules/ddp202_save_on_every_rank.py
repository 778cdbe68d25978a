from __future__ import annotations

import ast

import os

from ..model import Severity
from ..registry import NoCase, Rule
from ..semantic import FUNC_TYPES, get_arg, param_names, parent, subtree
from ..source import lowered, nfkc
from ..flow.assignments import reaching_assignment
from ..flow.fs_ranks import DUMPS, dumped_file, per_item_path, per_process_path, rank_specific_path
from ..flow.group_free import without_group
from ..flow.viewctx import view_ctx
from ..flow.models import LAUNCH_TEXT, distributed_program
from ..flow.rank import rank0_guarded
from ..flow.rank_tests import RANK_NEEDLES, is_rank_like
from ..flow.uniformity import MAIN_NAMES
from ._spawn import runs_in_ranks



# what a file must spell to hold a main-rank test (``rank_tests.polarity``): a rank-like name, a
# main-like one (its tokens, the known names), or a world size
_RANK_TEST_TEXT = tuple(NoCase(n) for n in sorted({*RANK_NEEDLES, *MAIN_NAMES, "main", "master", "zero", "chief",
                                                    "leader", "primary", "root", "lead", "world", "should_"}))


# what a writer spells (lower case): ``torch.save``, ``jit.save``, ``save_file``, ``.save(...)``,
# ``export_chrome_trace``..., and ``open(path, "w")`` (``_main_only_writes``)
_WRITER_TEXT = ("save", "export_", "open(")


class SaveOnEveryRank(Rule):
    """
    ## What it does
    Checks for `torch.save(obj, path)` in a distributed script (one that calls
    `init_process_group`, wraps in DDP/FSDP or spawns its ranks, or starts the process group
    through a function of another module of the project: `ext_dist.init_distributed(...)` with
    `import extend_distributed as ext_dist`, `from .comm import setup`, also when that function
    starts it only for a world size read from the environment, not when it makes a world of one
    process) that is not under a rank-0 guard and writes to a path that does not depend on the rank.

    Guards are recognised as `if rank == 0:`, `if dist.get_rank() == 0:`,
    `if args.local_rank in [-1, 0]:`, `if opt["rank"] == 0:` (an options dict's rank entry),
    `if master_process:`, `if is_main_process():` (and helpers of the file that return such a
    test), a flag that holds only on the main rank by its bindings (`log = True`, then `log =
    dist.get_rank() == 0` where the group is created; `self.cfg.out_dir = None` on the other
    ranks in `__init__`, then `if self.cfg.out_dir is not None:` in another method), `if not distributed or rank == 0:`, the `else` of `if rank != 0:`, an early
    `if rank != 0: return`, a test that the world has one process
    (`if dist.get_world_size() != 1: raise ...`, `WORLD_SIZE` from the environment, read by value
    flow, not by name), decorators such as `@rank_zero_only`, a
    function whose every call in the file is guarded, and a test of a helper's parameter that
    every call of the helper in the file fills with one such test (`elif not ddp:` in
    `train(model, ddp)` with `ddp = int(os.environ.get("RANK", -1)) != -1`). A save in a function this file never calls
    (unless that function starts the process group itself, outside any `if`, before the save), or
    in the launching process of an `mp.spawn` script, is not flagged; nor is a per-item output
    whose path comes from a loop over this rank's share of the work (`for p in
    paths[rank::world_size]`, `range(rank, n, world_size)`, this rank's block of the indices
    `range(rank * per, min(rank * per + per, n))`, a loader with a `DistributedSampler`, and inner
    loops over its batches): each rank writes different files; nor is a save in a helper that
    only the one-process branch of a test on the world size calls (`if self.world > 1: ... else:
    self._local(x)`, through up to three callers of the file). Nor is a path made of a value unique to the
    process and the call (`uuid.uuid4()`, `os.getpid()`, `tempfile.mkdtemp()`, `time.time()`,
    through names bound before the save, or through a parameter of the function that every call
    of it in the file fills with one: `with tempfile.TemporaryDirectory() as d: write_inputs(d)`),
    or with a value that a library function returns from no
    argument formatted into the file's name (`f"{folder}/batch-{make_id()}.pt"`: code the analysis
    cannot see, from nothing the ranks share, so nothing says the name is shared; in the folder
    part, `f"{run_dir()}/model.pt"`, it still is). Nor is a save on a program path that never
    creates the process group (`flow.group_free`): a subcommand of a command-line tool whose
    dispatch makes the group only in another branch (`if cmd == "train": train()  elif cmd ==
    "export": export()`), in the save's function and in every function of the file on the way
    to it, with no loop around that dispatch.

    A call, on every rank, of a helper from another file of the project
    (`save_checkpoint(state, args.output_dir)` from `utils/checkpoint.py`, whatever its name: the
    import that binds it says where it lives, an absolute or a relative one, also through the
    module, `utils.write_config(cfg, out)`; a method only when its name says it saves) is
    flagged at the call when the helper runs its `torch.save` (or another writer) unconditionally
    (no `if`, no early `return`, no decorator) on a path made only of its parameters, and none of
    the arguments given for them is
    rank-specific. Helpers that guard themselves (`save_on_master`) stay silent. When the call sits
    in a method that no function of its file runs (`self._save(tag)` from `fit()`), the project's
    entry decides: a script that runs `fit()` on every rank after joining the process group, itself
    or through a project helper (`ddp, rank = setup_ddp()`), with no main-rank test around the call.

    The writers are `torch.save`, `torch.jit.save`, safetensors `save_file`/`save_model`, the
    `.save(path)` of a scripted module (`torch.jit.script(m).save(p)`), a profiler's trace
    export (`prof.export_chrome_trace(p)`), `np.save`/`np.savez`/`np.savez_compressed`, and a
    serializer that dumps a whole object into a file opened for writing at a path
    (`pickle.dump(args, f)`, `json.dump`, `yaml.dump`/`yaml.safe_dump` into `with open(path,
    "wb") as f:`, `f = open(path, "w")`, `open(path, "w")` itself or `Path(p).open("w")`;
    `flow.fs_ranks.dumped_file`): every rank truncates and rewrites the same file, and a rank
    that reads it back (a resume) may find it empty. A file opened for appending or reading,
    `sys.stdout` or an in-memory buffer is not a write of a shared file. The receiver of a method,
    and the file object of a dump, are known by value flow (the call that made it, a `with ... as`
    binding, a declared type such as `prof: torch.profiler.profile = ...`), never by its name. A script that builds an
    `accelerate.Accelerator` is a distributed script too (`accelerate launch` runs it in every
    process; `accelerator.save` writes from the main process only and is not a writer here).

    A write in a module that starts no process group itself (a trainer class, a checkpoint
    module) is flagged when a distributed script of the project (one that joins the process group,
    itself or through a project helper, before the call) runs it on every rank: the
    write is behind no main-rank test in its function, and that function, or one of its module
    that runs it unguarded (`self._save_checkpoint("best")` from `fit()`, transitively), is called
    from the script with no main-rank test around the call (`trainer = Trainer(...);
    trainer.fit()` in `main.py`). A save helper called directly is reported at the call instead
    (above).
    Three more findings need no launch call in the file (the fourth needs one):

    1. a guard meant for the main rank that lets a few ranks through: `if not (dist.is_initialized()
       and dist.get_rank() > 1):` or `if rank < 2:` (ranks 0 and 1 both write). It is reported at
       the comparison, once per test, unless the function's calls in the file are all main-rank
       only or the path is rank-specific (`flow.rank_sets.ranks_admitted` reads the test:
       comparisons of a rank with integer constants, through `not`, `and`/`or` and names bound
       once; `rank % 8 == 0` and comparisons with variables say nothing);
    2. a write in a method of a class whose other method guards its own write with a main-rank
       test that asks the process (`if not is_master(): return`, `if self.rank != 0:`), not a flag
       its caller passes in (`is_main_process=True` parameter): the class runs on every rank and
       this write was missed;
    3. a write in a method of a class that tells its main rank apart (a method or property whose
       only `return` is a main-rank test: `return self.rank == 0`) and does not test it there.

    4. a write on every rank (any writer of `flow.fs_effects`: `torch.save`, `np.save`,
       `open(path, "w"/"a")`, also inside a project helper the path is passed to) whose path is
       made of a name that only the main rank sets, the other ranks keeping a literal default
       (`out_dir = ""` then `if rank == 0: out_dir = make_run_dir()`, `flow.fs_ranks`): every
       other rank writes to the default, the same file (in the working directory for `""`). A
       test of that name around the write (`if out_dir:`, `if out_dir is not None:`) silences it.

    For 2 and 3 the write must not be behind a main-rank test itself, nor in the branch of a test
    on the distributed mode that only a one-process run takes (`if self.args.world_size <= 1:
    torch.save(st, "rng.pth")` / `else:` a per-rank file), every call of its method in
    the file must not be main-rank only, and test files (`test_*.py`) are left alone. The name of a
    main-rank test (`is_master`, `is_main_process`) is read only where the value flow gives no
    answer (the guard is a call of another module's function, an attribute).

    ## Why is this bad?
    Every rank runs the line, so N processes open, truncate and write the same file at the same
    time. The result is a corrupt or truncated checkpoint that fails to load later:

    ```
    RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory
    ```

    and on shared file systems the writes also slow every rank down.

    ## Example
    ```python
    dist.init_process_group("nccl")
    ...
    torch.save(model.module.state_dict(), "checkpoint.pt")
    ```

    ## Use instead
    ```python
    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), "checkpoint.pt")
    dist.barrier()  # before other ranks read it
    ```

    ## Fix safety
    There is no fix: where the guard belongs (and whether the other ranks must wait with a
    `barrier()`) depends on the script.
    """

    code = "DDP202"
    name = "save-on-every-rank"
    severity = Severity.WARNING
    # (the writers' own needles, ``_WRITER_TEXT``, are asked in ``reach``: in this file, or in a
    # project module it imports, where a helper it calls may write)
    # is_distributed_script: a launch call is spelled in the file; an ``Accelerator``; else (a
    # library) a rank or main-rank test (``polarity``: a rank-like or main-like name, a world size)
    # (``torch.save``: a library's save helper that a distributed script runs on every rank,
    # through modules that start nothing: ``_entry_report``)
    # (``save``/``dump``: a writer of ``write_calls`` in a library module: ``torch.save``, ``np.save``,
    # ``pickle.dump`` / ``json.dump`` into a file opened for writing)
    requires_text = (*LAUNCH_TEXT, "Accelerator", *_RANK_TEST_TEXT, "save", "dump")

    @classmethod
    def reach(cls, text, filename):
        # torch.save and the other writers, a save helper, or a profiler's trace export: in this
        # file, or in a project module it imports (``_through_helpers``)
        low = lowered(text)
        if any(n in low for n in _WRITER_TEXT):
            return True, {}
        text = nfkc(text)  # identifiers are NFKC-normalised by the parser
        if not any(n in text for n in LAUNCH_TEXT):
            return False, {}  # a helper's write is only followed from a distributed script
        from ..flow.reach import reaches

        return reaches(filename, text, _WRITER_TEXT, fold=True)

    def finish(self, ctx) -> None:
        distributed = distributed_program(ctx) or _builds_accelerator(ctx)
        if distributed and distributed_program(ctx):
            self._through_helpers(ctx)
        loose_done: set[int] = set()
        reported: set[int] = set()
        for call, path, what, noun in write_calls(ctx):
            if path is None:
                continue
            # every test must let the save through: the usual deciding one (a save under a rank-0
            # guard) first, the walks over the path's bindings after
            guarded = rank0_guarded(ctx, call)
            loose = _loose_guard(ctx, call)
            if loose is not None:
                if not rank_specific_path(ctx, path, call) and not unique_path(ctx, path, call) \
                        and runs_in_ranks(ctx, call) is not False:
                    test, ranks = loose
                    if id(test) in loose_done:
                        continue  # one finding per test: the first write behind it
                    loose_done.add(id(test))
                    line = ctx.src.node_range(call).start.line + 1
                    ctx.report(test, f"this main-rank test lets {ranks} through to the {what} at line {line}: "
                                     f"they write the same path at the same time and corrupt the {noun}; test "
                                     "for one rank (`rank == 0`)",
                               related=[(call, f"the {what} that several ranks run")])
                continue
            if guarded is True:
                continue
            if guarded is None and _joins_group_before(ctx, call):
                guarded = False  # the function that starts the process group runs on every rank
            if rank_specific_path(ctx, path, call) or per_item_path(ctx, path, call) or unique_path(ctx, path, call):
                continue
            if runs_in_ranks(ctx, call) is False or _single_run_helper(ctx, call):
                continue
            if guarded is False and distributed:
                if without_group(ctx, call):
                    continue  # a subcommand of the program that never makes the group
                reported.add(id(call))
                ctx.report(
                    call,
                    f"{what} runs on every rank and writes the same path: concurrent writers corrupt "
                    f"the {noun}; guard it with `if rank == 0:` (or make the path rank-specific)",
                )
                continue
            if guarded is None and not distributed and _entry_report(ctx, call, what, noun):
                reported.add(id(call))
                continue
            sibling = _guarded_sibling(ctx, call)
            if sibling is not None:
                ctx.report(call, f"{what} runs on every rank that calls it, while {sibling}: concurrent "
                                 f"writers corrupt the {noun}; guard it with a main-rank test")
        if distributed:
            _main_only_writes(ctx, reported)

    def _through_helpers(self, ctx) -> None:
        """A call, on every rank, of a save helper of another project file (``save_checkpoint(state,
        args.output_dir)``) whose ``torch.save`` runs unguarded on a path made only of its
        parameters, none of them rank-specific at this call."""
        from ..flow import for_context  # lazy: only scripts that call project helpers load them
        from ..flow.helper_calls import bind_args

        from ..flow.helper_calls import calls_named_if

        from ..flow.imports import _NOT_PROJECT

        ana = None
        # the helpers asked: a function imported from a module that may be the project's (by value
        # flow: the import that binds the name), or a method whose name says it saves
        seen: set[int] = set()
        cands = []
        # names a relative import binds (``from .record import write``): the package's own
        relative = {a.asname or a.name for n in ctx.sem.imports if n.__class__ is ast.ImportFrom and n.level
                    for a in n.names}
        for call in ctx.sem.calls:
            # ``write_config(...)`` / ``utils.write_config(...)``: a function the import names
            q = ctx.qn(call) if call.func.__class__ in (ast.Name, ast.Attribute) else None
            if (q and "." in q and q.split(".", 1)[0] not in _NOT_PROJECT) or (
                    not q and call.func.__class__ is ast.Name and call.func.id in relative):
                cands.append(call)
                seen.add(id(call))
        cands += [c for c in calls_named_if(ctx, _save_like) if id(c) not in seen]
        for call in cands:
            f = call.func
            name = f.id if f.__class__ is ast.Name else f.attr
            if (ctx.qn(call) or "").startswith("torch."):
                continue
            if ana is None:
                ana = for_context(ctx)
            got = ana.resolve_call(ana.main, call)
            if got is None or got[0] is ana.main:
                continue  # the same file: its torch.save is checked where it is
            view, fn = got
            found = _unguarded_save(view, fn)
            if found is None:
                continue
            save, params = found
            if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
                continue  # ``*args``/``**kwargs``: which parameter gets what is not known here
            args = bind_args(call, fn)
            if any(p not in args and p not in _defaults(fn) for p in params):
                continue
            used = [args[p] for p in params if p in args]
            if any(rank_specific_path(ctx, a, call) or per_item_path(ctx, a, call) or unique_path(ctx, a, call)
                   for a in used):
                continue
            if runs_in_ranks(ctx, call) is False:
                continue
            guarded, entry = rank0_guarded(ctx, call), None
            if guarded is None:
                # the calls of this file do not tell (a method no function here calls): a script
                # of the project that runs it on every rank does (``Trainer(...).fit()``)
                from ._rank_callers import every_rank_entry

                entry = every_rank_entry(ctx, call)
                guarded = None if entry is None else False
            if guarded is not False or (entry is None and without_group(ctx, call)):
                continue
            from ..flow.findings import node_span

            rng = node_span(ctx, view.path, save)
            writer = (view.sem.call_qualname(save) or "torch.save").replace("safetensors.torch.", "")
            noun = "checkpoint" if writer.startswith("torch.") or "save_" in writer else "file"
            writer = writer.replace("numpy.", "np.")
            related = [("file", view.path, rng, f"the {writer} every rank runs")] if view.path else []
            by = ""
            if entry is not None:
                caller, site, _callee = entry
                by = f" ({os.path.basename(caller.filename or '')} line {site.lineno} runs it so)"
                related.append(("file", caller.filename, node_span(ctx, caller.filename, site),
                                "the call every rank makes"))
            ctx.report(
                call,
                f"`{name}()` runs on every rank{by}, and its `{writer}` ({os.path.basename(view.path or '')} "
                f"line {save.lineno}) writes the same path from every rank: concurrent writers corrupt the "
                f"{noun}; call it under `if rank == 0:`",
                related=related,
            )


def _entry_report(ctx, call, what: str, noun: str) -> bool:
    """A write in a module that starts no process group, run on every rank by a distributed script
    of the project (``_rank_callers.every_rank_entry``: ``trainer.train()`` in ``main.py``, whose
    ``self._save_checkpoint(...)`` writes unguarded); reported at the write, the entry related."""
    from ._rank_callers import every_rank_entry

    entry = every_rank_entry(ctx, call)
    if entry is None:
        return False
    caller, site, callee = entry
    if callee is ctx.sem.enclosing_function(call) and isinstance(parent(callee), ast.Module):
        return False  # a save helper called directly: ``_through_helpers`` reports it at the call
    from ..flow.findings import node_span

    where = os.path.basename(caller.filename or "")
    ctx.report(call, f"{what} runs on every rank: {where} line {site.lineno} runs it on every rank, and "
                     f"every rank writes the same path: concurrent writers corrupt the {noun}; guard it "
                     "with a main-rank test (or make the path rank-specific)",
               related=[("file", caller.filename, node_span(ctx, caller.filename, site),
                         "the call every rank makes")])
    return True


# writers of a whole file at a path: qualified name -> (position, keyword) of the path
_WRITERS = {"torch.save": (1, "f"), "torch.jit.save": (1, "f"),
            "safetensors.torch.save_file": (1, "filename"), "safetensors.torch.save_model": (1, "filename")}
# methods that write a file, on a receiver made by one of these calls (``torch.jit.script(m).save(p)``,
# ``scripted = torch.jit.trace(m, x); scripted.save(p)``, ``with torch.profiler.profile() as prof:
# ... prof.export_chrome_trace(p)``): method -> (receiver makers, (position, keyword) of the path)
_METHOD_WRITERS = {
    "save": (("torch.jit.script", "torch.jit.trace", "torch.jit.freeze", "torch.jit.trace_module"), (0, "f")),
    "export_chrome_trace": (("torch.profiler.profile", "torch.autograd.profiler.profile",
                             "torch.autograd.profiler_legacy.profile"), (0, "path")),
    "export_stacks": (("torch.profiler.profile",), (0, "path")),
    "export_memory_timeline": (("torch.profiler.profile",), (0, "path")),
}
# whole-file writers of arrays at a path, and (``flow.fs_ranks.dumped_file``) the serializers that
# dump an object into a file opened for writing at a path
_ARRAY_WRITERS = ("numpy.save", "numpy.savez", "numpy.savez_compressed")
_CKPT_WRITERS = ("torch.save", "torch.jit.save", "safetensors.torch.save_file", "safetensors.torch.save_model")


def write_calls(ctx) -> list[tuple[ast.Call, ast.AST | None, str, str]]:
    """(call, path, what it is called in a message, what it writes) for each call of the file that
    writes a whole file at a path: ``torch.save``, ``torch.jit.save``, safetensors ``save_file``, a
    scripted module's ``.save(path)``, a profiler's trace export, ``np.save``, and a dump into a
    file opened for writing at a path (``pickle.dump(obj, f)``: ``fs_ranks.dumped_file``). The receiver of a method is
    followed by value flow (a name bound once, or by ``with ... as``), never by its name."""
    def build():
        out = []
        for call in ctx.calls_to(*_WRITERS):
            pos, kw = _WRITERS[ctx.qn(call)]
            short = ctx.qn(call).rsplit(".", 1)[1] if ctx.qn(call).startswith("safetensors") else ctx.qn(call)
            out.append((call, get_arg(call, pos, kw), f"`{short}`", "checkpoint"))
        for call in ctx.calls_to(*_ARRAY_WRITERS):
            short = ctx.qn(call).replace("numpy.", "np.")
            out.append((call, get_arg(call, 0, "file"), f"`{short}`", "file"))
        for call in ctx.calls_to(*DUMPS):
            # ``pickle.dump(args, f)`` into ``with open(path, "wb") as f:``: the path opened
            path = dumped_file(ctx, call)
            if path is not None:
                out.append((call, path, f"`{ctx.qn(call)}`", "file"))
        for call in ctx.sem.calls:
            f = call.func
            if f.__class__ is not ast.Attribute or f.attr not in _METHOD_WRITERS or ctx.qn(call):
                continue
            makers, (pos, kw) = _METHOD_WRITERS[f.attr]
            maker = _receiver_maker(ctx, f.value, call, makers)
            if maker is None:
                continue
            noun = "trace" if "profile" in maker else "checkpoint"
            out.append((call, get_arg(call, pos, kw), f"`{maker.rsplit('.', 1)[1]}(...).{f.attr}`", noun))
        out.sort(key=lambda t: (t[0].lineno, t[0].col_offset))
        return out
    return ctx.memo("ddp202.write_calls", build)


def _receiver_maker(ctx, recv: ast.AST, at: ast.AST, makers) -> str | None:
    """The qualified name of the call in ``makers`` whose result ``recv`` is."""
    if isinstance(recv, ast.Call):
        q = ctx.qn(recv) or ""
        return q if q in makers else None
    if not isinstance(recv, ast.Name):
        return None
    from ..flow.assignments import reaching_value

    val = reaching_value(ctx, recv.id, at)
    if isinstance(val, ast.Call) and (ctx.qn(val) or "") in makers:
        return ctx.qn(val)
    for b in ctx.sem.assignments(ctx.sem.scope_of(at)).get(recv.id, ()):
        if isinstance(b, ast.AnnAssign) and b.lineno <= at.lineno:
            # ``profiler: torch.profiler.profile = handler.build()``: the declared type
            q = ctx.qn(b.annotation) or ""
            if q in makers:
                return q
        if isinstance(b, (ast.With, ast.AsyncWith)):
            for item in b.items:
                v = item.optional_vars
                if isinstance(v, ast.Name) and v.id == recv.id and isinstance(item.context_expr, ast.Call):
                    q = ctx.qn(item.context_expr) or ""
                    if q in makers:
                        return q
    return None


_ACCELERATORS = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})


def _builds_accelerator(ctx) -> bool:
    """The module builds an ``accelerate.Accelerator``: ``accelerate launch`` runs it in every
    process of the job (a distributed context like ``init_process_group``)."""
    return ctx.memo("ddp202.accelerator", lambda: bool(ctx.calls_to(*_ACCELERATORS)))


def _main_only_writes(ctx, reported: set[int]) -> None:
    """A write on every rank (``flow.fs_effects``: a writer of the vocabulary, ``open(p, "w"/"a")``,
    or a project helper that makes one, its path bound to this call's arguments) whose path is made
    of a name that only the main rank sets (``flow.fs_ranks.main_only_part``: ``out = ""`` then
    ``if rank == 0: out = run_dir()``): every other rank writes to the fallback, the same file."""
    from ..flow import for_context
    from ..flow.fs_effects import WRITE, effects_at
    from ..flow.fs_ranks import main_only_part

    sem = ctx.sem
    cands = [c for c in sem.calls if id(c) not in reported and _has_literal_fallback(ctx, c)]
    if not cands:
        return
    an = for_context(ctx)
    for call in cands:
        if rank0_guarded(ctx, call) is not False or runs_in_ranks(ctx, call) is False:
            continue
        for e in effects_at(ctx, an, call):
            if e.kind != WRITE or e.path is None or e.view is not an.main or e.per_rank:
                continue
            path = e.path
            part = main_only_part(ctx, an.main, path, call)
            if part is None:
                continue
            # what the other ranks write: the path with the fallback in place of the name
            if any(rank_specific_path(ctx, x, call) or per_item_path(ctx, x, call) or unique_path(ctx, x, call)
                   for x in _parts_besides(path, part.name)):
                continue
            test = _guard_text(ctx, part.main)
            what = f"`{e.api}`" + (f" (through `{' -> '.join(e.via)}`)" if e.via else "")
            where = ", the working directory," if part.value in ("", ".", "./") else ""
            ctx.report(
                call,
                f"{what} runs on every rank and writes `{_short(ctx, path)}`, but `{part.name.id}` gets its "
                f"value only on the main rank (line {part.main.lineno}{test}): every other rank keeps "
                f"`{part.value!r}` (line {part.fallback.lineno}){where} and they all write that same file at "
                f"once; make the write main-rank only as well",
                related=[(part.main, "set only on the main rank"), (part.fallback, "what the other ranks keep")],
            )
            break


def _parts_besides(expr: ast.AST, node: ast.AST) -> list[ast.AST]:
    """The largest subexpressions of ``expr`` that do not hold ``node``."""
    if expr is node:
        return []
    if not any(n is node for n in subtree(expr)):
        return [expr]
    out = []
    for child in ast.iter_child_nodes(expr):
        if isinstance(child, ast.expr):
            out += _parts_besides(child, node)
    return out


def _has_literal_fallback(ctx, call: ast.Call) -> bool:
    """A name among ``call``'s arguments that its scope binds to a literal string once and to
    something else elsewhere (a cheap filter before ``main_only_part``)."""
    scope = ctx.sem.scope_of(call)
    binds = ctx.sem.assignments(scope)
    for a in (*call.args, *(k.value for k in call.keywords)):
        for n in subtree(a):
            if n.__class__ is ast.Name and len(binds.get(n.id, ())) >= 2 and any(
                    isinstance(b, ast.Assign) and any(isinstance(v, ast.Constant) and isinstance(v.value, str)
                                                      for v in subtree(b.value))
                    for b in binds[n.id]):
                return True
    return False


def _guard_text(ctx, node: ast.AST) -> str:
    from ..flow.rank import main_guards

    guards = main_guards(ctx, node)
    return f", behind the main-rank test `{_short(ctx, guards[0][0])}`" if guards else ""


def _short(ctx, node: ast.AST) -> str:
    t = " ".join(ctx.text(node).split())
    return t if len(t) <= 60 else t[:57] + "..."


def _loose_guard(ctx, call: ast.Call):
    """(the comparison, the ranks it lets through) when the rank tests around ``call`` in its
    function (``if``, early exits, ``assert``; read by ``rank_sets.ranks_admitted``) let a few
    ranks through but not one (``if not rank > 1:``, ``if rank < 2:``), and nothing outside narrows
    it further (the function's calls in the file are not all main-rank only, it has no
    ``@rank_zero_only``-style decorator)."""
    from ..flow.rank import callers_guarded, main_guards
    from ..flow.rank_sets import ONE, SEVERAL, ranks_admitted
    from ..flow.rank_tests import is_main_decorated

    found = None
    for test, holds in main_guards(ctx, call, main_only=False):
        got = ranks_admitted(ctx, test, ctx.sem.scope_of(test), holds)
        if got is None:
            continue
        if got[0] == ONE:
            return None
        if got[0] == SEVERAL and found is None:
            found = (got[2], got[1])
    if found is None:
        return None
    fn = ctx.sem.enclosing_function(call)
    if fn is not None and (is_main_decorated(fn) or callers_guarded(ctx, fn) is True):
        return None
    return found


def _single_run_helper(ctx, call: ast.Call) -> bool:
    """The write is in a function that only a one-process run calls (``else: self._local(x)`` of
    ``if self.world > 1:``, through callers in this file): no other process writes at the same time."""
    from ..flow.mode_unbound import single_run_callers

    fn = ctx.sem.enclosing_function(call)
    return fn is not None and single_run_callers(ctx, fn)


def _guarded_sibling(ctx, call: ast.Call) -> str | None:
    """A write in a method of a class whose other method guards its own write with a main-rank
    test (``if not is_master(): return``): the class runs on every rank and this write was missed.
    None when the write is guarded itself, or when every call of its method in the file is."""
    from ..flow.rank import callers_guarded, main_guards
    from ..flow.testing import is_test_file

    fn = ctx.sem.enclosing_function(call)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef) or is_test_file(ctx.filename) or main_guards(ctx, call):
        return None
    if callers_guarded(ctx, fn) is True:
        return None
    from ..flow.mode_unbound import single_run_only

    if single_run_only(ctx, call, fn) or _single_run_helper(ctx, call):
        return None  # ``if args.world_size <= 1: save(...)``: the branch a one-process run takes
    for other, _path, what, _noun in write_calls(ctx):
        if other is call or not (cls.lineno <= other.lineno <= cls.end_lineno):
            continue
        ofn = ctx.sem.enclosing_function(other)
        if ofn is None or ofn is fn or parent(ofn) is not cls:
            continue
        guards = main_guards(ctx, other)
        if guards and rank0_guarded(ctx, other, callers=False) is True \
                and any(_asks_rank(ctx, t, ofn) for t, _holds in guards):
            line = ctx.src.node_range(other).start.line + 1
            return f"`{cls.name}.{ofn.name}` guards its {what} (line {line}) with a main-rank test"
    pred = _main_predicate(ctx, cls)
    if pred is not None:
        line = ctx.src.node_range(pred).start.line + 1
        return f"class `{cls.name}` tells its main rank apart (`{pred.name}`, line {line}) and does not test it here"
    return None


def _asks_rank(ctx, test: ast.AST, fn) -> bool:
    """The main-rank test asks the process itself (a call such as ``is_master()``, an attribute of
    ``self``, a name bound in the function), rather than reading a flag its caller passes in (a
    parameter: the caller decides which process writes)."""
    params = set(param_names(fn))
    for n in subtree(test):
        if isinstance(n, ast.Call):
            return True
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            return True
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in params:
            return True
    return False


def _main_predicate(ctx, cls: ast.ClassDef):
    """A method (or property) of ``cls`` that returns a main-rank test (``return self.rank == 0``),
    read by ``polarity`` on its only ``return``: the class runs on every rank, and knows which is
    the main one."""
    from ..flow.rank_tests import polarity

    for m in cls.body:
        if not isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) or len(m.body) > 3:
            continue
        rets = [st for st in m.body if isinstance(st, ast.Return)]
        if len(rets) == 1 and rets[0].value is not None and polarity(ctx, rets[0].value, m) is True:
            return m
    return None


def _joins_group_before(ctx, call: ast.Call) -> bool:
    """The function holding ``call`` starts the process group itself (``init_process_group``)
    before it, outside any ``if``: whoever calls the function, every rank runs it, and so the write."""
    fn = ctx.sem.enclosing_function(call)
    if fn is None:
        return False
    for init in ctx.calls_to("torch.distributed.init_process_group"):
        if ctx.sem.enclosing_function(init) is not fn or (init.lineno, init.col_offset) >= (call.lineno, call.col_offset):
            continue
        p = parent(init)
        while p is not None and p is not fn and not isinstance(p, (ast.If, ast.IfExp, ast.Try, ast.While, ast.For)):
            p = parent(p)
        if p is fn:
            return True
    return False


def _save_like(name: str) -> bool:
    low = name.lower()
    return "save" in low or "checkpoint" in low or "ckpt" in low


# clocks: a value that differs between calls (a path made of one is taken as unique; the values
# each process makes for itself are ``fs_ranks.PER_PROCESS_CALLS``)
_UNIQUE_CALLS = frozenset({"uuid.uuid1", "time.time", "time.time_ns", "time.perf_counter", "time.monotonic",
                           "datetime.datetime.now", "datetime.datetime.utcnow"})


def unique_path(ctx, expr: ast.AST, at: ast.AST, depth: int = 0) -> bool:
    """The path is made of a value that differs between processes (``uuid.uuid4()``,
    ``os.getpid()``, ``tempfile.mkdtemp()``: ``fs_ranks.per_process_path``, also through the file
    object of ``with open(path) as f``) or between calls (``time.time()``), through names bound
    before ``at``: no two ranks write the same file."""
    if depth > 3 or expr is None:
        return False
    if depth == 0 and per_process_path(ctx, expr, at):
        return True
    for n in subtree(expr):
        if isinstance(n, ast.Call) and (ctx.qn(n) or "") in _UNIQUE_CALLS:
            return True
        if isinstance(n, ast.JoinedStr) and any(_opaque_call(ctx, v.value) for v in _name_values(n, expr)):
            return True
        if isinstance(n, ast.Name) and depth < 3:
            st = reaching_assignment(ctx, n.id, at)
            if st is not None and unique_path(ctx, st.value, st, depth + 1):
                return True
            if st is None and _per_process_argument(ctx, n.id, at):
                return True
    return False


def _per_process_argument(ctx, name: str, at: ast.AST) -> bool:
    """``name`` is a parameter of the module-level function holding ``at`` that every call of it in
    the file (at least one) fills with a value each process makes for itself
    (``fs_ranks.per_process_path``: ``with tempfile.TemporaryDirectory() as d: do_setup(d)``)."""
    from ..flow.helper_calls import bind_args

    fn = ctx.sem.enclosing_function(at)
    if fn is None or not isinstance(parent(fn), ast.Module) or name not in param_names(fn):
        return False
    sites = [c for c in ctx.sem.calls if c.func.__class__ is ast.Name and c.func.id == fn.name]
    if not sites:
        return False
    for site in sites:
        arg = bind_args(site, fn).get(name)
        if arg is None or not per_process_path(ctx, arg, site):
            return False
    return True


def _name_values(js: ast.JoinedStr, expr: ast.AST) -> list:
    """The values an f-string formats into a file's name rather than its folder: those after a
    literal ``/`` of the f-string, or all of them when the f-string is a later part of a join
    (``os.path.join(d, f"...")``, ``Path(d) / f"..."``)."""
    p = parent(js)
    later = (isinstance(p, ast.Call) and js in p.args[1:]) or (
        isinstance(p, ast.BinOp) and isinstance(p.op, ast.Div) and js is p.right)
    out, seen_sep = [], later and js is not expr
    for v in js.values:
        if isinstance(v, ast.Constant) and isinstance(v.value, str) and "/" in v.value:
            seen_sep = True
        elif isinstance(v, ast.FormattedValue) and seen_sep:
            out.append(v)
    return out


def _opaque_call(ctx, e: ast.AST) -> bool:
    """``e`` is a call, with no argument, of a function of a library module (neither the standard
    library, whose per-call values ``_UNIQUE_CALLS`` names, nor torch, nor the project, which the
    analysis reads): a value made by code we cannot see, from nothing the ranks share. Nothing says
    it is the same on every rank, so a name made of it is not known to be shared."""
    import sys

    if not isinstance(e, ast.Call) or e.args or e.keywords or not isinstance(e.func, (ast.Name, ast.Attribute)):
        return False
    q = ctx.qn(e) or ""
    root = q.split(".", 1)[0]
    if "." not in q or root in sys.stdlib_module_names or root in ("torch", "numpy", "np"):
        return False
    from ..flow import for_context
    from ..flow.lifecycle import project_target

    hub = for_context(ctx)
    if project_target(hub, hub.main, e) is not None:
        return False
    from ..flow.imports import _NOT_PROJECT

    if root in _NOT_PROJECT:
        return True
    return hub.module_view(hub.main, q.rsplit(".", 1)[0], 0) is None  # not a module of the project


_PATH_CALLS = frozenset({"os.path.join", "str", "os.fspath", "pathlib.Path", "Path", "format"})


def _unguarded_save(view, fn):
    """(the torch.save call, the parameters its path is made of) when ``fn`` runs a ``torch.save``
    on every call: not decorated, not under an ``if``/loop, no early exit before it, and a path
    built only from parameters and constants. None otherwise (cannot tell)."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.decorator_list:
        return None
    memo = view.memo.setdefault("ddp202.unguarded", {})
    if id(fn) in memo:
        return memo[id(fn)]
    memo[id(fn)] = None
    sem = view.sem
    params = set(param_names(fn))
    vctx = view_ctx(view)
    for save in [*sem.calls_to(*_CKPT_WRITERS), *sem.calls_to(*_ARRAY_WRITERS), *sem.calls_to(*DUMPS)]:
        if sem.enclosing_function(save) is not fn:
            continue
        top, child, p = None, save, parent(save)
        ok = True
        while p is not None and p is not fn:
            if isinstance(p, (ast.If, ast.IfExp, ast.For, ast.AsyncFor, ast.While, *FUNC_TYPES, ast.Lambda)) or (
                    isinstance(p, ast.Try) and child not in p.body):
                ok = False
                break
            child, p = p, parent(p)
        top = child
        if not ok or top not in fn.body:
            continue
        before = fn.body[: fn.body.index(top)]
        if any(isinstance(n, (ast.Return, ast.Raise)) for st in before for n in subtree(st)):
            continue  # `if not is_main_process(): return` and the like
        qn = sem.call_qualname(save) or ""
        if qn in DUMPS:
            path = dumped_file(vctx, save)  # the file ``with open(path, "wb") as f:`` opened
        else:
            pos, kw = _WRITERS.get(qn, (0, "file") if qn in _ARRAY_WRITERS else (1, "f"))
            path = get_arg(save, pos, kw)
        used = _path_params(sem, path, fn, params, 0)
        if used is None:
            continue
        memo[id(fn)] = (save, used)
        break
    return memo[id(fn)]


def _path_params(sem, e, fn, params: set[str], depth: int) -> set[str] | None:
    """The parameters ``e`` is built from (constants, f-strings, os.path.join...); None when it uses
    anything else (a rank, a global, an unknown call)."""
    if e is None or depth > 3:
        return None
    out: set[str] = set()
    for n in subtree(e):
        if isinstance(n, ast.Call):
            qn = sem.call_qualname(n) or (n.func.id if isinstance(n.func, ast.Name) else None)
            if qn not in _PATH_CALLS and not (isinstance(n.func, ast.Attribute) and n.func.attr in ("format", "joinpath")):
                return None
        elif isinstance(n, ast.Name):
            if is_rank_like(n):
                return None
            if n.id in params:
                out.add(n.id)
            elif n.id in ("os", "str", "Path", "pathlib"):
                continue
            else:
                v = sem.single_value(n.id, fn)
                if v is None:
                    return None
                sub = _path_params(sem, v, fn, params, depth + 1)
                if sub is None:
                    return None
                out |= sub
        elif isinstance(n, ast.Attribute) and is_rank_like(n):
            return None
    return out


def _defaults(fn) -> set[str]:
    a = fn.args
    pos = [x.arg for x in (*a.posonlyargs, *a.args)]
    names = set(pos[len(pos) - len(a.defaults):]) if a.defaults else set()
    names |= {k.arg for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None}
    return names
