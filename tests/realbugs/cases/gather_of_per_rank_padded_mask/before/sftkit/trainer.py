from transformers import Trainer


class SupervisedTrainer(Trainer):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._total_tokens = 0
        self._metrics = {"train": {}, "eval": {}}

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        mode = "train" if self.model.training else "eval"
        loss, outputs = super().compute_loss(model, inputs, return_outputs=True,
                                             num_items_in_batch=num_items_in_batch)
        if mode == "train":
            self._total_tokens += self.accelerator.gather_for_metrics(inputs["attention_mask"]).sum().item()
        self._metrics[mode]["num_tokens"] = [self._total_tokens]
        return (loss, outputs) if return_outputs else loss
