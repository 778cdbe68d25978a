from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import parent
from ._common import project_callers
from ..flow.bindings import contains
from ..flow.modern import ASYNC_SAVE, DCP_READ, hub, key_of, uses_after
from ..flow.origins import helper_results, qn_pred
from ..flow.ckpt_publish import async_starts, path_forms, published
from ..flow.reach import reaches

_WAITS = ("result", "done", "wait", "exception", "add_done_callback", "upload_completion")


class AsyncSaveNotWaited(Rule):
    """
    ## What it does
    Checks for a `torch.distributed.checkpoint.async_save(...)` whose future is dropped (the call
    is a statement of its own, or its result is bound to a name nobody reads), and for an
    `async_save` in a loop whose previous future is not waited (`.result()`) before the next one
    starts. A future kept on `self` (`self.pending = dcp.async_save(...)`) is flagged when the
    method that stores it neither waits the previous one nor calls a method of its class that
    does, and a loop calls that method (in its module, or on an instance in another module)
    without waiting between the calls. Also flagged: a `destroy_process_group()` reached after the
    last `async_save` with nothing waiting for it in between (a future in a local name, or an
    instance of such a class whose waiting method is not called after its last save; the save
    may be in a function that the one destroying the group calls), reported at the destroy (at
    the save when the class lives in another module). And a pointer to the checkpoint published
    while its save is in flight: a `latest` link (`os.symlink(name, link)`, `Path.symlink_to`), or
    a file written with its path or name (`f.write(path)`, `json.dump({"latest": name}, f)`),
    after the `async_save` (or a project helper or method that starts one with that path, in
    another module too) and before any wait on its future, in the same function or a helper it
    passes the path or its parts to; the pointer and the checkpoint are matched by value
    (`os.path.join(root, f"step_{step}")` and `f"step_{step}"` of the same `step`). And a checkpoint
    read while a save may be in flight: a `dcp.load` (or a project helper that runs one) after an
    `async_save` whose future (a local name, or one element of a tuple assignment) is not used in
    between; a method that reads a checkpoint without waiting the future another method of its class
    keeps (`self.pending = dcp.async_save(...)`), called after that method on the same object (in
    its module or another, such as a training script that saves, then reloads the last step) with
    no waiting method called between them; and in a training script, a read of the object's
    checkpoint (`export(ckpt.latest(), out)` where the helper runs `dcp_to_torch_save`, or a
    `dcp.load`) after `ckpt.save(step)` (a method of a project class that keeps the future of its
    `async_save` on `self`) with no waiting method of that class called on `ckpt` in between.

    ## Why is this bad?
    `async_save` stages the state dict and returns at once; the write, and the collectives that
    commit the checkpoint, run in a background thread. A dropped future hides every error of the
    save (the checkpoint is silently missing or partial), and the process may exit before the
    write ends; destroying the process group under a save in flight takes the group its
    background write commits with (the ranks' shards overwrite each other or go missing). A
    pointer moved to a checkpoint whose write has not finished (its `.metadata` comes last) is
    left on an incomplete checkpoint by a crash or preemption in that window, and a resume from
    `latest` fails or loads a partial state. A load that meets a save in flight finds no
    `.metadata` yet, or a half-written checkpoint. Two saves in flight compete for the same staging memory and the same process
    group: the second one's collectives can interleave with the first one's, and ranks that see
    them in another order hang.

    ## Example
    ```python
    for step in range(steps):
        train_step()
        if step % 100 == 0:
            dcp.async_save(state, checkpoint_id=f"ckpt/{step}")
    ```

    ## Use instead
    ```python
    future = None
    for step in range(steps):
        train_step()
        if step % 100 == 0:
            if future is not None:
                future.result()  # the previous save is done
            future = dcp.async_save(state, checkpoint_id=f"ckpt/{step}")
    future.result()
    ```

    ## Fix safety
    There is no automatic fix: where to wait depends on the training loop.
    """

    code = "DDP504"
    name = "async-save-not-waited"
    severity = Severity.ERROR
    # the save may run in a helper of another module (``self.checkpointer.save(sd, path)``)
    reach = classmethod(lambda cls, text, filename: reaches(filename, text, ("async_save",)))

    def finish(self, ctx) -> None:
        an, view = hub(ctx)
        sem = view.sem
        self._published_early(ctx, an, view)
        _read_after_instance_save(ctx, an, view)
        if "async_save" not in ctx.src.text:
            return  # (the gate of the checks below: a necessary condition)
        # the ``async_save`` calls, and the calls of project helpers that return their future
        helpers = [c for c, _ in helper_results(an, view, qn_pred(*ASYNC_SAVE))]
        for c in [*ctx.calls_to(*ASYNC_SAVE), *helpers]:
            p = parent(c)
            if isinstance(p, ast.Await):
                p = parent(p)
            if isinstance(p, ast.Expr):
                ctx.report(c, f"the future of `{ctx.text(c)}` is dropped: the save's errors are never seen, "
                              "and nothing waits for it before the next save or the end of the process")
                continue
            tgt = _target_of(c, p)
            if isinstance(p, ast.Tuple):
                p = parent(p)
            if not (isinstance(p, ast.Assign) and len(p.targets) == 1) or tgt is None:
                continue
            k = key_of(tgt)
            if k is None:
                continue
            uses = uses_after(sem, k, p)
            if not k.startswith("self."):
                _read_in_flight(ctx, an, view, c, p, k, uses)
            loop = _loop_of(p)
            if loop is not None and not k.startswith("self."):
                # read earlier in the loop's body: the next round sees this binding
                uses += [u for u in ast.walk(loop) if isinstance(u, ast.Name) and u.id == k
                         and isinstance(u.ctx, ast.Load) and (u.lineno, u.col_offset) < (p.lineno, p.col_offset)]
            if not uses:
                ctx.report(c, f"the future of `{ctx.text(c)}` is bound to `{k}`, which nothing reads: the save's "
                              "errors are never seen, and nothing waits for it")
                continue
            if k.startswith("self."):
                _read_on_self(ctx, an, view, c, p, k[5:])
                self._kept_on_self(ctx, an, view, c, p, k[5:])
                self._last_on_self(ctx, an, view, c, p, k[5:])
                continue
            _report_teardown(ctx, an, view, c, p, k, f"the future of `{ctx.text(c)}` (line {c.lineno})")
            if loop is None:
                continue
            waited = [u for u in uses if _waited(u)]
            if not any(contains(loop, u) for u in waited) and not any(
                    not contains(loop, u) or u.lineno < p.lineno for u in uses if not _waited(u)):
                ctx.report(c, f"`{ctx.text(c)}` runs in a loop and `{k}` is not waited in it: the next "
                              "iteration starts a second `async_save` while this one is in flight",
                           related=[(loop, "the loop")])


    def _published_early(self, ctx, an, view) -> None:
        """A pointer to the checkpoint (``latest`` link, a file holding its path or name) written
        after the ``async_save`` that writes it and before any wait on its future, in the same
        function or a project helper it calls (``ckpt_publish``)."""
        sem = view.sem
        for fn in [n for fns in sem.functions.values() for n in fns]:
            for s, idx in async_starts(an, view, fn):
                if idx is None:
                    continue
                forms = path_forms(an, view, fn, idx)
                got = published(an, view, fn, s, forms) if forms else None
                if got is None:
                    continue
                c, w = got
                related = [(s, "the save, still in flight")]
                if w is not c:
                    wv = an.resolve_call(view, c)
                    if wv is not None and wv[0] is view:
                        related.append((w, "the write"))
                ctx.report(c, f"`{ctx.text(c)}` publishes the checkpoint that `{ctx.text(s)}` (line {s.lineno}) "
                              "is still writing: its future is not waited (`.result()`) before, so a crash "
                              "leaves the pointer on an incomplete checkpoint; publish it after the wait "
                              "or in a done callback",
                           related=related)
                break

    def _kept_on_self(self, ctx, an, view, c, store, attr: str) -> None:
        """``self.<attr> = async_save(...)`` in a method that neither waits ``self.<attr>`` nor
        calls a method of its class that does, where a loop calls that method (in this module, or
        on an instance of the class in another) and waits nothing of it between two calls: the
        store drops the future of the save still in flight."""
        fn = view.sem.enclosing_function(store)
        cls = parent(fn) if fn is not None else None
        if not isinstance(cls, ast.ClassDef) or not isinstance(parent(cls), ast.Module):
            return
        waiters = _waiting_methods(cls, attr)
        if fn.name in waiters:
            return
        for sv, site in _method_sites(ctx, an, view, cls, fn):
            loop = _loop_of(site)
            if loop is None or _waits_in(loop, waiters, attr):
                continue
            where = "" if sv is view else f" of `{sv.path.rsplit('/', 1)[-1]}`"
            ctx.report(c, f"`{ctx.text(c)}` replaces the future in `self.{attr}` without waiting for the "
                          f"previous one, and `{fn.name}` is called in a loop (line {site.lineno}{where}): the next "
                          "call starts a second `async_save` while the last one may still be in flight",
                       related=[(site, "called in a loop")] if sv is view else [])
            return


    def _last_on_self(self, ctx, an, view, c, store, attr: str) -> None:
        """``self.<attr> = async_save(...)`` in a method of a class, called on an instance kept in a
        local name (``ckpt = Checkpointer(...)``; ``ckpt.save(state)``) of a function that then
        destroys the process group without calling a method of the class that waits ``self.<attr>``
        (nor using the instance otherwise) after the save: the last save is still in flight."""
        fn = view.sem.enclosing_function(store)
        cls = parent(fn) if fn is not None else None
        if not isinstance(cls, ast.ClassDef) or not isinstance(parent(cls), ast.Module):
            return
        if not _waiting_methods(cls, attr):
            return  # nothing of the class waits the future: not this question
        for sv, site in _instance_sites(ctx, an, view, cls, fn):
            recv = site.func.value
            if not isinstance(recv, ast.Name):
                continue
            where = "" if sv is view else f" of `{sv.path.rsplit('/', 1)[-1]}`"
            what = f"the last `async_save` that `{recv.id}.{fn.name}(...)` starts (line {site.lineno}{where})"
            if sv is view:
                if _report_teardown(ctx, an, view, c, site, recv.id, what):
                    return
            elif _teardown_after(an, sv, site, recv.id) is not None:
                ctx.report(c, f"{what} is never waited: the process group is destroyed after it, "
                              "while its background write still needs the group (the checkpoint is lost or partial)")
                return


def _target_of(c, p):
    """The target the value of ``c`` is bound to by ``p``: ``x = c``, or one element of a tuple
    assignment ``x, t = c, time.time()``."""
    if isinstance(p, ast.Assign) and len(p.targets) == 1:
        return p.targets[0]
    q = parent(p)
    if isinstance(p, ast.Tuple) and isinstance(q, ast.Assign) and len(q.targets) == 1 \
            and isinstance(q.targets[0], ast.Tuple) and len(q.targets[0].elts) == len(p.elts) \
            and not any(isinstance(e, ast.Starred) for e in p.elts):
        return q.targets[0].elts[[id(e) for e in p.elts].index(id(c))]
    return None


def _reads(an, view, c):
    """The checkpoint read ``c`` runs: ``c`` itself for a ``dcp.load``, the ``dcp.load`` of the
    project function it calls (in this module or another); else None."""
    if (view.sem.call_qualname(c) or "") in DCP_READ:
        return c
    if not isinstance(c.func, (ast.Name, ast.Attribute)):
        return None
    try:
        got = an.resolve_call(view, c)
    except Exception:  # noqa: BLE001 - an unresolvable call is simply not followed
        got = None
    if got is None or not isinstance(got[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    tv, fn = got
    return next((x for x in ast.walk(fn) if isinstance(x, ast.Call) and (tv.sem.call_qualname(x) or "") in DCP_READ), None)


def _read_in_flight(ctx, an, view, c, store, k: str, uses) -> None:
    """``k = async_save(...)`` then, later in the same function, a ``dcp.load`` (or a project helper
    that runs one) with no use of ``k`` between them: the checkpoint is read while its write may
    still be in flight."""
    sem = view.sem
    fn = sem.enclosing_function(store) or sem.tree
    end = (store.end_lineno, store.end_col_offset)
    for r in sem.calls:
        if (r.lineno, r.col_offset) <= end or (sem.enclosing_function(r) or sem.tree) is not fn \
                or any(isinstance(a, ast.ExceptHandler) for a in sem.ancestors(r)):
            continue
        read = _reads(an, view, r)
        if read is None or any((u.lineno, u.col_offset) < (r.lineno, r.col_offset) for u in uses):
            continue
        ctx.report(r, f"`{ctx.text(r)}` reads a checkpoint while the `async_save` of line {c.lineno} may still be "
                      f"writing it: its future `{k}` is not waited (`.result()`) before, so the load finds the "
                      "checkpoint missing or half written; wait for the save first",
                   related=[(c, "the async save, still in flight")])
        return


def _read_after_instance_save(ctx, an, view) -> None:
    """``ckpt.save(step)``, a method of a project class (another module too) that keeps the future of
    an ``async_save`` in ``self.<attr>``, then a checkpoint read (``dcp.load``, ``dcp_to_torch_save``,
    or a project helper that runs one) in the same function whose arguments use ``ckpt``
    (``export(ckpt.latest(), out)``), with no method of the class that waits ``self.<attr>`` called on
    ``ckpt`` between them: the read meets the save in flight."""
    sem = view.sem
    keeps: dict = {}  # id(method) -> (its class, the attribute) or None
    for site in sem.calls:
        f = site.func
        if not (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id != "self"):
            continue
        got = an.resolve_call(view, site)
        if got is None or not isinstance(got[1], (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        tv, m = got
        if id(m) not in keeps:
            keeps[id(m)] = _kept_future(tv, m)
        kept = keeps[id(m)]
        if kept is None:
            continue
        cls, attr = kept
        waiters = _waiting_methods(cls, attr)
        if not waiters:
            continue  # nothing of the class waits the future: not this question
        key = f.value.id
        scope = sem.enclosing_function(site) or sem.tree
        at = (site.end_lineno, site.end_col_offset)
        # the method to advise: one that waits, not the saving one (which may wait the previous save first)
        advice = next((f"call `{key}.{w}()` first" for w in sorted(waiters) if w != m.name), "wait for it first")
        for r in sem.scope_calls(scope):
            if (r.lineno, r.col_offset) <= at:
                continue
            if isinstance(r.func, ast.Attribute) and r.func.attr in waiters and key_of(r.func.value) == key:
                break  # waited first
            if isinstance(r.func, ast.Attribute) and isinstance(r.func.value, ast.Name) and r.func.value.id == key:
                continue  # a method of the object itself: ``_read_on_self``'s question
            if not any(isinstance(n, ast.Name) and n.id == key for a in (*r.args, *(k.value for k in r.keywords))
                       for n in ast.walk(a)):
                continue  # a read of something else
            if _reads(an, view, r) is None:
                continue
            ctx.report(r, f"`{ctx.text(r)}` reads the checkpoint of `{key}` while the `async_save` that "
                          f"`{ctx.text(site)}` (line {site.lineno}) starts may still be writing it: nothing waits "
                          f"its future (`self.{attr}`) before, so the read finds no `.metadata` or a half-written "
                          f"checkpoint; {advice}",
                       related=[(site, "the async save, still in flight")])
            break


def _kept_future(view, m):
    """(class, attribute) when method ``m`` of a module-level class stores an ``async_save``'s future in
    ``self.<attr>``; else None."""
    cls = parent(m)
    if not isinstance(cls, ast.ClassDef) or not isinstance(parent(cls), ast.Module):
        return None
    for n in ast.walk(m):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.value, ast.Call) \
                and (view.sem.call_qualname(n.value) or "") in ASYNC_SAVE:
            t = n.targets[0]
            if isinstance(t, ast.Attribute) and _is_self(t.value):
                if any(_is_self_attr(u, t.attr) and _waited(u) and u.lineno > n.lineno for u in ast.walk(m)):
                    return None  # waited before the method returns
                return cls, t.attr
    return None


def _read_on_self(ctx, an, view, c, store, attr: str) -> None:
    """``self.<attr> = async_save(...)`` in a method of a class with another method that reads a
    checkpoint (``dcp.load``, directly or through a method of the class) without waiting
    ``self.<attr>`` first, and a caller that calls the saving method, then the reading one on the
    same object, with no waiting method called between them: the read meets the save in flight."""
    fn = view.sem.enclosing_function(store)
    cls = parent(fn) if fn is not None else None
    if not isinstance(cls, ast.ClassDef) or not isinstance(parent(cls), ast.Module):
        return
    waiters = _waiting_methods(cls, attr)
    readers = {}
    for m in cls.body:
        if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef)) and m.name not in waiters and m is not fn:
            r = next((x for x in ast.walk(m) if isinstance(x, ast.Call) and _reads(an, view, x) is not None
                      and (x.func.attr if isinstance(x.func, ast.Attribute) else "") not in waiters), None)
            if r is not None:
                readers[m.name] = (m, r)
    if not readers:
        return
    seen, sites = set(), []
    for sv, site in [*((view, s) for s in an.call_sites(view, fn)), *_other_files_calls(ctx, an, cls, fn)]:
        if id(site) not in seen:
            seen.add(id(site))
            sites.append((sv, site))
    for sv, site in sites:
        key = key_of(site.func.value) if isinstance(site.func, ast.Attribute) else None
        if key is None:
            continue
        got = _read_after(an, sv, site, key, readers, waiters, attr)
        if got is None:
            continue
        m, r, call = got
        where = "" if sv is view else f" of `{sv.path.rsplit('/', 1)[-1]}`"
        ctx.report(r, f"`{m.name}` reads the checkpoint without waiting for the `async_save` that `{fn.name}` "
                      f"leaves in flight in `self.{attr}`, and `{ctx.text(call) if sv is view else ast.unparse(call)}` "
                      f"(line {call.lineno}{where}) runs after `{fn.name}` with no wait between: the load finds "
                      "the checkpoint missing or half written; wait for the pending save first",
                   related=[(call, "the read after the save")] if sv is view else [])
        return


def _read_after(an, sv, site, key: str, readers: dict, waiters: set, attr: str):
    """(reading method, its read, the call of it) for a call ``key.<reader>(...)`` of the function of
    ``site`` (a call of the saving method on ``key``) that runs after it (later, or in a loop holding
    both) with no call of a waiting method on ``key`` and no wait on ``key.<attr>`` between them."""
    sem = sv.sem
    scope = sem.enclosing_function(site) or sem.tree
    calls = [x for x in sem.calls if (sem.enclosing_function(x) or sem.tree) is scope]
    at = (site.lineno, site.col_offset)
    for r in calls:
        f = r.func
        if not (isinstance(f, ast.Attribute) and f.attr in readers and key_of(f.value) == key):
            continue
        got = an.resolve_call(sv, r)
        if got is None or got[1] is not readers[f.attr][0]:
            continue
        pos = (r.lineno, r.col_offset)
        loop = _loop_of(site)
        if pos > at:
            span = (at, pos)
        elif loop is not None and contains(loop, r):
            span = None  # the next round's read follows this round's save
        else:
            continue
        def between(n):  # noqa: E306
            return contains(loop, n) if span is None else span[0] < (n.lineno, n.col_offset) < span[1]
        if any(between(x) and isinstance(x.func, ast.Attribute) and x.func.attr in waiters
               and key_of(x.func.value) == key for x in calls):
            continue
        if any(isinstance(n, ast.Attribute) and n.attr == attr and key_of(n.value) == key and _waited(n)
               and between(n) for n in ast.walk(scope)):
            continue
        return readers[f.attr][0], readers[f.attr][1], r
    return None


def _instance_sites(ctx, an, view, cls, fn) -> list:
    """(view, call) of ``x.<fn.name>(...)`` calls that resolve to method ``fn`` of ``cls``: in this
    module, then in the project's other files that name the class."""
    return [*_attr_calls(an, view, fn), *_other_files_calls(ctx, an, cls, fn)]


def _attr_calls(an, view, fn) -> list:
    """(view, call) of the ``x.<fn.name>(...)`` calls of ``view`` that resolve to ``fn``."""
    out = []
    for c in view.sem.calls:
        if isinstance(c.func, ast.Attribute) and c.func.attr == fn.name:
            got = an.resolve_call(view, c)
            if got is not None and got[1] is fn:
                out.append((view, c))
    return out


def _other_files_calls(ctx, an, cls, fn) -> list:
    """``_attr_calls`` in the project's other files that name ``cls``."""
    out = []
    for cctx, _, _ in project_callers(ctx, (cls.name,)):
        cv = an.view_of(cctx.filename)
        if cv is not None and cv.sem is cctx.sem:
            out.extend(_attr_calls(an, cv, fn))
    return out


_DESTROY = "torch.distributed.destroy_process_group"


def _teardown_after(an, view, node, key: str, depth: int = 0):
    """The first ``destroy_process_group()`` that runs after ``node`` in its function (not in an
    exception handler) with no use of ``key`` (a local name) between them; when the function has
    none, ``key`` never leaves it (only ``key.<attr>`` reads, never returned or passed on) and
    this module calls the function, such a destroy after a call of it. Else None."""
    sem = view.sem
    fn = sem.enclosing_function(node)
    scope = fn or sem.tree
    end = (node.end_lineno, node.end_col_offset)
    for d in sem.calls_to(_DESTROY):
        if (sem.enclosing_function(d) or sem.tree) is not scope or (d.lineno, d.col_offset) <= end:
            continue
        if any(isinstance(a, ast.ExceptHandler) for a in sem.ancestors(d)):
            continue
        between = [u for u in uses_after(sem, key, node)
                   if (u.lineno, u.col_offset) < (d.lineno, d.col_offset)
                   and (sem.enclosing_function(u) or sem.tree) is scope]
        return None if between else d
    if fn is None or depth >= 2 or uses_after(sem, key, node):
        return None  # a use after the node may wait for it
    if any(isinstance(n, ast.Name) and n.id == key and not isinstance(parent(n), ast.Attribute)
           and isinstance(n.ctx, ast.Load) for n in ast.walk(fn)):
        return None  # the object is passed on or returned somewhere in the function
    for site in an.call_sites(view, fn):
        p = parent(site)
        if isinstance(p, ast.Expr):  # the result is dropped: nothing of the callee survives the call
            got = _teardown_after(an, view, site, "\0", depth + 1)
            if got is not None:
                return got
    return None


def _report_teardown(ctx, an, view, c, node, key: str, what: str) -> bool:
    d = _teardown_after(an, view, node, key)
    if d is None:
        return False
    ctx.report(d, f"{what} is never waited before `{ctx.text(d)}`: the save's background write still "
                  "needs the process group (the checkpoint is lost or partial); wait for it (`.result()`) first",
               related=[(c, "the async save")])
    return True


def _waiting_methods(cls: ast.ClassDef, attr: str) -> set:
    """Names of the methods of ``cls`` that wait ``self.<attr>`` (``.result()``, ``.done()``...),
    directly or through a ``self.<method>()`` call of one that does."""
    calls, out = {}, set()
    for st in cls.body:
        if not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        called = set()
        for n in ast.walk(st):
            if _is_self_attr(n, attr) and _waited(n):
                out.add(st.name)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and _is_self(n.func.value):
                called.add(n.func.attr)
        calls[st.name] = called
    changed = True
    while changed:
        changed = False
        for name, called in calls.items():
            if name not in out and called & out:
                out.add(name)
                changed = True
    return out


def _waits_in(loop, waiters: set, attr: str) -> bool:
    """The loop calls a method named as one of ``waiters``, or waits an attribute ``attr``."""
    for n in ast.walk(loop):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in waiters:
            return True
        if isinstance(n, ast.Attribute) and n.attr == attr and _waited(n):
            return True
    return False


def _method_sites(ctx, an, view, cls, fn) -> list:
    """(view, call) of the calls of method ``fn`` of ``cls``: in this module, then on instances of
    ``cls`` in the project's other files that build one."""
    out = [(view, c) for c in an.call_sites(view, fn)]
    if any(_loop_of(c) is not None for _, c in out):
        return out
    return out + _other_files_calls(ctx, an, cls, fn)


def _is_self(n) -> bool:
    return isinstance(n, ast.Name) and n.id == "self"


def _is_self_attr(n, attr: str) -> bool:
    return isinstance(n, ast.Attribute) and n.attr == attr and _is_self(n.value)


def _waited(use) -> bool:
    p = parent(use)
    return isinstance(p, ast.Attribute) and p.attr in _WAITS


def _loop_of(node):
    p = parent(node)
    while p is not None and not isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)):
        if isinstance(p, (ast.For, ast.While, ast.AsyncFor)):
            return p
        p = parent(p)
    return None
