import os

import deepspeed
import torch


class ZeroStrategy:
    def __init__(self, ds_config, use_gpu=True):
        self.ds_config = ds_config
        self.use_gpu = use_gpu
        self.local_rank = int(os.environ.get("LOCAL_RANK", 0))

    @property
    def root_device(self):
        return torch.device("cuda", self.local_rank)

    def setup_training(self, module):
        if self.use_gpu:
            torch.cuda.set_device(self.root_device)
        params = [p for p in module.parameters() if p.requires_grad]
        engine, opt, _, sched = deepspeed.initialize(
            model=module, model_parameters=params, config=self.ds_config
        )
        self.engine = engine
        return engine, opt, sched
