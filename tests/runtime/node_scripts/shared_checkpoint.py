"""Every node's first rank saves the checkpoint to one path (a shared filesystem clobber)."""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
local_rank = int(os.environ["LOCAL_RANK"])
model = torch.nn.Linear(2, 2)
if local_rank == 0:
    torch.save(model.state_dict(), sys.argv[1])  # [save]
dist.barrier()
dist.destroy_process_group()
