from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..semantic import Semantic, get_arg, iter_scope_nodes, param_names, parent
from ..flow.assignments import has_ancestor
from ..flow.calls import call_sites_here
from ..flow.wrap_sites import bound_at
from ..flow.helper_calls import bind_args
from ..flow.mentions import mentions
from ..flow.tensors import TENSOR_CTORS
from ..flow.return_deps import names_reaching, target_names
from ..flow.training_loops import is_backward
from ._training import backward_calls, ddp_holder, ddp_wraps_of, enclosing_function
from ..flow.accum_window import loop_vars, mod_test, offset, same_window_slot, skipped_unless, spell


_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


class NoSyncMisuse(Rule):
    """
    ## What it does
    Checks how `DistributedDataParallel.no_sync()` is used, on a model that is provably the DDP
    wrapper (`model = DDP(...)` / `self.model = DDP(...)` assigned once, or a parameter of a helper
    that every call in the file passes the wrapper, or, for a helper this file never calls, every
    call from the project's other files, as an `engine.py` training loop called by `main.py`; or
    `self.model = model` of a class that only the project's other files construct, each passing
    the wrapper, `Trainer(ddp_model, opt)` of a script):

    - `with model.no_sync(): loss.backward()` where the body has a `backward()` but no forward of
      `model`, and the forward ran before the block, in the same function; also by value flow, with
      the block entered through a name bound to the context (`ctx = model.no_sync() if not last else
      nullcontext()`, `with ctx:`, also one element of a tuple assignment) or a helper that returns
      it, and the forward whose value the backward differentiates in a helper called before the
      block (`loss = self._compute(batch)`) or in the caller that passes the loss in (a method's
      `self._backward(loss, last)`, a function of another module), when no `no_sync()` block holds
      that forward;
    - an accumulation loop whose synchronising micro-batch is not the one after which the
      optimizer steps: `model.no_sync() if i % accum != 0 else nullcontext()` (the first of each
      window synchronises) with `if (i + 1) % accum == 0: optimizer.step()` (the last one steps).
      The split may also be an `if` whose one branch runs the micro-batch inside
      `with model.no_sync():` and whose other branch runs a backward outside it (either order, any
      number of statements), or a choice of the factory itself, called later
      (`ctx = model.no_sync if i % accum != 0 else nullcontext`, then `with ctx():`, also as one
      element of a tuple assignment), or the one `return` of a helper (a function or a method of
      this file) that picks the context from its parameters
      (`return model.no_sync() if step % every != 0 else nullcontext()`), judged in the loop of
      each of its calls with the arguments it gets (`with window(model, i, accum):`); also a helper
      that hands back the factory from an `if` with two `return`s (`if hasattr(self.model,
      "no_sync") and i % self.accum != 0: return self.model.no_sync`, then `return nullcontext`,
      either branch; the `hasattr` of the wrapper itself holds). The step
      may sit deeper under the modular test (`if torch.isfinite(norm): optimizer.step()`). The
      wrapper may reach a class through its constructor (`self.model = model` where every
      `Trainer(ddp_model, ...)` of the file passes it), or as a parameter of a method that the
      project's other files call with it (`trainer.train_epoch(model=ddp_model)` of a script). Only
      plain modular tests on the loop variable are compared
      (`(i + c) % k == r`, `!=`, a bare `(i + c) % k` as a truth value, `not`, a name bound once to
      one); with a constant `k` the residues
      are compared modulo `k` (`i % 4 == 3` is `(i + 1) % 4 == 0`), with a named `k` only tests one
      micro-batch apart are reported;
    - a loop in which **every** `backward()` runs inside `with model.no_sync():` and the optimizer
      steps (`optimizer.step()`, `scaler.step(optimizer)`): the gradients it applies were never
      synchronised. The `no_sync()` block may sit in an inner micro-batch loop (or hold it), with
      the step in the outer loop; a training-step function whose every backward is inside the
      block and which steps after them is judged the same way. Nothing conditional may lie between
      the backward and the loop (an `if` may route the last micro-batch outside the block).

    - a write of `require_backward_grad_sync` on the DDP wrapper (`model.require_backward_grad_sync
      = last`, `setattr(...)`, one element of a tuple target, or a project helper, in this module or
      another, that sets it on its parameter or on `self.<attr>`) that runs after the forward whose
      value the next `backward()` of the same round differentiates, and before that backward. The
      wrapper is followed by value (an alias, a tuple from a builder, a parameter that a caller in
      another module fills, `self.<attr>`), and the forward may hand it to a helper
      (`compute_loss(model, batch)`). A write before that forward in the same round (the one that
      governs it, followed by a restore), a forward after the write (an evaluation pass before
      it), a write that arms the reducer again by hand (`model.reducer.prepare_for_backward(...)`
      after it, as Accelerate's `trigger_sync_in_backward` does) and a context manager's writes
      after its `yield` are not reported.

    A file that flips `require_backward_grad_sync` (for the `no_sync()` shapes), or all-reduces
    gradients by hand (`dist.all_reduce` in the same function, or a call outside the block of a
    project function that may run a collective, such as an `average_gradients(model)` helper), is
    not judged.

    ## Why is this bad?
    DDP decides whether the next backward all-reduces **during the forward pass**
    (`require_backward_grad_sync` is read in `forward`, where the reducer is prepared). PyTorch's
    docs for `no_sync` warn: "The forward pass should be included inside the context manager, or
    else gradients will still be synchronized." A `no_sync()` around `backward()` alone saves
    nothing: every micro-batch is still all-reduced.

    The same holds for the flag itself: set after the forward, it does not govern the backward that
    follows; that backward keeps the value left from the previous micro-batch, so the window's last
    backward is not all-reduced and each rank steps on its own gradients.

    The opposite mistakes are worse. When the window synchronises its first micro-batch and steps
    after its last, the all-reduce carries only the first micro-batch's gradients and the step adds
    the local, unsynchronised rest. When no micro-batch ever leaves `no_sync()`, no all-reduce ever
    happens. Either way each rank steps on different gradients and the replicas drift apart
    without an error.

    ## Example
    ```python
    for i, (x, y) in enumerate(loader):
        loss = loss_fn(model(x), y)
        if (i + 1) % accum != 0:
            with model.no_sync():  # too late: the forward already armed the all-reduce
                loss.backward()
        else:
            loss.backward()
            optimizer.step()
    ```

    ## Use instead
    ```python
    for i, (x, y) in enumerate(loader):
        if (i + 1) % accum != 0:
            with model.no_sync():
                loss_fn(model(x), y).backward()
        else:
            loss_fn(model(x), y).backward()
            optimizer.step()
    ```

    ## Fix safety
    There is no fix: the forward pass has to move into the block, which may take other statements
    with it.
    """

    code = "DDP208"
    name = "no-sync-misuse"
    severity = Severity.WARNING
    # the flag must be spelled in the checked file (a helper of another module may set it, as long as
    # the file names it: a reach gate over the imports for it alone cost more than the whole rule)
    requires_text = ("no_sync", "require_backward_grad_sync")

    def finish(self, ctx) -> None:
        if mentions(ctx.sem, "require_backward_grad_sync", text=ctx.src.text):
            self._late_flag(ctx)
            return
        done = set()
        for w in _withs(ctx):
            holder = _no_sync_holder(w)
            if holder is None or not ddp_holder(ctx, holder, w):
                continue
            fn = enclosing_function(w)
            if fn is None or _manual_allreduce(ctx, fn):
                continue
            if self._backward_only(ctx, w, holder, fn):
                done.add(id(w))
        self._forward_elsewhere(ctx, done)
        self._wrong_micro_batch(ctx)
        self._never_synced(ctx)

    def _late_flag(self, ctx) -> None:
        for w, h, fwd, b in late_flag_writes(ctx):
            hs = ast.unparse(h)
            via = "" if isinstance(w, (ast.Assign, ast.AnnAssign)) or ctx.text(w.func) == "setattr" \
                else f" (in `{ctx.text(w.func)}()`)"
            ctx.report(
                w,
                f"`{hs}.require_backward_grad_sync` is set{via} after the forward on line {fwd.lineno}, whose "
                f"`backward()` on line {b.lineno} it means to control: DDP reads the flag in its forward "
                "(where the reducer is prepared), so that backward follows the value left from before and "
                "the gradients are not all-reduced when they should be (the ranks drift apart). Set the "
                "flag before the forward",
                related=[(fwd, "the forward that decided whether this backward synchronises"),
                         (b, "the backward the flag was meant for")],
            )

    def _wrong_micro_batch(self, ctx) -> None:
        """The micro-batch that synchronises is not the one after which the optimizer steps."""
        for call in [*ctx.sem.calls, *_no_sync_choices(ctx), *_returned_factories(ctx)]:
            f = call.func if isinstance(call, ast.Call) else call
            if not (isinstance(f, ast.Attribute) and f.attr == "no_sync" and not getattr(call, "args", None)
                    and isinstance(f.value, (ast.Name, ast.Attribute))):
                continue
            holder = f.value
            loop = next((a for a in ctx.sem.ancestors(call) if isinstance(a, _LOOPS + _FUNCS)), None)
            if loop is None or not ddp_holder(ctx, holder, call):
                continue
            if isinstance(loop, _LOOPS):
                fn = enclosing_function(call)
                if fn is None or _manual_allreduce(ctx, fn):
                    continue
                got = _sync_condition(ctx, call, holder, loop)
                if got is not None:
                    self._against_step(ctx, holder, loop, *got)
                continue
            # a helper that returns the context for one micro-batch, its test on its parameters:
            # judged in the loop of each call of this file, the parameters read as its arguments
            got = _sync_condition(ctx, call, holder, loop) if _returned(call, loop) else None
            if got is None:
                continue
            for site in call_sites_here(ctx, loop):
                outer = next((a for a in ctx.sem.ancestors(site) if isinstance(a, _LOOPS + _FUNCS)), None)
                fn = enclosing_function(site)
                if not isinstance(outer, _LOOPS) or fn is None or _manual_allreduce(ctx, fn):
                    continue
                same_self = isinstance(site.func, ast.Attribute) and isinstance(site.func.value, ast.Name) \
                    and site.func.value.id == "self"
                sync = _bound(ctx, got[1], bind_args(site, loop), outer, same_self)
                if sync is not None:
                    self._against_step(ctx, holder, outer, got[0], sync)

    def _against_step(self, ctx, holder, loop, sync_node, sync) -> None:
        """Report ``sync`` (the test under which a micro-batch of ``loop`` synchronises) when the
        optimizer of ``loop`` steps under a test that picks another micro-batch of the window."""
        steps = [c for st in loop.body for c in ast.walk(st) if isinstance(c, ast.Call)
                 and isinstance(c.func, ast.Attribute) and c.func.attr == "step" and _optimizer_step(c)]
        guards = []
        for c in steps:
            # the innermost modular test the step sits under in the loop (another ``if``
            # inside it, ``if torch.isfinite(norm):``, only narrows where it steps)
            g = t = None
            for a in ctx.sem.ancestors(c):
                if a is loop or isinstance(a, (*_LOOPS, *_FUNCS)):
                    break
                if isinstance(a, ast.If) and not any(x is c for x in ast.walk(a.test)):
                    t = mod_test(ctx, a.test, loop, 0)
                    if t is not None:
                        g = a
                        break
            if g is None:
                g, t = skipped_unless(ctx, c, loop)  # ``if (i + 1) % k != 0: continue`` before it
            if g is None:
                guards = []
                break  # a step under no modular test: not an accumulation loop
            guards.append((g, t if _in_body(c, g) else (t[0], t[1], t[2], not t[3])))
        if not guards:
            return
        g, step = guards[0]
        if not (sync[0] == step[0] and sync[2] == step[2] and sync[3] and step[3]):
            return
        if same_window_slot(sync, step) is not False:
            return
        h = ctx.text(holder)
        ctx.report(
            sync_node,
            f"`{h}.no_sync()` lets the micro-batch where `{spell(sync)}` synchronise, but the optimizer "
            f"steps where `{spell(step)}` (line {g.lineno}): the step applies gradients whose last "
            "micro-batches were never all-reduced, and the ranks drift apart. Synchronise the micro-batch "
            "that steps",
            related=[(g.test, "the optimizer steps under this test")],
        )

    def _backward_only(self, ctx, w, holder, fn) -> bool:
        body_nodes = [n for st in w.body for n in ast.walk(st)]
        backs = [b for b in backward_calls(ctx, fn) if any(b is n for n in body_nodes)]
        if not backs:
            return False
        key = ast.dump(holder)
        def is_forward(c):  # noqa: E306
            return isinstance(c, ast.Call) and ast.dump(c.func) == key or (
                isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "forward"
                and ast.dump(c.func.value) == key)
        if any(is_forward(n) for n in body_nodes):
            return False
        before = [c for c in _calls_by_function(ctx).get(id(fn), ()) if is_forward(c) and c.lineno < w.lineno]
        if not before:
            return False
        h = ctx.text(holder)
        ctx.report(
            w.items[0].context_expr,
            f"`{h}.no_sync()` wraps only the backward; the forward on line {before[-1].lineno} ran outside, so "
            "DDP already armed the all-reduce and this backward still synchronises. Run the forward inside "
            "the block too",
            related=[(before[-1], "the forward that decides whether gradients are synchronised")],
        )
        return True

    def _forward_elsewhere(self, ctx, done) -> None:
        """A ``no_sync()`` block (entered directly, through a name bound to the context or a helper
        that returns it) whose ``backward()`` differentiates a value computed by a forward of the
        same wrapper that no ``no_sync()`` block holds: in a helper called before the block, or in
        the caller that passes the loss in (this module or another)."""
        from ..flow.modern import hub
        from ..flow.sync_blocks import forwards_feeding, in_block, no_sync_blocks, refs

        an, view = hub(ctx)
        for w, holder, call in no_sync_blocks(an, view):
            fn = enclosing_function(w)
            if id(w) in done or holder is None or fn is None or _manual_allreduce(ctx, fn):
                continue
            wraps = ddp_wraps_of(ctx, holder, w)
            if not wraps and not ddp_holder(ctx, holder, w):
                continue
            keys = refs(an, view, holder, w, True) | {(v.path, c.lineno, c.col_offset) for v, c in wraps}
            backs = [b for b in backward_calls(ctx, fn) if in_block(b, w)]
            fwds = [f for b in backs for f in forwards_feeding(an, view, b, _callers_of(ctx, an))
                    if f[2] & keys]
            if not fwds or any(f[3] or f[0] is view and in_block(f[1], w) for f in fwds):
                continue
            # the forward nearest before the block (a probe pass earlier in the function may feed
            # the loss too, through a size it measures)
            here = [f for f in fwds if f[0] is view and (f[1].lineno, f[1].col_offset) < (w.lineno, w.col_offset)]
            fv, fwd = max(here, key=lambda f: (f[1].lineno, f[1].col_offset))[:2] if here else fwds[0][:2]
            where = "" if fv is view else f" of `{fv.path.rsplit('/', 1)[-1]}`"
            ctx.report(
                w.items[0].context_expr,
                f"`{ctx.text(holder)}.no_sync()` holds only the backward; the forward whose loss it "
                f"differentiates (`{ast.unparse(fwd)}`, line {fwd.lineno}{where}) runs outside any `no_sync()`, so "
                "DDP already armed the all-reduce and this backward still synchronises. Run the forward "
                "inside the block too",
                related=[(fwd, "the forward that decides whether gradients are synchronised")] if fv is view else [],
            )

    def _never_synced(self, ctx) -> None:
        reported: set[int] = set()
        loops = [n for n in _all_nodes(ctx) if isinstance(n, _LOOPS)]
        fns = [f for fl in ctx.sem.functions.values() for f in fl if "no_sync" in ctx.text(f)]
        by_fn = _calls_by_function(ctx)
        for loop in [*loops, *fns]:
            is_fn = isinstance(loop, _FUNCS)
            fn = loop if is_fn else enclosing_function(loop)
            if fn is None or _manual_allreduce(ctx, fn):
                continue
            fn_backs = backward_calls(ctx, fn)
            if not fn_backs:
                continue  # no backward in the function: none in the loop either
            in_loop = {id(n) for st in loop.body for n in ast.walk(st)}
            backs = [b for b in fn_backs if id(b) in in_loop]
            # the function's own calls (an index built once), not every call of the file per loop
            steps = [c for c in by_fn.get(id(fn), ()) if id(c) in in_loop and isinstance(c.func, ast.Attribute)
                     and c.func.attr == "step" and _optimizer_step(c)]
            if is_fn and backs:
                # a function (one training step): the optimizer steps after its last backward
                steps = [c for c in steps if c.lineno > max(b.end_lineno for b in backs)]
            if not backs or not steps or id(steps[0]) in reported:
                continue
            if any(b.lineno < loop.lineno or b.lineno > loop.end_lineno for b in backward_calls(ctx, fn)):
                continue  # a backward outside the loop: a final synchronising pass
            holders = []
            for b in backs:
                w = _unconditional_no_sync(ctx, b, loop)
                if w is None:
                    break
                holders.append(w)
            else:
                if _synchronising_helper(ctx, loop, in_loop):
                    continue
                w = holders[0]
                reported.add(id(steps[0]))
                ctx.report(
                    steps[0],
                    f"`{ctx.text(steps[0].func)}()` applies gradients that were never synchronised: every "
                    f"backward in this {'function' if is_fn else 'loop'} runs inside `{ctx.text(w.items[0].context_expr)}`, so no all-reduce "
                    "ever happens and the ranks drift apart",
                    related=[(w.items[0].context_expr, "every backward is inside this block")],
                )


def _no_sync_choices(ctx):
    """``X.no_sync`` uncalled, as one branch of a conditional expression whose other branch is a
    plain context-manager factory (``nullcontext``) and whose value is then called: directly
    (``with (X.no_sync if c else nullcontext)():``), or bound once, in the same function, to a
    name (also as one element of a tuple assignment) that a ``with name():`` of that function
    calls."""
    if "no_sync" not in ctx.src.text:
        return []
    out = []
    for e in ctx.sem.by_type.get(ast.IfExp, ()):
        for branch, other in ((e.body, e.orelse), (e.orelse, e.body)):
            if not (isinstance(branch, ast.Attribute) and branch.attr == "no_sync"
                    and isinstance(other, (ast.Name, ast.Attribute))):
                continue
            p = parent(e)
            tgt = p.targets[0] if isinstance(p, ast.Assign) and len(p.targets) == 1 else None
            if isinstance(p, ast.Tuple) and isinstance(parent(p), ast.Assign) and len(parent(p).targets) == 1:
                # ``ctx, last = (model.no_sync if c else nullcontext), ...``: the element's target
                whole = parent(p).targets[0]
                if isinstance(whole, ast.Tuple) and len(whole.elts) == len(p.elts):
                    tgt = whole.elts[p.elts.index(e)]
            if isinstance(p, ast.Call) and p.func is e and not p.args and not p.keywords:
                out.append(branch)
            elif isinstance(tgt, ast.Name):
                name, fn = tgt.id, enclosing_function(e)
                if fn is None or len(ctx.sem.assignments(fn).get(name, ())) != 1:
                    continue
                if any(isinstance(w, ast.With) and enclosing_function(w) is fn and any(
                        isinstance(i.context_expr, ast.Call) and isinstance(i.context_expr.func, ast.Name)
                        and i.context_expr.func.id == name and not i.context_expr.args for i in w.items)
                       for w in ctx.sem.by_type.get(ast.With, ())):
                    out.append(branch)
    return out


def _optimizer_step(c: ast.Call) -> bool:
    recv = c.func.value
    if _is_optimizer(recv) and not c.args:
        return True
    return bool(c.args) and _is_optimizer(c.args[0])


def _in_body(node, if_node) -> bool:
    child = node
    for a in Semantic.ancestors(node):
        if a is if_node:
            return child in if_node.body
        child = a
    return False


def _returned_factories(ctx):
    """``X.no_sync`` uncalled as the value of a ``return`` (the factory a helper hands back for its
    caller to enter: ``if c: return self.model.no_sync``, then ``return nullcontext``)."""
    if "no_sync" not in ctx.src.text:
        return []
    return [r.value for r in ctx.sem.by_type.get(ast.Return, ())
            if isinstance(r.value, ast.Attribute) and r.value.attr == "no_sync"]


def _if_returned(node, fn):
    """(the ``if``, True) for ``if C: ...; return <node>`` in ``fn`` (its body ends in that
    ``return``) whose only other ``return`` with a value, in its ``else`` or after it in the same
    block, returns something that is no ``no_sync`` (the other micro-batches' context); (the ``if``,
    False) for ``<node>`` returned at the end of the ``else`` and the other at the end of the body;
    else None."""
    ret = parent(node)
    q = parent(ret) if isinstance(ret, ast.Return) else None
    if q is None or enclosing_function(ret) is not fn:
        return None
    rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None and enclosing_function(n) is fn]
    other = [r for r in rets if r is not ret]
    if len(other) != 1 or any(isinstance(x, ast.Attribute) and x.attr == "no_sync" for x in ast.walk(other[0])):
        return None
    o = other[0]
    if not isinstance(q, ast.If):
        # ``if C: return nullcontext()`` then ``return X.no_sync()`` after it in the same block
        block = next((b for b in (getattr(q, f, None) for f in ("body", "orelse", "finalbody"))
                      if isinstance(b, list) and ret in b), None)
        before = block[:block.index(ret)] if block is not None else []
        i = next((x for x in before if isinstance(x, ast.If) and not x.orelse and x.body and x.body[-1] is o), None)
        return (i, False) if i is not None else None
    if q.orelse and q.orelse[-1] is ret and q.body[-1] is o:
        return q, False  # ``if C: return nullcontext`` / ``else: return X.no_sync``
    block = next((b for b in (getattr(parent(q), f, None) for f in ("body", "orelse", "finalbody"))
                  if isinstance(b, list) and q in b), None)
    if q.body[-1] is ret and (o in q.orelse or (block is not None and o in block[block.index(q) + 1:])):
        return q, True
    return None


def _returned(call, fn) -> bool:
    """``call`` is (a branch of the conditional expression that is) the value of a ``return`` of
    ``fn``, and ``fn`` has no other ``return`` with a value; or the ``return`` ends an ``if`` whose
    failing test leads to the one other ``return`` (``_if_returned``)."""
    if _if_returned(call, fn) is not None:
        return True
    p = parent(call)
    e = p if isinstance(p, ast.IfExp) else call
    ret = parent(e)
    if not isinstance(ret, ast.Return) or enclosing_function(ret) is not fn:
        return False
    return sum(isinstance(n, ast.Return) and n.value is not None and enclosing_function(n) is fn
               for n in ast.walk(fn)) == 1


def _bound(ctx, t, args: dict, loop, same_self: bool):
    """The helper's test ``t`` (on its parameters) read at a call that binds ``args``, inside
    ``loop``: its counter must be a loop variable (``i``, ``i + 1``), its modulus the argument's
    text when it is a parameter, a constant, or (``same_self``: a method called as ``self.m()``)
    an attribute of ``self``."""
    var, residue, k, holds = t
    a, off = offset(args.get(var))
    if not isinstance(a, ast.Name) or a.id not in loop_vars(ctx, loop):
        return None
    if k in args:
        if not isinstance(args[k], (ast.Name, ast.Attribute, ast.Constant)):
            return None
        k = ctx.text(args[k])
    elif not k.isdigit() and not (k.startswith("self.") and same_self):
        return None  # a modulus of the helper's own: not the caller's
    return (a.id, residue - off, k, holds)


def _sync_condition(ctx, call, holder, loop):
    """(node to report, test) where the test holds on the iterations that synchronise, for
    ``X.no_sync() if C else nullcontext()`` (in a ``with`` or bound once to a name) and for
    ``if C: with X.no_sync(): ... else: ...``."""
    p = parent(call)
    if isinstance(p, ast.IfExp) and p.test is not call:
        t = mod_test(ctx, p.test, loop, 0)
        if t is None:
            return None
        return p.test, (t[0], t[1], t[2], not t[3]) if call is p.body else t
    got = _if_returned(call, loop) if isinstance(loop, _FUNCS) else None
    if got is not None:
        q, in_body = got
        # ``if hasattr(self.model, "no_sync") and i % k != 0: return self.model.no_sync``: the
        # ``hasattr`` of the wrapper itself holds; the rest is the test
        rest = [v for v in (q.test.values if isinstance(q.test, ast.BoolOp) and isinstance(q.test.op, ast.And)
                            else [q.test]) if not _has_no_sync(ctx, v, holder)]
        if not in_body and len(rest) != len(q.test.values if isinstance(q.test, ast.BoolOp) else [q.test]):
            return None  # ``else`` of ``hasattr(...) and c``: not the negation of ``c`` alone
        t = mod_test(ctx, rest[0], loop, 0) if len(rest) == 1 else None
        if t is None:
            return None
        return q.test, (t[0], t[1], t[2], not t[3]) if in_body else t
    if isinstance(p, ast.withitem):
        w = parent(p)
        q = parent(w)
        if isinstance(q, ast.If) and q.orelse and has_ancestor(q, loop) and w in (*q.body, *q.orelse):
            other = q.orelse if w in q.body else q.body
            # the ``if`` splits the micro-batches: a backward inside this ``no_sync()`` block, and
            # one in the other branch that runs outside it (the synchronising micro-batch)
            if not _has_backward(ctx, w.body) or not _synced_backward(ctx, other):
                return None
            t = mod_test(ctx, q.test, loop, 0)
            if t is None:
                return None
            return q.test, (t[0], t[1], t[2], not t[3]) if w in q.body else t
    return None


def _has_no_sync(ctx, e, holder) -> bool:
    """``hasattr(<holder>, "no_sync")`` of the wrapper ``holder``: true."""
    return isinstance(e, ast.Call) and isinstance(e.func, ast.Name) and e.func.id == "hasattr" \
        and ctx.sem.qualname(e.func) in (None, "hasattr") and len(e.args) == 2 and not e.keywords \
        and ctx.text(e.args[0]) == ctx.text(holder) \
        and isinstance(e.args[1], ast.Constant) and e.args[1].value == "no_sync"


def _backwards_in(ctx, stmts):
    for st in stmts:
        for n in ast.walk(st):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "backward" \
                    and (isinstance(n.func.value, ast.Call) or ctx.qn(n.func.value) is None):
                yield n


def _has_backward(ctx, stmts) -> bool:
    return next(_backwards_in(ctx, stmts), None) is not None


def _synced_backward(ctx, stmts) -> bool:
    """A backward in ``stmts`` that no ``if`` / loop / ``with ...no_sync()`` inside them encloses."""
    tops = {id(st) for st in stmts}
    for b in _backwards_in(ctx, stmts):
        for a in Semantic.ancestors(b):
            if isinstance(a, (ast.If, ast.IfExp, ast.Try, *_LOOPS)) or isinstance(a, ast.With) and _no_sync_holder(a):
                break
            if id(a) in tops or a in stmts:
                return True
        else:
            continue
    return False


def _all_nodes(ctx):
    for fnl in ctx.sem.functions.values():
        for fn in fnl:
            yield from ast.walk(fn)


def _callers_of(ctx, an):
    """``callers(view, fn)`` for the flow layer: the calls of ``fn`` in the project's other files
    (a module-level function by name, a method through its class's instances)."""
    from ._common import project_callers

    def callers(view, fn):
        owner = parent(fn)
        method = isinstance(owner, ast.ClassDef)
        out, seen = [], set()
        for cctx, call, node in project_callers(ctx, {owner.name if method else fn.name}):
            cv = an.view_of(cctx.filename)
            if cv is None or cv.sem is not cctx.sem or method and id(cv) in seen:
                continue
            seen.add(id(cv))
            if not method:
                if node is fn:
                    out.append((cv, call))
                continue
            for c in cv.sem.calls:
                if isinstance(c.func, ast.Attribute) and c.func.attr == fn.name:
                    got = an.resolve_call(cv, c)
                    if got is not None and got[1] is fn:
                        out.append((cv, c))
        return out
    return callers


def _withs(ctx):
    seen = set()
    for c in ctx.sem.calls:
        f = c.func
        if isinstance(f, ast.Attribute) and f.attr == "no_sync" and not c.args and not c.keywords:
            item = parent(c)
            w = parent(item)
            if isinstance(item, ast.withitem) and isinstance(w, ast.With) and id(w) not in seen:
                seen.add(id(w))
                yield w


def _no_sync_holder(w: ast.With):
    for item in w.items:
        e = item.context_expr
        if isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr == "no_sync" \
                and isinstance(e.func.value, (ast.Name, ast.Attribute)):
            return e.func.value
    return None


def _unconditional_no_sync(ctx, node, loop):
    """The ``with X.no_sync():`` (X the DDP wrapper) around ``node`` inside ``loop``, when nothing
    conditional lies between ``node`` and the loop: only ``with`` blocks and inner loops (the
    micro-batch loop of an accumulation step), no ``if`` / ``try`` / conditional expression."""
    found = None
    for a in ctx.sem.ancestors(node):
        if a is loop:
            return found
        if isinstance(a, (ast.If, ast.IfExp, ast.Try, ast.BoolOp, ast.Lambda, ast.comprehension,
                          ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp, *_FUNCS)) \
                or a.__class__.__name__ in ("Match", "TryStar"):
            return None
        if isinstance(a, ast.With) and found is None:
            h = _no_sync_holder(a)
            if h is not None and ddp_holder(ctx, h, a):
                found = a
    return None


def _synchronising_helper(ctx, loop, in_loop) -> bool:
    """A call in ``loop``, outside every ``no_sync()`` block, of a project function that may run a
    collective (a backward of its own, a hand-written gradient all-reduce): the loop may
    synchronise after all."""
    from ..flow import for_context  # lazy: only loops that look never-synchronised get here

    ana = for_context(ctx)
    for c in ctx.sem.calls:
        if id(c) not in in_loop or not isinstance(c.func, (ast.Name, ast.Attribute)) \
                or (ctx.qn(c) or "").startswith("torch."):
            continue
        if any(isinstance(a, ast.With) and _no_sync_holder(a) is not None for a in ctx.sem.ancestors(c)):
            continue
        got = ana.resolve_call(ana.main, c)
        if got is None:
            continue
        if ana.summary(got[0], got[1]).collectives:
            return True
    return False


def _is_optimizer(expr) -> bool:
    name = expr.attr if isinstance(expr, ast.Attribute) else expr.id if isinstance(expr, ast.Name) else ""
    return "optim" in name.lower() or name.lower() in ("opt", "optimiser")


def _manual_allreduce(ctx, fn) -> bool:
    """``fn`` calls a torch.distributed reduction itself (one pass over the file's calls per check),
    of what may be gradients: a reduction of a tensor the function builds itself with a factory
    (``running = torch.zeros(2)``, a loss meter) is no gradient sync."""
    def build():
        out = set()
        for c in ctx.sem.calls:
            qn = ctx.qn(c) or ""
            if qn.startswith("torch.distributed.") and "reduce" in qn:
                f = enclosing_function(c)
                if f is not None and not _own_meter(ctx, c, f):
                    out.add(id(f))
        return out
    return id(fn) in ctx.memo("ddp208.manual_allreduce", build)


def _own_meter(ctx, call, fn) -> bool:
    """The reduction's tensor is a name that ``fn`` binds, every time, to a new tensor of a torch
    factory (``running = torch.zeros(2, device=d)``): a meter, not a gradient."""
    a = get_arg(call, 0, "tensor")
    if not isinstance(a, ast.Name):
        return False
    binds = ctx.sem.assignments(fn).get(a.id, ())
    return bool(binds) and all(isinstance(b, ast.Assign) and isinstance(b.value, ast.Call)
                               and ctx.qn(b.value) in TENSOR_CTORS for b in binds)


def _calls_by_function(ctx) -> dict[int, list[ast.Call]]:
    """id(function) -> the calls whose enclosing function it is, in the file's order."""
    def build():
        out: dict[int, list[ast.Call]] = {}
        for c in ctx.sem.calls:
            f = enclosing_function(c)
            if f is not None:
                out.setdefault(id(f), []).append(c)
        return out
    return ctx.memo("ddp208.calls_by_function", build)


# ---- ``require_backward_grad_sync`` written after the forward it means to control ----------------

_FLAG = "require_backward_grad_sync"


def _pos(node) -> tuple[int, int]:
    return node.lineno, node.col_offset


def _has_pos(node) -> bool:
    return isinstance(node, (ast.stmt, ast.expr))


def _innermost_loop(node, fn):
    for a in Semantic.ancestors(node):
        if a is fn or isinstance(a, _FUNCS):
            return None
        if isinstance(a, _LOOPS):
            return a
    return None


def _flag_targets(st):
    """The holders ``X`` whose ``X.require_backward_grad_sync`` the statement/call ``st`` sets:
    an assignment (also one element of a tuple target) or ``setattr(X, "require_backward_grad_sync", v)``."""
    if isinstance(st, (ast.Assign, ast.AnnAssign)):
        targets = st.targets if isinstance(st, ast.Assign) else [st.target]
        for t in targets:
            for x in ([t] if not isinstance(t, (ast.Tuple, ast.List)) else t.elts):
                if isinstance(x, ast.Attribute) and x.attr == _FLAG and isinstance(x.value, (ast.Name, ast.Attribute)):
                    yield x.value
    elif isinstance(st, ast.Call) and isinstance(st.func, ast.Name) and st.func.id == "setattr" \
            and len(st.args) == 3 and isinstance(st.args[1], ast.Constant) and st.args[1].value == _FLAG \
            and isinstance(st.args[0], (ast.Name, ast.Attribute)):
        yield st.args[0]


def _wrap_ids(ctx, holder, at) -> frozenset:
    if not (isinstance(holder, ast.Name) or isinstance(holder, ast.Attribute) and isinstance(holder.value, ast.Name)
            and holder.value.id == "self"):
        return frozenset()
    memo = ctx.memo("ddp208.wrap_ids", dict)
    key = (id(holder), id(at))
    if key not in memo:
        # (keyed by where the wrapper is bound: two wrappers a project helper builds are two)
        memo[key] = frozenset(id(bound_at(o)[1]) for o in ddp_wraps_of(ctx, holder, at))
    return memo[key]


def _flag_writes(ctx, an, view, fn, nodes):
    """(node in ``fn``, holder expression in ``fn``'s terms) for each write of the flag that runs at
    that node: the write itself, or a call of a project function (one call deep) that writes the flag
    on one of its parameters (the holder is the argument) or on ``self.<attr>`` (for ``self.m(...)``,
    the holder is ``self.<attr>``)."""
    for n in nodes:
        if isinstance(n, (ast.Assign, ast.AnnAssign)) or isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
            for h in _flag_targets(n):
                if not _rearms_after(nodes, n):
                    yield n, h
        if not isinstance(n, ast.Call) or not isinstance(n.func, (ast.Name, ast.Attribute)):
            continue
        try:
            got = an.resolve_call(view, n)
        except Exception:  # noqa: BLE001 - an unresolvable call is simply not followed
            got = None
        if got is None or not isinstance(got[1], (ast.FunctionDef, ast.AsyncFunctionDef)) or got[1].name == "__init__":
            continue
        callee = got[1]
        binds = bind_args(n, callee)
        inner = iter_scope_nodes(callee)
        # a context manager's writes after its ``yield`` run when the block ends, after its backward
        yields = [_pos(y) for y in inner if isinstance(y, (ast.Yield, ast.YieldFrom))]
        for m in inner:
            if not isinstance(m, (ast.Assign, ast.AnnAssign, ast.Call)) or _rearms_after(inner, m) \
                    or any(_pos(m) > y for y in yields):
                continue
            for h in _flag_targets(m):
                if isinstance(h, ast.Name) and h.id in binds and h.id in param_names(callee) \
                        and not got[0].sem.assignments(callee).get(h.id):
                    yield n, binds[h.id]
                elif isinstance(h, ast.Attribute) and isinstance(h.value, ast.Name) and h.value.id == "self" \
                        and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) \
                        and n.func.value.id == "self" and got[0] is view:
                    yield n, ast.copy_location(ast.Attribute(value=n.func.value, attr=h.attr, ctx=ast.Load()), n)


def _rearms_after(nodes, w) -> bool:
    """A ``<wrapper>.reducer.prepare_for_backward(...)`` call after the write ``w`` in its scope: the
    reducer is armed again by hand (Accelerate's ``trigger_sync_in_backward``), so the flag set after
    the forward does govern the next backward."""
    return any(_pos(c) > _pos(w) for c in nodes if c.__class__ is ast.Call and isinstance(c.func, ast.Attribute)
               and c.func.attr == "prepare_for_backward" and isinstance(c.func.value, ast.Attribute)
               and c.func.value.attr == "reducer")


def _forwards_feeding(ctx, an, view, fn, b, wraps, nodes):
    """The calls of ``fn`` whose value the ``backward`` call ``b`` differentiates that run a forward of
    the wrapper ``wraps`` names: a call of a holder of it, a call that hands one to a helper."""
    stmts = [s for s in nodes if isinstance(s, (ast.Assign, ast.AnnAssign, ast.AugAssign))]
    names = names_reaching([b], stmts)
    calls = [c for c in ast.walk(b) if isinstance(c, ast.Call) and c is not b]
    for s in stmts:
        if s.value is not None and target_names(s) & names:
            calls.extend(c for c in ast.walk(s.value) if isinstance(c, ast.Call))
    out = []
    for c in calls:
        if _wrap_ids(ctx, c.func, c) & wraps or any(
                _wrap_ids(ctx, a, c) & wraps for a in (*c.args, *(k.value for k in c.keywords))):
            out.append(c)
    return out


def late_flag_writes(ctx):
    """(write node, holder, forward call, backward call): ``holder.require_backward_grad_sync`` is set
    (here or in a helper) after the forward of the DDP wrapper whose value the next ``backward()`` of
    the same round differentiates, with no forward of that wrapper for it after the write and no
    write of the flag before that forward in the round. DDP reads the flag in its forward (the
    reducer is prepared there), so the write does not govern that backward."""
    from ..flow.modern import hub

    an, view = hub(ctx)
    scopes = [f for fl in ctx.sem.functions.values() for f in fl] + [ctx.sem.tree]
    for fn in scopes:
        nodes = iter_scope_nodes(fn)
        backs = sorted((b for b in nodes if isinstance(b, ast.Call) and is_backward(view, b)), key=_pos)
        if not backs:
            continue
        # a write that runs before the scope's last backward (a later one governs no backward here)
        writes = list(_flag_writes(ctx, an, view, fn, [n for n in nodes if _has_pos(n) and _pos(n) < _pos(backs[-1])]))
        if not writes:
            continue
        for w, h in writes:
            wraps = _wrap_ids(ctx, h, w)
            if not wraps:
                continue
            loop = _innermost_loop(w, fn)
            b = next((b for b in backs if _pos(b) > _pos(w) and _innermost_loop(b, fn) is loop), None)
            if b is None:
                continue
            fwd = [c for c in _forwards_feeding(ctx, an, view, fn, b, wraps, nodes)
                   if _innermost_loop(c, fn) is loop and _pos(c) < _pos(b)]
            if not fwd or any(_pos(c) > _pos(w) for c in fwd):
                continue
            first = min(fwd, key=_pos)
            if any(_pos(w2) < _pos(first) and _innermost_loop(w2, fn) is loop and _wrap_ids(ctx, h2, w2) & wraps
                   for w2, h2 in writes):
                continue  # a write before the forward governs it: this one is a restore
            yield w, h, max(fwd, key=_pos), b
