"""``flow.training_loops`` with ``passes.scope_passes``: which loop walks a loader (also in a helper
of another module given the loaders in a list), and whether its rounds backpropagate the DDP
model's output; an evaluation loop over the same kind of loader does not."""
from __future__ import annotations

import ast
import textwrap

from ddp_lint.analysis import flow
from ddp_lint.analysis.flow import project
from ddp_lint.analysis.flow.passes import scope_passes
from ddp_lint.analysis.flow.training_loops import trains, walking_loop
from ddp_lint.analysis.semantic import Semantic

HELPER = """
import torch


def epoch(models, feeds):
    (net,) = models
    fit, check = feeds
    for x in fit:
        net(x).sum().backward()
    with torch.no_grad():
        for x in check:
            net(x)
"""

MAIN = """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

from steps import epoch


def main(a, b):
    net = DDP(torch.nn.Linear(2, 2))
    fit = DataLoader(a)
    check = DataLoader(b)
    epoch([net], [fit, check])
"""


def test_helper_of_another_module_trains_on_first_loader_only(tmp_path):
    (tmp_path / "steps.py").write_text(textwrap.dedent(HELPER), encoding="utf-8")
    main = tmp_path / "main.py"
    main.write_text(textwrap.dedent(MAIN), encoding="utf-8")
    project.clear()
    text = main.read_text(encoding="utf-8")
    sem = Semantic(ast.parse(text))
    ana = flow.Analysis(str(main), sem, text)
    fn = next(n for n in ast.walk(sem.tree) if isinstance(n, ast.FunctionDef) and n.name == "main")
    got = {}
    for p in scope_passes(ana, ana.main, fn):
        wv, w = p.walker
        loop = walking_loop(wv, w)
        got[ast.unparse(p.expr)] = (loop.lineno, trains(ana, wv, loop, p.frames) is not None)
    assert got == {"fit": (8, True), "check": (11, False)}
