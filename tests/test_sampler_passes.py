"""DDP301 across functions and modules (issue 25, point 3): the flow layer's ``passes`` (which
loaders one round of a loop walks again, wherever the batch loop lives), ``origins`` in the context
of the call that built a value (``frames``), conditional expressions split into branches, and
function-local ``from x import f``. Each case here was missed before."""
from __future__ import annotations

import ast
import textwrap

from ddp_lint.analysis import flow
from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow import project
from ddp_lint.analysis.flow.origins import branch_origins, origins
from ddp_lint.analysis.flow.passes import loop_passes
from ddp_lint.analysis.semantic import Semantic


def _write(root, files: dict[str, str]):
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text), encoding="utf-8")


def _ddp301(path) -> list[int]:
    project.clear()
    text = path.read_text(encoding="utf-8")
    res = check_source(text, str(path), Settings(select=["DDP301"]))
    return sorted(f.range.start.line + 1 for f in res.findings if f.code == "DDP301")


def _analysis(path):
    project.clear()
    text = path.read_text(encoding="utf-8")
    sem = Semantic(ast.parse(text))
    return flow.Analysis(str(path), sem, text), sem


DATA = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    from torch.utils.data.distributed import DistributedSampler


    def init_data(batch_size, training=True):
        ds = TensorDataset(torch.randn(64, 4))
        sampler = DistributedSampler(ds, shuffle=training)
        return DataLoader(ds, batch_size=batch_size, sampler=sampler), sampler
"""


def test_passes_follow_calls_and_bind_parameters(tmp_path):
    _write(tmp_path, {"train.py": """
        import torch
        from torch.utils.data import DataLoader

        loader = DataLoader(list(range(8)))


        def walk_global():
            for b in loader:
                pass


        def walk(data_loader):
            for i, b in enumerate(data_loader):
                pass


        def run(other):
            for epoch in range(3):
                walk_global()
                walk(data_loader=other)
                for b in other:
                    for c in loader:  # a pass of the batch loop, not of the epoch loop
                        pass
    """})
    ana, sem = _analysis(tmp_path / "train.py")
    loop = next(n for n in ast.walk(sem.tree) if isinstance(n, ast.For) and ast.unparse(n.iter) == "range(3)")
    got = sorted((ast.unparse(p.expr), p.at.lineno) for p in loop_passes(ana, ana.main, loop))
    # the global walked in walk_global (line 9), the argument bound to data_loader (line 21), the
    # batch loop's own header (line 22); never ``loader`` walked inside the batch loop's body
    assert got == [("loader", 9), ("other", 21), ("other", 22)]


def test_origins_frames_read_a_parameter_at_the_call_that_built_the_value(tmp_path):
    _write(tmp_path, {"data.py": DATA, "main.py": """
        from data import init_data

        a, _ = init_data(8, training=True)
        b, _ = init_data(8, training=False)
        print(a, b)
    """})
    ana, sem = _analysis(tmp_path / "main.py")
    for name, want in (("a", True), ("b", False)):
        use = ast.Name(id=name, ctx=ast.Load())
        (lv, ld, fr), = origins(ana, ana.main, use, sem.tree.body[-1], frames=(), limit=10)
        assert ast.unparse(ld).startswith("DataLoader(")
        s_arg = next(k.value for k in ld.keywords if k.arg == "sampler")
        (sv, sc, sf), = origins(ana, lv, s_arg, ld, frames=fr)
        shuffle = next(k.value for k in sc.keywords if k.arg == "shuffle")
        vals = [e.value for _, e, _ in origins(ana, sv, shuffle, sc, frames=sf)]
        assert vals == [want]
    # without frames a parameter is read at the calls of its own module (none here)
    shuffle_param = ast.Name(id="training", ctx=ast.Load())
    dv = next(v for v in ana._modules.values() if v is not None)
    fn = dv.defs["init_data"]
    assert origins(ana, dv, shuffle_param, fn.body[0]) == []


def test_branch_origins_split_a_conditional_expression(tmp_path):
    _write(tmp_path, {"m.py": """
        from torch.utils.data.distributed import DistributedSampler
        s = DistributedSampler([1, 2]) if flag else None
        print(s)
    """})
    ana, sem = _analysis(tmp_path / "m.py")
    got = branch_origins(ana, ana.main, ast.Name(id="s", ctx=ast.Load()), sem.tree.body[-1])
    kinds = sorted(type(e).__name__ for _, e, _ in got)
    assert kinds == ["Call", "Constant"]


def test_function_local_import_resolves(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/data.py": DATA, "main.py": """
        def build():
            from pkg.data import init_data
            return init_data(4)
    """})
    ana, sem = _analysis(tmp_path / "main.py")
    call = next(n for n in ast.walk(sem.tree) if isinstance(n, ast.Call))
    got = ana.resolve_call(ana.main, call)
    assert got is not None and got[1].name == "init_data"


def test_epoch_loop_calling_a_helper_that_walks_a_module_loader(tmp_path):
    _write(tmp_path, {"main.py": """
        import torch.distributed as dist
        from torch.utils.data import DataLoader
        from torch.utils.data.distributed import DistributedSampler

        distributed = dist.is_initialized()
        ds = list(range(100))
        sampler = DistributedSampler(ds) if distributed else None
        loader = DataLoader(ds, sampler=sampler, shuffle=sampler is None)


        def train(epoch):
            for batch in loader:
                pass


        for epoch in range(10):
            train(epoch)
    """})
    assert _ddp301(tmp_path / "main.py") == [17]


def test_builder_in_another_module_with_shuffle_from_a_parameter(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/data.py": DATA, "pkg/probe.py": """
        import torch.distributed as dist
        from pkg.data import init_data


        def make_loader(training):
            loader, _ = init_data(16, training=training)
            return loader


        def run_one_epoch(data_loader):
            for x in data_loader:
                pass


        def main(epochs):
            train_loader = make_loader(True)
            ordered_loader = make_loader(False)
            for epoch in range(epochs):
                run_one_epoch(data_loader=train_loader)
            for epoch in range(epochs):
                run_one_epoch(data_loader=ordered_loader)
    """})
    assert _ddp301(tmp_path / "pkg" / "probe.py") == [19]


def test_a_module_on_the_way_that_calls_set_epoch_silences(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/data.py": DATA, "pkg/engine.py": """
        def run_one_epoch(data_loader, epoch):
            data_loader.sampler.set_epoch(epoch)
            for x in data_loader:
                pass
    """, "pkg/main.py": """
        import torch.distributed as dist
        from pkg.data import init_data
        from pkg.engine import run_one_epoch


        def main(epochs):
            train_loader, _ = init_data(16)
            for epoch in range(epochs):
                run_one_epoch(train_loader, epoch)
    """})
    assert _ddp301(tmp_path / "pkg" / "main.py") == []


def test_evaluation_function_is_skipped_after_the_flow_answer(tmp_path):
    _write(tmp_path, {"main.py": """
        from torch.utils.data import DataLoader
        from torch.utils.data.distributed import DistributedSampler


        def evaluate(ds, model, rounds):
            loader = DataLoader(ds, sampler=DistributedSampler(ds))
            for r in range(rounds):
                for b in loader:
                    model(b)


        def train_and_evaluate(ds, model, epochs):
            loader = DataLoader(ds, sampler=DistributedSampler(ds))
            for epoch in range(epochs):
                for b in loader:
                    model(b)
    """})
    assert _ddp301(tmp_path / "main.py") == [15]


def _ddp304(tmp_path, text: str) -> list[int]:
    _write(tmp_path, {"w.py": text})
    path = tmp_path / "w.py"
    res = check_source(path.read_text(encoding="utf-8"), str(path), Settings(select=["DDP304"]))
    return sorted(f.range.start.line + 1 for f in res.findings if f.code == "DDP304")


WRAPPER = """
    import torch
    from torch.utils.data import BatchSampler


    class Wrapper{base}:
        def __init__(self, sampler{ann}):
            self._sampler = sampler

        def __iter__(self):
            yield from self._sampler

        @property
        def sampler(self):
            return self._sampler.sampler
{extra}
"""


def test_ddp304_wrapper_forwarding_the_sampler_but_not_set_epoch(tmp_path):
    assert _ddp304(tmp_path, WRAPPER.format(base="", ann=": BatchSampler", extra="")) == [6]
    assert _ddp304(tmp_path, WRAPPER.format(base="(BatchSampler)", ann="", extra="")) == [6]


def test_ddp304_near_misses(tmp_path):
    # nothing says the wrapped value is a sampler
    assert _ddp304(tmp_path, WRAPPER.format(base="", ann="", extra="")) == []
    # an unknown base class may define set_epoch
    assert _ddp304(tmp_path, WRAPPER.format(base="(torch.nn.Module)", ann=": BatchSampler", extra="")) == []
    # set_epoch bound in __init__
    extra = "\n        def reset(self):\n            self.set_epoch = self._sampler.set_epoch\n"
    assert _ddp304(tmp_path, WRAPPER.format(base="", ann=": BatchSampler", extra=extra)) == []


def test_type_guards_read_assert_raise_and_warn_not_log(tmp_path):
    from ddp_lint.analysis.flow.type_guards import required_types

    _write(tmp_path, {"t.py": """
        import warnings
        from torch.utils.data.distributed import DistributedSampler


        class T:
            def a(self, x, y, z):
                assert isinstance(self.loader.sampler, DistributedSampler)
                if ddp and not isinstance(x.sampler, DistributedSampler):
                    raise ValueError("no")
                if not isinstance(y, DistributedSampler):
                    warnings.warn("no")
                if not isinstance(z, DistributedSampler):
                    print("no")
    """})
    ana, sem = _analysis(tmp_path / "t.py")
    got = sorted(k for _, k in required_types(ana.main))
    assert got == ["self.loader.sampler", "x.sampler", "y"]


def test_ddp304_composite_inheriting_a_no_op_set_epoch_from_another_module(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "from .base import Base\n", "pkg/base.py": """
        import torch


        class Base(torch.utils.data.Dataset):
            def set_epoch(self, epoch):
                pass
    """, "pkg/concat.py": """
        import torch
        from . import Base


        class Concat(Base):
            def __init__(self, *parts):
                self.parts = parts

            def size(self, i):
                return max(p.size(i) for p in self.parts)

            def prefetch(self, idx):
                for p in self.parts:
                    p.prefetch(idx)
    """})
    path = tmp_path / "pkg" / "concat.py"
    project.clear()
    res = check_source(path.read_text(encoding="utf-8"), str(path), Settings(select=["DDP304"]))
    (f,) = [f for f in res.findings if f.code == "DDP304"]
    assert f.range.start.line + 1 == 6
    (edit,) = f.fix.edits
    assert "super().set_epoch(epoch)" in edit.content and "for ds in self.parts:" in edit.content
    # the text-level reach: the base's module spells set_epoch, through the package's __init__
    from ddp_lint.analysis.flow.reach import reaches

    assert reaches(str(path), path.read_text(encoding="utf-8"), ("set_epoch",))[0]
    (tmp_path / "pkg" / "base.py").write_text("class Base:\n    pass\n", encoding="utf-8")
    (tmp_path / "pkg" / "other.py").write_text("import torch\n", encoding="utf-8")
    assert not reaches(str(tmp_path / "pkg" / "other.py"), "import torch\n", ("set_epoch",))[0]
