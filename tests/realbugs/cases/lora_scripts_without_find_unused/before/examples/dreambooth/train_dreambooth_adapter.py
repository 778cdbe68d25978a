import argparse

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="out")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--train_text_encoder", action="store_true")
    return p.parse_args()


def main(args, denoiser, text_enc, loader):
    project = ProjectConfiguration(project_dir=args.out)

    accelerator = Accelerator(
        gradient_accumulation_steps=args.accum,
        project_config=project,
    )
    params = [p for p in denoiser.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-4)
    if args.train_text_encoder:
        denoiser, text_enc, opt, loader = accelerator.prepare(denoiser, text_enc, opt, loader)
    else:
        denoiser, opt, loader = accelerator.prepare(denoiser, opt, loader)
    for batch in loader:
        with accelerator.accumulate(denoiser):
            loss = denoiser(batch, text_enc(batch)).mean()
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
