import torch
import torch.distributed
from accelerate.utils import gather_object


class Generator:
    def __init__(self, mode, tp_group=None, tp_size=1):
        self.mode = mode
        self.tp_group = tp_group
        self.tp_size = tp_size

    def generate(self, accelerator, prompts, images=None):
        if self.mode == "server":
            all_prompts = gather_object(prompts)
            all_images = gather_object(images if images is not None else [None] * len(prompts))
            if all(img is None for img in all_images):
                all_images = None
            if accelerator.is_main_process:
                return self._remote(all_prompts, all_images)
            return None
        gathered = [None for _ in range(self.tp_size)]
        torch.distributed.all_gather_object(gathered, prompts, group=self.tp_group)
        all_prompts = [p for chunk in gathered for p in chunk]
        local_images = images if images is not None else [None] * len(prompts)
        gathered_images = [None for _ in range(self.tp_size)]
        torch.distributed.all_gather_object(gathered_images, local_images, group=self.tp_group)
        all_images = [img for chunk in gathered_images for img in chunk]
        if all(img is None for img in all_images):
            all_images = None
        return self._local(all_prompts, all_images)

    def _remote(self, prompts, images):
        return [p.upper() for p in prompts]

    def _local(self, prompts, images):
        return list(prompts)
