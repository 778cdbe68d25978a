"""Round-2 rule catalogue (issue 15): messages, related locations and registration that the golden
fixtures (tests/fixtures/<CODE>/) do not state."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.registry import all_rules

NEW = {"DDP111": "scalar-to-collective", "DDP112": "blocking-p2p-order", "DDP207": "forward-bypasses-ddp",
       "DDP208": "no-sync-misuse", "DDP209": "unused-parameters"}


def _findings(code: str, src: str):
    return [f for f in check_source(textwrap.dedent(src), "t.py", Settings(select=[code])).findings if f.code == code]


def test_ddp001_message_names_the_call_and_its_line():
    src = """\
        import os
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        local_rank = int(os.environ["LOCAL_RANK"])
        dist.init_process_group("nccl")
        model = DDP(torch.nn.Linear(2, 2).cuda(), device_ids=[local_rank])
        """
    (f,) = _findings("DDP001", src)
    assert "`torch.nn.Linear(2, 2).cuda()` on line 8" in f.message, f.message
    assert "1 call then" not in f.message and "and 1 more call run on cuda:0 on every rank" in f.message
    msgs = [r.message for r in f.related]
    assert any("DistributedDataParallel" in m and "device_ids" in m for m in msgs), msgs
    assert f.fix is not None and "set_device(local_rank)" in f.fix.edits[0].content


def test_ddp001_single_call_grammar():
    src = """\
        import torch.distributed as dist
        dist.init_process_group("nccl")
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, 1)
        """
    (f,) = _findings("DDP001", src)
    assert "`dist.all_gather_object(out, 1)` on line 4 runs on cuda:0 on every rank" in f.message, f.message


def test_ddp001_counts_the_other_calls():
    src = """\
        import torch
        import torch.distributed as dist
        dist.init_process_group("nccl")
        x = torch.ones(1).cuda()
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, 1)
        """
    (f,) = _findings("DDP001", src)
    assert "`torch.ones(1).cuda()` on line 4 and 1 more call run on cuda:0" in f.message, f.message
    assert len(f.related) == 2


def test_ddp001_call_before_pin_is_reported_at_the_call():
    src = """\
        import os
        import torch
        import torch.distributed as dist

        def main():
            local_rank = int(os.environ["LOCAL_RANK"])
            dist.init_process_group("nccl")
            names = [None] * dist.get_world_size()
            dist.all_gather_object(names, local_rank)
            torch.cuda.set_device(local_rank)
        """
    (f,) = _findings("DDP001", src)
    assert f.range.start.line == 8
    assert "before `torch.cuda.set_device(local_rank)` (line 10)" in f.message, f.message
    # a barrier there is not reported: torch 2.13 runs it on GPU `global rank % device count`
    assert not _findings("DDP001", src.replace("names = [None] * dist.get_world_size()\n", "").replace(
        "dist.all_gather_object(names, local_rank)", "dist.barrier()"))


def test_new_rules_are_registered_and_listed():
    rules = all_rules()
    for code, name in NEW.items():
        assert code in rules and rules[code].name == name
    out = subprocess.run([sys.executable, "-m", "ddp_lint", "rule", "--all"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    for code, name in NEW.items():
        assert code in out.stdout and name in out.stdout


def test_ddp111_quotes_torch_error():
    src = """\
        import torch.distributed as dist
        def f(loss):
            total = 0.0
            total += loss.item()
            dist.all_reduce(total)
        """
    (f,) = _findings("DDP111", src)
    assert "Expected parameter `tensor` of type torch.Tensor" in f.message


def test_ddp101_non_destination_list_quotes_torch_error():
    src = """\
        import torch
        import torch.distributed as dist
        def f(t):
            out = [torch.zeros_like(t) for _ in range(dist.get_world_size())]
            dist.gather(t, out, dst=0)
        """
    (f,) = _findings("DDP101", src)
    assert "must NOT be specified on non-destination ranks" in f.message
    assert f.fix is not None and "if dist.get_rank() == 0 else None" in f.fix.edits[0].content
