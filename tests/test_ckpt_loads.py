"""Issue 25 (DDP203 on code nobody here wrote): a load helper called from a method of a class that
runs under torch.distributed (a method no code of its file calls: the library's users do), and a
class that moves its state to the device its user gives it (reason 6)."""
from __future__ import annotations

from pathlib import Path

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source


def _codes(path: Path, code: str = "DDP203") -> list[int]:
    res = check_source(path.read_text(encoding="utf-8"), str(path), Settings(select=[code]))
    return [f.range.start.line + 1 for f in res.findings if f.code == code]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")


_IO = ("import torch\n\n\ndef load_custom(obj, folder, index=0):\n"
       "    target = f'{folder}/custom_checkpoint_{index}.pkl'\n"
       "    obj.load_state_dict(torch.load(target))\n")
_RUNNER = ("import torch.distributed as dist\nfrom torch.nn.parallel import DistributedDataParallel\n"
           "from .state_io import load_custom\n\n\nclass Runner:\n"
           "    def __init__(self, model, dev):\n        dist.init_process_group('nccl')\n"
           "        self.model = {wrap}\n        self.custom = []\n\n"
           "    def load_state(self, folder):\n{guard}"
           "        for i, obj in enumerate(self.custom):\n            load_custom(obj, folder, i)\n")
_DDP = "DistributedDataParallel(model, device_ids=[dev])"


def _project(tmp_path: Path, wrap: str = _DDP, guard: str = "") -> Path:
    _write(tmp_path, {"setup.cfg": "", "kit/__init__.py": "", "kit/state_io.py": _IO,
                      "kit/runner.py": _RUNNER.format(wrap=wrap, guard=guard)})
    return tmp_path / "kit" / "state_io.py"


def test_a_helper_called_from_a_method_of_a_distributed_class(tmp_path):
    lib = _project(tmp_path)
    assert _codes(lib) == [6]
    res = check_source(lib.read_text(), str(lib), Settings(select=["DDP203"]))
    assert "`Runner.load_state`" in res.findings[0].message


def test_the_method_tests_for_the_main_rank(tmp_path):
    guard = "        if dist.get_rank() != 0:\n            return\n"
    assert _codes(_project(tmp_path, guard=guard)) == []


def test_a_class_that_runs_nothing_of_torch_distributed_says_nothing(tmp_path):
    # the process group is started elsewhere; this class neither wraps nor asks its rank
    assert _codes(_project(tmp_path, wrap="model")) == []


_FITTER = """import os
import torch


class Fitter:
    def __init__(self, model, out_dir, cuda_device=-1):
        self.model = model
        self.out_dir = out_dir
        self.cuda_device = {dev}
        self.model = self.model.cuda(self.cuda_device)

    def restore(self, epoch):
        weights = torch.load(os.path.join(self.out_dir, f"model_state_epoch_{{epoch}}.th"))
        self.model.load_state_dict(weights)
"""


def test_a_class_that_moves_its_model_to_the_device_it_is_given(tmp_path):
    p = tmp_path / "fit.py"
    p.write_text(_FITTER.format(dev="cuda_device"))
    assert _codes(p) == [13]
    p.write_text(_FITTER.format(dev="0"))  # its own choice of device: nothing to learn
    assert _codes(p) == []
    # a test file is left alone
    t = tmp_path / "test_fit.py"
    t.write_text(_FITTER.format(dev="cuda_device"))
    assert _codes(t) == []
