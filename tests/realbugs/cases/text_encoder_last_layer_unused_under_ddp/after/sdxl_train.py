import argparse

import torch

import library.train_util as train_util
from library import model_loader


def train(args):
    accelerator = train_util.prepare_accelerator(args)
    weight_dtype = torch.bfloat16 if args.mixed_precision == "bf16" else torch.float32

    enc_one, enc_two, denoiser = model_loader.load_all(args.base)
    train_enc_one = args.train_text_encoder
    train_enc_two = args.train_text_encoder
    train_denoiser = args.lr > 0

    params = []
    if train_denoiser:
        params += list(denoiser.parameters())
    if train_enc_one:
        enc_one.requires_grad_(True)
        params += list(enc_one.parameters())
    if train_enc_two:
        enc_two.requires_grad_(True)
        params += list(enc_two.parameters())
    optimizer = torch.optim.AdamW(params, lr=args.lr)
    loader = model_loader.build_loader(args)

    if train_denoiser:
        denoiser = accelerator.prepare(denoiser)
    if train_enc_one:
        # only the next-to-last layer's output is used: freeze what comes after it
        enc_one.text_model.encoder.layers[-1].requires_grad_(False)
        enc_one.text_model.final_layer_norm.requires_grad_(False)
        enc_one = accelerator.prepare(enc_one)
    if train_enc_two:
        enc_two = accelerator.prepare(enc_two)
    optimizer, loader = accelerator.prepare(optimizer, loader)

    for epoch in range(args.epochs):
        for batch in loader:
            with accelerator.accumulate(denoiser):
                hidden1, hidden2, pooled = train_util.encode_prompts(batch["input_ids"], enc_one, enc_two)
                context = torch.cat([hidden1, hidden2], dim=2).to(weight_dtype)
                pred = denoiser(batch["latents"], batch["timesteps"], context, pooled)
                loss = torch.nn.functional.mse_loss(pred.float(), batch["noise"].float())
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
    accelerator.end_training()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--base")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--mixed_precision", default="no")
    p.add_argument("--ddp_timeout", type=int, default=None)
    p.add_argument("--train_text_encoder", action="store_true")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--epochs", type=int, default=1)
    train(p.parse_args())
