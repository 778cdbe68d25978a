from ..model import Severity
from ..registry import Rule


class RankExitedEarly(Rule):
    """
    ## What it does
    A runtime finding of `ddp-lint run` (never reported by `ddp-lint check`): a rank exited, even
    with status 0, while other ranks still waited for it in a collective. It is reported at the line
    where the rank left: its `sys.exit(...)` or `os._exit(...)` call (taken from the `SystemExit`
    traceback or the shim's `os._exit` hook). A rank that simply reached the end of the script
    while the others wait inside a loop left that loop sooner than they did: the finding goes on the
    loop's one conditional exit (`break`, `return`, `raise`, `sys.exit` under an `if`, or in an
    `except`), or a conditional `continue` above the collective that skips it for one iteration (a
    NaN loss skipped on one rank), naming its condition, or, for a `for` loop without one, on the
    loop itself (the rank ran out of items: an uneven shard). The loops are read through every
    frame of the waiting rank's stack, innermost first: when the others wait in a helper called
    from the training loop, the training loop's exit is found; a loop over a model's parameters,
    buffers or modules, or over a constant `range`, runs alike on every rank and is never the one
    that ran short. A rank that finished after returning early from the helper its peers wait in
    (`if not metrics: return` above the helper's `all_reduce`) is placed on that `return`; when
    it only did not enter the `if` around the call (code that some ranks run), that `if` is a
    related location. When the loop has several exits, the finding stays on the
    rank's last collective (or the script's last line) and lists every exit as a related location.
    The waiting ranks' collectives and the rank's own last line are related locations.

    The run stops as soon as a rank has gone and another has waited more than a second in a
    collective of a group that contains it, instead of waiting for the timeout.

    ## Why is this bad?
    Every rank must take part in every collective of its group. A rank that leaves early (an early
    `return` or `sys.exit` on some ranks, a loop that runs fewer iterations on one rank) leaves the
    others blocked until the watchdog fires.

    ## Example
    ```python
    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        sys.exit(0)  # DDP904: rank 1 called sys.exit (status 0) here while rank 0 is waiting in barrier()
    dist.barrier()
    ```

    ## Use instead
    ```python
    dist.init_process_group("gloo")
    dist.barrier()
    dist.destroy_process_group()
    sys.exit(0)
    ```

    ## Fix safety
    A runtime finding has no fix of its own.
    """

    code = "DDP904"
    name = "rank-exited-early"
    severity = Severity.ERROR
    static = False
