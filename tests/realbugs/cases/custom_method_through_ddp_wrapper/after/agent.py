import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Retriever(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(100, 8)

    def tokenize_query(self, text):
        return torch.tensor([hash(w) % 100 for w in text.split()])

    def forward(self, ids):
        return self.emb(ids)


class Agent:
    def __init__(self):
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl")
        self.model = DDP(Retriever().cuda(), device_ids=[local_rank])

    def observe(self, observation):
        observation["query_vec"] = self.model.module.tokenize_query(observation["text"])
        return observation
