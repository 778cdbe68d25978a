from ..model import Severity
from ..registry import Rule


class SameFileFromRanks(Rule):
    """
    ## What it does
    A runtime finding of `ddp-lint run` (never reported by `ddp-lint check`): two or more ranks
    wrote the same file. The rank shim records the path of every `torch.save(obj, path)` and of
    every file opened for writing with `open(path, "w"/"wb"/"x")` (appends are left out), with the
    line of your code that did it. The finding is at the first rank's line and names the ranks and,
    on a multi-node run (`--nnodes`), their nodes: "ranks 0 (node 0, local 0) and 2 (node 1,
    local 0)". Other lines that wrote the file are related locations.

    Files under node-local folders (`/tmp`, `/var/tmp`, `/dev/shm`, `$TMPDIR`) count as one file
    only for ranks of one node. Writes from library code with no frame of your code on the stack
    are not counted.

    ## Why is this bad?
    The writes race: the file holds whichever rank finished last, or, when they overlap, a mix of
    them that `torch.load` cannot read. The usual cause is a checkpoint guarded by
    `local_rank == 0`, which is true once per node: on one machine only rank 0 writes, on a cluster
    with a shared filesystem every node's first rank writes the same path.

    ## Example
    ```python
    local_rank = int(os.environ["LOCAL_RANK"])
    ...
    if local_rank == 0:
        torch.save(model.state_dict(), "checkpoint.pt")  # DDP908 on 2 nodes: ranks 0 and 2
    ```

    ## Use instead
    ```python
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), "checkpoint.pt")
    dist.barrier()  # the others wait until the file is complete before they read it
    ```

    ## Fix safety
    A runtime finding has no fix of its own.
    """

    code = "DDP908"
    name = "same-file-from-several-ranks"
    severity = Severity.WARNING
    static = False
