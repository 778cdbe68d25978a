"""The second gate (analysis/flow/reach.py, ``Rule.reach``): a file whose text cannot lead to a
finding is not parsed, neither as a checked file nor as a module of the cross-file layer.

- the flow rules need a collective site in the file or in a project module it imports,
  transitively (a text-level import graph: no parse);
- DDP203/DDP207/DDP209 need, when the file cannot fire alone, a caller elsewhere in the project
  that holds what the rule requires of it (``_common.callers_may_exist``), and the cross-file layer
  parses only those callers (``project_callers(..., needs)``);
- in every case the finding is still there when the other file holds what it needs.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import admitted_for, check_source
from ddp_lint.analysis.flow import project, reach

ALL = Settings(select=["ALL"])
# the rules that need a collective site (DDP003/DDP103 would parse MAIN for its `rank` alone)
FLOW = Settings(select=["DDP104", "DDP107", "DDP108", "DDP109", "DDP110", "DDP111"])

MAIN = """import torch
from helpers import is_main, reduce_all


def step(x):
    if is_main():
        reduce_all(x)
    return x
"""
HELPER_PLAIN = """import os


def is_main():
    return os.environ.get("RANK", "0") == "0"


def reduce_all(x):
    return x
"""
HELPER_COLLECTIVE = """import torch.distributed as dist


def is_main():
    return dist.get_rank() == 0


def reduce_all(x):
    dist.all_reduce(x)
"""


@pytest.fixture
def parses(monkeypatch):
    """Every file ast.parse is asked for (the checked file and the cross-file layer's modules)."""
    seen: list[str] = []
    real = ast.parse

    def counting(src, filename="<unknown>", *a, **k):
        seen.append(str(filename))
        return real(src, filename, *a, **k)

    monkeypatch.setattr(ast, "parse", counting)
    project.clear()
    reach._facts.clear(), reach._resolved.clear(), reach._negative.clear(), reach._edge_memo.clear()
    yield seen
    project.clear()
    reach._facts.clear(), reach._resolved.clear(), reach._negative.clear(), reach._edge_memo.clear()


def _project(tmp_path: Path, helper: str, chain: int = 0) -> Path:
    (tmp_path / "pyproject.toml").write_text("")
    if chain:  # main -> helpers -> mid0 -> ... -> the code
        (tmp_path / "helpers.py").write_text("from mid0 import is_main, reduce_all\n")
        for i in range(chain):
            nxt = f"mid{i + 1}" if i + 1 < chain else "leaf"
            (tmp_path / f"mid{i}.py").write_text(f"from {nxt} import is_main, reduce_all\n")
        (tmp_path / "leaf.py").write_text(helper)
    else:
        (tmp_path / "helpers.py").write_text(helper)
    main = tmp_path / "main.py"
    main.write_text(MAIN)
    return main


def test_no_reachable_collective_no_parse(tmp_path, parses):
    main = _project(tmp_path, HELPER_PLAIN)
    res = check_source(MAIN, str(main), FLOW)
    assert res.findings == [] and res.gated_out
    assert parses == []  # neither main.py nor helpers.py
    # the answer depends on helpers.py: the cache re-checks main.py when it changes
    assert str(tmp_path / "helpers.py") in dict(res.dependencies)


@pytest.mark.parametrize("chain", [0, 2])
def test_no_dependencies_same_answers(tmp_path, parses, chain):
    """Inside ``snapshot.no_dependencies()`` (a batch run without a cache) a reach answer is the
    same, only without the files a "no" rests on; outside it they come back (the memo of one mode
    is not the other's)."""
    from ddp_lint.analysis import snapshot

    main = _project(tmp_path, HELPER_PLAIN, chain)
    with snapshot.snapshot():
        with snapshot.no_dependencies():
            lean = reach.reaches(str(main), MAIN)
        full = reach.reaches(str(main), MAIN)
    assert lean == (False, {})
    assert full[0] is False and str(tmp_path / "helpers.py") in full[1]
    main.write_text(MAIN.replace("import", "import torch.distributed as dist\nimport", 1))
    with snapshot.snapshot(), snapshot.no_dependencies():
        assert reach.reaches(str(main), main.read_text()) == (True, {})


@pytest.mark.parametrize("chain", [0, 1])
def test_reachable_collective_is_found(tmp_path, parses, chain):
    main = _project(tmp_path, HELPER_COLLECTIVE, chain)
    assert reach.reaches(str(main), MAIN)[0]
    res = check_source(MAIN, str(main), ALL)
    assert "DDP104" in {f.code for f in res.findings}
    ungated = check_source(MAIN, str(main), ALL, gate=False)
    assert sorted(f.message for f in res.findings) == sorted(f.message for f in ungated.findings)


def test_gated_equals_ungated_on_plain_helper(tmp_path):
    main = _project(tmp_path, HELPER_PLAIN, 2)
    assert check_source(MAIN, str(main), ALL, gate=False).findings == []
    assert not admitted_for(MAIN, FLOW.enabled_codes(str(main)), str(main))[0]


def test_import_candidates_are_a_superset():
    text = (
        "from . import a, b as c\n"
        "from ..x.y import (z,  # a ) in a comment\n   w)\n"
        "import os.path as p, foo.bar\n"
        "from.q import r\n"
        "x = 1; import k\n"
        "from \\\n  m import n\n"
        "if True:\n    from . . deep import thing\n"
    )
    got = set(reach.candidates(text))
    for want in [("a", 1), ("b", 1), ("x.y", 2), ("x.y.z", 2), ("x.y.w", 2), ("os.path", 0), ("foo.bar", 0),
                 ("q", 1), ("q.r", 1), ("k", 0), ("m", 0), ("m.n", 0), ("deep", 2), ("deep.thing", 2)]:
        assert want in got, want
    # every import the parser sees is among them
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom):
            assert (node.module or "", node.level) in got
        elif isinstance(node, ast.Import):
            assert all((a.name, 0) in got for a in node.names)


MODEL = """import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.used = torch.nn.Linear(2, 2)
        self.aux = torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.used(x)
"""
TRAIN = """import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from model import Net

model = DDP(Net())
model(torch.zeros(2)).sum().backward()
"""
USER_ONLY = "from model import Net\n\nnet = Net()\n"


def test_model_file_parsed_only_with_a_trainer_elsewhere(tmp_path, parses):
    (tmp_path / "pyproject.toml").write_text("")
    model = tmp_path / "model.py"
    model.write_text(MODEL)
    (tmp_path / "user.py").write_text(USER_ONLY)  # names Net, wraps nothing in DDP
    res = check_source(MODEL, str(model), ALL)
    assert res.findings == [] and parses == []  # no DDP trainer in the project: nothing parsed
    (tmp_path / "train.py").write_text(TRAIN)
    import time

    time.sleep(0)  # the candidates' listing is cached for a few seconds: start afresh
    from ddp_lint.analysis.rules import _common

    _common._candidates.clear(), _common._listings.clear()
    res = check_source(MODEL, str(model), ALL)
    assert [f.code for f in res.findings] == ["DDP209"]
    # the cross-file layer parsed the trainer, never user.py (it holds no DDP, no backward)
    assert str(tmp_path / "user.py") not in parses and str(tmp_path / "train.py") in parses


def test_an_open_document_is_seen_at_once(tmp_path, parses):
    """The editor's unsaved text of the helper decides (no stale cached answer)."""
    main = _project(tmp_path, HELPER_PLAIN)
    assert not reach.reaches(str(main), MAIN)[0]
    helper = str(tmp_path / "helpers.py")
    project.set_overlay(helper, HELPER_COLLECTIVE)
    try:
        assert reach.reaches(str(main), MAIN)[0]
    finally:
        project.set_overlay(helper, None)
    assert not reach.reaches(str(main), MAIN)[0]
