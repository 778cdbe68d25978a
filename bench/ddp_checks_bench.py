"""What the silent-divergence checks (DDP906/DDP907, analysis/runtime/shim_checks.py) cost.

``python bench/ddp_checks_bench.py``: in one child process (world size 1, gloo), a small DDP
training step is timed alternately through torch's own ``_pre_forward`` and through the checks'
counting wrapper, side by side in the same run; then the one-off fingerprint of the model at the
end. The hot path gains one attribute read and one counter increment per forward.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKS = os.path.join(ROOT, "analysis", "runtime", "shim_checks.py")

_CHILD = r"""
import importlib.util, json, os, statistics, sys, time
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + os.getpid() % 1000), RANK="0", WORLD_SIZE="1")
import torch, torch.distributed as dist
from torch.distributed import distributed_c10d as c10d
from torch.nn.parallel import DistributedDataParallel as DDP
torch.set_num_threads(1)
dist.init_process_group("gloo")
real_pre = DDP._pre_forward
spec = importlib.util.spec_from_file_location("ddp_lint_checks_bench", sys.argv[1])
checks = importlib.util.module_from_spec(spec); spec.loader.exec_module(checks)
checks.install(torch, c10d, lambda depth=2: None, lambda *a, **k: None)
wrapped = DDP._pre_forward
torch.manual_seed(0)
m = DDP(torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU(), torch.nn.Linear(512, 128)))
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x, y = torch.randn(256, 128), torch.randn(256, 128)
reps, steps = int(sys.argv[2]), int(sys.argv[3])
def step():
    t = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad(); ((m(x) - y) ** 2).mean().backward(); opt.step()
    return (time.perf_counter() - t) / steps
plain, counted = [], []
for _ in range(reps):
    DDP._pre_forward = real_pre; plain.append(step())
    DDP._pre_forward = wrapped; counted.append(step())
t = time.perf_counter(); checks.fingerprint(torch, "end"); fp = time.perf_counter() - t
print(json.dumps({"plain": statistics.median(plain), "counted": statistics.median(counted), "fingerprint": fp,
                  "params": sum(p.numel() for p in m.parameters())}))
dist.destroy_process_group()
"""


def main(reps: int = 7, steps: int = 30) -> dict:
    p = subprocess.run([sys.executable, "-c", _CHILD, CHECKS, str(reps), str(steps)], capture_output=True,
                       text=True, timeout=600)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    r = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"DDP step: {r['plain'] * 1e3:.2f} ms plain, {r['counted'] * 1e3:.2f} ms with the DDP907 counter "
          f"({r['counted'] / r['plain']:.3f}x); one-off fingerprint of {r['params']} parameters: "
          f"{r['fingerprint'] * 1e3:.1f} ms")
    return r


if __name__ == "__main__":
    main()
