import os

import torch
import torch.distributed as dist

from trainlib.tb_logger import BoardLogger


def worker(run_dir):
    dist.init_process_group("nccl")
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    board = BoardLogger(run_dir)
    board.scalar("loss", 0.0, 0)
    dist.destroy_process_group()


if __name__ == "__main__":
    worker("runs/exp")
