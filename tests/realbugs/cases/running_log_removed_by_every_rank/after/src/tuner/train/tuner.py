import torch.distributed as dist
from transformers import Trainer, TrainingArguments

from .callbacks import DashboardCallback


def run_training(model, dataset, output_dir):
    args = TrainingArguments(output_dir=output_dir)
    callbacks = [DashboardCallback()]
    Trainer(model=model, args=args, train_dataset=dataset, callbacks=callbacks).train()
    if dist.is_initialized():
        dist.destroy_process_group()
