"""Model parallelism: each rank holds its own shard of the first layer (different by design, seeded
per rank); only the replicated head's gradients are averaged by hand, and the head is broadcast
once. The shards differ across ranks and must not be reported."""
import torch
import torch.distributed as dist


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.shard = torch.nn.Linear(4, 4)  # this rank's own slice
        self.head = torch.nn.Linear(4, 1)  # replicated

    def forward(self, x):
        h = self.shard(x)
        dist.all_reduce(h.detach())  # activations, not gradients
        return self.head(h)


dist.init_process_group("gloo")
torch.manual_seed(100 + dist.get_rank())
net = Net()
for p in net.head.parameters():
    dist.broadcast(p.data, src=0)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    net(torch.randn(8, 4)).sum().backward()
    for p in net.head.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()
    opt.step()
dist.destroy_process_group()
