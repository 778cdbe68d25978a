import json
import logging
import os
import random

import torch

from seqtrain import checkpoint_utils
from seqtrain.distributed import utils as distributed_utils

log = logging.getLogger("seqtrain.cli.train")


def flat_config(cfg):
    return {k: v for k, v in vars(cfg).items() if not k.startswith("_")}


def main(cfg) -> None:
    checkpoint_utils.verify_checkpoint_directory(cfg.save_dir)

    if distributed_utils.is_master(cfg.distributed):
        # keep a readable copy of the run configuration next to the checkpoints
        with open(os.path.join(cfg.save_dir, "config.json"), "w") as fh:
            json.dump(flat_config(cfg), fh, default=str)

    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)

    log.info("training starts")


def cli_main(cfg):
    distributed_utils.launch(cfg, main)
