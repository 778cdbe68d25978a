from ..model import Severity
from ..registry import Rule


class ReplicasDiverged(Rule):
    """
    ## What it does
    A runtime finding of `ddp-lint run` (never reported by `ddp-lint check`): at the end of an
    otherwise clean run (the script's normal end, or `destroy_process_group()`), the parameters of a
    `DistributedDataParallel` model differ between ranks. It is reported where the model was
    wrapped, naming the first parameter that differs and the ranks.

    Each rank fingerprints every DDP model once (an exact checksum per parameter) when the process
    group is destroyed or the script ends; nothing is added to the training step beyond a counter.

    ## Why is this bad?
    DDP keeps the replicas identical only when every rank starts from the same weights and applies
    the same, all-reduced gradients. Once they drift apart, every rank trains a different model and
    the checkpoint saved by rank 0 is not what the other ranks evaluated. Nothing fails: the loss
    just behaves oddly.

    ## Example
    ```python
    model = DDP(net)
    ...
    if dist.get_rank() == 0:
        with torch.no_grad():
            model.module.fc.weight.add_(0.1)  # only rank 0 changes its replica
    dist.destroy_process_group()
    # DDP906 the replicas of the DDP model wrapped here diverged: parameter 'fc.weight' differs ...
    ```

    ## Use instead
    ```python
    with torch.no_grad():
        model.module.fc.weight.add_(0.1)  # the same change on every rank
    ```

    ## Fix safety
    A runtime finding has no fix of its own.
    """

    code = "DDP906"
    name = "replicas-diverged"
    severity = Severity.WARNING
    static = False
