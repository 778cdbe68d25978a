import torch
import torch.distributed as dist

from evals.data import init_data


def run_epoch(model, loader, training):
    model.train(training)
    correct = 0
    for x, y in loader:
        correct += (model(x.cuda()).argmax(1) == y.cuda()).sum().item()
    return correct


def make_loader(root, batch_size, world_size, rank, training):
    loader, _ = init_data(root=root, batch_size=batch_size, world_size=world_size,
                          rank=rank, training=training)
    return loader


def main(cfg):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model = torch.nn.Linear(128, 10).cuda()
    train_loader = make_loader(cfg["root"], cfg["batch_size"], world_size, rank, True)
    val_loader = make_loader(cfg["root"], cfg["batch_size"], world_size, rank, False)
    for epoch in range(cfg["epochs"]):
        print("epoch", epoch + 1)
        run_epoch(model, train_loader, True)
        run_epoch(model, val_loader, False)
