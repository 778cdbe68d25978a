import torch
from accelerate import Accelerator
from torch import nn


def patch_discriminator(channels=3, width=64):
    return nn.Sequential(
        nn.Conv2d(channels, width, 4, 2, 1), nn.LeakyReLU(0.2),
        nn.Conv2d(width, width * 2, 4, 2, 1), nn.BatchNorm2d(width * 2), nn.LeakyReLU(0.2),
        nn.Conv2d(width * 2, 1, 4, 1, 1),
    )


def main(args, vae, loader):
    accelerator = Accelerator(gradient_accumulation_steps=args.accum)
    disc = patch_discriminator()
    opt = torch.optim.AdamW(vae.parameters(), lr=args.lr)
    disc_opt = torch.optim.AdamW(disc.parameters(), lr=args.disc_lr)
    vae, disc, opt, disc_opt, loader = accelerator.prepare(vae, disc, opt, disc_opt, loader)
    for batch in loader:
        recon = vae(batch)
        g_loss = (recon - batch).abs().mean() - disc(recon).mean()
        accelerator.backward(g_loss)
        opt.step()
        opt.zero_grad()
        d_loss = torch.relu(1 - disc(batch)).mean() + torch.relu(1 + disc(recon.detach())).mean()
        accelerator.backward(d_loss)
        disc_opt.step()
        disc_opt.zero_grad()
