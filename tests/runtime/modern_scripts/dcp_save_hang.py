"""Only rank 0 calls dcp.save (which gathers the save plan on the coordinator): it hangs there,
rank 1 waits in the barrier."""
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Linear(8, 8)
fully_shard(model)
if rank == 0:
    dcp.save({"model": model.state_dict()}, checkpoint_id=sys.argv[1])  # [save]
dist.barrier()  # [barrier]
