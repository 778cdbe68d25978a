# Only rank 0 reaches the collective; rank 1 ends. Under emulation rank 0 must not wait for rank 1's
# device entry forever: the run reports the hang at the collective, as without emulation.
import torch.distributed as dist

if __name__ == "__main__":
    dist.init_process_group("nccl")
    out = [None, None]
    if dist.get_rank() == 0:
        dist.all_gather_object(out, 0)  # [gather]
    print("after", dist.get_rank())
