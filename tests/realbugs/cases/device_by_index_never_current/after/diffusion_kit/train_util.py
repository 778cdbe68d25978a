import torch as th
import torch.distributed as dist
from torch.nn.parallel.distributed import DistributedDataParallel as DDP

from . import dist_util


class TrainLoop:
    def __init__(self, model, data, lr=1e-4, resume_checkpoint=""):
        self.model = model
        self.data = data
        self.resume_checkpoint = resume_checkpoint
        self._load_and_sync_parameters()
        self.opt = th.optim.AdamW(self.model.parameters(), lr=lr)
        if th.cuda.is_available():
            self.ddp_model = DDP(
                self.model,
                device_ids=[dist_util.dev()],
                output_device=dist_util.dev(),
                broadcast_buffers=False,
            )
        else:
            self.ddp_model = self.model

    def _load_and_sync_parameters(self):
        if self.resume_checkpoint and dist.get_rank() == 0:
            self.model.load_state_dict(
                dist_util.load_state_dict(self.resume_checkpoint, map_location=dist_util.dev())
            )
        dist_util.sync_params(self.model.parameters())

    def run_loop(self, steps=1000):
        for _ in range(steps):
            batch = next(self.data).to(dist_util.dev())
            loss = self.ddp_model(batch).pow(2).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
