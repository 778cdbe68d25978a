"""DDP010: the SLURM / MPI global rank modulo the device count as the device (class
global-rank-as-device, the mmcv / mmengine launcher helpers). Both operands by value flow."""
from __future__ import annotations

import textwrap

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source

SEL = Settings(select=["DDP010"])
HEAD = "import os\nimport torch\n"


def _lines(body: str) -> list[int]:
    src = HEAD + textwrap.dedent(body)
    return sorted(f.range.start.line + 1 - 2 for f in check_source(src, "<t>.py", SEL).findings)


@pytest.mark.parametrize("body,lines", [
    ('p = int(os.environ["SLURM_PROCID"])\nn = torch.cuda.device_count()\ntorch.cuda.set_device(p % n)\n', [3]),
    # tuple unpacking, an intermediate variable, DDP's device_ids, an f-string device
    ('p, n = int(os.environ["OMPI_COMM_WORLD_RANK"]), torch.cuda.device_count()\nd = p % n\n'
     'm = torch.nn.parallel.DistributedDataParallel(m, device_ids=[d])\n', [2]),
    ('p = int(os.environ["PMI_RANK"])\nx = torch.device(f"cuda:{p % torch.cuda.device_count()}")\n', [2]),
    ('p = int(os.environ["SLURM_PROCID"])\ntorch.npu.set_device(p % torch.npu.device_count())\n', [2]),
    # torchrun's RANK, a constant divisor, a local id read beside it: nothing
    ('p = int(os.environ["RANK"])\ntorch.cuda.set_device(p % torch.cuda.device_count())\n', []),
    ('p = int(os.environ["SLURM_PROCID"])\ntorch.cuda.set_device(p % 8)\n', []),
    ('def f():\n    p = int(os.environ["SLURM_PROCID"])\n    l = os.environ.get("SLURM_LOCALID")\n'
     '    torch.cuda.set_device(int(l) if l else p % torch.cuda.device_count())\n', []),
    # not used as a device
    ('p = int(os.environ["SLURM_PROCID"])\nshard = p % torch.cuda.device_count()\n', []),
])
def test_modulo(body, lines):
    assert _lines(body) == lines
