from __future__ import annotations

import ast

from ..model import Severity
from ..semantic import parent
from ..registry import Rule
from ..flow.models import ddp_calls
from ..flow.mentions import mentions
from ..flow.modern import hub, origins

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
    requires_text = ("DistributedDataParallel", "prepare")

    def finish(self, ctx) -> None:
        calls = ddp_calls(ctx)
        prepared = _prepared_models(ctx)
        if not (calls or prepared) or mentions(ctx.sem, "SyncBatchNorm", "convert_sync_batchnorm", text=ctx.src.text):
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
        an, view = hub(ctx)
        for call in calls:
            if call.args and _holds_bn(an, view, call.args[0], call) is False:
                continue
            ctx.report(
                call,
                "the model has BatchNorm layers but is wrapped in DDP without SyncBatchNorm: each rank "
                "normalises with its own batch statistics",
                related=[(bn[0], "BatchNorm comes from here")],
            )
        for call, args in prepared:
            if all(_holds_bn(an, view, a, call) is False for a in args):
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
    from .ddp210_attribute_through_ddp_wrapper import _one_process_notebook

    if is_test_file(ctx.filename) or _one_process_notebook(ctx):
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


_MOVES = frozenset({"cuda", "to", "train", "eval", "float", "half", "bfloat16", "double", "cpu",
                    "requires_grad_", "to_empty"})


def _holds_bn(an, view, expr, at, depth: int = 0):
    """True / False when what ``expr`` holds at ``at`` is known to have (not to have) BatchNorm
    layers; None when it cannot be told."""
    if depth > 3:
        return None
    got = origins(an, view, expr, at)
    if not got:
        return None
    answers = set()
    for v, e in got:
        if not isinstance(e, ast.Call):
            return None
        f = e.func
        qn = v.sem.call_qualname(e) or ""
        if isinstance(f, ast.Attribute) and f.attr in _MOVES and not qn.startswith("torch.nn."):
            answers.add(_holds_bn(an, v, f.value, e, depth + 1))
        elif qn in _BN or (qn.startswith("torchvision.models.")
                           and qn.rsplit(".", 1)[-1].startswith(_BN_MODELS)):
            answers.add(True)
        elif qn.startswith("torch.nn.") and qn.count(".") == 2 and qn.rsplit(".", 1)[-1] not in _CONTAINERS:
            answers.add(False)  # a torch.nn layer: BatchNorm only if it is one (above)
        elif qn.startswith("torch.nn.") and qn.rsplit(".", 1)[-1] in _CONTAINERS and e.args and not e.keywords \
                and not any(isinstance(a, ast.Starred) for a in e.args):
            # ``nn.Sequential(conv, nn.BatchNorm2d(c), ...)``: what its layers hold
            inner = {_holds_bn(an, v, a, e, depth + 1) for a in e.args}
            answers.add(True if True in inner else False if inner == {False} else None)
        elif isinstance(f, ast.Name) and f.id in v.classes:
            answers.add(_class_builds_bn(v, v.classes[f.id]))
        else:
            # a project class of another module (``from nets import Backbone``)
            got = an.resolve_call(v, e) if isinstance(f, (ast.Name, ast.Attribute)) else None
            owner = parent(got[1]) if got is not None and getattr(got[1], "name", "") == "__init__" else None
            if not isinstance(owner, ast.ClassDef):
                return None
            answers.add(_class_builds_bn(got[0], owner))
    if True in answers:
        return True
    return False if answers == {False} else None


_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})


def _class_builds_bn(view, cls) -> bool | None:
    """A project class whose body builds a BatchNorm layer (True), builds only other ``torch.nn``
    layers (False), or builds anything else (None: a submodule class of unknown content)."""
    if any(not (isinstance(b, ast.Attribute) and b.attr == "Module") for b in cls.bases):
        return None  # a base class of its own may add BatchNorm
    seen_other = False
    for n in ast.walk(cls):
        if isinstance(n, ast.Call):
            qn = view.sem.call_qualname(n) or ""
            if qn in _BN or (qn.startswith("torchvision.models.")
                             and qn.rsplit(".", 1)[-1].startswith(_BN_MODELS)):
                return True
            if not qn.startswith(("torch.", "math.", "super")) and not (
                    isinstance(n.func, ast.Name) and n.func.id in ("super", "len", "range", "int", "float",
                                                                  "list", "dict", "tuple", "isinstance",
                                                                  "getattr", "setattr", "hasattr", "zip",
                                                                  "enumerate", "min", "max", "print")):
                seen_other = True
    return None if seen_other else False
