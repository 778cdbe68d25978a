from ..model import Severity
from ..registry import Rule


class Hang(Rule):
    """
    ## What it does
    A runtime finding of `ddp-lint run` (never reported by `ddp-lint check`): ranks were still
    blocked when the run's timeout (`--timeout`, counted from the moment every rank runs the script)
    fired. `ddp-lint run` asks each live rank for its Python stack (the shim registers
    `faulthandler` on `SIGUSR1`) and reports every rank at the line where it was: in a collective
    ("rank 0 hangs in barrier() here"), or outside any collective, spinning, sleeping or stuck in
    I/O ("rank 1 is still running here, outside any collective"). The ranks outside any collective
    come first: they are what the others wait for. The stacks are in the finding's details.

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
    dist.barrier()  # DDP903: rank 0 hangs in barrier() here
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
