"""The one traversal of ``semantic.Semantic``, its call and assignment indexes and its small queries,
held to what Python's own ``ast`` says about the same tree (parent pointers, every call, every
node of a wanted type), on tricky syntax, generated scripts, the examples and every
fixture. There is one implementation: the hand-written C copy (analysis/_speedups.c) was removed
in issue 31 (bench/README.md has the measurements behind the choice)."""
from __future__ import annotations

import ast

import pytest

from bench.gen import training_script
from ddp_lint.analysis import semantic as S
from tests.conftest import EXAMPLES, FIXTURES, ROOT

SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)

TRICKY = '''
import torch.distributed as dist
a = b = c
a, (b, *c) = d
self.x = y
m[i] = 2
self.n: int = 3
k += 1
for (p, q) in r:
    pass
with a as (u, v), b as w:
    pass
import torch.nn.parallel.distributed as tnpd
from torch.utils.data.distributed import DistributedSampler as DS
from functools import wraps as w
tnpd.DistributedDataParallel(m).module.x.y()
dist.distributed_c10d.all_reduce(t)
DS(d); fs[0](); g()(); (lambda: 1)(); dist.a.b.c.d()

def deco(f):
    @w(f)
    def inner(*a, key=(lambda q=dist.get_rank(): q)(), **kw):
        return f(*a, **kw)
    return inner

@deco
@dist.something(dist.get_rank())
async def f(x: dist.Tensor = dist.get_world_size(), /, *rest, k: int = 0, **more) -> dist.T:
    async with open(x) as (a, b):
        async for i in g():
            if (n := len(rest)) > 0:
                dist.all_reduce(i)
    match x:
        case {"a": 1, **kw} if kw:
            pass
        case [1, *others] | (2 as two):
            pass
        case Point(x=0) | None:
            pass
    try:
        pass
    except* ValueError as e:
        raise
    d = {**rest, None: 1, 2: [y for y in range(3) if y]}
    return lambda: (yield)

class K(dist.Base, metaclass=M):
    z: int = 1
    def m(self):
        global gg
        nonlocal_ = [x async for x in aiter()]
        return f"{self!r:>{width}}"
'''


def _sources():
    yield "tricky", TRICKY
    for n in (300, 800):
        yield f"training_script({n})", training_script(n, seed=n)
    for p in sorted(EXAMPLES.glob("*.py")) + sorted(FIXTURES.rglob("*.py")):
        yield str(p.relative_to(ROOT)), p.read_text(encoding="utf-8", errors="replace")


def _trees():
    """(name, text, a fresh tree) of every source that parses (the fixtures of DDP000 do not)."""
    for name, text in _sources():
        try:
            tree = ast.parse(text)
        except SyntaxError:
            assert name != "tricky"
            continue
        yield name, text, tree


def _preorder(tree):
    """Every node with its parent, in the pre-order a recursive walk gives."""
    out = []
    stack = [(tree, None)]
    while stack:
        n, p = stack.pop()
        out.append((n, p))
        stack.extend((c, n) for c in reversed(list(ast.iter_child_nodes(n))))
    return out


def test_traversal_agrees_with_ast():
    wanted = frozenset({ast.For, ast.Subscript, ast.Lambda}).union(S.BRANCHING, S.EXITS)
    n = 0
    for name, _text, tree in _trees():
        nodes = _preorder(tree)
        sem = S.Semantic(tree, wanted)
        for node, par in nodes:
            if par is not None and hasattr(node, "_p"):
                assert node._p is par, name
        calls = [x for x, _ in nodes if isinstance(x, ast.Call)]
        assert sorted(map(id, sem.calls)) == sorted(map(id, calls)), name
        for t in wanted:
            want = [x for x, _ in nodes if type(x) is t]
            assert sorted(id(x) for x in sem.by_type.get(t, ())) == sorted(map(id, want)), (name, t.__name__)
        for x, _ in nodes:
            if isinstance(x, SCOPES):
                sem.assignments(x)  # every scope's bindings build without error
        sem.release()
        n += 1
    assert n > 100


def test_small_queries_agree_with_ast():
    """``scope_of``, ``enclosing_function`` and ``statement_of`` against a walk up the real parents."""
    for name, _text, tree in _trees():
        nodes = _preorder(tree)
        parents = {id(x): p for x, p in nodes}
        sem = S.Semantic(tree, frozenset())

        def up(x, pred):
            p = parents[id(x)]
            while p is not None and not pred(p):
                p = parents[id(p)]
            return p

        for x, _ in nodes[1:400]:
            if not hasattr(x, "_p"):
                continue  # leaves no rule asked for, and the shared context singletons
            assert S.Semantic.enclosing_function(x) is up(x, lambda p: type(p) in S.FUNC_TYPES), name
            assert S.Semantic.statement_of(x) is (x if isinstance(x, ast.stmt) else up(
                x, lambda p: isinstance(p, ast.stmt))), name
        sem.release()


def test_hand_built_tree_is_walked():
    """A node without some field (built by hand, not by ast.parse) is read through plain
    attribute access."""
    call = ast.Call(func=ast.Name(id="f"), args=[ast.Constant(1)])  # no ``keywords``
    tree = ast.Module(body=[ast.Expr(value=call)], type_ignores=[])
    sem = S.Semantic(tree, frozenset())
    assert sem.calls == [call]


def test_bad_field_value_raises():
    tree = ast.Module(body=[ast.Expr(value=42)], type_ignores=[])  # an int where a node belongs
    with pytest.raises(AttributeError):
        S.Semantic(tree, frozenset())


def test_one_implementation():
    """No second, hand-written copy of the traversal (issue 31): no C source, no extension build."""
    assert not list((ROOT / "analysis").glob("*.c"))
    assert not (ROOT / "setup.py").exists() or "Extension" not in (ROOT / "setup.py").read_text()
    assert not hasattr(S, "_speedups")


def test_a_checked_tree_is_freed_without_the_cyclic_collector(monkeypatch):
    """``release`` breaks every cycle (parent pointers) of the tree the engine parsed: the tree
    dies by reference counting."""
    import gc
    import weakref

    from ddp_lint.analysis.engine import check_source

    trees = []
    orig = S.Semantic.__init__

    def spy(self, tree, *a, **k):
        trees.append(weakref.ref(tree))
        orig(self, tree, *a, **k)

    monkeypatch.setattr(S.Semantic, "__init__", spy)
    was = gc.isenabled()
    gc.disable()
    try:
        res = check_source(training_script(300, seed=300), "t.py")
        assert res.findings and trees
        assert trees[0]() is None
    finally:
        if was:
            gc.enable()
