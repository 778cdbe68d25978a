"""Target 10 (issue 31, issue 29 R4): every rule grows linearly with the file's size.

Each rule runs alone (``check_source(..., codes={CODE})``, so the shared analyses it asks for are
charged to it) on generated files of 1,000, 10,000 and 50,000 lines, and its own time is taken
around its ``visit``/``finish`` (CPU time of the thread): the parse and the traversal, the same for
every rule, are left out. Two inputs: training scripts (``bench/gen.py``) and a file made of
guarded collectives (``if rank == 0: dist.all_reduce(x)``, early exits, helpers named after
collectives), the shape that made DDP104 quadratic. The row per input gives the worst growth per
line, ``(time at 50k / 50k) / (time at 1k / 1k)``, over the rules; target <= 1.3x. Rules that take
under ``FLOOR_S`` at the largest size are left out (timer noise).

Also a 2,000-file-like project size is covered by the repository rows (bench/repo_bench.py).
"""
from __future__ import annotations

import time

from . import row
from .gen import training_script

TARGET = 1.3
FLOOR_S = 0.005


def guarded_collectives(n_lines: int) -> str:
    out = ["import torch", "import torch.distributed as dist", ""]
    i = 0
    while len(out) < n_lines:
        out += [f"def step{i}(x, rank):", "    if rank == 0:", "        dist.all_reduce(x)", "    dist.barrier()",
                "    comm_sync(x)", "    if rank == 1:", "        return x", "    dist.broadcast(x, 0)", ""]
        i += 1
    return "\n".join(out) + "\n"


def _rule_times(text: str, name: str, codes: list[str]) -> dict[str, float]:
    from ddp_lint.analysis.engine import _rule_instance, check_source

    out = {}
    for code in codes:
        inst = _rule_instance(code)
        spent = [0.0]
        finish, visit = inst.finish, inst.visit

        def timed(fn):
            def wrapper(*a):
                t0 = time.thread_time()
                try:
                    return fn(*a)
                finally:
                    spent[0] += time.thread_time() - t0
            return wrapper

        inst.finish, inst.visit = timed(finish), timed(visit)
        try:
            check_source(text, name, codes=frozenset({code}), gate=False)
        finally:
            del inst.finish, inst.visit  # back to the class's methods
        out[code] = spent[0]
    return out


def run(quick: bool = False) -> list[dict]:
    from ddp_lint.analysis.registry import all_rules

    codes = [c for c, r in all_rules().items() if r.static]
    sizes = (500, 2000) if quick else (1000, 10000, 50000)
    rows = []
    for label, make in (("training script", lambda n: training_script(n, seed=3)),
                        ("guarded collectives", guarded_collectives)):
        times = {}
        for n in sizes:  # the smaller sizes several times (their few milliseconds are noisy): the minimum
            text = make(n)
            runs = [_rule_times(text, f"growth_{n}.py", codes) for _ in range(1 if n == sizes[-1] else 3)]
            times[n] = {c: min(r[c] for r in runs) for c in codes}
        lo, hi = sizes[0], sizes[-1]
        worst, worst_code = 0.0, None
        for code in codes:
            t_lo, t_hi = times[lo][code], times[hi][code]
            if t_hi < FLOOR_S:
                continue
            g = (t_hi / hi) / (max(t_lo, 1e-6) / lo)
            if g > worst:
                worst, worst_code = g, code
        slowest = max(codes, key=lambda c: times[hi][c])
        rows.append(row(
            f"growth per line of every rule, {label}, {lo:,} -> {hi:,} lines (worst rule)",
            f"{worst_code or '-'} {worst:.2f}x",
            f"slowest at {hi:,} lines: {slowest} {times[hi][slowest] * 1e3:.0f} ms",
            worst or None, f"<= {TARGET}x", (worst <= TARGET) if worst_code else None,
            note=", ".join(f"{c} {times[hi][c] * 1e3:.0f} ms" for c in codes if times[hi][c] >= FLOOR_S)))
    return rows


if __name__ == "__main__":  # pragma: no cover
    from .__main__ import print_table

    print_table(run())
