"""Target 1: in-process analysis of one file (all on-by-default rules) against ``ast.parse``.

``check_source(text)`` is what the language server runs on every edit: decode positions, parse,
one traversal, every enabled rule, noqa filtering. Its floor is CPython's parser, so each figure is
the median of ``check_source`` next to the median of ``ast.parse`` of the same text, measured
interleaved in the same process. The garbage collector stays on (as in the server); two extra rows
show the ratio with the collector off on both sides.
"""
from __future__ import annotations

import ast
import gc

from . import c10d_text, fmt_s, interleaved, median, row
from .gen import training_script

TARGET = 2.0
FLAT_TOLERANCE = 1.15  # ratio at 10,000 lines may exceed the ratio at 500 lines by at most 15%


def _pair(text: str, name: str, reps: int) -> tuple[float, float, int]:
    from ddp_lint.analysis.engine import check_source

    def ours():
        return check_source(text, name)

    def floor():
        return ast.parse(text)

    n_findings = len(ours().findings)
    a, b = interleaved([ours, floor], reps)
    return median(a), median(b), n_findings


def run(quick: bool = False) -> list[dict]:
    rows: list[dict] = []
    reps = 5 if quick else 21
    got = c10d_text()
    if got is None:
        rows.append(row("in-process analysis, torch distributed_c10d.py", "torch not installed", ok=None))
    else:
        path, text = got
        ours, floor, nf = _pair(text, path, reps)
        r = ours / floor
        rows.append(row(f"in-process analysis, torch distributed_c10d.py ({text.count(chr(10)):,} lines, "
                        f"{nf} findings)", fmt_s(ours), f"ast.parse {fmt_s(floor)}", r, f"<= {TARGET}x",
                        r <= TARGET))
    sizes = (300, 500, 800) if not quick else (500,)
    for n in sizes:
        text = training_script(n, seed=n)
        ours, floor, nf = _pair(text, f"train_{n}.py", reps)
        r = ours / floor
        rows.append(row(f"in-process analysis, {n}-line training script ({nf} findings)", fmt_s(ours),
                        f"ast.parse {fmt_s(floor)}", r, f"<= {TARGET}x", r <= TARGET))
    # linearity: the ratio must not grow with the file size
    lin_sizes = (500, 1000, 2000, 5000, 10000) if not quick else (500, 2000)
    ratios = {}
    for n in lin_sizes:
        text = training_script(n, seed=7)
        r_reps = reps if n <= 2000 else max(5, reps // 2)
        ours, floor, nf = _pair(text, f"train_{n}.py", r_reps)
        ratios[n] = ours / floor
        rows.append(row(f"linearity: {n:,} lines", f"{fmt_s(ours)} ({ours / n * 1e6:.1f} us/line)",
                        f"ast.parse {fmt_s(floor)}", ours / floor, "", None))
    # Transparency: ast.parse itself slows down on big files with the collector on (it rescans the
    # growing tree), which flatters the ratio there; check_source pauses the collector. Side by side
    # with the collector off on both sides, the ratio is what the analysis costs on top of the parse.
    gc_sizes = (500, 10000) if not quick else (500,)
    for n in gc_sizes:
        text = training_script(n, seed=7)
        was = gc.isenabled()
        gc.disable()
        try:
            ours, floor, _ = _pair(text, f"train_{n}.py", reps if n <= 2000 else max(5, reps // 2))
        finally:
            if was:
                gc.enable()
        rows.append(row(f"same with the garbage collector off on both sides: {n:,} lines", fmt_s(ours),
                        f"ast.parse {fmt_s(floor)}", ours / floor, "(info)", None))
    lo, hi = lin_sizes[0], lin_sizes[-1]
    growth = ratios[hi] / ratios[lo]
    rows.append(row(f"linearity: ratio at {hi:,} / ratio at {lo:,} lines", f"{ratios[hi]:.2f}x",
                    f"{ratios[lo]:.2f}x", growth, f"<= {FLAT_TOLERANCE} (flat)", growth <= FLAT_TOLERANCE))
    return rows


if __name__ == "__main__":  # pragma: no cover
    from .__main__ import print_table

    print_table(run())
