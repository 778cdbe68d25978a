"""Both ranks write as fast as they can, without newlines, binary junk included, for a few
seconds, then hang: the output stays bounded and the hang is still reported."""
import os
import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
chunk = (b"\xff\xfe\x00junk\x1b[31m" * 4096)
end = time.monotonic() + 3
while time.monotonic() < end:
    os.write(1, chunk)
    os.write(2, chunk)
dist.barrier() if dist.get_rank() == 0 else time.sleep(600)  # [wait]
