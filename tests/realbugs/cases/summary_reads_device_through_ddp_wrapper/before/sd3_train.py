import argparse
import logging

import torch
from accelerate import Accelerator

from library import loaders

logger = logging.getLogger(__name__)


def train(args):
    zero = loaders.zero_plugin(args) if args.deepspeed else None
    accelerator = Accelerator(gradient_accumulation_steps=args.grad_accum, deepspeed_plugin=zero)
    dtype = torch.bfloat16 if args.bf16 else torch.float32

    backbone = loaders.build_backbone(args.checkpoint, dtype, "cpu")
    enc_small = loaders.build_encoder(args.checkpoint, "small", dtype) if args.train_encoders else None
    enc_large = loaders.build_encoder(args.checkpoint, "large", dtype) if args.train_encoders else None
    decoder = loaders.build_decoder(args.checkpoint, dtype)

    params = list(backbone.parameters())
    if enc_small is not None:
        params += list(enc_small.parameters()) + list(enc_large.parameters())
    optimizer = torch.optim.AdamW(params, lr=args.lr)
    loader = loaders.build_loader(args)

    if args.deepspeed:
        bundle = loaders.wrap_for_deepspeed(args, backbone=backbone, enc_small=enc_small if args.train_encoders else None)
        bundle, optimizer, loader = accelerator.prepare(bundle, optimizer, loader)
        trained = [bundle]
    else:
        if args.lr > 0:
            backbone = accelerator.prepare(backbone, device_placement=[not args.offload_blocks])
            if args.offload_blocks:
                accelerator.unwrap_model(backbone).keep_blocks_on_cpu(accelerator.device)
        if args.train_encoders:
            enc_small = accelerator.prepare(enc_small)
            enc_large = accelerator.prepare(enc_large)
        optimizer, loader = accelerator.prepare(optimizer, loader)
        trained = [backbone]

    # report where each model ended up
    logger.info(f"backbone on {backbone.device}, {backbone.dtype}" if backbone else "backbone missing")
    logger.info(f"small encoder on {enc_small.device}, {enc_small.dtype}" if enc_small else "small encoder missing")
    logger.info(f"large encoder on {enc_large.device}, {enc_large.dtype}" if enc_large else "large encoder missing")
    logger.info(f"decoder on {decoder.device}, {decoder.dtype}" if decoder is not None else "decoder missing")

    for epoch in range(args.epochs):
        for batch in loader:
            with accelerator.accumulate(*trained):
                loss = backbone(batch["x"]).float().pow(2).mean()
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
    accelerator.end_training()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint")
    p.add_argument("--grad_accum", type=int, default=1)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--train_encoders", action="store_true")
    p.add_argument("--deepspeed", action="store_true")
    p.add_argument("--offload_blocks", action="store_true")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--epochs", type=int, default=1)
    train(p.parse_args())
