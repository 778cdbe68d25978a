from __future__ import annotations

import ast

from ..model import Severity
from ..registry import NoCase, Rule
from ..semantic import parent
from ..flow.fs_effects import DOWNLOAD, EXTRACT, LIST, MKDIR, PRODUCES, READ, WRITE, effects_at, folder_of
from ..flow.fs_races import effect_key, rebound
from ..flow.fs_ranks import main_only_part
from ..flow.rank import rank0_guarded, rank_guard
from ..flow.rank_tests import polarity
from ..flow.sync import synchronised_between
from ._flow import scopes

_WORDS = {DOWNLOAD: "downloads", EXTRACT: "extracts", WRITE: "writes", MKDIR: "creates"}


class Rank0EffectWithoutBarrier(Rule):
    """
    ## What it does
    Checks for a filesystem effect made only under a main-rank test (`if rank == 0:`,
    `if is_main_process():`, `if local_rank in [-1, 0]:`...) whose result every rank then uses
    in the same function, with no synchronising collective in between:

    - the effect: a write (`torch.save`, `np.save`, `open(path, "w")`, `os.replace`/`os.rename`/
      `shutil.move`/`shutil.copy*` to the path, `Path.write_text`), a folder made (`os.makedirs`,
      `os.mkdir`, `Path.mkdir`), a download or an extraction (the vocabulary of DDP215);
    - the use, on every rank after the guarded block: a read of the same path (`torch.load`,
      `np.load`, `open(path)`, a `torchvision` dataset on the folder), a read or a listing
      (`os.listdir`, `glob.glob`, `Path.iterdir`) of the folder downloaded or extracted into (or of
      a file in it), a write into the folder made (`torch.save(x, os.path.join(folder, ...))`).
      Reading or listing a folder the main rank only made (`os.makedirs(out, exist_ok=True)`)
      is not a use: what is read there was not made by that call.

    The same path is decided by value flow (`flow.fs_effects.path_key`): the same variable, the same
    expression, a name bound once (also in a tuple assignment), `args.x`, `os.path.join` /
    `Path(...) / "x"` / f-strings over them; a variable whose value the analysis cannot read (the
    result of a helper, `path = os.path.join(root, index_name(cfg))`) is the same path at the write
    and at the read as long as it is not assigned again in between (`flow.fs_races.race_key`). Effects and reads inside project functions (this file
    or another module) are followed through their calls, their paths bound to the call's arguments
    (`if is_main: save_checkpoint(state, path)` then `load_checkpoint(path)` on every rank).

    The effect may also sit in a project function that returns its path: a helper (of this file or
    another module, or a method) that downloads or writes under a main-rank test and returns the
    path with no synchronising call before its `return` (`flow.fs_returns.main_only_returns`, also
    through `return other_helper(...)`), when this function reads the returned value (the call's
    result bound to a name, also in a tuple assignment) on every rank with no barrier in between.
    When that helper and its main-rank block are in the checked file, the finding is on the
    helper's `return` (where the other ranks leave with the path at once, and where the barrier
    goes for every caller), once however many callers read the path; otherwise on the read.
    Or it sits in a project function this function runs on every rank and that returns with no
    synchronising call after its main-rank block (`flow.fs_returns.main_only_effects`:
    `prepare_data(cfg["root"])` that downloads under `if is_main_process():`), when this function
    then uses the same path (bound to the call's arguments; `cfg["root"]`, an entry under a literal
    key, keys like an attribute) after the call, with no barrier in between. A method called on an
    instance of a project class keeps its `self.<attr>` paths as that instance's: `ckpt.save(...)`,
    whose main-rank block writes `os.path.join(self.root, "LATEST")`, then `ckpt.load_latest()` on
    every rank, which reads it (also `self.ckpt.save(...)` then `self.ckpt.load_latest()` in a
    method); another instance's paths are not the same.

    A use whose path is made of a name that only the main rank sets (`out = None` then
    `if rank == 0: out = run_dir`, `flow.fs_ranks`) is not one: the other ranks do not use that
    path there (DDP202 reports a write they make to the default instead).

    Anything that may synchronise the ranks between the two silences the rule: a collective
    (`dist.barrier()`, an all-reduce, DDP's gradient all-reduce in a backward, hidden collectives
    such as `dcp.save`), a call of a project function that may make one, and a call the analysis
    cannot follow whose name says it waits (`accelerator.wait_for_everyone()`, `comm.synchronize()`).
    So does a `with` block that holds the other ranks at its entry until the main rank has run it
    (composer's `local_rank_zero_download_and_wait(path)` and `run_local_rank_zero_first()`,
    `flow.sync.main_first_with`) around the main rank's effect. Composer's `get_file(uri,
    destination)` is a download.
    Nor is a function that only plain worker processes run and that never joins a process group
    (`flow.process_entries`: the target of `multiprocessing.Process(target=...)` or of `mp.spawn`,
    also through the cases of a pytest `parametrize`, called nowhere else, with no
    `init_process_group` in it or in what it calls): its `rank` is the index its starter gave it,
    and without a group there are no ranks to order with a barrier.
    Only the order in the source of one function is read: a use in an earlier statement reached by
    a loop's next iteration is not flagged.

    ## Why is this bad?
    The other ranks do not wait for the main rank: they reach the read while it is still writing
    (or before it started), and read a missing, empty or half-written file:

    ```
    FileNotFoundError: [Errno 2] No such file or directory: 'out/vocab.json'
    RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory
    ```

    It depends on timing, so it passes on one machine and fails on a loaded cluster.

    ## Example
    ```python
    if dist.get_rank() == 0:
        build_vocab(corpus, "out/vocab.json")
    vocab = json.load(open("out/vocab.json"))
    ```

    ## Use instead
    ```python
    if dist.get_rank() == 0:
        build_vocab(corpus, "out/vocab.json")
    dist.barrier()
    vocab = json.load(open("out/vocab.json"))
    ```

    ## Fix safety
    There is no fix: a `barrier()` is only valid where every rank reaches it and the process
    group exists (a single-process run has none), which depends on the program.
    """

    code = "DDP216"
    name = "rank0-effect-without-barrier"
    severity = Severity.WARNING
    # a main-rank test (``rank_tests.polarity``): its vocabulary's words, rank variables, world-size
    # tests and ``@..._only`` decorators (a lone "is"/"zero"/"only" name such as ``is_node_zero`` is not
    # enough: the gate must stay a prefilter that rejects most files, not a word found in every file)
    requires_text = (NoCase("rank"), NoCase("gpu"), NoCase("ordinal"), NoCase("procid"), NoCase("localid"),
                     NoCase("master"), NoCase("main"),
                     NoCase("global"), NoCase("process"), NoCase("local"), NoCase("chief"), NoCase("lead"),
                     NoCase("primary"), NoCase("root"), NoCase("world"), NoCase("ntasks"), NoCase("pmi_size"),
                     "should_save", "should_log", "logging_process", "process_index", "device_id",
                     "device_index", "dev_id", "local_device", "proc_id", "process_id")

    @classmethod
    def reach(cls, text, filename):
        # ranks wait for each other only in a distributed program: this file or a module it imports
        # can reach a collective (flow.reach), or a distributed file of the project may call this
        # one's functions (a data module's ``if rank == 0: download`` helper)
        from ..flow.reach import reaches
        from ..flow.models import LAUNCH_TEXT
        from ._common import callers_may_exist

        got = reaches(filename, text)
        if got[0]:
            return got
        more = callers_may_exist(text, filename, (LAUNCH_TEXT,))
        return more[0], {**got[1], **more[1]}

    def finish(self, ctx) -> None:
        from ..flow import for_context
        from ..flow.sync import main_first_with

        an = None
        sem = ctx.sem
        for scope in scopes(ctx):
            calls = sem.scope_calls(scope)
            guarded = []  # (call, effect, guard if)
            polarities: dict = {}
            inside = {}  # id(effect) -> (the helper's main-rank test, its view): made inside a helper
            for c in calls:
                if an is None:
                    an = for_context(ctx)
                if not _may_produce(ctx, an, c):
                    continue  # no file effect here nor inside: its guard (``polarity`` of each ``if``) is not needed
                g = _main_guard(ctx, c, scope, polarities)
                if g is None:
                    # a project function run here on every rank that produces the path only on the
                    # main rank and returns with no barrier (``prepare_data(root)``)
                    for e, hg, hv in _made_inside(ctx, an, c):
                        inside[id(e)] = (hg, hv)
                        guarded.append((c, e, c))
                    continue
                if main_first_with(sem, c, scope) is not None:
                    continue  # the other ranks wait at the ``with`` until the main rank ran its block
                for e in effects_at(ctx, an, c):
                    if e.kind in PRODUCES:
                        guarded.append((c, e, g))
            an = self._returned(ctx, an, scope, calls, polarities)
            if not guarded:
                continue
            done = set()
            for c, e, g in guarded:
                wk = effect_key(ctx, an, e)
                if wk is None or id(g) in done:
                    continue
                for r in calls:
                    if _pos(r) <= (g.end_lineno, g.end_col_offset) or rank_guard(ctx, r) is not None \
                            or rank0_guarded(ctx, r, callers=False) is True:
                        continue
                    use = _use(ctx, an, r, e, wk)
                    if use is None or rebound(ctx, scope, wk, g, r):
                        continue
                    if synchronised_between(an, an.main, scope, g, r) is not None:
                        break
                    if _group_less(ctx, an, r):
                        break  # worker processes with no process group: no ranks, no barrier
                    done.add(id(g))
                    if id(e) in inside:
                        self._report_inside(ctx, c, e, *inside[id(e)], r, use)
                    else:
                        self._report(ctx, c, e, g, r, use)
                    break

    def _returned(self, ctx, an, scope, calls, polarities):
        """A path that a project function returns after only the main rank produced it inside
        (``flow.fs_returns.main_only_returns``: ``download_file`` fetching on rank 0 and returning
        the local path at once), read here on every rank with no barrier in between. Returns the
        check's flow analysis (made on demand)."""
        from ..flow.bindings import reaching
        from ..flow.fs_effects import may_resolve_any, resolve
        from ..flow.fs_returns import main_only_returns, result_of

        sem = ctx.sem
        tried: dict = {}
        reported = ctx.__dict__.setdefault("_ddp216_returns", set())
        assigning = None
        for r in calls:
            # a call handed a value some call of this scope returned: ``torch.load(ckpt)`` after
            # ``ckpt = fetch(url)``, ``load_weights(fetch(url))``
            made = []
            made_inline = [a for a in (*r.args, *(k.value for k in r.keywords)) if isinstance(a, ast.Call)]
            made.extend(made_inline)
            for a in (*r.args, *(k.value for k in r.keywords)):
                if isinstance(a, ast.Call):
                    continue
                elif isinstance(a, ast.Name):
                    if an is None:
                        from ..flow import for_context
                        an = for_context(ctx)
                    if assigning is None:
                        assigning = _scopes_assigning_calls(ctx, an)
                    if scope not in assigning:
                        continue  # no assignment of this scope holds a call of such a helper: nothing to follow
                    kind, evs = reaching(an.main, a.id, r)
                    if kind == "events" and len(evs or ()) == 1 and isinstance(evs[0], ast.Assign) \
                            and sem.scope_of(evs[0]) is scope:
                        v = evs[0].value
                        made.extend(x for x in (v.elts if isinstance(v, ast.Tuple) else (v,))
                                    if isinstance(x, ast.Call))
            if made and an is None:
                from ..flow import for_context
                an = for_context(ctx)
            for c in made:
                if id(c) not in tried:
                    got = []
                    target = resolve(an, an.main, c) if may_resolve_any(an.main, c) else None
                    if target is not None and target[1] is not sem.enclosing_function(c):
                        # what the helper returns first (cheap, usually nothing), then the guards
                        got = [(*x, target[0]) for x in main_only_returns(an, *target)]
                        if got and (_main_guard(ctx, c, scope, polarities) is not None
                                    or rank_guard(ctx, c) is not None):
                            got = []
                    tried[id(c)] = got
                got = tried[id(c)]
                if not got or (_pos(r) <= (c.end_lineno, c.end_col_offset) and c not in made_inline) \
                        or rank_guard(ctx, r) is not None \
                        or rank0_guarded(ctx, r, callers=False) is True:
                    continue
                use = None
                for u in effects_at(ctx, an, r):
                    if u.view is an.main and u.path is not None and u.kind in (READ, LIST) \
                            and result_of(an.main, u.path, c, r):
                        use = "lists" if u.kind == LIST else "reads"
                        break
                if use is None or synchronised_between(an, an.main, scope, c, r) is not None or _group_less(ctx, an, r):
                    continue
                e, g, ret, gview, rview = got[0]
                tried[id(c)] = []  # once per producing call
                here = rview is an.main and gview is an.main  # the helper and its main-rank block are in this file
                if here:
                    if id(ret) in reported:
                        continue  # the helper's ``return`` is reported once, whatever calls it
                    reported.add(id(ret))
                self._report_returned(ctx, c, e, g, r, use, gview, ret if here else None)
        return an

    def _report_returned(self, ctx, c, e, g, r, use, gview, ret) -> None:
        from ..flow.findings import node_related

        what = _WORDS.get(e.kind, "writes")
        name = ctx.text(c.func)
        test = ast.unparse(g.test)
        if ret is not None:
            # the helper is in this file: the fault is its ``return``, where the other ranks leave with
            # the path at once (its fix, a barrier before it, serves every caller)
            ctx.report(
                ret,
                f"`{name}(...)` returns the path on every rank, but only the main rank {what} it (under "
                f"`if {test}:`), with no barrier before the `return`: the other ranks return at once and "
                f"`{ctx.text(r.func)}(...)` (line {r.lineno}) {use} a missing or half-written file; call "
                "`dist.barrier()` after the guarded block, before returning",
                related=[node_related(ctx, gview.path, g.test, "main-rank test in the helper"),
                         (r, f"every rank {use} the returned path here")],
            )
            return
        ctx.report(
            r,
            f"`{ctx.text(r.func)}(...)` runs on every rank and {use} the path that `{name}(...)` returns, "
            f"which only the main rank {what} inside it (under `if {test}:`), with no barrier "
            "before it returns: the other ranks get a missing or half-written file; call `dist.barrier()` "
            "after the guarded block",
            related=[(c, "the path comes from here"),
                     node_related(ctx, gview.path, g.test, "main-rank test in the helper")],
        )

    def _report_inside(self, ctx, c, e, g, gview, r, use) -> None:
        from ..flow.findings import node_related

        what = _WORDS.get(e.kind, "writes")
        ctx.report(
            r,
            f"`{ctx.text(r.func)}(...)` runs on every rank and {use} {'that' if 'folder' in use else 'what'} "
            f"`{ctx.text(c.func)}(...)` (line {c.lineno}) {what} only on the main rank (under "
            f"`if {ast.unparse(g.test)}:` inside it), with no barrier after it: the other ranks get a missing "
            "or half-written file; call `dist.barrier()` after the call",
            related=[(c, f"the main rank {what} it in this call"),
                     node_related(ctx, gview.path, g.test, "main-rank test in the helper")],
        )

    def _report(self, ctx, c, e, g, r, use) -> None:
        test = ctx.text(g.test)
        what = _WORDS.get(e.kind, "writes")
        ctx.report(
            r,
            f"`{ctx.text(r.func)}(...)` runs on every rank and {use} {'that' if 'folder' in use else 'what'} "
            f"only the main rank {what} at line "
            f"{c.lineno} (under `if {test}:`), with no barrier in between: the other ranks get a missing or "
            "half-written file; call `dist.barrier()` after the guarded block",
            related=[(c, f"the main rank {what} it here"), (g.test, "main-rank test")],
        )


def _scopes_assigning_calls(ctx, an) -> frozenset:
    """The scopes with an assignment whose value (or an element of its tuple) calls a project
    function that returns a path only the main rank produced (``main_only_returns``): the only
    bindings ``_returned`` follows a name argument to. Once per check."""
    from ..flow.fs_effects import may_resolve_any, resolve
    from ..flow.fs_returns import main_only_returns

    def returns_main_only(x) -> bool:
        if not (isinstance(x, ast.Call) and may_resolve_any(an.main, x)):
            return False
        target = resolve(an, an.main, x)
        return target is not None and target[1] is not ctx.sem.enclosing_function(x) \
            and bool(main_only_returns(an, *target))

    def build():
        sem = ctx.sem
        out = set()
        for a in sem.of_types(ast.Assign):
            v = a.value
            if any(returns_main_only(x) for x in (v.elts if isinstance(v, ast.Tuple) else (v,))):
                out.add(sem.scope_of(a))
        return frozenset(out)
    return ctx.memo("ddp216.scopes_assigning_calls", build)


def _group_less(ctx, an, node) -> bool:
    """``node`` runs in processes that never have a process group (``flow.process_entries``): its
    function only starts processes of their own, here and in the project's other files."""
    from ..flow.process_entries import group_less_entry
    from ._common import project_callers

    if not group_less_entry(an, an.main, node):
        return False
    return not project_callers(ctx, {ctx.sem.enclosing_function(node).name})


def _pos(n):
    return n.lineno, n.col_offset


def _made_inside(ctx, an, c) -> list:
    """[(effect bound to ``c``'s arguments, the helper's main-rank test, its view)] for a call of
    a project function that produces a path only on the main rank with no barrier after
    (``flow.fs_returns.main_only_effects``)."""
    from ..flow.fs_effects import call_site_effects, may_resolve_any, resolve
    from ..flow.fs_returns import main_only_effects

    if not may_resolve_any(an.main, c):
        return []
    target = resolve(an, an.main, c)
    if target is None or target[1] is ctx.sem.enclosing_function(c):
        return []
    made = main_only_effects(an, *target)
    if not made:
        return []
    by_node = {id(e.node): g for e, g in made}
    out = []
    for b in call_site_effects(an, an.main, c, target, effs=[e for e, _g in made]):
        g = by_node.get(id(b.node))
        if g is not None:
            out.append((b, g, target[0]))
    return out


def _may_produce(ctx, an, c) -> bool:
    """Whether ``c`` may produce a path on the main rank, here or inside a project function: a
    library call of the vocabulary whose effect is in ``PRODUCES`` (what ``effects_at`` returns first),
    or a call of a project function other than the one it sits in (``effects_at``'s other source,
    and the only one of ``_made_inside``). False: neither can give the check anything, whatever
    guards it, so its guard (``polarity`` of each ``if`` around it) is not asked."""
    from ..flow.fs_effects import call_effects, may_resolve_any, resolve

    if any(e.kind in PRODUCES for e in call_effects(ctx, c)):
        return True
    if not may_resolve_any(an.main, c):
        return False
    target = resolve(an, an.main, c)
    return target is not None and target[1] is not ctx.sem.enclosing_function(c)


def _main_guard(ctx, node, scope, polarities: dict):
    """The outermost ``if`` of ``scope`` around ``node`` that lets only the main rank in
    (``polarities``: the tests already classified in this scope, by node)."""
    found = None
    child, p = node, parent(node)
    while p is not None and p is not scope:
        if isinstance(p, ast.If) and child is not p.test:
            pol = polarities.get(p, polarities)
            if pol is polarities:
                pol = polarities[p] = polarity(ctx, p.test, scope)
            if (pol is True and child in p.body) or (pol is False and child in p.orelse):
                found = p
        child, p = p, parent(p)
    return found


def _use(ctx, an, r, w, wk) -> str | None:
    """How the call ``r`` uses what the effect ``w`` (path key ``wk``) produced, or None."""
    for u in effects_at(ctx, an, r):
        if u.path is None or u.node is w.node:
            continue
        uk = effect_key(ctx, an, u)
        if uk is None:
            continue
        if u.view is an.main and main_only_part(ctx, an.main, u.path, r, literal=False) is not None:
            continue  # a name only the main rank sets: the other ranks' path is another one
        if u.kind in (READ, LIST) and w.kind != MKDIR:
            if u.kind == LIST and w.kind == WRITE:
                continue  # a file written into the listed folder (``shutil.copy(cfg, out)``): the folder was there
            if uk == wk:
                return "lists" if u.kind == LIST else "reads"
            if w.folder and folder_of(uk) == wk:
                return "reads inside the folder"
        elif w.kind == MKDIR and u.kind == WRITE and folder_of(uk) == wk:
            return "writes inside the folder"
    return None
