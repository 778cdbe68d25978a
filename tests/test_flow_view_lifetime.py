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


def _whole(view) -> bool:
    """Every statement and expression of ``view``'s tree still has its parent pointer."""
    import ast

    return all(hasattr(n, "_p") for n in ast.walk(view.tree) if isinstance(n, (ast.stmt, ast.expr)))


def test_a_view_evicted_while_another_check_reads_it_stays_whole_until_that_check_ends(tmp_path):
    # the language server checks two documents at once: typing in ``helpers.py`` replaces its
    # view while the other thread's check is still walking the old one (CI: DDP210's
    # ``'Assign' object has no attribute '_p'`` in the load smoke test)
    project.clear()
    f = _write(tmp_path, {"helpers.py": _HELPERS})
    path = str(f["helpers.py"])
    with project.in_use():  # the other thread's check
        old = project.load(path)
        assert old is not None and _whole(old)
        with project.in_use():  # this thread's check, after an edit of helpers.py
            project.set_overlay(path, textwrap.dedent(_HELPERS) + "\nX = 1\n")
            new = project.load(path)
            assert new is not old
        assert _whole(old) and old.life.alive  # the reader's check still runs
    assert not old.life.alive and old.sem._nodes is None  # released once it ended
    assert _whole(new)
    project.set_overlay(path, None)
    project.clear()


def test_a_view_evicted_with_no_check_running_is_released_at_once(tmp_path):
    project.clear()
    f = _write(tmp_path, {"helpers.py": _HELPERS})
    path = str(f["helpers.py"])
    old = project.load(path)
    project.set_overlay(path, textwrap.dedent(_HELPERS) + "\nX = 1\n")
    assert project.load(path) is not old
    assert not old.life.alive
    project.set_overlay(path, None)
    project.clear()
    assert not project._retired


def test_two_threads_reading_the_same_content_share_one_view(tmp_path, monkeypatch):
    # both threads parse the module before either caches it; the second to finish must take the
    # first one's view, not release it (the first thread's check holds it)
    project.clear()
    f = _write(tmp_path, {"helpers.py": _HELPERS})
    path = str(f["helpers.py"])
    first = project.load(path)
    key = next(k for k in project._views if k[0] == path)
    with project._lock:
        project._views.pop(key)  # as if the first thread had not inserted it yet ...
    real_parse = project.ast.parse

    def parse_then_insert(*a, **kw):
        tree = real_parse(*a, **kw)
        with project._lock:
            project._views[key] = first  # ... and inserted it while this one was parsing
        return tree

    monkeypatch.setattr(project.ast, "parse", parse_then_insert)
    with project._lock:
        project._stat_hash.clear()
    assert project.load(path) is first
    assert first.life.alive and _whole(first)
    project.clear()
