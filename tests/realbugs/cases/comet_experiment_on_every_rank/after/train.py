import os

import torch
import torch.distributed as dist

wandb_log = False
comet_log = True
project = "gpt"

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    dist.init_process_group(backend="nccl")
    gpu_id = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(gpu_id)
else:
    gpu_id = 0

if wandb_log and gpu_id == 0:
    import wandb
    wandb.init(project=project)

if comet_log and gpu_id == 0:
    import comet_ml
    experiment = comet_ml.Experiment(project_name=project)

model = torch.nn.Linear(16, 16).cuda()
for it in range(10):
    loss = model(torch.randn(4, 16, device="cuda")).sum()
    loss.backward()
    if comet_log and gpu_id == 0:
        experiment.log_metric("loss", loss.item(), step=it)

if ddp:
    dist.destroy_process_group()
