import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration


def main(args, backbone, controlnet, loader):
    project = ProjectConfiguration(project_dir=args.output_dir)

    accelerator = Accelerator(
        gradient_accumulation_steps=args.accum,
        mixed_precision=args.precision,
        project_config=project,
    )
    backbone.requires_grad_(False)
    controlnet.train()
    opt = torch.optim.AdamW(controlnet.parameters(), lr=args.lr)
    controlnet, opt, loader = accelerator.prepare(controlnet, opt, loader)
    for batch in loader:
        with accelerator.accumulate(controlnet):
            residuals = controlnet(batch["latents"], batch["cond"])
            loss = backbone(batch["latents"], residuals[:-1]).mean()
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
