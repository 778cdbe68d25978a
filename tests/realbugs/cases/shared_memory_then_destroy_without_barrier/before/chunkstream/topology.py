import os


class Topology:
    """Where this process sits, read from the launcher's environment."""

    def __init__(self):
        self.rank = int(os.environ.get("RANK", 0))
        self.world_size = int(os.environ.get("WORLD_SIZE", 1))
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        self.is_local_leader = self.local_rank == 0
