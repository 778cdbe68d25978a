"""Target 11 (issue 31): ``ddp-lint check one_file.py`` within 0.1 s of ``python -c "import ast"``.

Hyperfine-like: the two commands alternate, run after run (warm-up first, bytecode caching on as
for an installed package, see cli_bench._env), and the row compares the medians of the wall
clock and of the CPU time (user + system). Two files: one small training script that the gate
admits (the rules run) and a one-line file that it does not.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from . import ROOT, fmt_s, median, row
from .cli_bench import _env, ddp_lint_cmd, run_proc
from .gen import training_script

TARGET_S = 0.1


def run(quick: bool = False) -> list[dict]:
    env = _env()
    env["PYTHONPATH"] = str(ROOT)
    reps = 5 if quick else 21
    rows = []
    with tempfile.TemporaryDirectory() as d:
        files = {
            "one-line file (gated out)": Path(d) / "one.py",
            "60-line training script (every rule runs)": Path(d) / "train.py",
        }
        files["one-line file (gated out)"].write_text("print('hello')\n")
        files["60-line training script (every rule runs)"].write_text(training_script(60, seed=1))
        floor = [sys.executable, "-c", "import ast"]
        for label, path in files.items():
            ours = [*ddp_lint_cmd(), "check", "--no-cache", "--isolated", "-q", "--exit-zero", str(path)]
            for c in (floor, ours):  # warm-up: page cache, bytecode cache
                run_proc(c, env)
            w_f, w_o, c_f, c_o = [], [], [], []
            for _ in range(reps):
                w, c, _ = run_proc(floor, env)
                w_f.append(w), c_f.append(c)
                w, c, _ = run_proc(ours, env)
                w_o.append(w), c_o.append(c)
            extra_w = median(w_o) - median(w_f)
            extra_c = median(c_o) - median(c_f)
            rows.append(row(f"start-up, `ddp-lint check` on a {label}, wall, median of {reps}",
                            f"{fmt_s(median(w_o))} (+{fmt_s(extra_w)})", f"python -c 'import ast' {fmt_s(median(w_f))}",
                            median(w_o) / median(w_f), f"<= +{TARGET_S:g} s", extra_w <= TARGET_S,
                            note=f"CPU: {fmt_s(median(c_o))} vs {fmt_s(median(c_f))} (+{fmt_s(extra_c)})"))
    return rows


if __name__ == "__main__":  # pragma: no cover
    from .__main__ import print_table

    print_table(run())
