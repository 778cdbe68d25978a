"""The per-file work cap (issue 31, issue 29 R4): a file far past what a person writes gets one
DDP000 warning naming the rules that were not run, never an endless check. (How each rule grows with
the file's size is a bench row, bench/growth_bench.py, not a timed test.)"""
from __future__ import annotations

from ddp_lint.analysis import engine
from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source

ALL = Settings(select=["ALL"])
SCRIPT = """import torch
import torch.distributed as dist


def step(x):
    if dist.get_rank() == 0:
        dist.all_reduce(x)
    return x
"""


def test_no_cap_on_ordinary_files():
    res = check_source(SCRIPT, "s.py", ALL)
    assert [f.code for f in res.findings] == ["DDP104"]


def test_node_cap_skips_the_flow_rules_and_says_so(monkeypatch):
    monkeypatch.setattr(engine, "MAX_NODES", 10)
    res = check_source(SCRIPT, "s.py", ALL)
    (f,) = res.findings
    assert f.code == "DDP000" and f.severity.value == "warning" and res.syntax_error is None
    assert "too large to analyse fully" in f.message and "DDP104" in f.message and "DDP001" not in f.message


def test_time_budget_stops_starting_rules(monkeypatch):
    monkeypatch.setattr(engine, "WORK_BUDGET_S", -1.0)
    res = check_source(SCRIPT, "s.py", ALL)
    (f,) = res.findings
    assert f.code == "DDP000" and "took over" in f.message and "DDP104" in f.message
