from dataclasses import dataclass, field


@dataclass
class DistOptions:
    world_size: int = field(default=1, metadata={"help": "number of processes"})
    backend: str = field(default="nccl", metadata={"help": "process group backend"})
    device_id: int = field(
        default=0,
        metadata={"help": "GPU of this process", "argparse_alias": "--local_rank"},
    )
    rank: int = field(default=0, metadata={"help": "global rank of this process"})
    init_method: str = field(default="", metadata={"help": "rendezvous address"})
    no_spawn: bool = field(default=False, metadata={"help": "the launcher made the processes"})


@dataclass
class TrainOptions:
    distributed: DistOptions = field(default_factory=DistOptions)
    cpu: bool = field(default=False, metadata={"help": "train on the CPU"})
