"""Manual data parallelism gone wrong: the model is never wrapped in DDP, the script averages its
gradients by hand, but every rank seeds itself differently and nothing broadcasts the initial
weights: the replicas start apart and stay apart."""
import torch
import torch.distributed as dist


def average_gradients(model):
    world = dist.get_world_size()
    for p in model.parameters():
        dist.all_reduce(p.grad)  # [reduce]
        p.grad /= world


dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())  # [seed]
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    average_gradients(model)
    opt.step()
dist.destroy_process_group()
