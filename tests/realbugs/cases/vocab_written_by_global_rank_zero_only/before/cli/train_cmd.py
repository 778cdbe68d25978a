import os

import torch.distributed as dist


def is_primary():
    return not dist.is_initialized() or dist.get_rank() == 0


def worker(proc_rank, out_dir, local_rank, world_size, build_vocab, build_model):
    if world_size > 1:
        dist.init_process_group("nccl", rank=proc_rank, world_size=world_size)
    vocab = build_vocab()
    model = build_model(vocab)
    if is_primary():
        vocab_dir = os.path.join(out_dir, "vocab")
        vocab.save(vocab_dir)
    if world_size > 1:
        dist.barrier()
    return model, load_vocab(out_dir)


def load_vocab(out_dir):
    with open(os.path.join(out_dir, "vocab", "tokens.txt")) as fh:
        return fh.read().split()
