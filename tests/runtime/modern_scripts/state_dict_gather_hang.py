"""Only rank 0 gathers a full state dict of an FSDP2 model (an all-gather per parameter through the
functional collectives): it hangs in get_model_state_dict, rank 1 waits in the barrier."""
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
fully_shard(model)
if rank == 0:
    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))  # [gather]
    torch.save(sd, "model.pt")
dist.barrier()  # [barrier]
