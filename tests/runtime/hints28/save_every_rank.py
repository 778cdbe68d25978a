"""Every rank saves the checkpoint to one path (no rank guard): DDP908 at run time, DDP202 statically."""
import os
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.Linear(4, 1)
torch.save(model.state_dict(), os.path.join(sys.argv[1], "ckpt.pt"))  # [save]
dist.barrier()
dist.destroy_process_group()
