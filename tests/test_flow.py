"""The semantic layer (analysis/flow): call summaries across files, dependencies, fixpoints."""
from __future__ import annotations

import ast
import textwrap

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow import Analysis, project
from ddp_lint.analysis.semantic import Semantic

SEL = Settings(select=["DDP002", "DDP104", "DDP107", "DDP108", "DDP109", "DDP110"])


def _write(root, rel, text):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p


def _project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    _write(tmp_path, "utils/__init__.py", "")
    _write(tmp_path, "utils/dist.py", """
        import torch.distributed as dist

        def is_main_process():
            return dist.get_rank() == 0

        def gather_metrics(m):
            out = [None] * dist.get_world_size()
            dist.all_gather_object(out, m)
            return out
    """)
    return _write(tmp_path, "tools/train.py", """
        import torch
        from utils.dist import gather_metrics, is_main_process

        def evaluate(model, loader):
            return gather_metrics(sum(float(model(x).sum()) for x in loader))

        def main(model, loader):
            if is_main_process():
                evaluate(model, loader)
    """)


def _check(path):
    return check_source(path.read_text(), str(path), SEL)


def test_collective_in_a_helper_of_another_file(tmp_path):
    project.clear()
    train = _project(tmp_path)
    res = _check(train)
    (f,) = [f for f in res.findings if f.code == "DDP104"]
    assert "all_gather_object" in f.message and "gather_metrics" in f.message
    assert any(r.filename == str(tmp_path / "utils" / "dist.py") for r in f.related)
    assert [p for p, _ in res.dependencies] == [str(tmp_path / "utils" / "dist.py")]
    digest = res.dependencies[0][1]
    from ddp_lint.analysis.cache import file_digest

    assert digest == file_digest(str(tmp_path / "utils" / "dist.py"))


def test_editing_the_helper_changes_the_finding(tmp_path):
    project.clear()
    train = _project(tmp_path)
    assert [f.code for f in _check(train).findings] == ["DDP104"]
    helper = tmp_path / "utils" / "dist.py"
    helper.write_text(helper.read_text().replace("dist.all_gather_object(out, m)", "out[0] = m"))
    assert _check(train).findings == []
    project.set_overlay(str(helper), helper.read_text() + "\ndef gather_metrics(m):\n    dist.barrier()\n")
    try:
        assert [f.code for f in _check(train).findings] == ["DDP104"]
    finally:
        project.set_overlay(str(helper), None)


def test_relative_import_and_package_reexport(tmp_path):
    project.clear()
    _write(tmp_path, "pkg/__init__.py", "from .comm import synchronize\n")
    _write(tmp_path, "pkg/comm.py", """
        import torch.distributed as dist

        def synchronize():
            if dist.get_world_size() == 1:
                return
            dist.barrier()
    """)
    main = _write(tmp_path, "pkg/main.py", """
        import torch
        import torch.distributed as dist
        from . import comm
        from pkg import synchronize

        def f(rank):
            if rank == 0:
                comm.synchronize()

        def g(rank):
            if rank == 1:
                synchronize()
    """)
    got = [f for f in _check(main).findings if f.code == "DDP104"]
    assert [f.range.start.line for f in got] == [8, 12]


def test_unknown_third_party_never_reports(tmp_path):
    project.clear()
    main = _write(tmp_path, "main.py", """
        import torch
        import torch.distributed as dist
        from somelib import evaluate, is_main

        def f(model, t):
            if is_main():
                evaluate(model)
            if evaluate(t) > 0:
                dist.barrier()
    """)
    assert [f.code for f in _check(main).findings] == []


def test_recursion_reaches_a_fixpoint():
    src = textwrap.dedent("""
        import torch.distributed as dist

        def a(n):
            dist.barrier()
            if n > 0:
                b(n - 1)

        def b(n):
            a(n)
    """)
    tree = ast.parse(src)
    an = Analysis("<mem>", Semantic(tree), src)
    fns = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    assert [e.op for e in an.summary(an.main, fns["b"]).collectives] == ["barrier"]
    assert [e.op for e in an.summary(an.main, fns["a"]).collectives] == ["barrier"]


def test_uniformity_sources():
    src = textwrap.dedent("""
        import os, time
        import torch
        import torch.distributed as dist

        def f(args, loader, t):
            r = dist.get_rank()
            ws = dist.get_world_size()
            lr = int(os.environ["LOCAL_RANK"])
            other = os.environ.get("MASTER_ADDR")
            now = time.time()
            for i, (x, y) in enumerate(loader):
                loss = (x - y).sum()
                v = loss.item()
            dist.all_reduce(t)
            s = t.item()
            return r, ws, lr, other, now, i, v, s, args.lr, args.local_rank
    """)
    tree = ast.parse(src)
    an = Analysis("<mem>", Semantic(tree), src)
    ev = an.evaluator(an.main)
    ret = [n for n in ast.walk(tree) if isinstance(n, ast.Return)][0]
    kinds = [ev.value(e).kind for e in ret.value.elts]
    assert kinds == ["V", "U", "V", "U", "V", "U", "V", "U", "U", "V"]
