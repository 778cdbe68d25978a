import argparse
import random

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser(description="toy latent denoiser trainer")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch_size", type=int, default=8)
parser.add_argument("--lr", type=float, default=1e-4)
parser.add_argument("--fp16", action="store_true")
parser.add_argument("--save_every", type=int, default=500)
parser.add_argument("--out_dir", type=str, default="runs")
args = parser.parse_args()


def setup():
    dist.init_process_group("nccl", init_method="env://")


def cleanup():
    dist.destroy_process_group()


def current_rank() -> int:
    if not dist.is_initialized():
        return 0
    return dist.get_rank()


def current_world() -> int:
    if not dist.is_initialized():
        return 1
    return dist.get_world_size()


class ToyDenoiser(torch.nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.inp = torch.nn.Linear(width, width)
        self.out = torch.nn.Linear(width, width)

    def forward(self, noisy, steps, context):
        hidden = torch.nn.functional.silu(self.inp(noisy + context))
        return self.out(hidden) * (steps.float().unsqueeze(-1) / 1000.0)


class LatentSet(torch.utils.data.Dataset):
    def __init__(self, count=512, width=32):
        self.items = torch.randn(count, width)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


class BatchPlan:
    def __init__(self, size, batch_size):
        self.size = size
        self.batch_size = batch_size

    def batch_count(self):
        return self.size // self.batch_size

    def plan(self):
        order = list(range(self.size))
        random.shuffle(order)
        return [order[k * self.batch_size:(k + 1) * self.batch_size] for k in range(self.batch_count())]


class StridedPlanSampler(torch.utils.data.Sampler):
    def __init__(self, plan: BatchPlan, num_replicas: int = 1, rank: int = 0):
        super().__init__(None)
        self.plan = plan
        self.num_replicas = num_replicas
        self.rank = rank

    def __iter__(self):
        batches = self.plan.plan()[self.rank::self.num_replicas]
        return iter(batches)

    def __len__(self):
        return self.plan.batch_count() // self.num_replicas


def main():
    rank = current_rank()
    world_size = current_world()
    torch.cuda.set_device(rank)
    device = torch.device("cuda")
    scaler = torch.cuda.amp.GradScaler(enabled=args.fp16)

    denoiser = ToyDenoiser().to(device)
    denoiser = torch.nn.parallel.DistributedDataParallel(denoiser, device_ids=[rank], output_device=rank)
    optimizer = torch.optim.AdamW(denoiser.parameters(), lr=args.lr)

    data = LatentSet()
    sampler = StridedPlanSampler(BatchPlan(len(data), args.batch_size), num_replicas=world_size, rank=rank)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, num_workers=0)

    def save_checkpoint(step):
        if rank == 0:
            torch.save(denoiser.module.state_dict(), f"{args.out_dir}/denoiser_{step}.pt")
        dist.barrier()

    step = 0
    for epoch in range(args.epochs):
        denoiser.train()
        for latents in loader:
            latents = latents.to(device)
            noise = torch.randn_like(latents)
            steps = torch.randint(0, 1000, (latents.shape[0],), device=device)
            context = torch.zeros_like(latents)
            noisy = latents + noise * (steps.float().unsqueeze(-1) / 1000.0)

            with denoiser.join():
                with torch.autocast("cuda", enabled=args.fp16):
                    predicted = denoiser(noisy, steps, context)

                loss = torch.nn.functional.mse_loss(predicted.float(), noise.float())

                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()

            dist.all_reduce(loss, op=dist.ReduceOp.SUM)
            loss = loss / world_size
            step += 1
            if rank == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
            if step % args.save_every == 0:
                save_checkpoint(step)

    save_checkpoint(step)
    cleanup()


if __name__ == "__main__":
    setup()
    main()
