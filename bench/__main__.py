"""``python -m bench``: run every benchmark and print one table.

    python -m bench                 # everything (a few minutes on 2 cores)
    python -m bench --quick         # small inputs, few repetitions (seconds; used by the smoke test)
    python -m bench --only engine,cli
    python -m bench --write         # also rewrite bench/RESULTS.md with this run's table

Modules: engine (target 1), lsp (2, ``bench/lsp_latency.py``), cli (3), fix (4), memory (5),
run (6, ``bench/run_overhead.py``), emulation (what the GPU-free emulation costs,
``bench/emulation_bench.py``). A module that is missing or fails prints a row saying so; the
others still run.
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import inspect
import os
import platform
import sys
import time
import traceback

MODULES = [
    ("engine", "bench.engine_bench", "1 in-process analysis"),
    ("project", "bench.project_bench", "1b cross-file analysis"),
    ("lsp", "bench.lsp_latency", "2 editor latency"),
    ("cli", "bench.cli_bench", "3 CLI"),
    ("fix", "bench.fix_bench", "4 quick fix"),
    ("memory", "bench.memory_bench", "5 memory"),
    ("run", "bench.run_overhead", "6 runtime run"),
    ("emulation", "bench.emulation_bench", "7 CUDA emulation"),
    ("load", "bench.load_bench", "8 load"),
    ("repo", "bench.repo_bench", "9 repository check"),
    ("growth", "bench.growth_bench", "10 linear rules"),
    ("startup", "bench.startup_bench", "11 start-up"),
]

COLUMNS = ("figure", "value", "comparison", "ratio", "target", "pass")


def _cell(r: dict, k: str) -> str:
    if k == "pass":
        v = r.get("pass", r.get("passed", r.get("ok")))
        if v is None:
            return ""
        if isinstance(v, str):
            return v
        return "PASS" if v else "FAIL"
    v = r.get(k)
    if v is None:
        return ""
    if k == "ratio" and isinstance(v, (int, float)):
        return f"{v:.2f}x"
    return str(v)


def _rows_text(rows: list[dict]) -> list[list[str]]:
    return [[_cell(r, k) for k in COLUMNS] for r in rows]


def format_table(rows: list[dict]) -> str:
    cells = _rows_text(rows)
    widths = [max(len(c), *(len(x[i]) for x in cells)) if cells else len(c) for i, c in enumerate(COLUMNS)]
    line = "  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths))
    out = [line, "  ".join("-" * w for w in widths)]
    for x in cells:
        out.append("  ".join(c.ljust(w) for c, w in zip(x, widths)).rstrip())
    notes = [(r.get("figure", ""), r["note"]) for r in rows if r.get("note")]
    if notes:
        out.append("")
        out.extend(f"note: {f}: {n}" for f, n in notes)
    return "\n".join(out)


def format_markdown(rows: list[dict]) -> str:
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for x in _rows_text(rows):
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in x) + " |")
    notes = [(r.get("figure", ""), r["note"]) for r in rows if r.get("note")]
    if notes:
        out.append("")
        out.extend(f"- {f}: {n}" for f, n in notes)
    return "\n".join(out)


def print_table(rows: list[dict]) -> None:
    print(format_table(rows))


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            for ln in fh:
                if ln.startswith("model name"):
                    cpu = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = f", load average {os.getloadavg()[0]:.1f} at the start"
    except OSError:  # pragma: no cover
        load = ""
    return (f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} cores{load}, "
            f"Python {platform.python_version()}")


def run_module(key: str, modname: str, title: str, quick: bool) -> list[dict]:
    try:
        mod = importlib.import_module(modname)
    except ImportError as e:
        if getattr(e, "name", None) == modname:
            return [{"figure": f"[{title}] {modname}", "value": "missing", "pass": None,
                     "note": f"{modname.replace('.', '/')}.py is not in this tree"}]
        return [{"figure": f"[{title}] {modname}", "value": f"import failed: {e}", "pass": False}]
    fn = getattr(mod, "run", None)
    if fn is None:
        return [{"figure": f"[{title}] {modname}", "value": "missing run()", "pass": False}]
    try:
        params = inspect.signature(fn).parameters
        rows = fn(quick=quick) if "quick" in params else fn()
    except Exception as e:  # one broken module must not hide the others
        traceback.print_exc(file=sys.stderr)
        return [{"figure": f"[{title}] {modname}", "value": f"error: {type(e).__name__}: {e}", "pass": False}]
    out = []
    for r in rows or []:
        r = dict(r)
        r["figure"] = f"[{title.split()[0]}] {r.get('figure', '')}"
        out.append(r)
    return out


def install_torchfix() -> int:
    """TorchFix pins an old libcst, so it gets its own virtual environment (never this one)."""
    import subprocess

    from . import CACHE

    venv = CACHE / "torchfix"
    try:
        if not (venv / "bin" / "pip").is_file():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "torchfix"], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"could not install TorchFix into {venv}: {e}", file=sys.stderr)
        return 1
    print(f"TorchFix installed in {venv}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small inputs and few repetitions (seconds)")
    p.add_argument("--only", help="comma-separated modules: " + ",".join(k for k, *_ in MODULES))
    p.add_argument("--write", action="store_true", help="write the table to bench/RESULTS.md")
    p.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    p.add_argument("--strict", action="store_true", help="exit 1 when any target fails")
    p.add_argument("--install-torchfix", action="store_true",
                   help="create the TorchFix peer's own virtual environment under the bench cache, then exit")
    args = p.parse_args(argv)
    if args.install_torchfix:
        return install_torchfix()
    only = {s.strip() for s in args.only.split(",")} if args.only else None
    if only:
        unknown = only - {k for k, *_ in MODULES}
        if unknown:
            p.error(f"unknown module(s): {', '.join(sorted(unknown))}")
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    started_on = machine()
    t0 = time.perf_counter()
    rows: list[dict] = []
    for key, modname, title in MODULES:
        if only and key not in only:
            continue
        print(f"... {title} ({modname})", file=sys.stderr, flush=True)
        rows.extend(run_module(key, modname, title, args.quick))
    took = time.perf_counter() - t0
    if args.json:
        import json

        print(json.dumps(rows, indent=2, default=str))
    else:
        print_table(rows)
        print(f"\n{started_on}; {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; took {took:.0f} s"
              f"{' (quick)' if args.quick else ''}")
    if args.write:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
        with open(path, "w", encoding="utf-8") as fh:
            fh.write("# Benchmark results\n\n")
            fh.write(f"Last run: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M %Z').strip()} on "
                     f"{started_on}.\n")
            fh.write(f"Command: `python -m bench{' --quick' if args.quick else ''}"
                     f"{' --only ' + args.only if args.only else ''}` ({took:.0f} s). "
                     "Ratios are measured side by side in the same run; see bench/README.md for the method.\n\n")
            fh.write(format_markdown(rows) + "\n")
        print(f"wrote {path}", file=sys.stderr)
    failed = [r for r in rows if r.get("pass", r.get("passed", r.get("ok"))) is False]
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
