from ..model import Severity
from ..registry import Rule


class RankException(Rule):
    """
    ## What it does
    A runtime finding of `ddp-lint run` (never reported by `ddp-lint check`): a rank raised an
    exception, crashed (segmentation fault, abort) or exited with a non-zero status. It is reported
    at the innermost line of *your* code in that rank's traceback (not in torch or site-packages),
    with the condensed exception (`Type: reason`; an NCCL error is reduced to its reason, such as
    `NCCL invalid usage: Duplicate GPU detected ...`). The ranks that were still waiting for the
    failed rank in a collective are related locations, and so are the ranks that were still busy
    outside any collective (not yet at the next collective) when the job was stopped. The full
    traceback of every rank is in the finding's details (`--output-format json`). A rank whose
    error a catch-all handler turned into `sys.exit(N)` is reported at the error's line (the exit
    call is related); a waiting rank whose code re-raised the collective's "peer went away" error
    as an exception of its own is still a waiting rank, not a second root cause.

    Ranks that fail the same way at the same line are merged into one finding listing the ranks.
    When a static rule explains the failure, the finding's hint names it: an `IndexError` inside
    `all_gather_object` comes from an output list shorter than the world size (DDP101).

    ## Why is this bad?
    Under `torchrun`, one failing rank prints a traceback between the output of the others, and
    the ranks that wait for it in a collective sit there until a 10 or 30 minute watchdog fires.
    The root cause is easy to miss in the interleaved output.

    ## Example
    ```python
    dist.init_process_group("gloo")
    output = [None]  # one slot, two ranks
    dist.all_gather_object(output, {"rank": dist.get_rank()})
    # DDP901 ranks 0, 1: IndexError: list assignment index out of range in all_gather_object()
    ```

    ## Use instead
    ```python
    dist.init_process_group("gloo")
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, {"rank": dist.get_rank()})
    ```

    ## Fix safety
    A runtime finding has no fix of its own. When the hint names a static rule, that rule's fix
    (where it has one) addresses the cause.
    """

    code = "DDP901"
    name = "rank-exception"
    severity = Severity.ERROR
    static = False
