from __future__ import annotations

import ast

from ..flow.rank import rank_guard
from ..model import Severity
from ..registry import Rule
from ._flow import (FLOW_TEXT, all_divergences, call_words, effect_words, elsewhere, node_related,
                    report_divergence, source_related, source_words, text, vtext)
from ._flow import where as loc

_EXIT_WORDS = {ast.Return: "return", ast.Break: "break", ast.Continue: "continue"}


class EarlyExitSkipsCollective(Rule):
    """
    ## What it does
    Checks for an early exit (`continue`, `break`, `return`, or a successful `sys.exit()` /
    `os._exit(0)`) under a condition whose value differs between ranks, when the exit skips a
    collective that the other ranks make: later in the same block, or in the later iterations of
    the loop it leaves.

    A condition differs between ranks when it depends on the rank itself, or on this rank's own
    data: a batch (also one pulled with `next()` from an iterator over the rank's loader:
    `feed = iter(loader)`, or a generator of the project that cycles it, `feed = cycle(loader)`), a
    loss computed from it (`if not torch.isfinite(loss): continue`), a metric
    accumulated over the rank's shard (also a torchmetrics metric's own count: a plain attribute that its
    `update()` stores from the batch, not registered with `add_state`, read in `compute()`), the wall clock (`if time.time() - start > budget: break`),
    unseeded random numbers; or whether a value is None, when such a condition chooses between None
    and a value never None (`extra = None` then `if batch_has_mask: extra = {}`, then `if extra is
    None: continue`). Collectives include the implicit ones: DDP's gradient all-reduce in
    `loss.backward()` (for a loss computed from a DDP-wrapped model), DDP's buffer broadcast in the
    forward, calls to functions (in this file or imported from the project) that make a
    collective, and the collectives of libraries: Accelerate's `gather` / `reduce` /
    `wait_for_everyone`, torchmetrics' `gather_all_tensors` (its `reduce` is local arithmetic).

    Collectives hidden in the modern stack count the same way (the table is
    `analysis/runtime/shim_vocab.py`, version-tagged and checked on torch 2.13): the forward and
    backward of a `fully_shard` module (FSDP2's all-gather and reduce-scatter), `DTensor.full_tensor()`
    / `redistribute()` / `distribute_tensor()`, `get_model_state_dict` / `get_optimizer_state_dict` /
    `get_state_dict` with `full_state_dict=True`, `set_*state_dict` with `broadcast_from_rank0=True`,
    `dcp.save` / `dcp.load` / `dcp.async_save`, `clip_grad_norm_` over FSDP2 parameters, FSDP1's
    `summon_full_params` and full optimizer state dicts, and a `torch.compile`d function that makes
    a collective.

    An exception handler is such an exit too: a `try` body that computes on this rank's data (a
    forward on this rank's batch, which may run out of CUDA memory on this rank only) before a
    collective (`loss.backward()` under DDP), with a handler that catches the error
    (`RuntimeError`, `torch.cuda.OutOfMemoryError`, `Exception`, a bare `except`) and may finish
    without raising it again (`return None`, `continue`, or falling through): the rank that raised
    skips the collective. The computation may also sit in a helper the `try` body calls first (a
    micro-batch step that receives this rank's slice, runs the forward, then `loss.backward()`),
    and the batch may reach the method as a parameter from the loop of another method. The finding
    is at the handler. Not flagged: a handler that re-raises on every path, or finishes only where
    the job is not distributed (`if world_size > 1: raise`), or makes the same collectives itself;
    a `try` body whose collective comes first, with only the packing of values already computed
    before a later collective (`payload = (per_name, steps)` then `all_gather_object`): that
    cannot fail on one rank only.

    Helpers are analysed as each call runs them: a step function that receives the DDP-wrapped
    model and this rank's batch (`train_step(ddp_model, batch, opt)`, a `Trainer` method using
    `self.model`, also called on the instance it builds: `Trainer(ddp_model).fit(...)`) and returns early on the batch (`if keep.sum() == 0: return None`) skips DDP's
    gradient all-reduce in its `loss.backward()`; a helper of another file that trains the model it
    receives makes that all-reduce at the call, and a value it returns from this rank's data
    (`val_loss = validate(model, val_loader)`) is rank-varying, and so is what a method stores on
    its object from such a value (`stopper.observe(val_loss)` then `if stopper.halt: break`, the
    flag set under a test on the loss: `flow.instance_state`), also when the method returns the flag
    it sets (`if stopper.update(val_loss): break`). When the exit lives in a helper of
    another file, the finding is reported at the call.

    Not flagged: a condition on a value a collective made equal on every rank (an all-reduced stop
    flag), exits inside DDP's `join()` context, `raise` and failing exits (`sys.exit(1)`): the
    launcher stops the whole job when one rank fails. Nor a count derived from the length of this
    rank's piece of an even split (`t.split(len(t) // world_size)[rank]`, also returned by a
    helper): every piece below index `world_size` has `len(t) // world_size` rows. Values the
    analysis cannot judge never produce a finding.

    ## Why is this bad?
    The rank that leaves early never enters the collective the others are waiting in. They block
    until the NCCL watchdog kills the job, or, worse, the next collectives pair up wrongly
    (one rank's gradient all-reduce meets another rank's `all_gather`):

    ```
    [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, ...)
    ```

    ## Example
    ```python
    for x, y in loader:
        loss = criterion(ddp_model(x), y)
        if not torch.isfinite(loss):
            continue  # only this rank skips the gradient all-reduce below
        loss.backward()

    for x, y in loader:
        try:
            criterion(ddp_model(x), y).backward()
        except torch.cuda.OutOfMemoryError:
            continue  # only the rank that ran out of memory skips the all-reduce
    ```

    ## Use instead
    Decide together: make the condition uniform with a collective first.
    ```python
    for x, y in loader:
        loss = criterion(ddp_model(x), y)
        bad = torch.tensor(float(not torch.isfinite(loss)), device=loss.device)
        dist.all_reduce(bad)
        if bad.item():
            continue  # every rank skips
        loss.backward()
    ```
    After an out-of-memory error, share a flag (`dist.all_reduce(oom, op=dist.ReduceOp.MAX)`)
    before anyone runs the backward, and let every rank skip the batch, or re-raise.

    ## Fix safety
    There is no automatic fix: which collective makes the decision uniform depends on the program.
    """

    code = "DDP107"
    name = "early-exit-skips-collective"
    severity = Severity.ERROR
    fix_availability = "never"
    requires_text = FLOW_TEXT
    requires_reach = True  # a collective site in this file or a module it imports (flow.reach)

    def finish(self, ctx) -> None:
        seen = set()
        for d in all_divergences(ctx):
            if d.kind == "except":
                self._handler(ctx, d, seen)
                continue
            if d.kind != "exit" or id(d.exit) in seen:
                continue
            site = d.site
            if elsewhere(ctx, d):
                self._in_callee(ctx, d, seen)
                continue
            if site.kind == "explicit":
                g = rank_guard(ctx, site.node)
                if g is not None and g.branch == "after" and g.if_node is d.node:
                    continue  # DDP104 reports the collective after a rank guard's early exit
            seen.add(id(d.exit))
            ex = d.exit
            word = _EXIT_WORDS.get(type(ex)) or text(ctx, ex)
            cond = text(ctx, d.node.test)
            if type(ex) in (ast.Break, ast.Return) and site.node.lineno < ex.lineno:
                where = "in the later iterations"
            else:
                where = "at line %d" % site.node.lineno
            report_divergence(
                ctx, d, ex, f"`{cond}`", f"the `{word}` at line {ex.lineno} skips ",
                f"{where}, which the other ranks make: they wait for this rank until the watchdog timeout",
                "skipped collective", related=[(d.node.test, "rank-varying condition")],
            )

    def _handler(self, ctx, d, seen) -> None:
        """An exception handler that swallows an error raised on this rank only (out of memory in
        a forward on this rank's batch) before a collective of the ``try`` body."""
        h = d.exit
        there = elsewhere(ctx, d)
        key = (id(d.ctx.call) if there else 0, id(h))
        if key in seen:
            return
        seen.add(key)
        view, path = d.view, d.view.path
        caught = vtext(view, h.type) if h.type is not None else "every exception"
        body = (f"`except {caught}` ({loc(ctx, path, h)}) catches an error that the `try` body may raise "
                f"on this rank only before the collective (a computation on this rank's data, "
                f"{source_words(ctx, d.value)}, may run out of memory where the others do not) and does not raise it again, so this rank skips "
                f"{effect_words(ctx, d.site)} in `{vtext(view, d.site.node)}` ({loc(ctx, path, d.site.node)}), "
                "which the other ranks make: the collectives pair up wrongly or wait until the watchdog "
                "timeout; decide together (all-reduce a flag) or re-raise")
        if there:
            ctx.report(d.ctx.call, f"`{text(ctx, d.ctx.call)}` passes {call_words(ctx, d)} to `{d.ctx.fname}`; there "
                       + body, related=[node_related(ctx, path, h, "exception handler"),
                                        node_related(ctx, path, d.site.node, "skipped collective"),
                                        *source_related(ctx, d.value)])
            return
        ctx.report(h, body[0].upper() + body[1:],
                   related=[(d.site.node, "skipped collective"), *source_related(ctx, d.value)])

    def _in_callee(self, ctx, d, seen) -> None:
        """An early exit inside a function of another file, on a condition rank-varying because of
        what this file's call passes it: reported at the call."""
        call = d.ctx.call
        key = (id(call), id(d.exit))
        if key in seen:
            return
        seen.add(key)
        path, ex = d.view.path, d.exit
        word = _EXIT_WORDS.get(type(ex)) or vtext(d.view, ex)
        ctx.report(
            call,
            f"`{text(ctx, call)}` passes {call_words(ctx, d)} to `{d.ctx.fname}`; there "
            f"`{vtext(d.view, d.node.test)}` ({loc(ctx, path, d.node)}) is rank-varying "
            f"({source_words(ctx, d.value)}), and its `{word}` ({loc(ctx, path, ex)}) skips "
            f"{effect_words(ctx, d.site)} in `{vtext(d.view, d.site.node)}` ({loc(ctx, path, d.site.node)}), "
            "which the other ranks make: they wait for this rank until the watchdog timeout",
            related=[node_related(ctx, path, d.node.test, "rank-varying condition"),
                     node_related(ctx, path, ex, "early exit"),
                     node_related(ctx, path, d.site.node, "skipped collective"),
                     *source_related(ctx, d.value)],
        )
