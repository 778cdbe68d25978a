from functools import partial

import torch
import torch.distributed as dist


def dp_group_info():
    group = None
    return group, dist.get_rank(group=group), dist.get_world_size(group=group)


def retriever(dataset_cls):
    def forward_step(batch, model):
        group, rank, world_size = dp_group_info()
        q_tokens, c_tokens, neg_tokens = batch
        if neg_tokens is not None:
            n = torch.tensor([[neg_tokens.size(0)]], device=torch.cuda.current_device())
            sizes = [torch.empty_like(n) for _ in range(world_size)]
            dist.all_gather(sizes, n, group=group)
            longest = int(torch.max(torch.cat(sizes, dim=0)))
            neg_tokens = torch.nn.functional.pad(neg_tokens, (0, 0, 0, longest - neg_tokens.size(0)))
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
