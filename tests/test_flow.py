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
    read = [(p, h) for p, h in res.dependencies if h is not None]  # None: probed and absent (R3)
    assert [p for p, _ in read] == [str(tmp_path / "utils" / "dist.py")]
    assert (str(tmp_path / "tools" / "utils"), None) in res.dependencies  # beside the script: no utils/
    digest = read[0][1]
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


# -- call-site contexts (issue 14: helpers that receive the DDP model, rank-varying arguments) ----

def _engine_project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    _write(tmp_path, "engine.py", """
        import torch

        def train_one_epoch(net, batches, opt):
            for x, y in batches:
                opt.zero_grad()
                torch.nn.functional.mse_loss(net(x), y).backward()
                opt.step()

        @torch.no_grad()
        def evaluate(net, batches):
            total = 0.0
            for x, y in batches:
                total += torch.nn.functional.mse_loss(net(x), y).item()
            return total

        def step(net, batch, opt):
            x, y = batch
            if not (y > 0).any():
                return None
            net(x).sum().backward()
            opt.step()
    """)


def test_ddp_model_passed_to_a_helper_of_another_file(tmp_path):
    """The helper's backward through its parameter is DDP's gradient all-reduce when the call
    passes a DDP model; its return is rank-varying when the call passes this rank's data."""
    project.clear()
    _engine_project(tmp_path)
    main = _write(tmp_path, "main.py", """
        import torch
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        from engine import evaluate, train_one_epoch

        def fit(args, train_loader, val_loader):
            net = DDP(nn.Linear(4, 1).cuda(), device_ids=[args.gpu])
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for epoch in range(args.epochs):
                train_one_epoch(net, train_loader, opt)
                if evaluate(net, val_loader) > args.target:
                    break
    """)
    (f,) = [f for f in _check(main).findings if f.code == "DDP107"]
    assert f.range.start.line == 12
    assert "train_one_epoch" in f.message and "gradient all-reduce" in f.message
    assert "passed to `evaluate` as `batches`" in f.message
    assert str(tmp_path / "engine.py") in [r.filename for r in f.related] or "engine.py" in f.message


def test_bare_module_or_unknown_model_stays_silent(tmp_path):
    project.clear()
    _engine_project(tmp_path)
    main = _write(tmp_path, "main.py", """
        import torch
        import torch.nn as nn
        from engine import evaluate, train_one_epoch
        from somelib import build_model

        def fit(args, train_loader, val_loader):
            net = nn.Linear(4, 1).cuda()
            other = build_model(args)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for epoch in range(args.epochs):
                train_one_epoch(net, train_loader, opt)
                train_one_epoch(other, train_loader, opt)
                if evaluate(net, val_loader) > args.target:
                    break
    """)
    assert [f.code for f in _check(main).findings] == []


def test_condition_inside_a_helper_of_another_file_reported_at_the_call(tmp_path):
    project.clear()
    _engine_project(tmp_path)
    main = _write(tmp_path, "main.py", """
        import torch
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        from engine import step

        def fit(args, loader):
            net = DDP(nn.Linear(4, 1).cuda(), device_ids=[args.gpu])
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            for batch in loader:
                step(net, batch, opt)
    """)
    (f,) = [f for f in _check(main).findings if f.code == "DDP107"]
    assert f.range.start.line == 10
    assert "`step`" in f.message and "return" in f.message and "engine.py" in f.message
    assert {r.filename for r in f.related if r.filename} == {str(tmp_path / "engine.py")}


def test_rank_zero_forward_counts_against_the_training_forward():
    """A guarded DDP forward beside the same forward on every rank is one extra collective on
    rank 0 (counted, not matched as a set); the staggered barriers stay silent."""
    src = textwrap.dedent("""
        import torch
        import torch.nn as nn
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        def run(args, loader):
            net = DDP(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).cuda(), device_ids=[args.gpu])
            for x in loader:
                net(x).sum().backward()
            if dist.get_rank() == 0:
                with torch.no_grad():
                    net(x)

        def staggered(rank):
            if rank != 0:
                dist.barrier()
            if rank == 0:
                dist.barrier()
    """)
    got = [f for f in check_source(src, "<mem>", SEL).findings if f.code == "DDP104"]
    assert [f.range.start.line for f in got] == [12]
    assert "buffer broadcast" in got[0].message


def test_module_buffers():
    from ddp_lint.analysis.flow.buffers import module_buffers

    src = textwrap.dedent("""
        import torch.nn as nn
        import torchvision
        from torch.nn.parallel import DistributedDataParallel as DDP
        from lib import make

        class Plain(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 2)

        class WithBuffer(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("mask", None)

        a = DDP(nn.Sequential(nn.Linear(2, 2), nn.ReLU()).cuda())
        b = DDP(nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))
        c = DDP(Plain())
        d = DDP(WithBuffer())
        e = DDP(torchvision.models.resnet18())
        f = DDP(make())
    """)
    tree = ast.parse(src)
    an = Analysis("<mem>", Semantic(tree), src)
    calls = {st.targets[0].id: st.value for st in tree.body if isinstance(st, ast.Assign)}
    got = {k: module_buffers(an, an.main, v, v) for k, v in calls.items()}
    assert got == {"a": False, "b": True, "c": False, "d": True, "e": True, "f": None}


def test_contexts_are_bounded_and_cached():
    from ddp_lint.analysis.flow.context import MAX_DEPTH, call_context

    src = textwrap.dedent("""
        import torch.distributed as dist

        def a(t, who):
            dist.broadcast(t, src=who)

        def b(t, who):
            a(t, who)

        def c(t):
            b(t, dist.get_rank())
            b(t, dist.get_rank())
    """)
    tree = ast.parse(src)
    an = Analysis("<mem>", Semantic(tree), src)
    fns = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    c1, c2 = [n for n in ast.walk(fns["c"]) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "b"]
    ctx = call_context(an, an.main, c1, (an.main, fns["b"]), None)
    assert ctx is not None and ctx.depth == 1 and list(ctx.binds) == ["who"]
    inner = [n for n in ast.walk(fns["b"]) if isinstance(n, ast.Call)][0]
    ctx2 = call_context(an, an.main, inner, (an.main, fns["a"]), ctx)
    assert ctx2 is not None and ctx2.depth == MAX_DEPTH == 2
    assert call_context(an, an.main, inner, (an.main, fns["a"]), ctx2) is None  # depth bound
    roots = an.varying_roots(an.main, c1, (an.main, fns["b"]))
    assert [r[2] for r in roots] == ["broadcast"]
    n = len(an.contexts)
    an.varying_roots(an.main, c1, (an.main, fns["b"]))
    assert len(an.contexts) == n  # cached


def test_root_through_a_helper_of_another_file(tmp_path):
    project.clear()
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    _write(tmp_path, "comm.py", """
        import torch.distributed as dist

        def reduce_to(t, dst):
            dist.reduce(t, dst=dst)
    """)
    main = _write(tmp_path, "main.py", """
        import os
        import torch.distributed as dist
        from comm import reduce_to

        def f(t, args):
            reduce_to(t, 0)
            reduce_to(t, args.dst)
            reduce_to(t, int(os.environ["LOCAL_RANK"]))
    """)
    got = [f for f in _check(main).findings if f.code == "DDP108"]
    assert [f.range.start.line for f in got] == [8]
    assert "reduce_to" in got[0].message and "LOCAL_RANK" in got[0].message
    assert any(r.filename == str(tmp_path / "comm.py") for r in got[0].related)


def test_trainer_class_of_another_file_holding_the_ddp_model(tmp_path):
    """``trainer = Trainer(ddp_model)``; the class (another file) stores it as ``self.model``: its
    methods make the model's collectives as the calls on that instance run them."""
    project.clear()
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    _write(tmp_path, "trainer.py", """
        import torch
        import torch.nn as nn

        class Trainer:
            def __init__(self, model, opt):
                self.model = model
                self.opt = opt

            def step(self, x, y):
                loss = nn.functional.mse_loss(self.model(x), y)
                if torch.isnan(loss):
                    return
                loss.backward()
                self.opt.step()

            def fit(self, loader):
                for x, y in loader:
                    nn.functional.mse_loss(self.model(x), y).backward()
    """)
    main = _write(tmp_path, "main.py", """
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        from trainer import Trainer

        def main(args, loader):
            model = DDP(nn.Linear(4, 1).cuda(), device_ids=[args.gpu])
            trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1))
            if dist.get_rank() == 0:
                trainer.fit(loader)
            for x, y in loader:
                trainer.step(x, y)
            plain = Trainer(nn.Linear(4, 1), None)
            if dist.get_rank() == 0:
                plain.fit(loader)
    """)
    got = sorted((f.code, f.range.start.line) for f in _check(main).findings)
    assert got == [("DDP104", 11), ("DDP107", 13)]
