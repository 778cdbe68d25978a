"""Both ranks print at once: many whole lines, a line built from pieces and a line on stderr; then,
one rank at a time, a partial line flushed before its end."""
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
dist.barrier()
for i in range(200):
    print(f"line {i} from rank {rank} " + "x" * 60)
print("pieces", rank, end="")
print(" of one line")
# a partial line flushed on purpose (a prompt, a progress bar) goes out at once, so another rank's
# line may follow it on the same output line: the ranks take turns here
for turn in range(dist.get_world_size()):
    dist.barrier()
    if turn == rank:
        sys.stdout.write("partial ")
        sys.stdout.flush()
        sys.stdout.write("then the rest\n")
        sys.stdout.flush()
dist.barrier()  # the last turn is over before anyone prints again
print(f"on stderr from rank {rank}", file=sys.stderr)
dist.destroy_process_group()
