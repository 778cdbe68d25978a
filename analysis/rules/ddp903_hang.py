from ..model import Severity
from ..registry import Rule


class Hang(Rule):
    """
    ## What it does
    A runtime finding of `ddp-lint run` (never reported by `ddp-lint check`): ranks were still
    blocked when the run's timeout (`--timeout`, counted from the moment every rank runs the script)
    fired. `ddp-lint run` asks each live rank for its Python stack (the shim registers
    `faulthandler` on `SIGUSR1`) and reports the ranks at the line where they were: outside any
    collective, spinning, sleeping or stuck in I/O ("rank 1 is still running here, outside any
    collective"), or, when every rank is in a collective, there ("rank 0 hangs in barrier() here").
    A rank that waits in a collective for a rank still running elsewhere is the echo, not the
    cause: it is a related location of the running rank's finding, not a finding of its own, also
    when torch's own process-group timeout (shorter than the run's) fired on it first: the finding
    then quotes torch. The stacks of all of them are in the finding's details.

    The shim also shortens the process group's own timeout to about the run's timeout, so gloo and
    NCCL raise instead of waiting 10 to 30 minutes.

    ## Why is this bad?
    A hung distributed job gives no error at all until a watchdog fires, and then only says that a
    collective timed out, not which rank stopped where.

    ## Example
    ```python
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        while not os.path.exists("ready.flag"):  # DDP903: rank 1 is still running here
            time.sleep(1)
    dist.barrier()  # related: rank 0 waits in barrier() here
    ```

    ## Use instead
    ```python
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        wait_for_file("ready.flag", timeout=60)  # bounded, raises instead of spinning forever
    dist.barrier()
    ```

    ## Fix safety
    A runtime finding has no fix of its own. When all ranks wait in the same NCCL collective, the
    hint points to DDP001 (ranks sharing one GPU hang like this).
    """

    code = "DDP903"
    name = "hang"
    severity = Severity.ERROR
    static = False
