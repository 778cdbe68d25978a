import os
from dataclasses import dataclass, field


@dataclass
class DistOptions:
    world_size: int = field(default=1, metadata={"help": "number of processes"})
    backend: str = field(default="nccl", metadata={"help": "process group backend"})
    device_id: int = field(
        default=os.getenv("LOCAL_RANK", 0),
        metadata={"help": "GPU of this process, LOCAL_RANK when set", "argparse_alias": "--local_rank"},
    )
