"""A project module's memo must never outlive the modules whose nodes it holds.

``fs_effects.function_effects`` (and the summaries) memoise, in the memo of a shared project view,
results that point at nodes of *other* modules: the helper's download in ``data.py`` seen from
``helpers.py``. When that other module's view is released (evicted from the project cache, or the
checked file's own tree taken apart at the end of its check), the memo held nodes without parent
pointers (or without fields), and the next check that reused it crashed in DDP215
(``'Name' object has no attribute 'body'`` in ``semantic._iter_scope_statements`` /
``fs_effects._binding_kind``, Megatron-LM's tests, in multi-file runs only)."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow import project

_TRAIN = """
    import torch.distributed as dist
    import helpers

    dist.init_process_group("nccl")
    helpers.prepare()
"""
_HELPERS = """
    import os
    import data

    def prepare():
        data.fetch(os.environ["DATA"])
"""
_DATA = """
    import os
    import torchvision

    def fetch(root):
        torchvision.datasets.CIFAR10(os.path.join(root, "cifar"), download=True)
"""


def _write(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    out = {}
    for name, src in files.items():
        p = tmp_path / name
        p.write_text(textwrap.dedent(src), encoding="utf-8")
        out[name] = p
    return out


def _check(p: Path):
    res = check_source(p.read_text(encoding="utf-8"), str(p), Settings(select=["DDP215"]))
    assert not res.errors, res.errors
    return [(f.code, f.range.start.line + 1) for f in res.findings]


def _view(path: Path):
    with project._lock:
        for k, v in project._views.items():
            if k[0] == str(path):
                return k, v
    return None, None


def test_memo_holding_an_evicted_module_is_dropped(tmp_path):
    project.clear()
    f = _write(tmp_path, {"train.py": _TRAIN, "train2.py": _TRAIN, "helpers.py": _HELPERS, "data.py": _DATA})
    assert _check(f["train.py"]) == [("DDP215", 6)]
    # ``data.py`` leaves the project cache (as the least recently used of 256 views does in a long
    # run): its tree loses its parent pointers while ``helpers.py``'s memo still points into it
    key, dead = _view(f["data.py"])
    assert dead is not None
    with project._lock:
        project._views.pop(key).release()
    assert _check(f["train2.py"]) == [("DDP215", 6)]
    project.clear()


def test_memo_holding_the_checked_file_is_dropped_after_its_check(tmp_path):
    # the checked file is not a cached view: its own tree is taken apart when its check ends; a
    # shared module that called back into it must not keep those nodes for the next check
    project.clear()
    data = _DATA + """
    import torch.distributed as dist
    import helpers

    dist.init_process_group("nccl")
    helpers.prepare()
"""
    f = _write(tmp_path, {"train.py": _TRAIN, "helpers.py": _HELPERS, "data.py": data})
    assert _check(f["data.py"]) == [("DDP215", 12)]
    assert _check(f["train.py"]) == [("DDP215", 6)]
    project.clear()
