import torch
from accelerate import Accelerator
from safetensors.torch import save_file

from library import helpers


class EmbeddingTrainer:
    def load_encoders(self, args):
        tokenizer, text_encoder = helpers.load_text_encoder(args.base)
        return [tokenizer], text_encoder

    def write_embeddings(self, path, rows_list, step):
        save_file({f"rows_{i}": rows.contiguous() for i, rows in enumerate(rows_list)}, path)

    def train(self, args):
        accelerator = Accelerator(gradient_accumulation_steps=args.accum)
        tokenizers, encoder_or_list = self.load_encoders(args)
        encoders = [encoder_or_list] if not isinstance(encoder_or_list, list) else encoder_or_list
        ids_list = []
        for tokenizer, text_encoder in zip(tokenizers, encoders):
            ids_list.append(helpers.add_placeholder_tokens(tokenizer, text_encoder, args.tokens))
            text_encoder.requires_grad_(False)
            text_encoder.get_input_embeddings().requires_grad_(True)

        params = [p for enc in encoders for p in enc.get_input_embeddings().parameters()]
        optimizer = torch.optim.AdamW(params, lr=args.lr)
        loader = helpers.build_loader(args, tokenizers)

        if len(encoders) == 1:
            encoder_or_list, optimizer, loader = accelerator.prepare(encoder_or_list, optimizer, loader)
        elif len(encoders) == 2:
            enc_a, enc_b, optimizer, loader = accelerator.prepare(encoders[0], encoders[1], optimizer, loader)
            encoder_or_list = encoders = [enc_a, enc_b]
        else:
            raise NotImplementedError()

        for epoch in range(args.epochs):
            for batch in loader:
                with accelerator.accumulate(encoders[0]):
                    loss = sum(enc(batch["input_ids"])[0].float().pow(2).mean() for enc in encoders)
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()

            accelerator.wait_for_everyone()
            if args.save_every_n_epochs and (epoch + 1) % args.save_every_n_epochs == 0:
                rows_list = []
                for text_encoder, new_ids in zip(encoders, ids_list):
                    rows = accelerator.unwrap_model(text_encoder).get_input_embeddings().weight[new_ids].data.detach().clone()
                    rows_list.append(rows)
                if accelerator.is_main_process:
                    self.write_embeddings(f"{args.output}-{epoch + 1}.safetensors", rows_list, epoch + 1)

        is_main_process = accelerator.is_main_process
        if is_main_process:
            text_encoder = accelerator.unwrap_model(text_encoder)

        accelerator.end_training()

        rows = text_encoder.get_input_embeddings().weight[new_ids].data.detach().clone()

        if is_main_process:
            self.write_embeddings(args.output + ".safetensors", rows_list, args.epochs)
