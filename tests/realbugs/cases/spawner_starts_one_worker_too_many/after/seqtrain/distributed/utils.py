import os
import signal

import torch
import torch.distributed as dist
import torch.multiprocessing


def run_worker(i, main, cfg, kwargs):
    dcfg = cfg.distributed
    if not dcfg.no_spawn:
        # spawned workers are numbered from 0, but the parent process is already local rank 0
        i = i + 1
    dcfg.device_id = i
    if torch.cuda.is_available():
        torch.cuda.set_device(dcfg.device_id)
    if dcfg.rank is None:
        dcfg.rank = kwargs.pop("start_rank", 0) + i
    dist.init_process_group("nccl", init_method=dcfg.init_method, world_size=dcfg.world_size, rank=dcfg.rank)
    main(cfg, **kwargs)
    dist.barrier()
    dist.destroy_process_group()


def _spawn_and_run(main, cfg, kwargs):
    """Start the other local workers and run local rank 0 in this process, so signals reach us."""
    ctx = torch.multiprocessing.start_processes(
        run_worker,
        (main, cfg, kwargs),
        nprocs=min(
            torch.cuda.device_count(),
            cfg.distributed.world_size - 1,
        ),
        join=False,
        start_method="spawn",
    )
    try:
        # -1: run_worker adds one for spawned processes
        result = run_worker(-1, main, cfg, kwargs)
        ctx.join()
        return result
    except (KeyboardInterrupt, Exception):
        for proc in ctx.processes:
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)
        raise


def call_main(cfg, main, **kwargs):
    dcfg = cfg.distributed
    if dcfg.init_method is not None and not dcfg.no_spawn:
        kwargs["start_rank"] = dcfg.rank or 0
        dcfg.rank = None
        return _spawn_and_run(main, cfg, kwargs)
    return main(cfg, **kwargs)
