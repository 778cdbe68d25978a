"""The one traversal of ``semantic.Semantic``, its call and assignment indexes and its small queries:
the optional C versions
(analysis/_speedups.c, built by setup.py) must give exactly what the Python versions give (parent
pointers, every index, the order of each list, each call's qualified name), and the product must
work the same without them (``DDP_LINT_PURE_PYTHON=1``).

In CI (``DDP_LINT_REQUIRE_ALL=1``) the extension must have been built: ``pip install -e .`` compiles
it, and a missing compiler would otherwise go unnoticed (the build treats it as optional)."""
from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from bench.gen import training_script
from ddp_lint.analysis import semantic as S
from tests.conftest import EXAMPLES, FIXTURES, ROOT, require

C_WALK = S._c_walk
C_INDEX = S._c_index_calls
C_MODULE = S._speedups
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


def _snapshot(tree, sem):
    parents = [(id(n), id(getattr(n, "_p", None))) for n in ast.walk(tree) if hasattr(n, "_p")]
    by_qn = sem.calls_by_qualname
    assigns = {id(n): {k: [id(x) for x in v] for k, v in sem.assignments(n).items()}
               for n in ast.walk(tree) if isinstance(n, SCOPES)}
    return {
        "assignments": assigns,
        "by_qualname": {k: [id(c) for c in v] for k, v in by_qn.items()},
        "qn": [c._qn for c in sem.calls],
        "callee_index": sem.callee_index(),
        "parents": parents,
        "calls": [id(c) for c in sem.calls],
        "by_type": {k.__name__: [id(x) for x in v] for k, v in sem.by_type.items()},
        "scope_calls": {id(k): [id(x) for x in v] for k, v in sem._scope_calls.items()},
        "functions": {k: [id(x) for x in v] for k, v in sem.functions.items()},
        "imports": [id(x) for x in sem.imports],
        "walrus": sem._walrus,
        "nodes": sorted(id(x) for x in sem._nodes),
        "aliases": dict(sem.aliases),
    }


def _both(tree, wanted, owned):
    """Snapshots of the Python and the C traversal of the same tree."""
    out = []
    for walk, index, module in ((None, None, None), (C_WALK, C_INDEX, C_MODULE)):
        S._c_walk, S._c_index_calls, S._speedups = walk, index, module
        try:
            sem = S.Semantic(tree, wanted, owned=owned)
            out.append(_snapshot(tree, sem))
            sem._owned = False  # keep the tree whole for the next traversal
            sem.release()
        finally:
            S._c_walk, S._c_index_calls, S._speedups = C_WALK, C_INDEX, C_MODULE
    return out


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


def test_the_extension_is_built_in_ci():
    require(C_WALK is not None and C_INDEX is not None,
            "the C traversal (analysis/_speedups.c) was not built: no C compiler?")


def test_c_traversal_matches_python_traversal():
    require(C_WALK is not None, "the C traversal (analysis/_speedups.c) was not built")
    wanted_sets = (frozenset(), frozenset({ast.For, ast.Subscript, ast.Name, ast.Lambda, ast.Constant}))
    n = 0
    for name, text, tree in _trees():
        for wanted in wanted_sets:
            for owned in (False, True):
                py, c = _both(tree, frozenset(wanted).union(S.BRANCHING, S.EXITS), owned)
                for key in py:
                    assert py[key] == c[key], f"{name}: {key} differs (owned={owned}, wanted={sorted(t.__name__ for t in wanted)})"
        n += 1
    assert n > 100


def test_hand_built_tree_is_walked_the_same():
    """A node without some field (built by hand, not by ast.parse) is read through plain
    attribute access in both traversals."""
    require(C_WALK is not None, "the C traversal (analysis/_speedups.c) was not built")
    call = ast.Call(func=ast.Name(id="f"), args=[ast.Constant(1)])  # no ``keywords``
    tree = ast.Module(body=[ast.Expr(value=call)], type_ignores=[])
    py, c = _both(tree, frozenset(), False)
    assert py == c and len(py["calls"]) == 1


def test_bad_field_value_raises_in_both():
    require(C_WALK is not None, "the C traversal (analysis/_speedups.c) was not built")
    tree = ast.Module(body=[ast.Expr(value=42)], type_ignores=[])  # an int where a node belongs
    for walk in (None, C_WALK):
        S._c_walk = walk
        try:
            with pytest.raises(AttributeError):
                S.Semantic(tree, frozenset())
        finally:
            S._c_walk = C_WALK


def test_findings_identical_without_the_extension(tmp_path):
    """The same CLI run with the Python traversal forced: byte-identical output."""
    files = [str(p) for p in sorted(EXAMPLES.glob("*.py"))]
    outs = []
    for pure in ("", "1"):
        env = dict(os.environ, PYTHONPATH=str(ROOT), DDP_LINT_PURE_PYTHON=pure, XDG_CACHE_HOME=str(tmp_path / ".x"))
        r = subprocess.run([sys.executable, "-m", "ddp_lint", "check", "--no-cache", "--select", "ALL", *files],
                           capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
        assert r.returncode in (0, 1), r.stderr
        outs.append(r.stdout)
    assert outs[0] == outs[1] and outs[0].strip()


def _outcome(fn, *args):
    try:
        return ("ok", id(fn(*args)))
    except Exception as e:  # noqa: BLE001 - the exception's type is the answer to compare
        return ("raises", type(e).__name__)


def test_c_queries_match_python_queries():
    """``scope_of``, ``enclosing_function``, ``statement_of`` (every node) and ``get_arg`` (every
    call, positions and keywords present or not, negative positions too) answer the same."""
    require(S._speedups is not None, "the C queries (analysis/_speedups.c) were not built")
    pairs = [(S._py_scope_of, S.Semantic.scope_of), (S._py_enclosing_function, S.Semantic.enclosing_function),
             (S._py_statement_of, S.Semantic.statement_of), (S._py_parent, S.parent)]
    checked = 0
    for name, text, tree in _trees():
        sem = S.Semantic(tree, frozenset())
        for n in ast.walk(tree):
            for py, c in pairs:
                assert _outcome(py, n) == _outcome(c, n), (name, getattr(py, "__name__", py), ast.dump(n)[:80])
            if isinstance(n, ast.Call):
                kws = [k.arg for k in n.keywords if k.arg] + ["absent"]
                for pos in (None, 0, 1, 2, 5, -1, -2, -9):
                    for kw in kws:
                        assert _outcome(S._py_get_arg, n, pos, kw) == _outcome(S.get_arg, n, pos, kw), (
                            name, pos, kw, ast.dump(n)[:80])
                checked += 1
        sem.release()
    for n in (None, 42, ast.Name(id="x")):  # no parent pointer at all
        for py, c in pairs:
            assert _outcome(py, n) == _outcome(c, n)
    bare = ast.Call(func=ast.Name(id="f"), args=[ast.Starred(value=ast.Name(id="a")), ast.Constant(1)])
    for pos in (None, 0, 1, -1):
        assert _outcome(S._py_get_arg, bare, pos, "k") == _outcome(S.get_arg, bare, pos, "k")  # no ``keywords``
    assert checked > 1000


@pytest.mark.parametrize("pure", [False, True])
def test_a_checked_tree_is_freed_without_the_cyclic_collector(monkeypatch, pure):
    """``release`` breaks every cycle (parent pointers) of the tree the engine parsed, with the C
    ``take_apart`` and with the Python fallback: the tree dies by reference counting."""
    import gc
    import weakref

    from ddp_lint.analysis.engine import check_source

    if pure:
        monkeypatch.setattr(S, "_speedups", None)
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


def test_c_reaching_events_match_python():
    """``bindings.reaching`` for every name read in the sources: which bindings reach it, with the
    C event filter and with the Python one."""
    require(C_MODULE is not None, "the C queries (analysis/_speedups.c) were not built")
    from ddp_lint.analysis.flow import bindings, project

    def answers(tree, text, module):
        S._speedups = module
        try:
            sem = S.Semantic(tree, frozenset())
            view = project.ModuleView(None, tree, sem, "", text)
            out = []
            for n in ast.walk(tree):
                if isinstance(n, ast.Name):
                    kind, got = bindings.reaching(view, n.id, n)
                    out.append((kind, [id(x) for x in got] if isinstance(got, list) else id(got)))
            sem._owned = False
            sem.release()
            return out
        finally:
            S._speedups = C_MODULE

    checked = 0
    for name, text, tree in _trees():
        py, c = answers(tree, text, None), answers(tree, text, C_MODULE)
        assert py == c, name
        checked += len(py)
    assert checked > 10000


def test_c_gate_and_has_param_match_python():
    require(C_MODULE is not None, "the C queries (analysis/_speedups.c) were not built")
    from ddp_lint.analysis import engine
    from ddp_lint.analysis.registry import NoCase

    gates = engine._gates(engine._DEFAULT_SETTINGS.enabled_codes("t.py"))
    texts = [text for _, text in _sources()] + ["", "import torch", "TORCH.distributed RANK save", "ｔｏｒｃｈ"]
    for text in texts:
        S._speedups = None
        try:
            py = engine._admitted(text, gates)
        finally:
            S._speedups = C_MODULE
        assert C_MODULE.admitted(text, gates, NoCase) == py
    for name, text, tree in _trees():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                names = [a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)] + ["self", "absent"]
                for n in names:
                    assert S._py_has_param(fn, n) == S.has_param(fn, n), (name, n)
