import copy
import os
import pickle

import torch
import torch.distributed as dist

from metrics import metric_main
from torch_utils import misc


class Generator(torch.nn.Module):
    def __init__(self, z_dim=64, w_avg_beta=0.995):
        super().__init__()
        self.z_dim = z_dim
        self.w_avg_beta = w_avg_beta
        self.mapping = torch.nn.Linear(z_dim, z_dim)
        self.synthesis = torch.nn.Linear(z_dim, 3 * 16 * 16)
        # running mean of the latent w, updated from each rank's own batches
        self.register_buffer("w_avg", torch.zeros(z_dim))

    def forward(self, z, truncation=0.7):
        w = self.mapping(z)
        if self.training:
            self.w_avg.copy_(w.detach().mean(dim=0).lerp(self.w_avg, self.w_avg_beta))
        w = self.w_avg.lerp(w, truncation)
        return self.synthesis(w)


def training_loop(run_dir=".", rank=0, num_gpus=1, total_kimg=100, batch_gpu=16,
                  snapshot_ticks=10, metrics=("mean_energy",), ema_beta=0.999):
    device = torch.device("cuda", rank)
    G = Generator().train().requires_grad_(False).to(device)
    D = torch.nn.Linear(3 * 16 * 16, 1).train().requires_grad_(False).to(device)
    G_ema = copy.deepcopy(G).eval()

    # Distribute across GPUs.
    for module in [G, D, G_ema]:
        if module is not None and num_gpus > 1:
            for tensor in misc.params_and_buffers(module):
                dist.broadcast(tensor, src=0)

    opt = torch.optim.Adam(list(G.parameters()) + list(D.parameters()), lr=2e-3)
    cur_nimg = 0
    cur_tick = 0
    done = False
    while not done:
        G.requires_grad_(True)
        D.requires_grad_(True)
        z = torch.randn(batch_gpu, G.z_dim, device=device)
        loss = torch.nn.functional.softplus(-D(G(z))).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for p in list(G.parameters()) + list(D.parameters()) if p.grad is not None]
        if params:
            flat = torch.cat([p.grad.flatten() for p in params])
            if num_gpus > 1:
                dist.all_reduce(flat)
                flat /= num_gpus
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset:offset + p.numel()].reshape(p.shape))
                offset += p.numel()
        opt.step()
        G.requires_grad_(False)
        D.requires_grad_(False)

        with torch.no_grad():
            for p_ema, p in zip(G_ema.parameters(), G.parameters()):
                p_ema.copy_(p.lerp(p_ema, ema_beta))
            for b_ema, b in zip(G_ema.buffers(), G.buffers()):
                b_ema.copy_(b)

        cur_nimg += batch_gpu * num_gpus
        cur_tick += 1
        done = cur_nimg >= total_kimg * 1000

        # Save network snapshot.
        snapshot_pkl = None
        snapshot_data = None
        if done or cur_tick % snapshot_ticks == 0:
            snapshot_data = dict(G=G, D=D, G_ema=G_ema, run_dir=run_dir)
            for key, value in snapshot_data.items():
                if isinstance(value, torch.nn.Module):
                    value = copy.deepcopy(value).eval().requires_grad_(False)
                    if num_gpus > 1:
                        misc.check_ddp_consistency(value, ignore_regex=r".*\.[^.]+_(avg|ema)")
                        for tensor in misc.params_and_buffers(value):
                            dist.broadcast(tensor, src=0)
                    snapshot_data[key] = value.cpu()
                del value
            snapshot_pkl = os.path.join(run_dir, f"snapshot-{cur_nimg // 1000:06d}.pkl")
            if rank == 0:
                with open(snapshot_pkl, "wb") as f:
                    pickle.dump(snapshot_data, f)

        # Evaluate metrics.
        if snapshot_data is not None and len(metrics) > 0:
            for metric in metrics:
                result = metric_main.calc_metric(metric=metric, G=snapshot_data["G_ema"],
                                                 num_gpus=num_gpus, rank=rank, device=device)
                if rank == 0:
                    metric_main.report_metric(result, run_dir=run_dir)
        del snapshot_data
