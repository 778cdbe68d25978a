"""The semantic layer is one layer: the rules ask analysis/flow/ their flow questions, and every
theory of "this is the rank" there shares uniformity's vocabulary (one ``env_key``, one
terminal-name helper, one table of rank names, main-rank names and rank variables)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from ddp_lint.analysis.config import Settings
from ddp_lint.analysis.engine import check_source
from ddp_lint.analysis.flow import rank_tests, uniformity
from ddp_lint.analysis.semantic import terminal_name

ROOT = Path(__file__).resolve().parent.parent
ANALYSIS = ROOT / "analysis"
# rule glue that stays beside the rules; flow questions live in analysis/flow/
RULE_HELPERS = {"__init__.py", "_common.py", "_flow.py", "_loader.py", "_spawn.py", "_training.py",
                "_index.py",  # _index.py: the generated rule index (no flow code)
                "_per_rank_device.py", "_current_device.py", "_pin_order.py",  # DDP001's own device queries, split to keep the rule's file small
                "_rank_callers.py"}  # DDP006/DDP009's caller views over _common.project_callers (rule glue)


def _defs(name: str) -> list[str]:
    out = []
    for path in ANALYSIS.rglob("*.py"):
        if "runtime" in path.parts:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name:
                out.append(f"{path.relative_to(ROOT)}:{n.lineno}")
    return out


def test_the_old_rank_and_binding_helpers_are_gone():
    helpers = {p.name for p in (ANALYSIS / "rules").glob("_*.py")}
    assert helpers <= RULE_HELPERS, f"flow helpers beside the rules: {sorted(helpers - RULE_HELPERS)}"


@pytest.mark.parametrize("name", ["env_key", "terminal_name", "_terminal", "name_binding_kind", "reaching_assignment", "rank_guard", "rank0_guarded",
                                  "polarity", "rank_test", "rank_kind",
                                  # issue 25 "one program model, one implementation" (stop 45): the span test, the
                                  # rebinding test, the mesh readers and DDP521's walk of the calls that set a model
                                  "contains", "stores_name", "mesh_dims", "named_mesh_dims", "setter_calls"])
def test_one_definition_of_each_query(name):
    assert len(_defs(name)) <= 1, _defs(name)


def test_uniformity_vocabulary_is_the_only_rank_table():
    # the global / local split refines uniformity's rank variables, it adds none
    assert rank_tests.GLOBAL_RANK_ENV <= uniformity.RANK_ENV
    assert rank_tests.LOCAL_RANK_ENV <= uniformity.RANK_ENV
    assert not rank_tests.GLOBAL_RANK_ENV & rank_tests.LOCAL_RANK_ENV
    # a rank function is `get_` + a rank by uniformity's name pattern
    for name in ("get_rank", "get_local_rank", "get_global_rank", "get_node_rank", "get_dist_rank"):
        assert rank_tests.is_rank_function(name), name
        assert uniformity.RANK_NAME.match(name[4:])
    assert rank_tests.is_rank_function("get_node_local_rank")  # torch.distributed's, on another module
    for name in ("get_world_size", "get_ranks", "get_rank_repr", "rank", None):
        assert not rank_tests.is_rank_function(name), name
    # every main-rank name uniformity knows selects the main rank for the rank-0 guards too
    for name in sorted(uniformity.MAIN_NAMES):
        assert rank_tests.is_main_like(ast.Name(id=name)), name
    for env in sorted(uniformity.RANK_ENV):
        assert rank_tests.is_rank_like(ast.parse(f'os.environ["{env}"]', mode="eval").body), env


def test_terminal_name():
    assert terminal_name(ast.parse("a.b.c", mode="eval").body) == "c"
    assert terminal_name(ast.parse("f", mode="eval").body) == "f"
    assert terminal_name(ast.parse("f()", mode="eval").body) is None


def test_env_key_takes_a_rule_context_or_a_module_view():
    from ddp_lint.analysis.semantic import Semantic

    src = 'import os\nr = os.environ["RANK"]\nk = os.environ.get(name)\nx = cfg["RANK"]\n'
    tree = ast.parse(src)
    sem = Semantic(tree)

    class Ctx:
        pass

    ctx = Ctx()
    ctx.sem = sem
    vals = [st.value for st in tree.body[1:]]
    assert [uniformity.env_key(ctx, v) for v in vals] == ["RANK", "", None]


def test_a_main_rank_flag_of_uniformity_guards_a_save():
    """``is_first_rank()`` is a main-rank name of uniformity's table; the rank-0 guard of DDP202
    reads it the same way (it used to read it as "a rank", true on the other ranks)."""
    src = (
        "import torch, torch.distributed as dist\n"
        "def is_first_rank():\n    return dist.get_rank() == 0\n"
        "def main(model):\n"
        "    dist.init_process_group('nccl')\n"
        "    if is_first_rank():\n        torch.save(model.state_dict(), 'm.pt')\n"
        "    if is_first_epoch():\n        torch.save(model.state_dict(), 'n.pt')\n"
        "main(None)\n"
    )
    found = check_source(src, "train.py", Settings(select=["DDP202"])).findings
    assert [f.range.start.line + 1 for f in found] == [9]


def test_flow_modules_stay_small():
    for path in (ANALYSIS / "flow").glob("*.py"):
        assert len(path.read_text(encoding="utf-8").splitlines()) <= 700, path.name


def test_no_rule_defines_its_own_terminal_name_helper():
    pat = re.compile(r"^def (_?terminal(_name)?|_last_name)\(", re.M)
    for path in (ANALYSIS / "rules").glob("*.py"):
        assert not pat.search(path.read_text(encoding="utf-8")), path.name


def test_a_call_on_a_container_element_resolves_to_each_class_method(tmp_path):
    """``for cb in cbs: cb.m(x)`` over instances of several project classes: ``resolve_targets``
    names each class's ``m`` (inherited ones included); ``resolve_call`` the one that is not an
    empty default; unknown when an element is not a project instance."""
    from ddp_lint.analysis.context import Context
    from ddp_lint.analysis.flow import for_context
    from ddp_lint.analysis.semantic import Semantic
    from ddp_lint.analysis.source import SourceText

    src = (
        "class Base:\n    def m(self, x):\n        pass\n"
        "class A(Base):\n    def m(self, x):\n        print(x)\n"
        "class B(Base):\n    pass\n"
        "class C(Base):\n    def m(self, x):\n        return x\n"
        "def run(x):\n"
        "    cbs = [A()]\n    cbs.append(B())\n"
        "    for cb in cbs:\n        cb.m(x)\n"
        "    for cb in (A(), C()):\n        cb.m(x)\n"
        "    for cb in [A(), object()]:\n        cb.m(x)\n"
    )
    path = tmp_path / "mod.py"
    path.write_text(src)
    tree = ast.parse(src)
    sem = Semantic(tree)
    an = for_context(Context(SourceText(src), sem, str(path)))
    calls = [c for c in sem.calls if isinstance(c.func, ast.Attribute) and c.func.attr == "m"]
    got = [sorted(f.lineno for _v, f in an.resolve_targets(an.main, c)) for c in calls]
    assert got == [[2, 5], [5, 10], []]
    one = [an.resolve_call(an.main, c) for c in calls]
    assert one[0][1].lineno == 5 and one[1] is None and one[2] is None
