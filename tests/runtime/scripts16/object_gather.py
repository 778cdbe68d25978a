"""Uses an object collective (pickled through numpy under torch 2.13)."""
import torch.distributed as dist

dist.init_process_group("gloo")
out = [None] * dist.get_world_size()
dist.all_gather_object(out, {"rank": dist.get_rank()})  # [gather]
dist.destroy_process_group()
