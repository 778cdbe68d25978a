from functools import partial

import torch
import torch.distributed as dist


def dp_group_info():
    group = None
    return group, dist.get_rank(group=group), dist.get_world_size(group=group)


def retriever(dataset_cls):
    def forward_step(batch, model):
        q_tokens, c_tokens, neg_tokens = batch
        if neg_tokens is not None:
            c_tokens = torch.cat([c_tokens, neg_tokens])
        out = model(q_tokens, c_tokens)
        return out, partial(loss_fn, q_tokens, c_tokens)

    def loss_fn(q_tokens, c_tokens, out):
        group, rank, world_size = dp_group_info()
        q_logits, c_logits = out
        if world_size > 1:
            local = torch.empty_like(c_logits).copy_(c_logits).detach_()
            parts = [torch.empty_like(local) for _ in range(world_size)]
            parts[rank].copy_(local)
            dist.all_gather(parts, local, group=group)
            parts[rank] = c_logits
            c_logits = torch.cat(parts, dim=0)
        scores = torch.matmul(q_logits, c_logits.t())
        return torch.nn.functional.cross_entropy(scores, torch.arange(q_logits.shape[0]))

    return forward_step
