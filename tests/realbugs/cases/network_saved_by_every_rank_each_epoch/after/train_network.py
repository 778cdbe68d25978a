import os

import torch

import library.train_util as train_util
from library import adapters


def train(args):
    accelerator = train_util.prepare_accelerator(args)
    is_main_process = accelerator.is_main_process
    base, pipeline = adapters.load_base(args.base)
    network = adapters.attach_adapter(base, args.rank)
    optimizer = torch.optim.AdamW(network.parameters(), lr=args.lr)
    loader = adapters.build_loader(args)
    network, optimizer, loader = accelerator.prepare(network, optimizer, loader)
    num_epochs = args.epochs

    for epoch in range(num_epochs):
        if is_main_process:
            print(f"epoch {epoch + 1}/{num_epochs}")
        for batch in loader:
            with accelerator.accumulate(network):
                loss = base(batch["latents"], batch["cond"]).float().pow(2).mean()
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()

        accelerator.wait_for_everyone()

        if args.save_every_n_epochs is not None:
            model_name = args.output_name or "last"

            def save_func():
                path = os.path.join(args.output_dir, train_util.EPOCH_NAME.format(model_name, epoch + 1) + ".safetensors")
                print(f"writing {path}")
                accelerator.unwrap_model(network).save_weights(path)

            def remove_old_func(old_epoch):
                path = os.path.join(args.output_dir, train_util.EPOCH_NAME.format(model_name, old_epoch) + ".safetensors")
                if os.path.exists(path):
                    os.remove(path)

            if is_main_process:
                saving = train_util.save_on_epoch_end(args, save_func, remove_old_func, epoch + 1, num_epochs)
                if saving and args.save_state:
                    train_util.save_state_on_epoch_end(args, accelerator, model_name, epoch + 1)

        train_util.sample_images(accelerator, args, epoch + 1, 0, pipeline)

    if is_main_process:
        network = accelerator.unwrap_model(network)
    accelerator.end_training()
    if is_main_process:
        network.save_weights(os.path.join(args.output_dir, (args.output_name or "last") + ".safetensors"))


if __name__ == "__main__":
    train(train_util.parse_args())
