"""Evaluation loop: every rank must run it, because it ends in a collective."""
import torch

from utils.dist import all_gather_metrics


@torch.no_grad()
def evaluate(model, loader, device) -> list:
    correct = seen = 0
    for x, y in loader:
        pred = model(x.to(device)).argmax(dim=-1)
        correct += (pred == y.to(device)).sum().item()
        seen += y.numel()
    return all_gather_metrics({"correct": correct, "seen": seen})
