from __future__ import annotations

import ast

from ..flow.rank import rank_guard
from ..model import Severity
from ..registry import Rule
from ._flow import FLOW_TEXT, all_divergences, report_divergence, text

_EXIT_WORDS = {ast.Return: "return", ast.Break: "break", ast.Continue: "continue"}


class EarlyExitSkipsCollective(Rule):
    """
    ## What it does
    Checks for an early exit (`continue`, `break`, `return`, or a successful `sys.exit()` /
    `os._exit(0)`) under a condition whose value differs between ranks, when the exit skips a
    collective that the other ranks make: later in the same block, or in the later iterations of
    the loop it leaves.

    A condition differs between ranks when it depends on the rank itself, or on this rank's own
    data: a batch, a loss computed from it (`if not torch.isfinite(loss): continue`), a metric
    accumulated over the rank's shard, the wall clock (`if time.time() - start > budget: break`),
    unseeded random numbers. Collectives include the implicit ones: DDP's gradient all-reduce in
    `loss.backward()` (for a loss computed from a DDP-wrapped model), DDP's buffer broadcast in the
    forward, and calls to functions (in this file or imported from the project) that make a
    collective.

    Not flagged: a condition on a value a collective made equal on every rank (an all-reduced stop
    flag), exits inside DDP's `join()` context, `raise` and failing exits (`sys.exit(1)`): the
    launcher stops the whole job when one rank fails. Values the analysis cannot judge never produce
    a finding.

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

    ## Fix safety
    There is no automatic fix: which collective makes the decision uniform depends on the program.
    """

    code = "DDP107"
    name = "early-exit-skips-collective"
    severity = Severity.ERROR
    fix_availability = "never"
    requires_text = FLOW_TEXT

    def finish(self, ctx) -> None:
        seen = set()
        for d in all_divergences(ctx):
            if d.kind != "exit" or id(d.exit) in seen:
                continue
            site = d.site
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
