import os

import torch
import transformers
from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training


def train(model_name, output_dir, q_lora=True):
    device_map = None
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    ddp = world_size != 1
    if q_lora:
        device_map = {"": int(os.environ.get("LOCAL_RANK") or 0)} if ddp else None

    model = transformers.AutoModelForCausalLM.from_pretrained(model_name, device_map=device_map)
    if q_lora:
        model = prepare_model_for_kbit_training(model)
        if not ddp and torch.cuda.device_count() > 1:
            # stop the trainer from adding its own data parallelism on a multi-GPU machine
            model.is_parallelizable = True
            model.model_parallel = True

    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, task_type="CAUSAL_LM"))
    args = transformers.TrainingArguments(output_dir=output_dir, per_device_train_batch_size=1)
    trainer = transformers.Trainer(model=model, args=args)
    trainer.train()
    trainer.save_state()


if __name__ == "__main__":
    train("some/model", "out")
