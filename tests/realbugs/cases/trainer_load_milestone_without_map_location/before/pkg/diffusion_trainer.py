from pathlib import Path

import torch
from accelerate import Accelerator


class DiffusionTrainer:
    def __init__(self, model, results_dir="./results"):
        self.acc = Accelerator()
        self.model = self.acc.prepare(model)
        self.step = 0
        self.results_dir = Path(results_dir)

    def save(self, tag):
        if not self.acc.is_local_main_process:
            return
        blob = {"step": self.step, "model": self.acc.get_state_dict(self.model)}
        torch.save(blob, str(self.results_dir / f"ckpt-{tag}.pt"))

    def load(self, tag):
        blob = torch.load(str(self.results_dir / f"ckpt-{tag}.pt"))
        net = self.acc.unwrap_model(self.model)
        net.load_state_dict(blob["model"])
        self.step = blob["step"]
