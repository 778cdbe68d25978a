import math

import torch
from accelerate import Accelerator


def main(args, model, optimizer, train_loader):
    accelerator = Accelerator()
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    args.max_train_steps = math.ceil(args.max_train_steps / accelerator.num_processes)
    if args.use_adaptive:
        inner = model.module if hasattr(model, "module") else model
        inner.base_model.peft_config["default"].total_step = args.max_train_steps

    step = 0
    for epoch in range(args.epochs):
        model.train()
        for batch in train_loader:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                optimizer.step()
                if args.use_adaptive:
                    inner = model.module if hasattr(model, "module") else model
                    inner.update_and_allocate(step)
                optimizer.zero_grad()
                step += 1
    return model
