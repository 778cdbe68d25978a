"""False-positive measurement on real DDP code that no one here wrote.

Runs the static check over local checkouts (never committed; bring them with any git client) and
prints, per folder and per rule, the number of findings, plus the number of Python files and of files
that touch torch.distributed. Two passes: the on-by-default rules, then every rule (``--select ALL``).

    python bench/corpus.py /tmp/corpus/examples /tmp/corpus/nanoGPT ...
    python bench/corpus.py --list /tmp/corpus/*          # also print every finding
    python bench/corpus.py --list --select DDP104 /tmp/corpus/*

Rule crashes (recorded by the engine instead of raised) are printed and make the exit status 1.
The reading of each finding (true / false positive) is recorded in docs/false-positives.md.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ddp_lint.analysis.config import Settings  # noqa: E402
from ddp_lint.analysis.engine import check_source  # noqa: E402
from ddp_lint.analysis.io import read_source  # noqa: E402
from ddp_lint.analysis.notebook import NotebookError, check_notebook  # noqa: E402

_DIST = re.compile(r"torch\.distributed|from\s+torch\s+import\s+[^\n]*\bdistributed\b")
_SKIP_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", "build", "dist", ".tox"}


def py_files(root: Path):
    if root.is_file():
        yield root
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for f in sorted(filenames):
            if f.endswith((".py", ".ipynb")):  # notebooks too, as `ddp-lint check` walks them
                yield Path(dirpath) / f


def run(roots, settings: Settings, listing: bool):
    per_root = {}
    errors = []
    total_time = 0.0
    for root in roots:
        counts: Counter = Counter()
        files = dist_files = 0
        for path in py_files(root):
            try:
                text = read_source(str(path))
            except Exception as e:  # unreadable input is reported, not fatal
                errors.append(f"{path}: unreadable: {e}")
                continue
            files += 1
            touches = bool(_DIST.search(text))
            dist_files += touches
            t0 = time.perf_counter()
            if path.suffix == ".ipynb":  # the code cells as one module (analysis/notebook.py)
                try:
                    found, _, _, _ = check_notebook(text, str(path), settings)
                except NotebookError as e:
                    errors.append(str(e))
                    continue
                res = None
            else:
                res = check_source(text, str(path), settings)
                found = res.findings
            total_time += time.perf_counter() - t0
            for e in res.errors if res is not None else ():
                errors.append(f"{path}: {e}")
            for f in found:
                if f.code == "DDP000":
                    continue
                counts[f.code] += 1
                if listing:
                    cell = f"cell {f.cell}:" if f.cell is not None else ""
                    print(f"{path}:{cell}{f.range.start.line + 1}:{f.range.start.column + 1}: {f.code} {f.message}")
        per_root[root] = (files, dist_files, counts)
    return per_root, errors, total_time


def report(title: str, per_root) -> None:
    print(f"\n== {title}")
    codes = sorted({c for _, _, counts in per_root.values() for c in counts})
    head = f"{'folder':28} {'files':>6} {'dist':>5}  " + " ".join(f"{c:>7}" for c in codes)
    print(head)
    tot_files = tot_dist = 0
    tot = Counter()
    for root, (files, dist_files, counts) in per_root.items():
        tot_files += files
        tot_dist += dist_files
        tot.update(counts)
        print(f"{root.name[:28]:28} {files:>6} {dist_files:>5}  " + " ".join(f"{counts.get(c, 0):>7}" for c in codes))
    print(f"{'TOTAL':28} {tot_files:>6} {tot_dist:>5}  " + " ".join(f"{tot.get(c, 0):>7}" for c in codes))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--list", action="store_true", help="print every finding")
    ap.add_argument("--select", action="append", help="only these codes/prefixes (default: both passes)")
    args = ap.parse_args(argv)
    missing = [str(r) for r in args.roots if not r.exists()]
    if missing:
        print(f"error: no such folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    select = [c.strip() for s in args.select or () for c in s.split(",") if c.strip()]  # DDP220,DDP301 as the CLI takes it
    passes = [("selected rules", Settings(select=select))] if select else [
        ("on-by-default rules", Settings()),
        ("all rules (--select ALL)", Settings(select=["ALL"])),
    ]
    failed = False
    for title, settings in passes:
        if args.list:
            print(f"\n== findings: {title}")
        per_root, errors, secs = run(args.roots, settings, args.list)
        report(title, per_root)
        print(f"(check time {secs:.2f} s)")
        if errors:
            failed = True
            print(f"\n{len(errors)} rule error(s):")
            for e in errors:
                print("  " + e.strip().replace("\n", "\n    "))
        if not args.list:
            continue
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
