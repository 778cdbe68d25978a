import math
import time

import torch

from tune.loops import validate


def main(fabric, model, optimizer, train_loader, val_loader, cfg):
    fit(fabric, model, optimizer, train_loader, val_loader, cfg)
    if cfg.final_validation:
        val_loss = validate(fabric, model, val_loader, max_iters=len(val_loader))
        val_loss = fabric.all_reduce(val_loss.detach().clone().to(fabric.device), reduce_op="mean")
        metrics = {"val_loss": val_loss, "val_ppl": math.exp(val_loss)}
        fabric.log_dict(metrics)
        fabric.print(f"final | val loss {val_loss.item():.3f}")


def fit(fabric, model, optimizer, train_loader, val_loader, cfg):
    if cfg.initial_validation:
        val_loss = validate(fabric, model, val_loader, max_iters=len(val_loader))
        val_loss = fabric.all_reduce(val_loss.detach().clone().to(fabric.device), reduce_op="mean")
        val_loss = f"{val_loss:.3f}"
    else:
        val_loss = "n/a"
    for step, batch in enumerate(train_loader, 1):
        loss = model(batch).mean()
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        fabric.print(f"step {step} | loss {loss.item():.3f} | val {val_loss}")
        if step % cfg.eval_interval == 0:
            t0 = time.perf_counter()
            val_loss = validate(fabric, model, val_loader, max_iters=cfg.eval_iters)
            t1 = time.perf_counter() - t0
            val_time = torch.tensor(t1, device=fabric.device)
            val_loss = fabric.all_reduce(val_loss.detach().clone().to(fabric.device), reduce_op="mean")
            val_time = fabric.all_reduce(val_time, reduce_op="mean")
            fabric.print(f"step {step}: val loss {val_loss.item():.4f}")
            fabric.log_dict({"val_loss": val_loss}, step=step)
            fabric.barrier()
