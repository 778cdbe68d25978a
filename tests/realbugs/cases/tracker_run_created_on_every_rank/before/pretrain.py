import argparse
import os
import time

import torch
import wandb

import helpers


def build_parser():
    parser = argparse.ArgumentParser("self-distillation pretraining", add_help=False)
    parser.add_argument("--epochs", default=10, type=int)
    parser.add_argument("--lr", default=5e-4, type=float)
    parser.add_argument("--output_dir", default=".", type=str)
    parser.add_argument("--dist_url", default="env://", type=str)
    parser.add_argument("--use_tracker", default=True, type=bool, help="log metrics to Weights & Biases")
    parser.add_argument("--tracker_project", default="selfdistill", type=str)
    parser.add_argument("--tracker_entity", default=None, type=str)
    return parser


def pretrain(args):
    if args.use_tracker:
        wandb.init(project=args.tracker_project, entity=args.tracker_entity, config=args)
    helpers.setup_distributed(args)
    torch.manual_seed(0)

    student = torch.nn.Linear(16, 16).cuda()
    student = torch.nn.parallel.DistributedDataParallel(student, device_ids=[args.gpu])
    optimizer = torch.optim.AdamW(student.parameters(), lr=args.lr)

    start = time.time()
    for epoch in range(args.epochs):
        run_epoch(student, optimizer, epoch, args)
        helpers.save_on_main({"student": student.module.state_dict(), "epoch": epoch},
                             os.path.join(args.output_dir, "checkpoint.pth"))
    print("training took {:.0f}s".format(time.time() - start))
    if args.use_tracker:
        wandb.finish()


def run_epoch(student, optimizer, epoch, args):
    logger = helpers.MetricLogger(delimiter="  ", use_tracker=args.use_tracker)
    for step in range(100):
        views = torch.randn(8, 16, device="cuda")
        loss = (student(views) - views).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        logger.update(loss=loss.item(), lr=optimizer.param_groups[0]["lr"])
    return {name: meter.average for name, meter in logger.meters.items()}


if __name__ == "__main__":
    parser = argparse.ArgumentParser("pretrain", parents=[build_parser()])
    args = parser.parse_args()
    pretrain(args)
