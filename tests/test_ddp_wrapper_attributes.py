"""DDP210's frozen list of the attributes a DistributedDataParallel wrapper has (torch 2.13), held
to the installed torch: every attribute of the class and every one its __init__ sets is in it, so a
torch upgrade that adds one is noticed (a read of it would be a false positive)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

from tests.conftest import require_torch

from ddp_lint.analysis.rules.ddp210_attribute_through_ddp_wrapper import DDP_ATTRIBUTES

_PROBE = textwrap.dedent("""
    import json, os, torch, torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo", rank=0, world_size=1)
    m = DDP(nn.Linear(2, 2))
    print(json.dumps(sorted(set(dir(DDP)) | set(vars(m)))))
    dist.destroy_process_group()
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_frozen_attributes_cover_the_installed_wrapper():
    require_torch()
    import json

    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    p = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    have = set(json.loads(p.stdout.strip().splitlines()[-1]))
    assert have <= DDP_ATTRIBUTES, sorted(have - DDP_ATTRIBUTES)


def test_frozen_attributes_hold_the_usual_api_and_not_a_model_method():
    for name in ("module", "no_sync", "parameters", "state_dict", "train", "eval", "to", "named_modules",
                 "register_forward_hook", "require_backward_grad_sync", "device_ids", "training"):
        assert name in DDP_ATTRIBUTES, name
    for name in ("generate", "config", "tokenize", "save_pretrained", "dtype"):
        assert name not in DDP_ATTRIBUTES, name
