"""The output list of all_gather_object is shorter than the world size: IndexError on every rank."""
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
output = [None]
dist.all_gather_object(output, {"rank": rank})  # [gather]
print(output)
