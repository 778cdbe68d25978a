from ..model import Severity
from ..registry import Rule


class GradientsNeverSynchronised(Rule):
    """
    ## What it does
    A runtime finding of `ddp-lint run` (never reported by `ddp-lint check`): a
    `DistributedDataParallel` model's parameters received gradients, but no forward through the DDP
    wrapper ran with gradient synchronisation on, so no gradient all-reduce ever happened. It is
    reported where the model was wrapped, for the ranks where this happened.

    The cause is one of: every step runs under `no_sync()`, or the forward calls the wrapped module
    directly (`ddp_model.module(x)`), which bypasses DDP.

    ## Why is this bad?
    Without the all-reduce, each rank trains on its own gradients: the replicas drift apart and the
    run is not data-parallel training at all, with no error anywhere.

    ## Example
    ```python
    model = DDP(net)
    for x in loader:
        loss = model.module(x).sum()  # bypasses DDP: no gradient all-reduce
        loss.backward()
    # DDP907 ranks 0, 1: the DDP model wrapped here never synchronised its gradients ...
    ```

    ## Use instead
    ```python
    for x in loader:
        loss = model(x).sum()
        loss.backward()
    ```

    ## Fix safety
    A runtime finding has no fix of its own.
    """

    code = "DDP907"
    name = "gradients-never-synchronised"
    severity = Severity.WARNING
    static = False
