"""Scoring of one real-bug case: the one implementation that both the benchmark runner
(bench/realbugs/run.py, on the real trees) and the CI test (tests/realbugs/, on our own-words
reproductions) use.

A case is a ``before`` tree and an ``after`` tree (the parent of the fix and the fix) plus the files
the fix changed. A **hit** is a finding in the before version, on a changed file, whose line (or the
line of one of its fix edits) lies on or within ``WINDOW`` lines of a line the fix removed or changed,
and that is gone in the after version: no finding of the same code in the same file maps back to
within ``WINDOW`` lines of it.
"""
from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

WINDOW = 3
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class CaseResult:
    case_id: str
    klass: str
    hit: bool
    hits: list = field(default_factory=list)        # (file, line, code) of the findings that hit
    before_findings: int = 0
    error: str | None = None


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def diff_maps(before: list[str], after: list[str]):
    """(changed before lines, before->after map, after->before map); lines are 1-based.

    A pure insertion between before lines i and i+1 marks both neighbours as changed (the fix
    added something there). Unchanged lines map one to one."""
    changed: set[int] = set()
    fwd: dict[int, int] = {}
    back: dict[int, int] = {}
    sm = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            for k in range(i2 - i1):
                fwd[i1 + k + 1] = j1 + k + 1
                back[j1 + k + 1] = i1 + k + 1
        elif tag == "insert":
            changed.update(x for x in (i1, i1 + 1) if 1 <= x <= max(len(before), 1))
            for j in range(j1, j2):
                back[j + 1] = i1 if i1 >= 1 else 1
        else:  # replace, delete
            changed.update(range(i1 + 1, i2 + 1))
            for j in range(j1, j2):
                back[j + 1] = i1 + 1
    return changed, fwd, back


def run_check(root: Path, files: list[str], timeout: float = 600) -> list[dict]:
    """Every finding (--select ALL, no configuration, no cache) on ``files`` inside ``root``."""
    existing = [f for f in files if (root / f).is_file()]
    if not existing:
        return []
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    r = subprocess.run([sys.executable, "-m", "ddp_lint", "check", "--isolated", "--no-cache", "--select",
                        "ALL", "--output-format", "json", "--exit-zero", *existing],
                       cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"ddp-lint check failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    out = json.loads(r.stdout or "[]")
    for f in out:
        f["filename"] = os.path.relpath(os.path.join(root, f["filename"]), root)
    return out


def _touch_lines(f: dict) -> set[int]:
    lines = {f["location"]["row"]}
    for e in ((f.get("fix") or {}).get("edits") or []):
        lines.add(e["location"]["row"])
    return lines


def score(case_id: str, klass: str, before: Path, after: Path, files: list[str]) -> CaseResult:
    try:
        bf = run_check(before, files)
        af = run_check(after, files)
    except Exception as e:  # noqa: BLE001 - one broken case must not stop the benchmark
        return CaseResult(case_id, klass, False, error=str(e))
    res = CaseResult(case_id, klass, False, before_findings=len(bf))
    for name in files:
        b_lines, a_lines = _lines(before / name), _lines(after / name)
        changed, _fwd, back = diff_maps(b_lines, a_lines)
        remaining: dict[str, list[int]] = {}
        for f in af:
            if f["filename"] == name:
                remaining.setdefault(f["code"], []).append(back.get(f["location"]["row"], f["location"]["row"]))
        for f in bf:
            if f["filename"] != name:
                continue
            near = any(abs(t - c) <= WINDOW for t in _touch_lines(f) for c in changed)
            if not near:
                continue
            line = f["location"]["row"]
            if any(abs(line - r) <= WINDOW for r in remaining.get(f["code"], ())):
                continue  # still there after the fix
            res.hits.append((name, line, f["code"]))
    res.hit = bool(res.hits)
    return res


def recall_table(results: list[CaseResult]) -> str:
    """A Markdown table of recall per class, then the total."""
    by: dict[str, list[CaseResult]] = {}
    for r in results:
        by.setdefault(r.klass, []).append(r)
    rows = ["| class | cases | found | recall |", "| --- | ---: | ---: | ---: |"]
    for k in sorted(by):
        n, h = len(by[k]), sum(r.hit for r in by[k])
        rows.append(f"| {k} | {n} | {h} | {h / n:.2f} |")
    n, h = len(results), sum(r.hit for r in results)
    rows.append(f"| **all** | **{n}** | **{h}** | **{(h / n if n else 0):.2f}** |")
    return "\n".join(rows)
