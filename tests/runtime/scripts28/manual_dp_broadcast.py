"""The same manual data parallelism done right: the initial weights are broadcast from rank 0."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
for p in model.parameters():
    dist.broadcast(p.data, src=0)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad.data)
        p.grad.data /= dist.get_world_size()
    opt.step()
dist.destroy_process_group()
