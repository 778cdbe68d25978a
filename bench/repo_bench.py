"""Target 9 (issue 18): checking a whole repository at Ruff's pace.

All figures are whole processes, wall clock, measured side by side in one run (the commands
alternate, repetition by repetition, so load from other processes hits every side alike):

* torch's own package tree (the installed ``torch/``, ~2,300 files, ~1.2M lines), cold
  (``--no-cache``, all cores) next to ``ruff check --select F --no-cache`` on the same tree:
  target <= 2x;
* the same tree warm (cache filled, no file changed): target <= 1x Ruff cold;
* the cold check with ``-j 1`` and ``-j 2``: the parallel speed-up;
* files parsed / files in the tree: what the text gate and the reach gates (flow/reach.py,
  ``Rule.reach``) let through to the parser;
* one changed file in a warm 2,000-file tree (``bench/gen.py``): target <= 0.3 s;
* the findings of the cold, warm and ``-j 1`` runs are identical (the gated-vs-ungated comparison is
  a test: tests/test_gate.py).

The cache lives under the bench cache folder (``DDP_LINT_CACHE_DIR``), never in torch's folder.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from . import CACHE, ROOT, fmt_s, median, row
from .cli_bench import _env, ddp_lint_cmd, ruff_cmd, run_proc
from .gen import write_tree

COLD_TARGET = 2.0
FLOOR_TARGET = 1.5  # issue 31: cold, 2 workers, over ast.parse of the files the check parses
WARM_TARGET = 1.0
CHANGED_TARGET = 0.3


def _torch_tree() -> Path | None:
    import importlib.util

    spec = importlib.util.find_spec("torch")  # located, never imported
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _output(cmd: list[str], env: dict) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    return p.stdout


# The floor (issue 31): CPython's own parse of exactly the files the check admits, on the same
# number of worker processes, as a whole process (start-up counted on both sides).
_FLOOR = """
import ast, sys
from concurrent.futures import ProcessPoolExecutor

def parse(path):
    with open(path, "rb") as f:
        ast.parse(f.read(), path)
    return 0

paths = open(sys.argv[1], encoding="utf-8").read().splitlines()
with ProcessPoolExecutor(int(sys.argv[2])) as ex:
    sum(ex.map(parse, paths, chunksize=16))
"""


def _gate_stats(tree: Path, admitted: list | None = None) -> tuple[int, int]:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from ddp_lint.analysis.config import Settings
    from ddp_lint.analysis.engine import passes_gate
    from ddp_lint.analysis.walk import collect_files

    s = Settings()
    files = collect_files([str(tree)], s).files
    n = 0
    for f in files:
        try:
            text = open(f, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError):
            continue
        ok = passes_gate(text, s.enabled_codes(f), f)  # the text gate, then the reach gates
        n += ok
        if ok and admitted is not None:
            admitted.append(f)
    return n, len(files)


def run(quick: bool = False) -> list[dict]:
    rows: list[dict] = []
    env = _env()
    env["PYTHONPATH"] = str(ROOT)  # this checkout, whatever the environment has installed
    ours = ddp_lint_cmd()
    rc = ruff_cmd()
    cores = os.cpu_count() or 1
    torch_tree = _torch_tree()
    if torch_tree is None:
        rows.append(row("repository check: torch's package tree", "torch not installed"))
    else:
        cache_dir = CACHE / "repo-cache"
        shutil.rmtree(cache_dir, ignore_errors=True)
        warm_env = dict(env, DDP_LINT_CACHE_DIR=str(cache_dir))
        n_files = sum(1 for _ in torch_tree.rglob("*.py"))
        cold = [*ours, "check", "-q", "--exit-zero", "--no-cache", str(torch_tree)]
        cold1 = [*ours, "check", "-q", "--exit-zero", "--no-cache", "-j", "1", str(torch_tree)]
        cold2 = [*ours, "check", "-q", "--exit-zero", "--no-cache", "-j", "2", str(torch_tree)]
        warm = [*ours, "check", "-q", "--exit-zero", str(torch_tree)]
        admitted: list[str] = []
        passed, total = _gate_stats(torch_tree, admitted)
        listing = CACHE / "repo-admitted.txt"
        listing.parent.mkdir(parents=True, exist_ok=True)
        listing.write_text("\n".join(admitted), encoding="utf-8")
        floor2 = [sys.executable, "-c", _FLOOR, str(listing), "2"]
        out_cold = _output(cold, env)  # also warms the page and bytecode caches
        out_fill = _output(warm, warm_env)  # fills the findings cache
        out_warm = _output(warm, warm_env)
        out_j1 = _output(cold1, env)
        same = out_cold == out_fill == out_warm == out_j1
        cmds = [cold, warm, cold1, cold2, floor2]
        if rc:
            cmds.append([*rc, "check", "--isolated", "--no-cache", "--select", "F", "-q", "--exit-zero",
                         str(torch_tree)])
        reps = 1 if quick else 3
        got = [[], [], [], [], [], []]
        for _ in range(reps):  # interleaved by hand: the warm run needs its cache folder
            for i, c in enumerate(cmds):
                got[i].append(run_proc(c, warm_env if c is warm else env)[0])
        t_cold, t_warm, t_j1, t_j2, t_floor = (median(got[i]) for i in range(5))
        desc = f"torch's package tree ({n_files:,} files)"
        rows.append(row(f"{desc}, cold, -j 2, over ast.parse of the {passed:,} admitted files on 2 processes",
                        fmt_s(t_j2), f"ast.parse floor {fmt_s(t_floor)}", t_j2 / t_floor, f"<= {FLOOR_TARGET}x",
                        t_j2 / t_floor <= FLOOR_TARGET,
                        note="the floor parses the files the text and reach gates admit; the cross-file layer "
                             "parses some imported modules beyond them (counted on our side only)"))
        if rc:
            t_ruff = median(got[5])
            rows.append(row(f"{desc}, cold, {cores} cores (wall)", fmt_s(t_cold),
                            f"ruff check --select F --no-cache {fmt_s(t_ruff)}", t_cold / t_ruff,
                            f"<= {COLD_TARGET}x", t_cold / t_ruff <= COLD_TARGET))
            rows.append(row(f"{desc}, warm (cache filled, nothing changed)", fmt_s(t_warm),
                            f"ruff cold {fmt_s(t_ruff)}", t_warm / t_ruff, f"<= {WARM_TARGET}x",
                            t_warm / t_ruff <= WARM_TARGET))
        else:
            rows.append(row(f"{desc}, cold / warm", f"{fmt_s(t_cold)} / {fmt_s(t_warm)}", "ruff not installed"))
        rows.append(row(f"{desc}, cold, parallel speed-up -j 2 over -j 1", fmt_s(t_j2), f"-j 1 {fmt_s(t_j1)}",
                        t_j2 / t_j1, "reported", None,
                        note=f"speed-up {t_j1 / t_j2:.2f}x on {cores} cores shared with other processes"))
        rows.append(row(f"{desc}: files parsed / files in the tree (text and reach gates)", f"{passed:,}",
                        f"of {total:,}", passed / max(total, 1), "reported", None))
        rows.append(row(f"{desc}: findings of cold, warm and -j 1 runs identical",
                        "identical" if same else "DIFFERENT", f"{out_cold.count(chr(10))} findings", None,
                        "identical", same))

    # -- one changed file in a warm 2,000-file tree -----------------------------------------------
    n = 300 if quick else 2000
    tree = CACHE / f"tree-{n}"
    files = write_tree(tree, n)
    cache_dir = CACHE / "tree-cache"
    shutil.rmtree(cache_dir, ignore_errors=True)
    tenv = dict(env, DDP_LINT_CACHE_DIR=str(cache_dir))
    cmd = [*ours, "check", "-q", "--exit-zero", str(tree)]
    ref = _output([*ours, "check", "-q", "--exit-zero", "--no-cache", str(tree)], env)
    _output(cmd, tenv)  # fill
    victim = Path(files[len(files) // 2])
    original = victim.read_bytes()
    times, cpus = [], []
    try:
        for k in range(3 if quick else 7):
            victim.write_bytes(original + f"# edit {k}\n".encode())
            w, c, _ = run_proc(cmd, tenv)
            times.append(w)
            cpus.append(c)
        victim.write_bytes(original)
        after = _output(cmd, tenv)
    finally:
        victim.write_bytes(original)
    t = median(times)
    rows.append(row(f"1 changed file in a warm {n:,}-file tree (wall, whole process)", fmt_s(t), "", None,
                    f"<= {CHANGED_TARGET} s", t <= CHANGED_TARGET,
                    note=f"CPU time (user + system, load-independent) {fmt_s(median(cpus))}; "
                         f"findings after the edits equal the --no-cache run: {after == ref}"))
    return rows


if __name__ == "__main__":  # pragma: no cover
    from .__main__ import print_table

    print_table(run("--quick" in sys.argv))
