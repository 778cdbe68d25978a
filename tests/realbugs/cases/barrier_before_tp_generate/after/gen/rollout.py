import torch


class RolloutEngine:
    def __init__(self, accelerator, llm, model, tp_size=1, uses_adapter=False):
        self.accelerator = accelerator
        self.llm = llm
        self.model = model
        self.tp_size = tp_size
        self.uses_adapter = uses_adapter

    def _sync_weights(self):
        for name, param in self.model.named_parameters():
            torch.distributed.all_reduce(param.data)

    def generate(self, prompts, params):
        accelerator = self.accelerator
        self._sync_weights()
        if self.uses_adapter and self.tp_size > 1:
            torch.distributed.barrier(device_ids=[accelerator.local_process_index])
        outputs = self.llm.generate(prompts, sampling_params=params)
        return [o.text for o in outputs]
