import os
from types import SimpleNamespace

_SETTINGS = None


def get_settings():
    global _SETTINGS
    if _SETTINGS is None:
        _SETTINGS = SimpleNamespace(
            local_rank=int(os.environ.get("LOCAL_RANK", 0)),
            rank=int(os.environ.get("RANK", 0)),
            world_size=int(os.environ.get("WORLD_SIZE", 1)),
            backend="nccl", timeout_minutes=10, use_engine_launcher=False)
    return _SETTINGS
