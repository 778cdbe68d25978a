import argparse
import os
import time

import torch
from accelerate import Accelerator

EPOCH_NAME = "{}-{:06d}"


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--save_every_n_epochs", type=int, default=None)
    parser.add_argument("--keep_last_n_epochs", type=int, default=None)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--accum", type=int, default=1)
    parser.add_argument("--base", required=True)
    parser.add_argument("--rank", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--output_name", default=None)
    parser.add_argument("--save_state", action="store_true")
    parser.add_argument("--sample_prompts", default=None)
    parser.add_argument("--sample_steps", type=int, default=20)
    return parser.parse_args()


def prepare_accelerator(args):
    return Accelerator(gradient_accumulation_steps=args.accum)


def save_on_epoch_end(args, save_func, remove_old_func, epoch_no, num_epochs):
    if epoch_no % args.save_every_n_epochs != 0 or epoch_no >= num_epochs:
        return False
    save_func()
    if args.keep_last_n_epochs is not None:
        stale = epoch_no - args.save_every_n_epochs * args.keep_last_n_epochs
        if stale > 0:
            remove_old_func(stale)
    return True


def save_state_on_epoch_end(args, accelerator, model_name, epoch_no):
    accelerator.save_state(os.path.join(args.output_dir, EPOCH_NAME.format(model_name, epoch_no) + "-state"))


def sample_images(accelerator, args, epoch, step, pipeline):
    if not args.sample_prompts:
        return
    out_dir = os.path.join(args.output_dir, "sample")
    os.makedirs(out_dir, exist_ok=True)
    with open(args.sample_prompts, encoding="utf-8") as fh:
        prompts = fh.readlines()
    with torch.no_grad():
        for i, prompt in enumerate(prompts):
            prompt = prompt.strip()
            if not prompt or prompt.startswith("#"):
                continue
            image = pipeline(prompt, args.sample_steps).images[0]
            stamp = time.strftime("%Y%m%d%H%M%S", time.localtime())
            image.save(os.path.join(out_dir, f"e{epoch:04d}_{i:02d}_{stamp}.png"))
