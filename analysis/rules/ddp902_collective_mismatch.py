from ..model import Severity
from ..registry import Rule


class CollectiveMismatch(Rule):
    """
    ## What it does
    A runtime finding of `ddp-lint run` (never reported by `ddp-lint check`): the ranks were in
    *different* collectives at the same time, for example "rank 0 is in barrier() here, rank 1 is in
    all_gather_object() at line 49". It is reported at the collective that fewer ranks reached (the
    first one in the file on a tie), with the other ranks' collectives as related locations.

    The two ranks' stacks are compared to find how one of them went past the collective the other
    is in: an early `return` in the helper that makes it ("rank 1 skipped all_reduce(): it returned
    early from reduce_metrics() at metrics.py:8 (under `not metrics`)"), a conditional `continue`
    that skipped a step's `backward()`, a loop it left, or an `if` in a caller that it did not enter
    (an evaluation through the DDP wrapper on rank 0 only). When the source says so for one side
    only, the finding goes on the collective that was skipped and the line through which the
    other ranks went past it is a related location.

    `ddp-lint run` sets `TORCH_DISTRIBUTED_DEBUG=DETAIL`, so torch compares every collective across
    ranks and raises at once on a mismatch; the shim's per-rank log of collective calls gives the
    lines. A mismatch that shows only as a hang (ranks blocked in different collectives at the
    timeout) is reported the same way.

    ## Why is this bad?
    Every rank of a process group must call the same collectives in the same order. When they do
    not, the job hangs until the watchdog fires, or the collectives pair up wrongly and exchange
    data of the wrong shape. The usual cause is a collective under a rank condition (static rule
    DDP104).

    ## Example
    ```python
    if rank == 0:
        dist.barrier()  # DDP902: rank 0 is in barrier() here, rank 1 is in all_gather_object() at line 4
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, metrics)
    ```

    ## Use instead
    ```python
    dist.barrier()  # every rank
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, metrics)
    ```

    ## Fix safety
    A runtime finding has no fix of its own; see DDP104 (collective-under-rank-guard).
    """

    code = "DDP902"
    name = "collective-mismatch"
    severity = Severity.ERROR
    static = False
