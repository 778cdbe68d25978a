from __future__ import annotations

from ..model import Severity
from ..registry import Rule


class LocalMetricReported(Rule):
    """
    ## What it does
    Checks for an evaluation metric that each rank computes on its own shard of the data and
    that the main rank alone reports, never combined across ranks (`flow.local_metrics`):

    - an evaluation loop (under `torch.no_grad()` / `torch.inference_mode()`, no `backward()`, no
      training step) accumulates a value over its rounds (`total += loss`, `losses.append(...)`,
      `losses[k] = loss` with `k` a name the `for` binds);
    - its batches come from a per-rank shard: the loop walks, or draws its batches from
      (`loader.next_batch()`, `next(it)`), an object built from the rank
      (`ShardedBatches(tokens, rank, world)`, also through a builder's return, a tuple and a
      `self` attribute set from a constructor's parameter in another module), a `DataLoader`
      over a `DistributedSampler`, or a loader that Lightning Fabric's `setup_dataloaders` set
      up (it gives the loader a `DistributedSampler`, unless `use_distributed_sampler=False`; an
      iterable dataset, which it leaves alone, is taken to split itself by rank, as streaming
      datasets do, or every rank would train on the same data; `flow.fabric`: the Fabric is
      built in the project, declared as a parameter's type, or the one whose `launch(main, ...)`
      runs the function; not one of `devices=1`);
    - no data-combining collective (`all_reduce`, `all_gather`, ..., also in a project helper,
      or a Fabric's `all_reduce` / `all_gather`) reads the value after the loop, nor, when the
      function returns it, in the caller after the call;
    - it reaches a report that only the main rank makes (`flow.rank.rank0_guarded`): `print`, a
      `logging` call, `wandb.log`, a `SummaryWriter` scalar, a Fabric's `print` / `log` /
      `log_dict` (rank zero only by themselves), or a project function whose parameter
      reaches one of them behind a main-rank test in its body (`print0(msg, is_master)`), in the
      loop's function or in a caller (this module or another; a caller that only hands the
      result on, `return evaluate(model, loader)`, is followed to its own callers, two levels up).

    The finding is at the accumulation when the loop's function reports the value, at the call
    whose result is reported when a caller in the same module does (the function's other calls
    may reduce theirs), and at the function's `return` when the caller is in another module.

    A message that also holds the rank (`f"rank {rank}: {loss}"`) reports the value as the
    rank's own and is not flagged, nor a metric that is reduced before the report.

    ## Why is this bad?
    With the validation set split across ranks, the main rank's loss is the loss on its
    1/world of the data. The logged "validation loss" changes with the number of processes, is
    noisier than it looks, and early stopping or model selection read from the log pick on a
    fraction of the data. Nothing fails: the number just is not the job's metric.

    ## Example
    ```python
    @torch.no_grad()
    def evaluate(model, shard):  # shard: this rank's part of the validation set
        total = 0.0
        for x, y in shard:
            total += model(x, y).item()
        return total / len(shard)

    loss = evaluate(model, shard)
    if rank == 0:
        print(f"val loss {loss:.4f}")
    ```

    ## Use instead
    ```python
    loss = torch.tensor(evaluate(model, shard), device=device)
    dist.all_reduce(loss, op=dist.ReduceOp.AVG)
    if rank == 0:
        print(f"val loss {loss.item():.4f}")
    ```

    ## Fix safety
    No fix is offered: how to combine the shards (a mean of means, a sum over samples divided by
    a summed count) depends on the metric.
    """

    code = "DDP227"
    name = "local-metric-reported"
    severity = Severity.WARNING
    fix_availability = "never"
    requires_text = ("no_grad", "inference_mode")
    # (no reach gate: an evaluation module need not touch torch.distributed itself; the rank
    # and the shard come from its callers)

    def finish(self, ctx) -> None:
        from ..flow.findings import node_related, where
        from ..flow.local_metrics import unreduced_shard_metrics
        from ..flow.modern import hub

        an, _view = hub(ctx)
        for m in unreduced_shard_metrics(an, ctx):
            sv, sink = m.sink
            shown = sorted(m.names & m.shown)
            name = (", ".join(f"`{n}`" for n in shown) + (" are" if len(shown) > 1 else " is")) if shown else "the metric is"
            ctx.report(
                m.anchor,
                f"{name} accumulated over this rank's shard of the data (loop at line {m.loop.lineno}) and "
                f"never reduced across ranks, and only the main rank reports it ({where(ctx, sv.path, sink)}): "
                "the reported value is the main rank's shard only; all-reduce it first",
                related=[node_related(ctx, sv.path, sink, "reported here, on the main rank only")],
            )
