"""Cross-file analysis: a generated project of 200 files whose scripts call helpers in other files.

The flow analysis (``analysis/flow``) parses the project modules a file imports on demand and caches
them by content hash. Rows (the target is what following the imports adds; the ratio to
``ast.parse`` is printed alongside: a batch of distinct files costs the single-file engine about
2.8x ``ast.parse`` with or without the cross-file analysis, against about 2x for one file analysed
repeatedly, as in row [1]):
- cold: every script checked once with empty caches (helpers parsed on first use), against the same
  scripts checked where their imports resolve to nothing;
- warm: the same again (helpers from the cache);
- edit: one helper file changes on disk, then a script that imports it is checked again, against
  the same script checked again with nothing changed.
"""
from __future__ import annotations

import ast
import shutil
import tempfile
from pathlib import Path

from . import CLOCK, fmt_s, interleaved, median, row
from .gen import training_script

TARGET = 1.25  # cross-file analysis / the same files without it
EDIT_TARGET = 1.5
N_FILES = 200

_DIST = '''"""Distributed helpers of the generated project."""
import torch
import torch.distributed as dist


def get_rank():
    if not dist.is_initialized():
        return 0
    return dist.get_rank()


def is_main_process():
    return get_rank() == 0


def synchronize():
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return
    dist.barrier()


def all_gather_metrics(metrics):
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, metrics)
    return out


def reduce_mean(t):
    dist.all_reduce(t)
    return t / dist.get_world_size()
'''

_EVAL = '''"""Evaluation helpers of the generated project."""
import torch

from utils.dist import all_gather_metrics, reduce_mean


def evaluate(model, loader):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            total += float(model(x).sum())
    return all_gather_metrics({"total": total})


def mean_loss(loss):
    return reduce_mean(loss.detach())
'''

_TAIL = '''

from utils.dist import is_main_process, synchronize
from engine.evaluate import evaluate, mean_loss


def after_epoch_{i}(model, loader, loss, epoch):
    avg = mean_loss(loss)
    if is_main_process():
        print("epoch", epoch, float(avg))
    synchronize()
    if epoch % 2 == 0:
        evaluate(model, loader)
'''


def build(root: Path, n_files: int = N_FILES) -> list[Path]:
    (root / "pyproject.toml").write_text("[project]\nname = 'gen'\n")
    for pkg, files in (("utils", {"dist.py": _DIST}), ("engine", {"evaluate.py": _EVAL})):
        (root / pkg).mkdir(parents=True, exist_ok=True)
        (root / pkg / "__init__.py").write_text("")
        for name, text in files.items():
            (root / pkg / name).write_text(text)
    scripts = []
    (root / "scripts").mkdir(exist_ok=True)
    for i in range(n_files - 4):
        p = root / "scripts" / f"train_{i}.py"
        p.write_text(training_script(300, seed=i) + _TAIL.format(i=i))
        scripts.append(p)
    return scripts


def run(quick: bool = False) -> list[dict]:
    from ddp_lint.analysis.engine import check_source
    from ddp_lint.analysis.flow import project

    rows: list[dict] = []
    tmp = Path(tempfile.mkdtemp(prefix="ddp-lint-project-"))
    try:
        scripts = build(tmp, 40 if quick else N_FILES)
        texts = [(str(p), p.read_text()) for p in scripts]
        alone = [("/nonexistent-project/" + Path(n).name, t) for n, t in texts]  # imports resolve to nothing

        def parse_all():
            for _, t in texts:
                ast.parse(t)

        def check_all():
            for name, t in texts:
                check_source(t, name)

        def check_alone():
            for name, t in alone:
                check_source(t, name)

        def cold():
            project.clear()
            check_all()

        reps = 3 if quick else 7
        n = len(texts) + 4
        for label, fn in (("cold caches", cold), ("warm caches", check_all)):
            a, b, c = interleaved([fn, check_alone, parse_all], reps)
            r = median(a) / median(b)
            rows.append(row(f"cross-file project, {n} files, {label} (vs the same files alone; "
                            f"{median(a) / median(c):.2f}x ast.parse)", fmt_s(median(a)),
                            f"alone {fmt_s(median(b))}", r, f"<= {TARGET}x", r <= TARGET))
        # one helper changes: the dependent script is re-analysed against the new helper
        helper = tmp / "utils" / "dist.py"
        name, text = texts[0]
        base = helper.read_text()
        k = [0]

        def edit_and_check():
            k[0] += 1
            helper.write_text(base + f"\n\ndef extra_{k[0]}():\n    return {k[0]}\n")
            res = check_source(text, name)
            assert any(p == str(helper) for p, _ in res.dependencies)

        def recheck():
            check_source(text, name)

        check_source(text, name)
        samples = [[], []]
        for _ in range(15 if not quick else 5):
            for i, f in enumerate((edit_and_check, recheck)):
                t = CLOCK()
                f()
                samples[i].append(CLOCK() - t)
        r = median(samples[0]) / median(samples[1])
        rows.append(row("re-analysis of a script after editing the helper it imports", fmt_s(median(samples[0])),
                        f"unchanged re-analysis {fmt_s(median(samples[1]))}", r, f"<= {EDIT_TARGET}x",
                        r <= EDIT_TARGET))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        from ddp_lint.analysis.flow import project as _p

        _p.clear()
    return rows
