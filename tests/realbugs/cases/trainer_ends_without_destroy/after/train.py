import torch
from torch.distributed import destroy_process_group
from torch.distributed.elastic.multiprocessing.errors import record

from dist_helpers import setup_process_group


class Settings:
    backend = "nccl"
    steps = 100


@record
def main(cfg):
    setup_process_group(cfg)
    model = torch.nn.Linear(8, 8).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    log = open("metrics.log", "a")
    for step in range(cfg.steps):
        loss = model(torch.randn(2, 8, device="cuda")).sum()
        loss.backward()
        opt.step()
        log.write(f"{step} {loss.item()}\n")
    log.close()
    print("done")
    destroy_process_group()


if __name__ == "__main__":
    main(Settings())
