import deepspeed
import torch
from torch.utils.data import DataLoader, DistributedSampler

from sft.helpers import mean_over_ranks, to_device


def main(model, eval_set, device, epochs=2):
    deepspeed.init_distributed()
    eval_loader = DataLoader(eval_set, sampler=DistributedSampler(eval_set), batch_size=4)

    def evaluate(model, loader):
        model.eval()
        total = 0
        for step, batch in enumerate(loader):
            batch = to_device(batch, device)
            with torch.no_grad():
                out = model(**batch)
            total += out.loss.float()
        total = total / (step + 1)
        try:
            total = mean_over_ranks(total)
        except Exception:
            pass
        try:
            ppl = torch.exp(total).item()
        except OverflowError:
            ppl = float("inf")
        return ppl, total.item()

    ppl, loss = evaluate(model, eval_loader)
    print(f"ppl: {ppl}, loss: {loss}")
    for epoch in range(epochs):
        ppl, loss = evaluate(model, eval_loader)
        print(f"epoch {epoch} ppl: {ppl}, loss: {loss}")
