from __future__ import annotations

from ..model import Severity
from ..registry import Rule
from ..flow.models import ddp_calls
from ..flow.mentions import mentions

_BN = ("torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d",
       "torch.nn.LazyBatchNorm1d", "torch.nn.LazyBatchNorm2d", "torch.nn.LazyBatchNorm3d")
# torchvision builders whose models contain BatchNorm layers
_BN_MODELS = ("resnet", "resnext", "wide_resnet", "densenet", "inception", "googlenet", "mobilenet",
              "efficientnet", "regnet", "shufflenet", "mnasnet", "convnext_", "vgg11_bn", "vgg13_bn",
              "vgg16_bn", "vgg19_bn")


class BatchNormWithoutSyncBn(Rule):
    """
    ## What it does
    Checks for a file that builds a model with BatchNorm layers (`nn.BatchNorm1d/2d/3d`, or a
    torchvision ResNet/DenseNet/MobileNet/EfficientNet/... builder) and wraps it in DDP without
    ever calling `nn.SyncBatchNorm.convert_sync_batchnorm`.

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
    requires_text = ("DistributedDataParallel",)

    def finish(self, ctx) -> None:
        calls = ddp_calls(ctx)
        if not calls or mentions(ctx.sem, "SyncBatchNorm", "convert_sync_batchnorm", text=ctx.src.text):
            return
        bn = ctx.calls_to(*_BN)
        if not bn:
            for c in ctx.sem.calls:
                qn = ctx.qn(c) or ""
                if qn.startswith("torchvision.models.") and qn.rsplit(".", 1)[-1].startswith(_BN_MODELS):
                    bn = [c]
                    break
        if not bn:
            return
        for call in calls:
            ctx.report(
                call,
                "the model has BatchNorm layers but is wrapped in DDP without SyncBatchNorm: each rank "
                "normalises with its own batch statistics",
                related=[(bn[0], "BatchNorm comes from here")],
            )
