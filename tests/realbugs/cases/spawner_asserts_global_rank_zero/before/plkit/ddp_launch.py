import os
import subprocess
import sys

import torch.distributed as dist


class DDPLauncher:
    def __init__(self, num_nodes, devices_per_node):
        self.num_nodes = num_nodes
        self.devices = devices_per_node
        self.node_rank = int(os.environ.get("NODE_RANK", 0))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.global_rank = self.node_rank * self.devices + self.local_rank
        self.children = []

    def spawn_children(self):
        # the first process of each node starts the other processes of that node
        assert self.global_rank == 0
        env = dict(os.environ)
        for local in range(1, self.devices):
            env["LOCAL_RANK"] = str(local)
            self.children.append(subprocess.Popen([sys.executable] + sys.argv, env=env))

    def join_group(self):
        dist.init_process_group(
            "nccl", rank=self.global_rank, world_size=self.num_nodes * self.devices
        )
