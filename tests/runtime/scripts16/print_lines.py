"""Both ranks print at once: many whole lines, a line built from pieces, a partial line flushed
before its end, and a line on stderr."""
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
dist.barrier()
for i in range(200):
    print(f"line {i} from rank {rank} " + "x" * 60)
print("pieces", rank, end="")
print(" of one line")
sys.stdout.write("partial ")
sys.stdout.flush()
sys.stdout.write("then the rest\n")
print(f"on stderr from rank {rank}", file=sys.stderr)
dist.destroy_process_group()
