import torch


@torch.no_grad()
def validate(fabric, model, loader, max_iters):
    model.eval()
    losses = torch.zeros(min(len(loader), max_iters))
    for k, batch in enumerate(loader):
        if k >= max_iters:
            break
        losses[k] = model(batch).mean().item()
    model.train()
    return losses.mean()
