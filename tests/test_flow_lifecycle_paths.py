"""flow.lifecycle: the group's state along a path (``group_value``, ``group_state_path``), the
helpers' inits and destroys (``init_when_present``, ``init_sites``, ``destroys_anywhere``,
``project_target``): what DDP002 (the path kept for a run without a group), DDP004 (a script that
inits through a helper) and DDP008 (an init where the group exists) are built on."""
from __future__ import annotations

import ast
import textwrap

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow import Analysis
from ddp_lint.analysis.flow.lifecycle import (destroys_anywhere, group_state_path, group_value, init_sites,
                                              init_when_present, project_target)
from ddp_lint.analysis.semantic import Semantic


def _analysis(src: str) -> Analysis:
    src = textwrap.dedent(src)
    return Analysis("<test>", Semantic(ast.parse(src)), src)


def _fn(an, name):
    return an.main.sem.functions[name][0]


def _calls(an, fn, name):
    return [c for c in ast.walk(fn) if isinstance(c, ast.Call) and ast.unparse(c.func).endswith(name)]


def _tests(an, fn):
    return [n.test for n in ast.walk(fn) if isinstance(n, (ast.If, ast.IfExp))]


@pytest.mark.parametrize("test,present,absent", [
    ("dist.is_initialized()", True, False),
    ("not dist.is_initialized()", False, True),
    ("dist.is_available() and dist.is_initialized()", True, False),
    ("not dist.is_initialized() or rank == 0", None, True),
    ("dist.is_initialized() and rank == 0", None, False),
    ("is_dist()", True, False),          # a helper that returns the test
    ("flag", True, False),                # a name bound once to the test
    ("rank == 0", None, None),
])
def test_group_value(test, present, absent):
    an = _analysis(f"""
        import torch.distributed as dist
        def is_dist():
            return dist.is_available() and dist.is_initialized()
        def f(rank):
            flag = dist.is_initialized()
            if {test}:
                pass
    """)
    t = _tests(an, _fn(an, "f"))[0]
    assert group_value(an, an.main, t, True) is present
    assert group_value(an, an.main, t, False) is absent


def test_no_group_path_inside_branch_and_after_fall_through():
    an = _analysis("""
        import torch.distributed as dist
        def f(rank):
            if not dist.is_initialized() or rank == 0:
                dist.get_rank()
            dist.get_world_size()
        def g():
            if not dist.is_initialized():
                return 0
            return dist.get_rank()
        def h():
            if not dist.is_initialized():
                dist.init_process_group("nccl")
            return dist.get_rank()
        def k():
            if not dist.is_initialized() or dist.get_rank() == 0:
                pass
    """)
    f = _fn(an, "f")
    inside, after = _calls(an, f, "get_rank")[0], _calls(an, f, "get_world_size")[0]
    assert isinstance(group_state_path(an, an.main, inside, f, present=False), ast.If)
    assert isinstance(group_state_path(an, an.main, after, f, present=False), ast.If)
    for name in ("g", "h", "k"):  # leaves / initialises / short-circuits
        fn = _fn(an, name)
        assert group_state_path(an, an.main, _calls(an, fn, "get_rank")[0], fn, present=False) is None, name


def test_else_of_a_mixed_test_is_not_the_no_group_path():
    an = _analysis("""
        import torch.distributed as dist
        def f(t):
            if dist.is_initialized() and dist.get_rank() == 0:
                print(t)
            else:
                dist.all_reduce(t)
        def g(t):
            rank = dist.get_rank() if dist.is_initialized() else 0
            dist.all_reduce(t)
    """)
    f, g = _fn(an, "f"), _fn(an, "g")
    assert group_state_path(an, an.main, _calls(an, f, "all_reduce")[0], f, present=False) is None
    # the conditional expression of a pure test: the statement goes on with no group
    assert isinstance(group_state_path(an, an.main, _calls(an, g, "all_reduce")[0], g, present=False), ast.IfExp)


def test_present_path_to_an_init():
    an = _analysis("""
        import torch.distributed as dist
        def f(args):
            if dist.is_initialized():
                print("up")
            dist.init_process_group("nccl")
        def g(args):
            if dist.is_initialized():
                dist.destroy_process_group()
            dist.init_process_group("nccl")
        def h(args):
            if dist.is_initialized():
                print("up")
            if not dist.is_initialized():
                dist.init_process_group("nccl")
        def always():
            dist.init_process_group("nccl")
        def once():
            if not dist.is_initialized():
                dist.init_process_group("nccl")
        def caller():
            always()
            once()
    """)
    f = _fn(an, "f")
    assert isinstance(group_state_path(an, an.main, _calls(an, f, "init_process_group")[0], f, present=True), ast.If)
    for name in ("g", "h"):
        fn = _fn(an, name)
        assert group_state_path(an, an.main, _calls(an, fn, "init_process_group")[0], fn, present=True) is None
    assert init_when_present(an, an.main, _fn(an, "always")) is not None
    assert init_when_present(an, an.main, _fn(an, "once")) is None
    caller = _fn(an, "caller")
    assert len(init_sites(an, an.main, caller)) == 2
    assert not destroys_anywhere(an, an.main, caller)


def test_static_method_through_its_class():
    an = _analysis("""
        import torch.distributed as dist
        class Utils:
            @staticmethod
            def setup():
                dist.init_process_group("nccl")
        def main():
            Utils.setup()
    """)
    call = _calls(an, _fn(an, "main"), "setup")[0]
    target = project_target(an, an.main, call)
    assert target is not None and target[1].name == "setup"


def _codes(src, code):
    res = check_source(textwrap.dedent(src), "<mem>.py", Settings(select=[code]))
    return [(f.code, f.range.start.line + 1) for f in res.findings]


def test_a_comment_naming_the_guard_changes_nothing():
    src = """
        import torch.distributed as dist
        def f(args):
            if dist.is_initialized():
                print("up")
            dist.init_process_group("nccl")  # if not dist.is_initialized(): ...
    """
    assert _codes(src, "DDP008") == [("DDP008", 6)]


def test_destroy_on_the_no_group_path_directly_and_through_a_helper():
    src = """
        import torch.distributed as dist
        def cleanup():
            dist.destroy_process_group()
        def a():
            if not dist.is_initialized():
                print("single")
            dist.destroy_process_group()
        def b():
            if not dist.is_initialized():
                print("single")
            cleanup()
        def c():
            if dist.is_initialized():
                cleanup()
    """
    assert _codes(src, "DDP113") == [("DDP113", 8), ("DDP113", 12)]
