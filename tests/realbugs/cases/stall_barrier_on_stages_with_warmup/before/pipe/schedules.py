import torch
import torch.distributed

from pipe import topology


def run_pipeline(step_fn, data_iter, model, num_microbatches, timers):
    stages = topology.pipeline_world_size()
    stage = topology.pipeline_rank()
    num_warmup = min(stages - stage - 1, num_microbatches)
    remaining = num_microbatches - num_warmup

    outputs = []
    for i in range(num_warmup):
        inp = topology.recv_forward()
        out = step_fn(data_iter, model, inp)
        # barrier before the first receive measures the forward stall
        if i == (num_warmup - 1):
            timers("stall").start()
            torch.distributed.barrier(group=topology.pipeline_group())
            timers("stall").stop()
        topology.send_forward(out)
        outputs.append(out)

    if num_warmup == 0:
        timers("stall").start()
        torch.distributed.barrier(group=topology.pipeline_group())
        timers("stall").stop()

    for _ in range(remaining):
        inp = topology.recv_forward()
        outputs.append(step_fn(data_iter, model, inp))
    return outputs
