from __future__ import annotations

import ast

from ..model import Applicability, Severity
from ..registry import Rule
from ..semantic import get_arg
from ..flow.models import ddp_calls
from ._common import is_simple_ref
from ._loader import DIST_SAMPLER, dataloaders, has_kwargs, is_eval_name, is_true, sampler_args, target_name

# anything that hints the data is already split per rank
_SPLIT_HINTS = ("DistributedSampler", "sampler", "shard", "split_dataset_by_node", "num_replicas",
                "IterableDataset", "DistributedBatchSampler",
                # frameworks that shard a plain DataLoader themselves
                "accelerate", "lightning", ".prepare(", "deepspeed", "fabric", "horovod", "torch_xla",
                # a dataset split by hand: ``indices[rank::world_size]``
                "rank::", "rank :: ", "::world", "::self.world", "num_shards")


class NoDistributedSampler(Rule):
    """
    ## What it does
    Checks for a script that wraps its model in `DistributedDataParallel` and builds its training
    `DataLoader` with `shuffle=True` and no `sampler` / `batch_sampler`.

    To stay precise, a file that mentions a `DistributedSampler`, any other sampler, sharding
    (`shard`, `split_dataset_by_node`, `num_replicas`), an `IterableDataset`, or a framework that
    shards plain DataLoaders itself (Accelerate's `prepare`, Lightning, DeepSpeed) is not flagged,
    and neither are loaders named like evaluation loaders.

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
    requires_text_all = (("DataLoader",),)  # torch.utils.data.DataLoader calls

    def finish(self, ctx) -> None:
        text = ctx.src.text
        if any(h in text for h in _SPLIT_HINTS) or not ddp_calls(ctx):
            return
        for call in dataloaders(ctx):
            kw = next((k for k in call.keywords if k.arg == "shuffle"), None)
            if kw is None or not is_true(kw.value) or sampler_args(call) or has_kwargs(call):
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
