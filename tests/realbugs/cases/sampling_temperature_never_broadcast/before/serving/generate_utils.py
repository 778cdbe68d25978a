import torch
import torch.distributed


def send_request_info(tokens, lengths, max_new, want_probs):
    """Rank 0 side; must match receive_request_info."""
    info = [tokens.size(0), tokens.size(1), max_new, want_probs]
    info_tensor = torch.cuda.LongTensor(info)
    torch.distributed.broadcast(info_tensor, 0)
    torch.distributed.broadcast(lengths, 0)
    torch.distributed.broadcast(tokens, 0)


def receive_request_info():
    """Other ranks; must match send_request_info."""
    info_tensor = torch.empty(4, dtype=torch.int64, device=torch.cuda.current_device())
    torch.distributed.broadcast(info_tensor, 0)
    batch = info_tensor[0].item()
    seq = info_tensor[1].item()
    max_new = info_tensor[2].item()
    want_probs = info_tensor[3].item()
    lengths = torch.empty(batch, dtype=torch.int64, device=torch.cuda.current_device())
    tokens = torch.empty(batch, seq, dtype=torch.int64, device=torch.cuda.current_device())
    torch.distributed.broadcast(lengths, 0)
    torch.distributed.broadcast(tokens, 0)
    return lengths, tokens, max_new, want_probs


def generate(model, tokens=None, lengths=None, max_new=0, want_probs=0, temperature=1.0):
    if torch.distributed.get_rank() == 0:
        send_request_info(tokens, lengths, max_new, want_probs)
    else:
        lengths, tokens, max_new, want_probs = receive_request_info()
    logits = model(tokens)[:, -1] / temperature
    return torch.multinomial(torch.softmax(logits, -1), 1)
