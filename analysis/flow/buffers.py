"""Does a DDP-wrapped module have buffers (``module_buffers``, ``class_buffers``), does it hold
BatchNorm layers (``holds_batchnorm``, DDP206 / DDP225), does the file synchronise buffers itself
(``syncs_buffers``)? (True / False / None = unknown.)

DDP's forward broadcasts rank 0's buffers (``running_mean``, ``running_var``, registered buffers)
before it runs the module, whenever ``broadcast_buffers`` is on (the default) and the module has
buffers, and the previous forward ran with gradients enabled (``require_forward_param_sync``): a
forward under ``torch.no_grad()`` right after training still broadcasts. A module without buffers
has no collective in its forward. So the forward is a collective only when the module has buffers:

- True: a BatchNorm / InstanceNorm-with-running-stats layer, ``register_buffer``, a torchvision
  builder of a BatchNorm model, ``SyncBatchNorm.convert_sync_batchnorm``, in the module's
  construction (through ``nn.Sequential``, ``.to()``/``.cuda()``, either arm of a conditional, and the ``__init__`` of a class of
  the same file, a few levels deep);
- False: only layers of ``torch.nn`` known to hold no buffers, or a class of the same file whose
  ``__init__`` builds only such layers and registers no buffer;
- None: anything else (a third-party builder, a factory function, a config-driven model).
"""
from __future__ import annotations

import ast

from ..semantic import FUNC_TYPES, _iter_scope_statements, iter_scope_nodes, parent
from .bindings import reaching

_BUFFERED = frozenset({
    "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d",
    "SyncBatchNorm",
})
_NO_BUFFERS = frozenset({
    "Linear", "Bilinear", "LazyLinear", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
    "ConvTranspose3d", "ReLU", "ReLU6", "GELU", "SiLU", "Tanh", "Sigmoid", "LeakyReLU", "ELU", "Softmax",
    "LogSoftmax", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "Identity", "Flatten", "Unflatten",
    "Embedding", "LayerNorm", "GroupNorm", "RMSNorm", "LSTM", "GRU", "RNN", "MultiheadAttention",
    "MaxPool1d", "MaxPool2d", "MaxPool3d", "AvgPool1d", "AvgPool2d", "AvgPool3d", "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d", "AdaptiveAvgPool3d", "AdaptiveMaxPool2d", "Upsample", "PReLU", "Softplus", "Mish",
    "Hardswish", "Hardtanh", "TransformerEncoderLayer", "TransformerDecoderLayer", "ZeroPad2d",
})
_CONTAINERS = frozenset({"Sequential", "ModuleList"})
_BN_BUILDERS = ("resnet", "resnext", "wide_resnet", "densenet", "inception", "googlenet", "mobilenet",
                "efficientnet", "regnet", "shufflenet", "mnasnet", "vgg11_bn", "vgg13_bn", "vgg16_bn", "vgg19_bn")
_MOVES = frozenset({"to", "cuda", "cpu", "float", "half", "double", "bfloat16", "train", "eval", "requires_grad_"})


def _and(vals) -> bool | None:
    """True if any is True; False if all are False; else None."""
    out = False
    for v in vals:
        if v is True:
            return True
        if v is None:
            out = None
    return out


def module_buffers(hub, view, expr: ast.AST, at: ast.AST, depth: int = 0) -> bool | None:
    """Whether the module ``expr`` (evaluated at ``at``) has buffers."""
    if depth > 6 or expr is None:
        return None
    sem = view.sem
    if isinstance(expr, ast.Call):
        f = expr.func
        qn = sem.call_qualname(expr) or ""
        if qn in ("torch.nn.parallel.DistributedDataParallel", "torch.distributed.fsdp.FullyShardedDataParallel"):
            a = expr.args[0] if expr.args else next((k.value for k in expr.keywords if k.arg == "module"), None)
            return module_buffers(hub, view, a, at, depth + 1)
        if qn.endswith("convert_sync_batchnorm"):
            return True
        if qn.startswith("torch.nn."):
            last = qn.rsplit(".", 1)[-1]
            if last in _BUFFERED:
                return True
            if last.startswith("InstanceNorm"):
                tr = next((k.value for k in expr.keywords if k.arg == "track_running_stats"), None)
                return isinstance(tr, ast.Constant) and tr.value is True
            if last in _NO_BUFFERS:
                return False
            if last in _CONTAINERS:
                items = list(expr.args)
                if len(items) == 1 and isinstance(items[0], (ast.List, ast.Tuple)):
                    items = list(items[0].elts)
                if any(isinstance(i, ast.Starred) for i in items) or expr.keywords:
                    return None
                return _and(module_buffers(hub, view, i, at, depth + 1) for i in items)
            return None
        if qn.startswith("torchvision.models."):
            return True if qn.rsplit(".", 1)[-1].startswith(_BN_BUILDERS) else None
        if isinstance(f, ast.Attribute) and f.attr in _MOVES and qn == "":
            return module_buffers(hub, view, f.value, at, depth + 1)
        if isinstance(f, ast.Name) and f.id in view.classes:
            return class_buffers(hub, view, view.classes[f.id], depth + 1)
        return _returned_buffers(hub, view, expr, depth)
    if isinstance(expr, ast.IfExp):  # ``convert_sync_batchnorm(m) if sync else m``: either arm, as bindings
        vals = [module_buffers(hub, view, e, at, depth + 1) for e in (expr.body, expr.orelse)]
        return True if True in vals else False if vals == [False, False] else None
    if isinstance(expr, ast.Name):
        kind, evs = reaching(view, expr.id, at)
        if kind in ("events", "global") and evs and len(evs) <= 4:
            vals = []
            for e in evs:
                if isinstance(e, ast.Assign) and len(e.targets) == 1 and isinstance(e.targets[0], ast.Name):
                    vals.append(module_buffers(hub, view, e.value, e, depth + 1))
                else:
                    vals.append(None)
            if any(v is True for v in vals):
                return True
            return False if all(v is False for v in vals) else None
        return None
    return None


def _returned_buffers(hub, view, call: ast.Call, depth: int) -> bool | None:
    """A call of a project function (this module or another): whether the module it returns has
    buffers (every ``return`` agreeing, as for several bindings); a project class's constructor:
    whether the class has."""
    if hub is None or depth > 4:
        return None
    target = hub.resolve_call(view, call)
    if target is None or not isinstance(target[1], FUNC_TYPES):
        return None
    tv, fn = target
    if fn.name == "__init__":
        cls = next((c for c in tv.classes.values() if fn in c.body), None)
        return class_buffers(hub, tv, cls, depth + 1) if isinstance(cls, ast.ClassDef) else None
    vals = [module_buffers(hub, tv, n.value, n, depth + 1) for n in iter_scope_nodes(fn)
            if isinstance(n, ast.Return) and n.value is not None]
    if not vals or len(vals) > 4:
        return None
    if any(v is True for v in vals):
        return True
    return False if all(v is False for v in vals) else None


def class_buffers(hub, view, cls: ast.ClassDef, depth: int = 0) -> bool | None:
    memo = view.memo.setdefault("class_buffers", {})
    key = (id(cls), depth)  # keyed by depth too: an answer cut at the depth limit is not the answer from the top
    if key in memo:
        return memo[key]
    memo[key] = None  # recursion guard
    got = memo[key] = _class_buffers(hub, view, cls, depth)
    return got


def _class_buffers(hub, view, cls: ast.ClassDef, depth: int) -> bool | None:
    if depth > 6:
        return None
    for b in cls.bases:
        qn = view.sem.qualname(b) or ""
        if qn not in ("torch.nn.Module", "torch.nn.modules.module.Module"):
            if isinstance(b, ast.Name) and b.id in view.classes and view.classes[b.id] is not cls:
                if class_buffers(hub, view, view.classes[b.id], depth + 1) is not False:
                    return None
                continue
            return None
    if "register_buffer" in view.text:
        for m in cls.body:
            if isinstance(m, FUNC_TYPES):
                for n in iter_scope_nodes(m):
                    if n.__class__ is ast.Call and n.func.__class__ is ast.Attribute \
                            and n.func.attr == "register_buffer":
                        return True
    vals = []
    for m in cls.body:
        if not isinstance(m, FUNC_TYPES) or m.name != "__init__":
            continue
        for n in _iter_scope_statements(m):
            if n.__class__ is not ast.Assign:
                continue
            for t in n.targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    v = n.value
                    if isinstance(v, ast.Call):
                        qn = view.sem.call_qualname(v) or ""
                        if qn.startswith(("torch.nn.", "torchvision.")) or (
                                isinstance(v.func, ast.Name) and v.func.id in view.classes):
                            vals.append(module_buffers(hub, view, v, n, depth + 1))
                        elif qn.startswith("torch."):
                            continue  # a tensor (torch.zeros, nn.Parameter): not a submodule
                        else:
                            vals.append(None)
                    elif isinstance(v, (ast.Constant, ast.Name, ast.Attribute, ast.BinOp)):
                        continue  # hyperparameters, references
                    else:
                        vals.append(None)
    return _and(vals)


_BUFFER_SYNCS = frozenset({
    "torch.distributed.broadcast", "torch.distributed.all_reduce", "torch.distributed.all_reduce_coalesced",
    "torch.distributed.broadcast_coalesced", "torch.distributed._broadcast_coalesced",
    "torch.distributed.reduce", "torch.distributed.all_gather", "torch.distributed.all_gather_into_tensor"})
_STATS = frozenset({"running_mean", "running_var", "num_batches_tracked"})
_BUFFER_ITERS = frozenset({"buffers", "named_buffers"})


def syncs_buffers(hub, view) -> bool:
    """The module synchronises module buffers itself: a collective on a BatchNorm statistic
    (``dist.broadcast(m.running_mean, 0)``), or it walks a module's ``buffers()`` /
    ``named_buffers()`` (the usual loop that broadcasts or all-reduces each one); or it calls a
    function of another project module that does."""
    got = view.memo.get("syncs_buffers")
    if got is not None:
        return got
    sem = view.sem
    got = view.memo["syncs_buffers"] = _syncs_in(sem, sem.calls)
    if not got:
        for c in sem.calls:
            if not (c.args or c.keywords):
                continue
            t = hub.resolve_call(view, c)
            if t is not None and t[0] is not view and _syncs_in(t[0].sem, t[0].sem.function_calls(t[1])):
                got = view.memo["syncs_buffers"] = True
                break
    return got


def _syncs_in(sem, calls) -> bool:
    for c in calls:
        f = c.func
        if isinstance(f, ast.Attribute) and f.attr in _BUFFER_ITERS:
            return True
        if (sem.call_qualname(c) or "") in _BUFFER_SYNCS and any(
                isinstance(n, ast.Attribute) and n.attr in _STATS
                for a in (*c.args, *(k.value for k in c.keywords)) for n in ast.walk(a)):
            return True
    return False


# --- BatchNorm layers (DDP206, DDP225): a narrower question than buffers, asked through ``origins``

BN_LAYERS = ("torch.nn.BatchNorm1d", "torch.nn.BatchNorm2d", "torch.nn.BatchNorm3d",
             "torch.nn.LazyBatchNorm1d", "torch.nn.LazyBatchNorm2d", "torch.nn.LazyBatchNorm3d")
# torchvision builders whose models contain BatchNorm layers
_BN_MODELS = ("resnet", "resnext", "wide_resnet", "densenet", "inception", "googlenet", "mobilenet",
              "efficientnet", "regnet", "shufflenet", "mnasnet", "convnext_", "vgg11_bn", "vgg13_bn",
              "vgg16_bn", "vgg19_bn")
_BN_MOVES = frozenset({"cuda", "to", "train", "eval", "float", "half", "bfloat16", "double", "cpu",
                       "requires_grad_", "to_empty"})
_BN_CONTAINERS = frozenset({"Sequential", "ModuleList", "ModuleDict"})


def builds_bn_model(qn: str) -> bool:
    """``qn`` (a call's qualified name) builds a torchvision model with BatchNorm layers."""
    return qn.startswith("torchvision.models.") and qn.rsplit(".", 1)[-1].startswith(_BN_MODELS)


def _builds_bn(qn: str) -> bool:
    return qn in BN_LAYERS or builds_bn_model(qn)


def holds_batchnorm(an, view, expr, at, depth: int = 0):
    """True / False when what ``expr`` holds at ``at`` is known to have (not to have) BatchNorm
    layers; None when it cannot be told. The value is followed through ``origins`` (names, tuple
    unpacking, ``self`` attributes, helper returns), ``.cuda()`` / ``.to(...)``, the layers of an
    ``nn.Sequential(...)`` and the project classes it builds."""
    from .origins import origins

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
        if isinstance(f, ast.Attribute) and f.attr in _BN_MOVES and not qn.startswith("torch.nn."):
            answers.add(holds_batchnorm(an, v, f.value, e, depth + 1))
        elif _builds_bn(qn):
            answers.add(True)
        elif qn.startswith("torch.nn.") and qn.count(".") == 2 and qn.rsplit(".", 1)[-1] not in _BN_CONTAINERS:
            answers.add(False)  # a torch.nn layer: BatchNorm only if it is one (above)
        elif qn.startswith("torch.nn.") and qn.rsplit(".", 1)[-1] in _BN_CONTAINERS and e.args and not e.keywords \
                and not any(isinstance(a, ast.Starred) for a in e.args):
            # ``nn.Sequential(conv, nn.BatchNorm2d(c), ...)``: what its layers hold
            inner = {holds_batchnorm(an, v, a, e, depth + 1) for a in e.args}
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


_PLAIN_BUILTINS = frozenset({"super", "len", "range", "int", "float", "list", "dict", "tuple", "isinstance",
                             "getattr", "setattr", "hasattr", "zip", "enumerate", "min", "max", "print"})


def _class_builds_bn(view, cls) -> bool | None:
    """A project class whose body builds a BatchNorm layer (True), builds only other ``torch.nn``
    layers (False), or builds anything else (None: a submodule class of unknown content)."""
    if any(not (isinstance(b, ast.Attribute) and b.attr == "Module") for b in cls.bases):
        return None  # a base class of its own may add BatchNorm
    seen_other = False
    for n in ast.walk(cls):
        if isinstance(n, ast.Call):
            qn = view.sem.call_qualname(n) or ""
            if _builds_bn(qn):
                return True
            if not qn.startswith(("torch.", "math.", "super")) and not (
                    isinstance(n.func, ast.Name) and n.func.id in _PLAIN_BUILTINS):
                seen_other = True
    return None if seen_other else False
