from __future__ import annotations

import ast

from ..model import Severity
from ..registry import Rule
from ..flow.wrap_sites import wrap_sites
from ..flow.mentions import mentions
from ..flow.buffers import BN_LAYERS, builds_bn_model, holds_batchnorm
from ..flow.modern import hub



class BatchNormWithoutSyncBn(Rule):
    """
    ## What it does
    Checks for a file that builds a model with BatchNorm layers (`nn.BatchNorm1d/2d/3d`, or a
    torchvision ResNet/DenseNet/MobileNet/EfficientNet/... builder) and wraps it in DDP without
    ever calling `nn.SyncBatchNorm.convert_sync_batchnorm`.

    The model is the value DDP wraps, followed through names, tuple unpacking, `self` attributes,
    helper returns and `.cuda()` / `.to(...)` calls: a wrap of a module that is known to hold no
    BatchNorm (a `torch.nn` layer such as the `nn.Linear` head of a linear probe, or a class of the
    project whose body builds none) is not reported because another model of the file has
    BatchNorm. When what DDP wraps cannot be told, the file's own BatchNorm layers decide. The
    layers of an `nn.Sequential(...)` are looked into.

    Accelerate's `accelerator.prepare(model, ...)` counts as the wrap: it returns a DDP wrapper
    when it runs on several processes (the models it prepares are those of
    `flow.wrapped.prepares_model`, as in DDP210), except in a test file or a notebook that never
    calls `notebook_launcher`, which run one process.

    It is informational and off by default: per-rank batch statistics are a legitimate choice
    (and the usual one when the per-GPU batch is large).

    ## Why is this bad?
    DDP synchronises gradients, not BatchNorm statistics. Each rank normalises with the mean and
    variance of its own slice of the batch, and `running_mean`/`running_var` drift apart between
    ranks (DDP broadcasts rank 0's buffers at each forward by default). With small per-GPU batches
    the symptom is a model that trains worse on N GPUs than on one, and evaluation accuracy that
    depends on which rank's buffers were saved.

    ## Example
    ```python
    model = torchvision.models.resnet50().to(local_rank)
    model = DDP(model, device_ids=[local_rank])
    ```

    ## Use instead
    ```python
    model = torchvision.models.resnet50()
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model).to(local_rank)
    model = DDP(model, device_ids=[local_rank])
    ```

    ## Fix safety
    There is no fix: SyncBatchNorm adds a collective to every forward pass and changes the
    training dynamics; it is a modelling decision.
    """

    code = "DDP206"
    name = "batchnorm-without-syncbn"
    severity = Severity.INFO
    default_enabled = False
    # a DDP wrap, or Accelerate's ``accelerator.prepare(model, ...)`` (a DDP wrap on several processes)
    # (or a project helper that returns the DDP wrapper: a module the file imports spells it)
    requires_text = ("DistributedDataParallel", "prepare", "import")

    @classmethod
    def reach(cls, text, filename):
        from ..flow.reach import WRAP_TEXT, reaches

        if "prepare" in text:
            return True, {}
        return reaches(filename, text, WRAP_TEXT)

    def finish(self, ctx) -> None:
        sites = wrap_sites(ctx)  # ``DDP(...)`` here, or a project helper that returns the wrapper
        prepared = _prepared_models(ctx)
        if not (sites or prepared) or mentions(ctx.sem, "SyncBatchNorm", "convert_sync_batchnorm", text=ctx.src.text):
            return
        bn = ctx.calls_to(*BN_LAYERS)
        if not bn:
            for c in ctx.sem.calls:
                if builds_bn_model(ctx.qn(c) or ""):
                    bn = [c]
                    break
        if not bn:
            return
        an, view = hub(ctx)
        for site in sites:
            module, mv, at = site.arg_at(view, 0, "module")
            if module is not None and holds_batchnorm(an, mv, module, at) is False:
                continue
            ctx.report(
                site.call,
                "the model has BatchNorm layers but is wrapped in DDP without SyncBatchNorm: each rank "
                "normalises with its own batch statistics",
                related=[(bn[0], "BatchNorm comes from here")],
            )
        for call, args in prepared:
            if all(holds_batchnorm(an, view, a, call) is False for a in args):
                continue
            ctx.report(
                call,
                "the model has BatchNorm layers but `prepare` wraps it in DDP (on several processes) without "
                "SyncBatchNorm: each rank normalises with its own batch statistics",
                related=[(bn[0], "BatchNorm comes from here")],
            )


def _prepared_models(ctx) -> list:
    """(``accelerator.prepare(...)`` call, its arguments that are models Accelerate wraps in DDP on
    several processes: ``flow.wrapped.prepares_model``)."""
    from ..flow.helper_calls import calls_named
    from ..flow.testing import is_test_file
    from ..flow.wrapped import prepares_model
    from ..flow.kernel import one_process_notebook

    if is_test_file(ctx.filename) or one_process_notebook(ctx):
        return []  # one process (a test harness, a kernel without notebook_launcher): nothing is wrapped
    out = []
    an = None
    for c in calls_named(ctx, "prepare"):
        if not isinstance(c.func, ast.Attribute) or not c.args:
            continue
        if an is None:
            an, view = hub(ctx)
        paths = [()] if len(c.args) == 1 else [(i,) for i in range(len(c.args))]
        args = [c.args[p[0] if p else 0] for p in paths if prepares_model(an, view, c, p)]
        if args:
            out.append((c, args))
    return out
