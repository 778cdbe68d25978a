"""Target 3: the CLI as a whole process, and a parallel check of a tree of ~2,000 files.

* ``ddp-lint check FILE`` on a 500-line script against the whole-process floor
  ``python -c "import ast,sys; ast.parse(open(sys.argv[1]).read())" FILE`` (same interpreter, same
  environment, interleaved). ``python -c pass`` is shown too: it is the interpreter's own start-up,
  which both sides pay.
* The modules the check path imports: no torch, pygls, lsprotocol or libcst.
* ``ddp-lint check TREE`` (all cores) over ~2,000 generated files, in files per second, next to
  ``ruff check --select F`` over the same tree, and ``-j 1`` for the parallel speed-up.
* Peers on torch's ``distributed_c10d.py``: Ruff (all default rules) and TorchFix (its own virtual
  environment under the bench cache; see bench/README.md), whole process.

Subprocesses run with bytecode caching on (``PYTHONPYCACHEPREFIX`` under the bench cache), as an
installed package would: ``PYTHONDONTWRITEBYTECODE`` in the environment would otherwise recompile
every module on each start. Time per process is its CPU time (user + system, from ``wait4``) when
``DDP_LINT_BENCH_CLOCK`` is ``cpu`` (the default), else wall time; the tree figures are always wall
time, since parallelism is the point there.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from . import CACHE, CLOCK_NAME, c10d_text, fmt_s, median, row
from .gen import training_script, write_tree

TARGET = 3.0
FLOOR_CODE = "import ast,sys; ast.parse(open(sys.argv[1]).read())"
FORBIDDEN = ("torch", "pygls", "lsprotocol", "libcst")


def _env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(CACHE / "pycache")
    return env


def ddp_lint_cmd() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m ddp_lint``."""
    cand = Path(sys.executable).parent / "ddp-lint"
    if cand.is_file():
        return [str(cand)]
    return [sys.executable, "-m", "ddp_lint"]


def ruff_cmd() -> list[str] | None:
    cand = Path(sys.executable).parent / "ruff"
    if cand.is_file():
        return [str(cand)]
    found = shutil.which("ruff")
    return [found] if found else None


def torchfix_cmd() -> list[str] | None:
    cand = CACHE / "torchfix" / "bin" / "torchfix"
    return [str(cand)] if cand.is_file() else None


def run_proc(cmd: list[str], env: dict, timeout: float = 600) -> tuple[float, float, int]:
    """Run ``cmd`` (output discarded); return (wall seconds, CPU seconds, exit status). The CPU time
    is user + system of the process and of the children it waited for (the tree check's workers)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        _, status, ru = os.wait4(p.pid, 0)
    except ChildProcessError:  # pragma: no cover
        p.wait(timeout)
        w = time.perf_counter() - t0
        return w, w, p.returncode
    p.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, ru.ru_utime + ru.ru_stime, p.returncode


def timed(cmd: list[str], env: dict, wall: bool = False, timeout: float = 600) -> tuple[float, int]:
    """(seconds, exit status): CPU time of the process tree unless ``wall`` or the wall clock was
    asked for."""
    w, cpu, rc = run_proc(cmd, env, timeout)
    return (w if wall or CLOCK_NAME == "wall" else cpu), rc


def interleaved_procs(cmds: list[list[str]], env: dict, reps: int, wall: bool = False,
                      warmup: bool = True) -> list[list[float]]:
    if warmup:  # page cache, bytecode cache
        for c in cmds:
            timed(c, env, wall)
    out: list[list[float]] = [[] for _ in cmds]
    for _ in range(reps):
        for i, c in enumerate(cmds):
            out[i].append(timed(c, env, wall)[0])
    return out


def imported_modules(env: dict, path: str) -> set[str]:
    """Modules loaded by a real ``check`` run (the CLI's main, in a child interpreter)."""
    code = ("import sys\nfrom ddp_lint.cli import main\nsys.argv=['ddp-lint','check',sys.argv[1]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "sys.__stderr__.write('\\n'.join(sorted(sys.modules)))\n")
    p = subprocess.run([sys.executable, "-c", code, path], capture_output=True, text=True, env=env, timeout=120)
    return set(p.stderr.split())


def run(quick: bool = False) -> list[dict]:
    rows: list[dict] = []
    env = _env()
    clock = "CPU" if CLOCK_NAME != "wall" else "wall"
    work = CACHE / "cli"
    work.mkdir(parents=True, exist_ok=True)
    script = work / "train_500.py"
    script.write_text(training_script(500, seed=500))
    ours = ddp_lint_cmd()
    floor = [sys.executable, "-c", FLOOR_CODE, str(script)]
    bare = [sys.executable, "-c", "pass"]
    reps = 3 if quick else 15
    o, f, b = interleaved_procs([[*ours, "check", str(script)], floor, bare], env, reps)
    mo, mf, mb = median(o), median(f), median(b)
    r = mo / mf
    rows.append(row(f"CLI whole process, `ddp-lint check` 500-line file ({clock} time)", fmt_s(mo),
                    f"python -c ast.parse {fmt_s(mf)}", r, f"<= {TARGET}x", r <= TARGET,
                    note=f"bare interpreter start-up (python -c pass) here: {fmt_s(mb)}; "
                         f"ddp-lint adds {fmt_s(mo - mf)} over the floor"))
    mods = imported_modules(env, str(script))
    bad = sorted(m for m in mods if m.split(".")[0] in FORBIDDEN)
    n_ours = len([m for m in mods if m.split(".")[0] == "ddp_lint"])
    rows.append(row("CLI check path imports torch / pygls / lsprotocol / libcst",
                    ", ".join(bad) if bad else "none", f"{len(mods)} modules ({n_ours} of ddp-lint)", None,
                    "none", not bad))

    # -- a tree of generated files, all cores ---------------------------------------------
    n_files = 300 if quick else 2000
    tree = CACHE / f"tree-{n_files}"
    files = write_tree(tree, n_files)
    n_lines = sum(Path(p).read_text().count("\n") for p in files)
    cores = os.cpu_count() or 1
    treps = 1 if quick else 3
    # --no-cache: these rows measure a cold check (bench/repo_bench.py measures the cache)
    cmds = [[*ours, "check", "-q", "--no-cache", str(tree)], [*ours, "check", "-q", "--no-cache", "-j", "1", str(tree)]]
    rc = ruff_cmd()
    if rc:
        cmds.append([*rc, "check", "--isolated", "--no-cache", "--select", "F", "-q", str(tree)])
    # no warm-up round: the single-file runs above already wrote the bytecode cache, and the tree
    # was just written (page cache); each tree run costs seconds
    got = interleaved_procs(cmds, env, treps, wall=True, warmup=False)
    par, ser = median(got[0]), median(got[1])
    desc = f"{n_files:,} files, {n_lines:,} lines"
    if rc:
        rf = median(got[2])
        rows.append(row(f"CLI tree check, {desc}, {cores} cores (wall)", f"{n_files / par:,.0f} files/s ({fmt_s(par)})",
                        f"ruff check --select F {n_files / rf:,.0f} files/s ({fmt_s(rf)})", par / rf,
                        "reported", None))
    else:
        rows.append(row(f"CLI tree check, {desc}, {cores} cores (wall)", f"{n_files / par:,.0f} files/s ({fmt_s(par)})",
                        "ruff not installed", None, "reported", None))
    w, cpu, _ = run_proc(cmds[0], env)
    rows.append(row("CLI tree check, parallel speed-up over -j 1", f"{fmt_s(par)}", f"-j 1 {fmt_s(ser)}",
                    par / ser, f"< 1.0x with {cores} cores", (par < ser) if cores > 1 else None,
                    note=f"one more parallel run: {fmt_s(cpu)} of CPU in {fmt_s(w)} of wall time = "
                         f"{cpu / w:.2f} cores busy on average (start-up and the folder walk are serial; "
                         "other load on the machine takes the rest)"))

    # -- peers on torch's distributed_c10d.py --------------------------------------------
    got = c10d_text()
    if got is None:
        rows.append(row("peers on distributed_c10d.py", "torch not installed"))
        return rows
    c10d = got[0]
    preps = 1 if quick else 5
    ddp = median(interleaved_procs([[*ours, "check", c10d]], env, preps, wall=True)[0])
    if rc:
        ruff_t = median(interleaved_procs([[*rc, "check", "--isolated", "--no-cache", c10d]], env, preps, wall=True)[0])
        rows.append(row("peer: whole process on distributed_c10d.py vs Ruff (wall)", f"ddp-lint {fmt_s(ddp)}",
                        f"ruff {fmt_s(ruff_t)}", ddp / ruff_t, "reported", None))
    tf = torchfix_cmd()
    if tf is None:
        rows.append(row("peer: whole process on distributed_c10d.py vs TorchFix", f"ddp-lint {fmt_s(ddp)}",
                        "TorchFix not installed", None, "reported", None,
                        note=f"install: python -m venv {CACHE / 'torchfix'} && "
                             f"{CACHE / 'torchfix' / 'bin' / 'pip'} install torchfix"))
    elif quick:
        rows.append(row("peer: whole process on distributed_c10d.py vs TorchFix", f"ddp-lint {fmt_s(ddp)}",
                        "TorchFix skipped (--quick)", None, "reported", None))
    else:
        t, status = timed([*tf, c10d], env, wall=True)
        rows.append(row("peer: whole process on distributed_c10d.py vs TorchFix (wall)", f"ddp-lint {fmt_s(ddp)}",
                        f"TorchFix {fmt_s(t)}", ddp / t, "reported", None))
    return rows


if __name__ == "__main__":  # pragma: no cover
    from .__main__ import print_table

    print_table(run("--quick" in sys.argv))
