"""Values and calls the shared layer follows (issue 25, metamorphic survival): a name bound by a
tuple assignment or by a function that declares it ``global``, constants through configuration,
``Cls(...).m(...)`` resolved to the method."""
from __future__ import annotations

import ast

from ddp_lint.analysis.flow import Analysis
from ddp_lint.analysis.semantic import Semantic
from ddp_lint.analysis.torch_api import const_int, const_str


def _sem(src: str) -> Semantic:
    return Semantic(ast.parse(src))


def test_single_value_tuple_and_global():
    sem = _sem("a, b = 2, 'gloo'\n\ndef main():\n    global CFG\n    CFG = {'n': 4}\n\nc, *d = 1, 2, 3\n")
    assert ast.literal_eval(sem.single_value("a", sem.tree)) == 2
    assert ast.literal_eval(sem.single_value("b", sem.tree)) == "gloo"
    assert isinstance(sem.single_value("CFG", sem.tree), ast.Dict)
    assert sem.single_value("c", sem.tree) is None  # a starred target: not one element


def test_global_set_twice_is_no_single_value():
    sem = _sem("def a():\n    global N\n    N = 1\n\ndef b():\n    global N\n    N = 2\n")
    assert sem.single_value("N", sem.tree) is None


def test_const_through_configuration():
    src = ("import argparse\np = argparse.ArgumentParser()\np.add_argument('--n', default=2)\nargs = p.parse_args()\n"
           "CFG = {'method': 'spawn'}\nx = args.n\ny = CFG['method']\n")
    sem = _sem(src)
    x, y = (st.value for st in sem.tree.body[-2:])
    assert const_int(x) is None and const_int(x, sem) == 2
    assert const_str(y) is None and const_str(y, sem) == "spawn"


def test_fresh_instance_method_resolves():
    src = "class Ev:\n    def run(self, m):\n        return m\n\n\ndef main(m):\n    return Ev().run(m)\n"
    tree = ast.parse(src)
    sem = Semantic(tree)
    an = Analysis("<mem>", sem, src)
    call = tree.body[1].body[0].value
    got = an.resolve_call(an.main, call)
    assert got is not None and got[1].name == "run"
    assert an.call_sites(an.main, tree.body[0].body[0]) == [call]
