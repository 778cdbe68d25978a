"""What ``ddp-lint run`` costs over a plain torchrun (``python -m bench --only run``).

1. Overhead: the same clean 2-rank gloo script, run alternately with
   ``python -m torch.distributed.run --standalone --nproc-per-node 2 SCRIPT`` and with
   ``ddp-lint run SCRIPT --nproc 2`` (both whole processes, wall clock, median of the pairs).
   Target (issue #8, figure 6): ``ddp-lint run`` <= 1.2x torchrun + 1 s.
2. Hang to finding: a script whose rank 1 sleeps forever while rank 0 waits in ``barrier()``
   writes the time the hang starts; the figure is the time from there to ``run_script`` returning
   the DDP903 finding, against the run's timeout (the part beyond the timeout is ddp-lint's own:
   asking the ranks for their stacks, killing them, mapping).
3. Early exit to finding: rank 1 calls ``sys.exit(0)`` while rank 0 waits; ddp-lint stops the run
   as soon as it sees that (no timeout involved).
4. Mismatch hang to finding (early verdict): rank 0 all-reduces on a new group while rank 1 waits in
   the default group's barrier (nothing raises: DETAIL's fingerprints never meet); with the 60 s
   default timeout, the DDP902 finding must come within 3 s of the hang's start (issue 28).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CLEAN = """\
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4) * (rank + 1)
for _ in range(20):
    dist.all_reduce(t)
out = [None for _ in range(dist.get_world_size())]
dist.all_gather_object(out, {"rank": rank})
dist.barrier()
dist.destroy_process_group()
"""

HANG = """\
import sys, time
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    with open(sys.argv[1], "w") as f:
        f.write(repr(time.time()))
    while True:
        time.sleep(0.05)
dist.barrier()
"""

EXIT = """\
import sys, time
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    with open(sys.argv[1], "w") as f:
        f.write(repr(time.time()))
    sys.exit(0)
dist.barrier()
"""

MISMATCH = """\
import sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
pair = dist.new_group([0, 1])
t = torch.ones(4)
dist.barrier()
if dist.get_rank() == 0:
    dist.all_reduce(t, group=pair)
else:
    with open(sys.argv[1], "w") as f:
        f.write(repr(time.time()))
    dist.barrier()
"""


def _timed(argv, cwd) -> float:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("OMP_NUM_THREADS", "1")
    t = time.perf_counter()
    p = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=600)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"{argv[2]} failed ({p.returncode}): {p.stderr.decode(errors='replace')[-500:]}")
    return dt


def overhead(tmp: str, reps: int) -> tuple[float, float]:
    script = os.path.join(tmp, "clean.py")
    with open(script, "w") as f:
        f.write(CLEAN)
    plain_cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", script]
    lint_cmd = [sys.executable, "-m", "ddp_lint", "run", script, "--nproc", "2", "--emulate", "off",
                "--output-format", "json"]
    _timed(plain_cmd, tmp)  # warm the page cache for both sides
    plain, lint = [], []
    for i in range(reps):
        pair = [(plain, plain_cmd), (lint, lint_cmd)]
        if i % 2:
            pair.reverse()
        for bucket, cmd in pair:
            bucket.append(_timed(cmd, tmp))
    return statistics.median(plain), statistics.median(lint)


def to_finding(tmp: str, source: str, timeout: float, code: str) -> tuple[float, float]:
    """(seconds from the failure's start to run_script returning, the run's total seconds)."""
    from ddp_lint.analysis.runtime.api import run_script

    script = os.path.join(tmp, f"{code}.py")
    stamp = os.path.join(tmp, f"{code}.t")
    with open(script, "w") as f:
        f.write(source)
    t0 = time.perf_counter()
    res = run_script(script, nproc=2, timeout=timeout, emulate="off", script_args=[stamp])
    end = time.time()
    total = time.perf_counter() - t0
    if not any(f.code == code for f in res.findings):
        raise RuntimeError(f"expected {code}, got {[(f.code, f.message) for f in res.findings]} {res.notes}")
    with open(stamp) as f:
        started = float(f.read())
    return end - started, total


def run(quick: bool = False) -> list[dict]:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return [{"figure": "ddp-lint run overhead", "value": "torch not installed", "pass": None}]
    reps = 1 if quick else 5
    timeout = 5.0
    rows = []
    with tempfile.TemporaryDirectory(prefix="ddp-lint-bench-run-") as tmp:
        plain, lint = overhead(tmp, reps)
        limit = 1.2 * plain + 1.0
        rows.append({
            "figure": "clean 2-rank gloo script: ddp-lint run vs plain torchrun (wall, whole process)",
            "value": f"{lint:.2f} s", "comparison": f"{plain:.2f} s torchrun", "ratio": lint / plain,
            "target": f"<= 1.2x + 1 s ({limit:.2f} s)", "pass": lint <= limit,
            "note": f"median of {reps} alternating pairs",
        })
        hang, total = to_finding(tmp, HANG, timeout, "DDP903")
        rows.append({
            "figure": f"hang start -> DDP903 finding (timeout {timeout:g} s)",
            "value": f"{hang:.2f} s", "comparison": f"{timeout:g} s timeout", "ratio": hang / timeout,
            "target": "reported", "pass": None,
            "note": f"{hang - timeout:.2f} s beyond the timeout (stacks, kill, mapping); whole run {total:.1f} s",
        })
        early, total = to_finding(tmp, EXIT, timeout, "DDP904")
        rows.append({
            "figure": "rank exits early -> DDP904 finding (no timeout needed)",
            "value": f"{early:.2f} s", "comparison": f"{timeout:g} s timeout", "ratio": early / timeout,
            "target": "< timeout", "pass": early < timeout,
            "note": f"whole run {total:.1f} s",
        })
        early_hang, total = to_finding(tmp, MISMATCH, 60.0, "DDP902")
        rows.append({
            "figure": "mismatch hang (two groups) start -> DDP902 finding, early verdict (timeout 60 s)",
            "value": f"{early_hang:.2f} s", "comparison": "60 s timeout", "ratio": early_hang / 60.0,
            "target": "<= 3 s", "pass": early_hang <= 3.0,
            "note": f"whole run {total:.1f} s",
        })
    for r in rows:  # the keys other consumers use for the same figures
        r.setdefault("name", r["figure"])
        r.setdefault("baseline", r.get("comparison"))
    return rows


if __name__ == "__main__":
    sys.path.insert(0, ROOT)
    for r in run(quick="--quick" in sys.argv):
        print(r)
