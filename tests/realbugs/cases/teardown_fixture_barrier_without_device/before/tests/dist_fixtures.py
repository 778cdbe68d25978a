import os

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def process_group():
    if int(os.environ.get("WORLD_SIZE", 1)) > 1 and not torch.distributed.is_initialized():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        torch.distributed.init_process_group(backend="nccl")
    yield
    if torch.distributed.is_initialized():
        try:
            torch.distributed.barrier()
        except Exception:
            return
        torch.distributed.destroy_process_group()
