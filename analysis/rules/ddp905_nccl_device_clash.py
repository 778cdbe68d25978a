from ..model import Severity
from ..registry import Rule


class NcclDeviceClash(Rule):
    """
    ## What it does
    A runtime finding of `ddp-lint run` (never reported by `ddp-lint check`): two or more ranks of
    one NCCL process group drove the same GPU in one collective. It is reported at the collective's
    line, for every rank of the group, with the `init_process_group` call as a related location.

    Without enough GPUs the run is emulated on the CPU (`--emulate auto`, see
    [docs/emulation.md](../emulation.md)), and the finding says "(emulated on CPU)". The emulation
    knows each rank's device for every collective the way NCCL picks it: the *current* CUDA device
    for the object collectives (`all_gather_object`, `gather_object`, `scatter_object_list`, and
    `broadcast_object_list` / `send_object_list` / `recv_object_list` without `device=`); the
    tensor's device for tensor collectives; the module's device for `DistributedDataParallel`;
    `device_ids`, then `init_process_group(device_id=...)`, then the group's first used device for
    `barrier()`. The ranks exchange their devices before each call, so the clash is reported within
    milliseconds, on every rank, instead of after a watchdog timeout.

    ## Why is this bad?
    NCCL allows one rank per GPU in a communicator. When two ranks bring the same device, real NCCL
    either hangs (the seed's `all_gather_object` that never returns: rank 0 already has a
    communicator on `cuda:0`, rank 1 waits for a new one that rank 0 never joins), or fails with

    ```
    RuntimeError: NCCL error ... invalid usage ... ncclInvalidUsage: This usually reflects invalid
    usage of NCCL library ... Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000
    ```

    or, in recent versions, `Multiple Ranks are using the same GPU`. The usual cause is a missing
    `torch.cuda.set_device(local_rank)`: every rank's current device is then `cuda:0`.
    `torch.cuda.synchronize()` does not help.

    ## Example
    ```python
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device_id = rank % torch.cuda.device_count()
    model = DDP(ToyModel().to(device_id), device_ids=[device_id])  # fine: cuda:0 and cuda:1
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, {"rank": rank})  # DDP905: ranks 0 and 1 both use cuda:0
    ```

    ## Use instead
    ```python
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    device_id = rank % torch.cuda.device_count()
    torch.cuda.set_device(device_id)
    model = DDP(ToyModel().to(device_id), device_ids=[device_id])
    output = [None for _ in range(dist.get_world_size())]
    dist.all_gather_object(output, {"rank": rank})
    ```

    ## Fix safety
    A runtime finding has no fix of its own. The static rule DDP001 (nccl-without-set-device)
    reports the same cause in the editor and carries the fix that inserts
    `torch.cuda.set_device(...)`.
    """

    code = "DDP905"
    name = "nccl-device-clash"
    severity = Severity.ERROR
    static = False
