"""Score every case of the manifest on the real before/after trees and print recall per class.

    python -m bench.realbugs.fill --trees /tmp/realbugs     # once: extract the trees
    python -m bench.realbugs.run --trees /tmp/realbugs [--list]

A case whose trees are absent is reported as missing, not as a miss.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .manifest import load_manifest
from .score import recall_table, score


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=Path, default=Path("/tmp/realbugs"))
    ap.add_argument("--list", action="store_true", help="print every case's verdict")
    ap.add_argument("--only", nargs="*", help="case ids")
    a = ap.parse_args(argv)
    cases = load_manifest()
    results, missing = [], []
    for case in cases:
        if a.only and case["id"] not in a.only:
            continue
        d = a.trees / case["id"]
        if not (d / "before").is_dir():
            missing.append(case["id"])
            continue
        r = score(case["id"], case["class"], d / "before", d / "after", case["files"])
        results.append(r)
        if a.list:
            verdict = "HIT " if r.hit else ("ERR " if r.error else "miss")
            detail = ", ".join(f"{c}@{f}:{ln}" for f, ln, c in r.hits) or (r.error or "")
            print(f"{verdict} {case['id']:40} {case['class']:28} {detail}")
    repos = {c["repo"] for c in cases}
    print(f"\n{len(cases)} cases from {len(repos)} repositories; {len(results)} scored, {len(missing)} missing trees")
    print(recall_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
