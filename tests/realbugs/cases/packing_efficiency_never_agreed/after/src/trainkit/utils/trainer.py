import logging
import math
import os

import numpy as np
import torch.distributed as dist
from torch.utils.data import DistributedSampler, RandomSampler
from transformers import DataCollatorForSeq2Seq

from trainkit.utils.dataloader import PackedLoader
from trainkit.utils.distributed import is_distributed, is_main_process, reduce_and_broadcast

LOG = logging.getLogger(__name__)


def calculate_total_num_steps(cfg, train_dataset, tokenizer):
    if not cfg.sample_packing:
        return int(math.ceil(len(train_dataset) * cfg.num_epochs / cfg.batch_size))

    if not cfg.total_num_tokens:
        cfg.total_num_tokens = int(np.sum([len(ids) for ids in train_dataset["input_ids"]]))

    if cfg.packing_efficiency:
        world = int(os.environ.get("WORLD_SIZE", 1))
        steps_per_epoch = math.floor(
            0.99 * cfg.total_num_tokens / cfg.packing_efficiency / cfg.sequence_len // cfg.batch_size // world
        ) - 1
        total_num_steps = steps_per_epoch * cfg.num_epochs
    else:
        if cfg.world_size > 1 and is_distributed():
            sampler = DistributedSampler(
                train_dataset, num_replicas=cfg.world_size, rank=dist.get_rank(), seed=cfg.seed or 42
            )
        else:
            sampler = RandomSampler(train_dataset)
        loader = PackedLoader(
            train_dataset,
            collate_fn=DataCollatorForSeq2Seq(tokenizer, return_tensors="pt", padding="longest"),
            seq_len=cfg.sequence_len,
            batch_size=cfg.micro_batch_size,
            sampler=sampler,
            world_size=int(os.environ.get("WORLD_SIZE", 1)),
        )
        loader_len = loader.measured_len()
        efficiency = loader.efficiency()
        total_num_steps = int(math.floor(loader_len * cfg.num_epochs))
        # every rank packs its own shard: agree on the most pessimistic estimate
        agreed = reduce_and_broadcast(lambda: efficiency, max)
        if is_main_process():
            LOG.info("measured packing efficiency %.2f", agreed)
        cfg.packing_efficiency = math.ceil(agreed * 100.0) / 100.0
    LOG.info("total_num_steps: %d", total_num_steps)
    return total_num_steps
