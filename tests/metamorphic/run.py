"""Apply every transformation to every bad and good fixture and score survival.

A bad variant survives when every tagged ``# expect: CODE`` of the fixture still has a finding of
CODE on a line that carries its tag (in the fixture or in a module the transformation created) and
there is no finding of CODE elsewhere in those files. A good variant survives when those files have
no finding of CODE. The fixture's folder is copied as a whole, so multi-file fixtures keep their
sibling modules.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source

from .transforms import MARK_RE, tag_markers, variants

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@dataclass
class Outcome:
    code: str
    fixture: str
    kind: str  # "bad" | "good"
    transform: str
    survived: bool
    detail: str = ""


# (code, transform) pairs where the transformation changes what the rule is about, so that the finding
# is rightly gone: DDP403 is "no main guard", and moving the code under a guard or into main() is the fix;
# DDP002's import-time fixtures are about code that runs when the module is imported.
NOT_PRESERVING = {
    ("DDP403", "main_guard"), ("DDP403", "main_function"), ("DDP403", "epoch_loop"),
    ("DDP002", "main_function"), ("DDP002", "main_guard"), ("DDP002", "epoch_loop"),
}


def fixtures():
    for d in sorted(p for p in FIXTURES.iterdir() if p.is_dir()):
        for f in sorted(d.glob("bad_*.py")) + sorted(d.glob("good_*.py")):
            yield d.name, f


def _tags(text: str, code: str) -> dict[str, set[int]]:
    out: dict[str, set[int]] = defaultdict(set)
    for i, line in enumerate(text.split("\n")):
        m = MARK_RE.search(line)
        if m and code in m.group(1).replace(" ", "").split(",") and m.group(2):
            out[m.group(2)].add(i)
    return out


def _check(code: str, path: Path, text: str):
    settings = Settings(select=[code])
    # ``x.ipynb.py`` is the module of the notebook ``x.ipynb`` (its code cells joined), checked under
    # the notebook's name as tests/test_fixtures.py does
    name = str(path)[:-3] if path.name.endswith(".ipynb.py") else str(path)
    return [f for f in check_source(text, name, settings).findings if f.code == code]


def run_one(code: str, fixture: Path, only: str | None = None):
    text = tag_markers(fixture.read_text(encoding="utf-8"))
    kind = "bad" if fixture.name.startswith("bad_") else "good"
    out = []
    for v in variants(text):
        if (only and v.name != only) or (code, v.name) in NOT_PRESERVING:
            continue
        if v.name == "scripts_folder" and fixture.name.endswith(".ipynb.py"):
            continue  # a notebook's cells have no ``__file__`` to put on ``sys.path``
        with tempfile.TemporaryDirectory(prefix="ddp-mm-") as tmp:
            root = Path(tmp) / code
            shutil.copytree(fixture.parent, root, ignore=shutil.ignore_patterns("__pycache__", "*.fixed"))
            rel = (v.main_path or fixture.name).format(name=fixture.name)
            main = root / rel
            main.parent.mkdir(parents=True, exist_ok=True)
            if main != root / fixture.name:
                os.remove(root / fixture.name)
            main.write_text(v.text, encoding="utf-8")
            files = {main: v.text}
            for r, s in v.files.items():
                p = root / r
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(s, encoding="utf-8")
                files[p] = s
            findings = {p: sorted({f.range.start.line for f in _check(code, p, s)}) for p, s in files.items()
                        if p.suffix == ".py"}
            if kind == "good":
                bad = {str(p.relative_to(root)): [x + 1 for x in ls] for p, ls in findings.items() if ls}
                out.append(Outcome(code, fixture.name, kind, v.name, not bad, f"false positives {bad}" if bad else ""))
                continue
            tags = {p: _tags(s, code) for p, s in files.items()}
            want = defaultdict(set)
            allowed = defaultdict(set)
            for p, tg in tags.items():
                for t, lines in tg.items():
                    want[t].update((p, x) for x in lines)
                    allowed[p].update(lines)
            got = {(p, x) for p, ls in findings.items() for x in ls}
            missing = [t for t, places in want.items() if not (places & got)]
            extra = [(str(p.relative_to(root)), x + 1) for p, x in got if x not in allowed[p]]
            ok = bool(want) and not missing and not extra
            out.append(Outcome(code, fixture.name, kind, v.name, ok,
                               "" if ok else f"missing {missing} extra {extra}"))
    return out


def run_all(only_code: str | None = None, only: str | None = None):
    res = []
    for code, f in fixtures():
        if only_code and code != only_code:
            continue
        res.extend(run_one(code, f, only))
    return res
