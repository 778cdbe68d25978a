"""Real Flight Recorder dumps for the explain tests: tests/runtime/fr_jobs/proj/train.py run on 2
gloo ranks (torch 2.13 records gloo), one scenario per job, all jobs started at once.

``make_jobs(base, scenarios)`` copies the project to ``base/<scenario>/job/proj`` (the "cluster"
checkout), runs it, and returns {scenario: (dump folder, project folder, launcher output)}. The
``exit`` scenario runs under torchrun, so its folder also holds torchrun's real root-cause summary.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

PROJ = Path(__file__).resolve().parent / "proj"


def _env(extra: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR", "TORCHELASTIC", "PYTHONPATH"))}
    env.update({"TORCH_FR_BUFFER_SIZE": "2000", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


def make_jobs(base: Path, scenarios=("mismatch", "skip", "exit", "hang"), timeout: float = 180.0) -> dict:
    procs = []
    out = {}
    for sc in scenarios:
        root = base / sc
        proj = root / "job" / "proj"
        shutil.copytree(PROJ, proj, ignore=shutil.ignore_patterns("__pycache__"))
        dumps = root / "artefacts"
        dumps.mkdir(parents=True)
        log = dumps / "launcher.log"
        out[sc] = (dumps, proj, log)
        if sc == "exit":  # torchrun: its root-cause summary is one of the artefacts
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", "0",
                   "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--monitor-interval", "0.2",
                   str(proj / "train.py"), sc, str(dumps)]
            procs.append((subprocess.Popen(cmd, cwd=proj, env=_env({}), stdout=open(log, "wb"),
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL), sc))
            continue
        store = root / "store"
        for r in (0, 1):
            env = _env({"RANK": str(r), "WORLD_SIZE": "2", "FR_INIT": f"file://{store}"})
            procs.append((subprocess.Popen([sys.executable, str(proj / "train.py"), sc, str(dumps)], cwd=proj, env=env,
                                           stdout=open(root / f"rank{r}.log", "wb"), stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL), sc))
    deadline = time.time() + timeout
    for p, sc in procs:
        try:
            p.wait(timeout=max(deadline - time.time(), 1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    return out
