import argparse

import torch
import torch.distributed as dist
from transformers import AutoTokenizer

from rlchat.models.sampling import sample


def main(args):
    dist.init_process_group("nccl")
    torch.cuda.set_device(dist.get_rank() % torch.cuda.device_count())
    tokenizer = AutoTokenizer.from_pretrained(args.pretrain)
    tokenizer.pad_token = tokenizer.eos_token
    model = torch.load(args.actor, weights_only=False).cuda()

    def encode(texts):
        batch = tokenizer(texts, return_tensors="pt", max_length=96, padding="max_length", truncation=True)
        return {k: v.cuda() for k, v in batch.items()}

    prompts = open(args.prompts).read().splitlines()
    mine = prompts[dist.get_rank()::dist.get_world_size()]
    for i in range(0, len(mine), 4):
        ids = encode(mine[i:i + 4])["input_ids"]
        out = sample(model, ids, 128, early_stopping=True, eos_token_id=tokenizer.eos_token_id,
                     pad_token_id=tokenizer.pad_token_id)
        print(out.shape)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--pretrain")
    parser.add_argument("--actor")
    parser.add_argument("--prompts")
    main(parser.parse_args())
