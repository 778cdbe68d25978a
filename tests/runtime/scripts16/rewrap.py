"""The waiting rank's code wraps the collective's error in its own exception ("raise ... from e"):
rank 1 is still the echo of rank 0's failure, not a second root cause."""
import torch
import torch.distributed as dist


class SyncError(Exception):
    pass


def average(t):
    try:
        dist.all_reduce(t)  # [reduce]
    except RuntimeError as e:
        raise SyncError("could not average the metrics") from e


dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    metrics = torch.ones(2).view(3)  # [view]
else:
    metrics = torch.ones(2)
average(metrics)
