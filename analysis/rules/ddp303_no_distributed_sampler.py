from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.models import ddp_calls
from ..flow.mentions import code_words
from ._common import is_simple_ref, shown_path
from ._loader import DIST_SAMPLER, dataloaders, has_kwargs, is_eval_name, is_true, sampler_args, target_name

# anything in the code (identifiers, imported modules) that hints the data is already split per rank
_SPLIT_HINTS = ("DistributedSampler", "sampler", "shard", "split_dataset_by_node", "num_replicas",
                "IterableDataset", "DistributedBatchSampler",
                # frameworks that shard a plain DataLoader themselves (``accelerator.prepare(...)``)
                "accelerate", "lightning", "prepare", "deepspeed", "fabric", "horovod", "torch_xla",
                "num_shards")


def _split_hint(sem, text: str | None = None) -> bool:
    """The module's code (never a comment or a string: ``flow.mentions``) names something that
    splits the data per rank, or slices by rank: ``indices[rank::world_size]``."""
    if text is not None and not any(h in text for h in _SPLIT_HINTS) and "::" not in text:
        return False
    words = code_words(sem)
    if any(h in w for w in words for h in _SPLIT_HINTS):
        return True
    for s in sem.by_type.get(ast.Slice, ()) if ast.Slice in sem.wanted else ast.walk(sem.tree):
        if s.__class__ is ast.Slice and s.step is not None and any(
                ("rank" in n or "world" in n) for e in (s.lower, s.step) if e is not None
                for n in _names(e)):
            return True
    return False


def _names(e):
    for n in ast.walk(e):
        if n.__class__ is ast.Name:
            yield n.id.lower()
        elif n.__class__ is ast.Attribute:
            yield n.attr.lower()


class NoDistributedSampler(Rule):
    """
    ## What it does
    Checks for a script that wraps its model in `DistributedDataParallel` and builds its training
    `DataLoader` with `shuffle=True` and no `sampler` / `batch_sampler`.

    To stay precise, a file that mentions a `DistributedSampler`, any other sampler, sharding
    (`shard`, `split_dataset_by_node`, `num_replicas`), an `IterableDataset`, or a framework that
    shards plain DataLoaders itself (Accelerate's `prepare`, Lightning, DeepSpeed) is not flagged,
    and neither are loaders named like evaluation loaders.

    The loader may also come from a data module of the project (`train_loader =
    build_train_loader(train_set, bs)` with the helper in `data/loaders.py`): reported at the call
    when the helper builds `DataLoader(..., shuffle=True)` without a sampler and its module
    mentions no sharding either.

    ## Why is this bad?
    Without a `DistributedSampler`, every rank iterates over the *whole* dataset (each in its own
    random order). N GPUs then do N times the work per epoch, each "epoch" is really N epochs
    of gradient steps with an N times larger effective batch, and the speed-up from adding GPUs
    never shows up. Nothing errors; the symptom is a distributed run that is no faster per epoch
    than one GPU and converges differently.

    ## Example
    ```python
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    loader = DataLoader(dataset, batch_size=32, shuffle=True)
    ```

    ## Use instead
    ```python
    model = DDP(model.to(local_rank), device_ids=[local_rank])
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    # and call sampler.set_epoch(epoch) at the start of each epoch
    ```

    ## Fix safety
    The fix replaces `shuffle=True` with `sampler=DistributedSampler(<dataset>)`. It is
    **unsafe**: each rank then sees 1/N of the data per epoch (the intended behaviour, but a change
    to the epoch length, learning-rate schedule and logging), and the loop still needs
    `loader.sampler.set_epoch(epoch)` (DDP301).
    """

    code = "DDP303"
    name = "no-distributed-sampler"
    severity = Severity.WARNING
    fix_availability = "sometimes"
    requires_text = ("DistributedDataParallel",)
    requires_text_all = (("DataLoader", "oader"),)  # DataLoader calls, or a project `build_loader` helper

    def finish(self, ctx) -> None:
        if _split_hint(ctx.sem, ctx.src.text) or not ddp_calls(ctx):
            return
        for call in dataloaders(ctx):
            kw = next((k for k in call.keywords if k.arg == "shuffle"), None)
            if kw is None or not is_true(kw.value, ctx.sem) or sampler_args(call) or has_kwargs(call):
                continue
            ds = get_arg(call, 0, "dataset")
            if ds is None:
                continue
            ds_name = ds.id if isinstance(ds, ast.Name) else (ds.attr if isinstance(ds, ast.Attribute) else None)
            if is_eval_name(target_name(call), ds_name):
                continue
            fix = None
            if is_simple_ref(ds):
                sampler, imp = ctx.ref(DIST_SAMPLER)
                fix = ctx.fix(Applicability.UNSAFE, f"Shard the data: `sampler={sampler}({ctx.text(ds)})`",
                              [ctx.replace(kw, f"sampler={sampler}({ctx.text(ds)})"), *imp])
            ctx.report(
                call,
                "DDP script whose DataLoader shuffles the whole dataset on every rank: without a "
                "DistributedSampler each rank trains on all the data",
                fix=fix,
            )
        self._project_loaders(ctx)

    @staticmethod
    def _project_loaders(ctx) -> None:
        """``train_loader = build_loader(ds, ...)``: a loader helper of another project file whose
        module never mentions sharding builds ``DataLoader(..., shuffle=True)`` without a sampler."""
        from ..flow import for_context  # lazy: only DDP scripts without split hints get here

        ana = None
        done: set[int] = set()
        for call in ctx.sem.calls:
            if not isinstance(call.func, (ast.Name, ast.Attribute)) or (ctx.qn(call) or "").startswith("torch."):
                continue
            name = call.func.id if isinstance(call.func, ast.Name) else call.func.attr
            if "load" not in name.lower() or is_eval_name(name, target_name(call)):
                continue
            if any(isinstance(a, ast.Name) and is_eval_name(a.id) for a in call.args):
                continue
            if ana is None:
                ana = for_context(ctx)
            got = ana.resolve_call(ana.main, call)
            if got is None or got[0] is ana.main or id(got[1]) in done:
                continue
            view, fn = got
            if view.path is None or _split_hint(view.sem, view.text):
                continue
            loader = _shuffling_loader(view, fn)
            if loader is None:
                continue
            done.add(id(fn))
            from ..source import SourceText  # noqa: PLC0415  (only for the other file's range)

            ctx.report(
                call,
                f"DDP script whose DataLoader (built by `{fn.name}`, {shown_path(ctx, view.path)} line {loader.lineno}) "
                "shuffles the whole dataset on every rank: without a DistributedSampler each rank trains on "
                "all the data",
                related=[("file", view.path, SourceText(view.text).node_range(loader),
                          "the DataLoader shuffles without a sampler here")],
            )


def _shuffling_loader(view, fn):
    """The ``DataLoader(..., shuffle=True)`` without a sampler or ``**kwargs`` that ``fn`` builds
    (its own body, not under a condition naming evaluation), else None."""
    for c in view.sem.function_calls(fn):
        if view.sem.call_qualname(c) != "torch.utils.data.DataLoader":
            continue
        kw = next((k for k in c.keywords if k.arg == "shuffle"), None)
        if kw is None or not is_true(kw.value, view.sem) or sampler_args(c) or has_kwargs(c):
            continue
        ds = get_arg(c, 0, "dataset")
        ds_name = ds.id if isinstance(ds, ast.Name) else (ds.attr if isinstance(ds, ast.Attribute) else None)
        if ds is None or is_eval_name(target_name(c), ds_name):
            continue
        return c
    return None
