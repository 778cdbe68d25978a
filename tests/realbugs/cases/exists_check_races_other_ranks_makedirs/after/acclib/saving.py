import os

import torch
import torch.distributed as dist


class Saver:
    def __init__(self, project_dir, automatic_naming=True):
        self.project_dir = project_dir
        self.automatic_naming = automatic_naming
        self.iteration = 0
        self.is_main_process = dist.get_rank() == 0

    def wait_for_everyone(self):
        dist.barrier()

    def save_state(self, model, output_dir=None):
        if self.automatic_naming:
            output_dir = os.path.join(self.project_dir, "checkpoints", f"checkpoint_{self.iteration}")
            if os.path.exists(output_dir):
                raise ValueError(f"checkpoint directory {output_dir} already exists")
            self.wait_for_everyone()
        os.makedirs(output_dir, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(output_dir, f"model_{dist.get_rank()}.bin"))
        self.iteration += 1
        return output_dir
