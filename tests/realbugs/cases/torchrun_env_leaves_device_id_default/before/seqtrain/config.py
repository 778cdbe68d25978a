from dataclasses import dataclass, field
from typing import Optional


@dataclass
class DistSection:
    init_method: Optional[str] = field(default=None, metadata={"help": "rendezvous address"})
    world_size: int = field(default=1, metadata={"help": "number of processes"})
    rank: Optional[int] = field(default=0, metadata={"help": "global rank"})
    port: int = field(default=-1, metadata={"help": "port for a single-node run"})
    device_id: int = field(default=0, metadata={"help": "GPU of this process", "argparse_alias": "--local_rank"})
    no_spawn: bool = field(default=False, metadata={"help": "the launcher made the processes"})


@dataclass
class SeqTrainConfig:
    distributed: DistSection = field(default_factory=DistSection)
