"""Shapes, parameter sinks and import-time uses across files (analysis/flow/shapes.py, sinks.py,
imports.py): DDP109, DDP110, DDP111 and DDP002 through helpers of another file, and their
re-analysis when the helper changes."""
from __future__ import annotations

import ast
import textwrap

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow import Analysis, project
from ddp_lint.analysis.flow.shapes import shapes_of
from ddp_lint.analysis.semantic import Semantic

SEL = Settings(select=["DDP002", "DDP109", "DDP110", "DDP111"])


def _write(root, rel, text):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text))
    return p


def _check(path):
    return check_source(path.read_text(), str(path), SEL)


def _codes(res):
    return sorted((f.code, f.range.start.line + 1) for f in res.findings)


def test_shape_through_a_helper_of_another_file_and_its_edit(tmp_path):
    project.clear()
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    helper = _write(tmp_path, "utils/comm.py", """
        import torch
        import torch.distributed as dist

        def gather_all(t):
            out = [torch.empty_like(t) for _ in range(dist.get_world_size())]
            dist.all_gather(out, t)
            return torch.cat(out)
    """)
    _write(tmp_path, "utils/__init__.py", "")
    main = _write(tmp_path, "train.py", """
        import torch
        from utils.comm import gather_all

        def evaluate(model, loader):
            for x, y in loader:
                keep = model(x).argmax(1) == y
                gather_all(x[keep])
    """)
    res = _check(main)
    assert _codes(res) == [("DDP109", 8)]
    f = res.findings[0]
    assert "gather_all" in f.message and "all_gather" in f.message and "boolean mask" in f.message
    assert any(r.filename == str(helper) for r in f.related)
    assert str(helper) in [p for p, _ in res.dependencies]
    # the helper now pads to an agreed length first: silent
    helper.write_text(helper.read_text().replace("    dist.all_gather(out, t)", """\
    n = torch.tensor([t.size(0)])
    dist.all_reduce(n, op=dist.ReduceOp.MAX)
    t = torch.nn.functional.pad(t, (0, 0, 0, int(n) - t.size(0)))
    dist.all_gather(out, t)"""))
    assert _codes(_check(main)) == []


def test_generator_of_another_file_over_a_rank_file(tmp_path):
    project.clear()
    _write(tmp_path, "data.py", """
        def records(path):
            with open(path) as fh:
                for line in fh:
                    yield line
    """)
    main = _write(tmp_path, "run.py", """
        import torch.distributed as dist
        from data import records

        def run(t):
            rank = dist.get_rank()
            for rec in records(f"part-{rank}.txt"):
                dist.all_reduce(t)
            for rec in records("all.txt"):
                dist.all_reduce(t)
    """)
    res = _check(main)
    assert _codes(res) == [("DDP110", 7)]
    assert "records()" in res.findings[0].message


def test_scalar_through_two_helpers_of_other_files(tmp_path):
    project.clear()
    _write(tmp_path, "comm.py", """
        import torch.distributed as dist

        def all_sum(x):
            dist.all_reduce(x)
            return x
    """)
    _write(tmp_path, "metrics.py", """
        from comm import all_sum

        def global_mean(v, n):
            return all_sum(v) / n
    """)
    main = _write(tmp_path, "train.py", """
        import torch
        import torch.distributed as dist
        from metrics import global_mean

        def step(loss, n):
            return global_mean(loss.item(), n), global_mean(loss.detach(), n)
    """)
    res = _check(main)
    assert _codes(res) == [("DDP111", 7)]
    msg = res.findings[0].message
    assert "global_mean" in msg and "all_sum" in msg and "all_reduce" in msg


def test_import_time_use_and_its_edit(tmp_path):
    project.clear()
    cfg = _write(tmp_path, "config.py", """
        import torch.distributed as dist

        WORLD = dist.get_world_size()
    """)
    main = _write(tmp_path, "train.py", """
        import torch
        import torch.distributed as dist
        import config

        def main():
            dist.init_process_group("gloo")
            t = torch.ones(config.WORLD)
            dist.all_reduce(t)

        if __name__ == "__main__":
            main()
    """)
    res = _check(main)
    assert _codes(res) == [("DDP002", 4)]
    assert any(r.filename == str(cfg) for r in res.findings[0].related)
    cfg.write_text("import torch.distributed as dist\n\nWORLD = dist.get_world_size() if dist.is_initialized() else 1\n")
    assert _codes(_check(main)) == []


def test_shape_facts():
    src = textwrap.dedent("""
        import torch
        import torch.distributed as dist

        def f(args, loader, feats, n):
            rank = dist.get_rank()
            for x, lengths in loader:
                a = torch.zeros(int(lengths.max()), 4)
                b = x[:, : args.max_len]
                c = feats[feats.sum(1) > 0]
                d = torch.zeros(c.shape[1])
                e = torch.arange(rank + 1)
                g = torch.zeros(n)
                m = torch.tensor([int(lengths.sum())])
            return a, b, c, d, e, g, m
    """)
    tree = ast.parse(src)
    an = Analysis("<mem>", Semantic(tree), src)
    sh = shapes_of(an, an.main)
    ret = [n for n in ast.walk(tree) if isinstance(n, ast.Return)][0]
    facts = [sh.shape(e) for e in ret.value.elts]
    kinds = [(s.kind, bool(s.deps)) for s in facts]
    # a: data size; b: uniform bound on an unknown batch; c: a mask over a parameter (symbolic);
    # d: the other dimension; e: rank size; g: the parameter's value (symbolic); m: one element
    assert kinds == [("V", False), ("X", False), ("U", True), ("X", False), ("V", False), ("U", True),
                     ("U", False)]


def test_loop_over_a_stored_loader_judged_at_the_constructor_of_another_file(tmp_path):
    """DDP110: a class of one module walks the loader its ``__init__`` stored, with a collective
    per batch; the script that builds it passes a loader over this rank's uneven block (a bug), or
    one with a DistributedSampler (clean)."""
    project.clear()
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    _write(tmp_path, "evalkit/__init__.py", "")
    scorer = _write(tmp_path, "evalkit/scorer.py", """
        import torch.distributed as dist

        class Scorer:
            def __init__(self, net, batches):
                self.net = net
                self.batches = batches

            def score(self):
                for rows in self.batches:
                    part = self.net(rows).sum()
                    dist.all_reduce(part)
    """)
    _write(tmp_path, "evalkit/blocks.py", """
        from torch.utils.data import Dataset

        class Block(Dataset):
            def __init__(self, table, rank, world):
                step = (len(table) + world - 1) // world
                first = rank * step
                self.rows = table[first:min(first + step, len(table))]

            def __len__(self):
                return len(self.rows)

            def __getitem__(self, i):
                return self.rows[i]
    """)
    script = _write(tmp_path, "run_eval.py", """
        import torch.distributed as dist
        from torch.utils.data import DataLoader
        from evalkit.blocks import Block
        from evalkit.scorer import Scorer

        def main(net, table):
            rank, world = dist.get_rank(), dist.get_world_size()
            Scorer(net, DataLoader(Block(table, rank, world), batch_size=8)).score()
    """)
    res = _check(scorer)
    assert _codes(res) == [("DDP110", 10)]
    assert "Scorer()" in res.findings[0].message and str(script) in res.findings[0].message
    assert str(script) in [p for p, _ in res.dependencies]
    project.clear()
    _write(tmp_path, "run_eval.py", """
        import torch.distributed as dist
        from torch.utils.data import DataLoader
        from torch.utils.data.distributed import DistributedSampler
        from evalkit.scorer import Scorer

        def main(net, table):
            Scorer(net, DataLoader(table, batch_size=8, sampler=DistributedSampler(table))).score()
    """)
    assert _codes(_check(scorer)) == []


def test_loop_in_a_method_judged_at_a_script_of_another_file_two_calls_up(tmp_path):
    """DDP110: a method walks the loader it receives from another method of its class
    (``fit(loader)`` -> ``self.one_epoch(loader)``); a script of another file calls ``fit`` on a
    loader over whole files per rank (an IterableDataset: a bug), or over a DistributedSampler
    (clean)."""
    project.clear()
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    _write(tmp_path, "kit/__init__.py", "")
    loop = _write(tmp_path, "kit/loop.py", """
        from torch.nn.parallel import DistributedDataParallel as DDP

        class Loop:
            def __init__(self, net):
                self.net = DDP(net)

            def one_epoch(self, batches):
                for rows in batches:
                    self.net(rows).sum().backward()

            def fit(self, batches, epochs):
                for _ in range(epochs):
                    self.one_epoch(batches)
    """)
    _write(tmp_path, "kit/files.py", """
        from torch.utils.data import IterableDataset

        class Files(IterableDataset):
            def __init__(self, manifest, rank, world):
                self.mine = list(manifest)[rank::world]

            def __iter__(self):
                for path, count in self.mine:
                    for k in range(count):
                        yield path, k
    """)
    script = _write(tmp_path, "run.py", """
        import torch.distributed as dist
        from torch.utils.data import DataLoader
        from kit.files import Files
        from kit.loop import Loop

        def main(net, manifest):
            rank, world = dist.get_rank(), dist.get_world_size()
            Loop(net).fit(DataLoader(Files(manifest, rank, world), batch_size=8), 2)
    """)
    res = _check(loop)
    assert _codes(res) == [("DDP110", 9)]
    assert "fit()" in res.findings[0].message and str(script) in res.findings[0].message
    project.clear()
    _write(tmp_path, "run.py", """
        from torch.utils.data import DataLoader
        from torch.utils.data.distributed import DistributedSampler
        from kit.loop import Loop

        def main(net, rows):
            Loop(net).fit(DataLoader(rows, batch_size=8, sampler=DistributedSampler(rows)), 2)
    """)
    assert _codes(_check(loop)) == []
    project.clear()


def test_rows_of_an_unpadded_eval_shard_gathered_through_a_helper_of_another_file(tmp_path):
    """DDP109: a scoring function concatenates the outputs of the loader it is given and gathers
    them through a helper of another file whose receive buffers copy the local tensor; a class of
    a third file stores a loader over a project sampler that gives each rank its own indices with
    no padding (a bug, flagged at the gather call), or a DistributedSampler (clean)."""
    project.clear()
    (tmp_path / "pyproject.toml").write_text("[project]\nname='x'\n")
    _write(tmp_path, "kit/__init__.py", "")
    _write(tmp_path, "kit/comm.py", """
        import torch
        import torch.distributed as dist

        def gather_rows(x):
            got = [torch.empty_like(x) for _ in range(dist.get_world_size())]
            dist.all_gather(got, x)
            return torch.cat(got)
    """)
    score = _write(tmp_path, "kit/score.py", """
        import torch
        from kit.comm import gather_rows

        def score(net, batches):
            outs = []
            for x, _ in batches:
                outs.append(net(x))
            return gather_rows(torch.cat(outs))
    """)
    _write(tmp_path, "kit/data.py", """
        import torch.distributed as dist
        from torch.utils.data import DataLoader, Sampler

        class Mine(Sampler):
            def __init__(self, n):
                self.ids = list(range(n))[dist.get_rank()::dist.get_world_size()]

            def __iter__(self):
                return iter(self.ids)

        def holdout(rows):
            return DataLoader(rows, batch_size=8, sampler=Mine(len(rows)))
    """)
    runner = _write(tmp_path, "kit/runner.py", """
        from kit.data import holdout
        from kit.score import score

        class Runner:
            def __init__(self, net, rows):
                self.net = net
                self.val = holdout(rows)

            def validate(self):
                return score(self.net, self.val)
    """)
    res = _check(score)
    assert _codes(res) == [("DDP109", 9)]
    assert "Mine()" in res.findings[0].message and str(runner) in res.findings[0].message
    project.clear()
    _write(tmp_path, "kit/data.py", """
        from torch.utils.data import DataLoader, DistributedSampler

        def holdout(rows):
            return DataLoader(rows, batch_size=8, sampler=DistributedSampler(rows, shuffle=False))
    """)
    assert _codes(_check(score)) == []
    project.clear()
