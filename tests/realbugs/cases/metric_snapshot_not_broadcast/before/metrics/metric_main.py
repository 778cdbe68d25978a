import torch
import torch.distributed as dist


def calc_metric(metric, G, num_gpus, rank, device, num_samples=1024):
    """Each rank scores its share of generated samples; the shares are summed over the ranks."""
    share = num_samples // num_gpus
    G = G.to(device)
    total = torch.zeros([], dtype=torch.float64, device=device)
    with torch.no_grad():
        for _ in range(share // 64):
            z = torch.randn(64, G.z_dim, device=device)
            total += G(z).pow(2).mean(dim=1).sum().double()
    if num_gpus > 1:
        dist.all_reduce(total)
    return {metric: float(total) / (share * num_gpus)}


def report_metric(result, run_dir):
    print(run_dir, result)
