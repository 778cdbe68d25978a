"""``records.method_order`` / ``inherited_method``: ``self.m()`` resolves through the class's method
resolution order (C3) over its project base classes, across modules."""
from __future__ import annotations

import ast

from ddp_lint.analysis.flow import Analysis, project
from ddp_lint.analysis.flow.records import method_order
from ddp_lint.analysis.semantic import Semantic


def _analysis(path):
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    sem = Semantic(tree, (ast.Call, ast.FunctionDef, ast.AsyncFunctionDef))
    return Analysis(str(path), sem, text)


def _resolved(an, attr):
    for c in an.main.sem.calls:
        if isinstance(c.func, ast.Attribute) and c.func.attr == attr:
            got = an.resolve_call(an.main, c)
            return None if got is None else (got[0].path, getattr(got[1]._p, "name", None))
    raise AssertionError(attr)


def test_self_method_of_a_mixin_in_another_module(tmp_path):
    project.clear()
    pkg = tmp_path / "kit"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mixins.py").write_text(
        "import torch\n\n"
        "class Base:\n    def hook(self):\n        return 0\n\n"
        "class Left(Base):\n    def hook(self):\n        return 1\n\n"
        "class Right(Base):\n    def hook(self):\n        return 2\n    def only_right(self):\n        return 3\n"
    )
    (pkg / "trainer.py").write_text(
        "from kit.mixins import Left, Right\n\n"
        "class Trainer(Left, Right):\n"
        "    def run(self):\n        self.hook()\n        self.only_right()\n        self.missing()\n"
    )
    an = _analysis(pkg / "trainer.py")
    trainer = an.main.classes["Trainer"]
    order = [getattr(c, "name", c) for _v, c in method_order(an, an.main, trainer)]
    assert order == ["Trainer", "Left", "Right", "Base"]  # C3: Base after both of its subclasses
    calls = {ast.unparse(c.func): c for c in an.main.sem.calls if c.lineno < trainer.end_lineno + 1}
    where = {k: an.resolve_call(an.main, c) for k, c in calls.items()}
    assert where["self.hook"][1]._p.name == "Left"
    assert where["self.only_right"] is not None and where["self.only_right"][1]._p.name == "Right"
    assert where["self.missing"] is None


def test_a_library_base_first_leaves_the_method_unknown(tmp_path):
    project.clear()
    pkg = tmp_path / "kit2"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mixins.py").write_text("class Right:\n    def only_right(self):\n        return 3\n")
    (pkg / "net.py").write_text(
        "import torch.nn as nn\nfrom kit2.mixins import Right\n\n"
        "class Net(nn.Module, Right):\n    def go(self):\n        self.only_right()\n"
    )
    an = _analysis(pkg / "net.py")
    assert _resolved(an, "only_right") is None  # ``nn.Module`` comes first and may define it
