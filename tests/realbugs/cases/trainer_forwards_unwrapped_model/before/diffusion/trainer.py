import torch
from torch.nn.parallel import DistributedDataParallel as DDP


class Trainer:
    def __init__(self, model, loader, rank, use_ddp=False, steps=1000, accumulate=2):
        self.rank = rank
        self.use_ddp = use_ddp
        self.model = model.cuda(rank)
        if self.use_ddp:
            self.model_ddp = DDP(self.model, device_ids=[rank], output_device=rank)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-4)
        self.loader = loader
        self.steps = steps
        self.accumulate = accumulate
        self.step = 0

    def train(self):
        batches = iter(self.loader)
        while self.step < self.steps:
            for _ in range(self.accumulate):
                data = next(batches).cuda(self.rank)
                loss = self.model(data)
                (loss / self.accumulate).backward()
            self.opt.step()
            self.opt.zero_grad()
            self.step += 1
