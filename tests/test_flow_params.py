"""A parameter named like the rank is the rank only when value flow has no answer (issue 25,
point 5): when every call of the function in its module passes a constant (directly, or through a
caller's own never-rebound parameter), it is uniform. Found on Megatron-LM's checkpoint loading
(`rank0=False` passed down three helpers) and Megatron-DeepSpeed's `broadcast(tensor, rank)`."""
from __future__ import annotations


from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source

HELPER = '''
import torch
import torch.distributed as dist


def send_tokens(tensor, rank):
    dist.broadcast(tensor, rank)
    return tensor


def relay(tensor, rank):
    return send_tokens(tensor, rank)


def main():
    dist.init_process_group("gloo")
    t = torch.zeros(4)
    send_tokens(t, 0)
    send_tokens(t, rank=0)
    relay(t, 1)
    {extra}
    dist.destroy_process_group()
'''


def _codes(src: str) -> list[tuple[str, int]]:
    res = check_source(src, "train.py", Settings(select=["ALL"]))
    return [(f.code, f.range.start.line + 1) for f in res.findings]


def test_constant_roots_at_every_call_are_uniform_whatever_the_parameter_is_called():
    assert ("DDP108", 7) not in _codes(HELPER.format(extra="pass"))


def test_one_caller_passing_the_rank_keeps_the_finding():
    assert ("DDP108", 7) in _codes(HELPER.format(extra="send_tokens(t, dist.get_rank())"))


def test_a_function_passed_as_a_value_keeps_the_finding():
    # used as a callback somewhere: callers we cannot see may pass anything
    assert ("DDP108", 7) in _codes(HELPER.format(extra="hooks = [send_tokens]"))


def test_a_rebound_parameter_is_not_passed_through():
    src = HELPER.replace("def relay(tensor, rank):\n", "def relay(tensor, rank):\n    rank = dist.get_rank()\n")
    assert ("DDP108", 7) in _codes(src.format(extra="pass"))


def test_kwargs_that_may_carry_the_parameter_keep_the_finding():
    src = HELPER.replace("send_tokens(t, rank=0)", "send_tokens(t, **opts)").replace(
        "t = torch.zeros(4)", "t = torch.zeros(4)\n    opts = dict()")
    assert ("DDP108", 7) in _codes(src.format(extra="pass"))
