"""Findings do not depend on the order in which a project's files are checked.

``ddp_lint check -j 1`` checks the files one after the other in one process, and the views of the
project's other modules (with their ``memo`` dicts) are shared between those checks. A memoised
answer that depends on how the question was reached (an answer cut at a depth limit, one cut by a
recursion guard) and is reused by a later question that would have seen more (or less) makes a
finding come and go with the order of the files or with the rules selected. Each project below is
checked with every rule selected (and with its own rule alone), through ``batch.check_files`` (what the CLI runs for ``-j 1``),
with its files in forward order, in reverse order, and each file alone with its project: the
findings must be the same. ``DDP104/project_shard_helper_depth`` has a chain of sharding helpers
longer than ``hidden.params_to`` follows: its answer for a helper met at the depth limit once came
back for a later file that calls that helper directly."""
from __future__ import annotations

from pathlib import Path

import pytest

from ddp_lint.analysis.batch import check_files
from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.flow import project

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PROJECTS = [
    "DDP104/project_shard_helper_depth",
    "DDP107/project_stopper_elsewhere",
    "DDP210/project_helper_module",
    "DDP210/project_runner_field_through_super",
    "DDP218/project_writer_built_by_trainer",
    "DDP501/project_runner_wraps",
    "DDP517/project_warmstart",
    "DDP521/project_seed_module",
]


def _check(files: list[Path], select: str) -> dict[str, list]:
    project.clear()  # a fresh project cache, shared by the checks of this one run
    out = {}
    for path, findings, err in check_files([str(f) for f in files], Settings(select=[select]), jobs=1):
        assert err is None, err
        out[path] = sorted((f.code, f.range.start.line, f.range.start.column, f.message) for f in findings)
    return out


@pytest.mark.parametrize("name", PROJECTS)
@pytest.mark.parametrize("which", ["ALL", "own"])
def test_findings_do_not_depend_on_file_order(name, which):
    select = name.split("/")[0] if which == "own" else "ALL"  # the rules run change what is asked first
    files = sorted((FIXTURES / name).rglob("*.py"))
    assert len(files) >= 2
    forward = _check(files, select)
    assert any(forward.values()), "the project should have findings to compare"
    assert _check(files[::-1], select) == forward
    for f in files:
        assert _check([f], select) == {str(f): forward[str(f)]}, f


@pytest.mark.parametrize("name", PROJECTS)
def test_a_rules_findings_do_not_depend_on_the_other_rules_selected(name):
    """The rules that run first explore the project (callers, helpers) and use up the per-check
    module budget (``flow._MAX_MODULES``); a module the checked file imports itself is read all the
    same. ``DDP107/project_stopper_elsewhere`` sits inside this repository, whose project root holds
    every fixture: with every rule selected its ``helpers.stopping`` was once refused, and the
    finding that ``--select DDP107`` gives was lost."""
    code = name.split("/")[0]
    files = sorted((FIXTURES / name).rglob("*.py"))
    every = {p: [f for f in got if f[0] == code] for p, got in _check(files, "ALL").items()}
    assert every == _check(files, code)


def test_uniformity_does_not_depend_on_the_order_of_questions():
    """A cycle of bindings is cut where the question started: ``b`` asked first once left ``a``
    memoised as unknown, where ``a`` asked first finds it rank-varying (``b`` feeds it ``rank``)."""
    import ast
    import textwrap

    from ddp_lint.analysis.flow import Analysis
    from ddp_lint.analysis.semantic import Semantic

    src = textwrap.dedent("""
        import torch.distributed as dist
        def main(loader):
            rank = dist.get_rank()
            a = 0
            b = 0
            for _ in loader:
                a = b + 1
                b = a + rank
            return a, b
    """)

    def kinds(order):
        tree = ast.parse(src)
        an = Analysis("<mem>", Semantic(tree), src)
        ev = an.evaluator(an.main)
        elts = next(n for n in ast.walk(tree) if isinstance(n, ast.Return)).value.elts
        return {i: ev.value(elts[i]).kind for i in order}

    assert kinds([0, 1]) == kinds([1, 0]) == {0: "V", 1: "V"}


def _kinds_in_order(src: str, order: list[int], node_type) -> dict[int, str]:
    """Uniformity kinds of the ``node_type`` nodes of ``src`` (in source order), asked in ``order``
    by one fresh analysis."""
    import ast

    from ddp_lint.analysis.flow import Analysis
    from ddp_lint.analysis.semantic import Semantic

    tree = ast.parse(src)
    an = Analysis("<mem>", Semantic(tree), src)
    ev = an.evaluator(an.main)
    nodes = sorted((n for n in ast.walk(tree) if isinstance(n, node_type)), key=lambda n: (n.lineno, n.col_offset))
    return {i: ev.value(nodes[i]).kind for i in order}


def test_none_ness_does_not_depend_on_the_order_of_questions():
    """``callers_none_ness`` of two functions that call each other: ``f`` asked first reached ``g``
    through its call in ``f`` and cut the cycle at ``f``, and ``g`` stayed memoised as unknown,
    where ``g`` asked first finds its None-ness chosen by the rank (through ``f``'s caller)."""
    import ast
    import textwrap

    src = textwrap.dedent("""
        import torch.distributed as dist
        def f(x, n):
            if x is None:
                return 0
            return g(x, n - 1)
        def g(y, n):
            if y is None:
                return 0
            return f(y, n - 1)
        def main():
            pics = {} if dist.get_rank() == 0 else None
            f(pics, 3)
    """)
    forward = _kinds_in_order(src, [0, 1], ast.Compare)
    assert forward == _kinds_in_order(src, [1, 0], ast.Compare)
    assert forward == {0: "V", 1: "V"}


def test_yielded_elements_do_not_depend_on_the_order_of_questions():
    """Two generators that yield from each other: ``gen_a`` asked first cut the cycle at itself and
    left ``gen_b`` memoised as unknown, where ``gen_b`` asked first finds the rank ``gen_a`` yields."""
    import ast
    import textwrap

    src = textwrap.dedent("""
        import torch.distributed as dist
        def gen_a(n):
            if n:
                yield from gen_b(n - 1)
            yield dist.get_rank()
        def gen_b(n):
            yield 1
            if n:
                yield from gen_a(n - 1)
        def main():
            for a in gen_a(3):
                pass
            for b in gen_b(3):
                pass
            return a, b
    """)

    def kinds(order):
        tree = ast.parse(src)
        from ddp_lint.analysis.flow import Analysis
        from ddp_lint.analysis.semantic import Semantic

        an = Analysis("<mem>", Semantic(tree), src)
        ev = an.evaluator(an.main)
        elts = next(n for n in ast.walk(tree) if isinstance(n, ast.Return)).value.elts
        return {i: ev.value(elts[i]).kind for i in order}

    assert kinds([0, 1]) == kinds([1, 0]) == {0: "V", 1: "V"}


def test_returns_do_not_depend_on_the_order_of_questions():
    """``returns_of`` of two functions that return each other's result (an audit of the memos with
    a recursion guard and no depth): ``f`` asked first left ``g`` memoised as unknown."""
    import ast
    import textwrap

    src = textwrap.dedent("""
        import torch.distributed as dist
        def f(n):
            if n:
                return g(n - 1)
            return dist.get_rank()
        def g(n):
            if n:
                return f(n - 1)
            return 0
        def main():
            a = f(3)
            b = g(3)
            return a, b
    """)

    def kinds(order):
        from ddp_lint.analysis.flow import Analysis
        from ddp_lint.analysis.semantic import Semantic

        tree = ast.parse(src)
        an = Analysis("<mem>", Semantic(tree), src)
        ev = an.evaluator(an.main)
        elts = next(n for n in ast.walk(tree) if isinstance(n, ast.Return) and isinstance(n.value, ast.Tuple)).value.elts
        return {i: ev.value(elts[i]).kind for i in order}

    assert kinds([0, 1]) == kinds([1, 0]) == {0: "V", 1: "V"}
