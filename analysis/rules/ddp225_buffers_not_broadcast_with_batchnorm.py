from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..flow.buffers import holds_batchnorm, syncs_buffers
from ..flow.mentions import mentions
from ..flow.wrap_sites import wrap_sites
from ..flow.modern import hub
from ..torch_api import constant_of


class BuffersNotBroadcastWithBatchNorm(Rule):
    """
    ## What it does
    Checks for `DistributedDataParallel(model, broadcast_buffers=False)` where the model is known
    to hold BatchNorm layers (not SyncBatchNorm: the file never converts them), the file puts a
    model in evaluation mode (`.eval()`), and nothing in the file synchronises the buffers itself
    (a collective on `running_mean` / `running_var`, or a walk over `buffers()` /
    `named_buffers()`, also in a function of another module of the project that the file calls). The model is followed through names, tuple unpacking, helper returns,
    `.to()` / `.cuda()` and the project classes the file builds.

    ## Why is this bad?
    With `broadcast_buffers=False`, DDP no longer copies rank 0's buffers to the other ranks at
    each forward. Each rank's `running_mean` and `running_var` then track only its own shard of
    the data, and the replicas drift apart while their weights stay equal. Every rank that
    evaluates runs a different model (per-rank metrics disagree, and a metric gathered over ranks
    mixes models), and the checkpoint the main rank saves keeps its own statistics only, which is
    neither what the other ranks evaluated nor an estimate over the whole data set.

    ## Example
    ```python
    model = DDP(ResNetWithBN().to(dev), device_ids=[dev], broadcast_buffers=False)
    train(model)
    model.eval()
    evaluate(model, val_loader)  # each rank's BatchNorm statistics differ
    ```

    ## Use instead
    ```python
    model = DDP(ResNetWithBN().to(dev), device_ids=[dev], broadcast_buffers=False)
    train(model)
    for buf in model.module.buffers():  # one set of statistics on every rank
        dist.broadcast(buf, src=0)
    model.eval()
    evaluate(model, val_loader)
    ```
    or keep `broadcast_buffers=True`, or convert the model with
    `nn.SyncBatchNorm.convert_sync_batchnorm`.

    ## Fix safety
    There is no automatic fix: whether to broadcast, average or keep per-rank statistics is the
    author's decision.
    """

    code = "DDP225"
    name = "buffers-not-broadcast-with-batchnorm"
    severity = Severity.WARNING
    requires_text = ("broadcast_buffers", "import")

    @classmethod
    def reach(cls, text, filename):
        # the keyword in this file, or in a project helper that builds the wrapper for it
        from ..flow.reach import reaches

        return reaches(filename, text, ("broadcast_buffers",))

    def finish(self, ctx) -> None:
        sites = wrap_sites(ctx)  # ``DDP(...)`` here, or a project helper that returns the wrapper
        if not sites or mentions(ctx.sem, "SyncBatchNorm", "convert_sync_batchnorm", text=ctx.src.text):
            return
        an, view = hub(ctx)
        offs = []
        for site in sites:
            value, vv, at = site.keyword(view, "broadcast_buffers")
            if value is None:
                continue
            got = constant_of(vv.sem, value, vv.sem.scope_of(at))
            module, mv, mat = site.arg_at(view, 0, "module")
            if got is not None and got.value is False and module is not None:
                # reported at the keyword when it is written in the call, else at the helper's call
                kw = next((k for k in site.call.keywords if k.arg == "broadcast_buffers"), None)
                offs.append((kw if kw is not None and kw.value is value else site.call, (module, mv, mat)))
        if not offs:
            return
        if syncs_buffers(an, view):
            return
        evals = [c for c in ctx.sem.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "eval"
                 and not c.args and not c.keywords]
        if not evals:
            return
        for where, (module, mv, mat) in offs:
            if holds_batchnorm(an, mv, module, mat) is not True:
                continue
            ctx.report(where, "`broadcast_buffers=False` on a model with BatchNorm layers, and nothing here "
                           "synchronises its buffers: each rank's running statistics track only its own data, "
                           "so every rank evaluates a different model and the main rank's checkpoint keeps its "
                           "own statistics only",
                       related=[(evals[0], "evaluation mode")])
