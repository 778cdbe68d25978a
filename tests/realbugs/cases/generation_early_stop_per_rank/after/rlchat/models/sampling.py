import torch
import torch.distributed as dist



def _all_done(unfinished: torch.Tensor) -> bool:
    if dist.is_initialized() and dist.get_world_size() > 1:
        unfinished = unfinished.clone()
        dist.all_reduce(unfinished)
    return unfinished.max() == 0


def sample(model, input_ids, max_length, early_stopping=False, eos_token_id=None, pad_token_id=None):
    if input_ids.size(1) >= max_length:
        return input_ids
    unfinished = input_ids.new(input_ids.shape[0]).fill_(1)
    for _ in range(input_ids.size(1), max_length):
        logits = model(input_ids)["logits"][:, -1, :]
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        next_tokens = torch.multinomial(probs, num_samples=1).squeeze(1)
        if eos_token_id is not None:
            next_tokens = next_tokens * unfinished + pad_token_id * (1 - unfinished)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        if eos_token_id is not None:
            unfinished = unfinished.mul((next_tokens != eos_token_id).long())
        # leave once every sequence has ended
        if early_stopping and _all_done(unfinished):
            break
    return input_ids
